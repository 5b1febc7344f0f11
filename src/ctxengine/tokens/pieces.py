"""Exact token counts of long texts as the sum of their pieces' counts, each piece counted once.

tiktoken's encodings (``o200k_base``, ``cl100k_base``) split a text with a regular expression
before the byte-pair merges, and merge only within a split; a text's count is therefore the sum
of the counts of pieces cut where that expression always splits. It always splits after a run of
line breaks followed by a character that is neither whitespace nor ``/``: every alternative of
both patterns that can hold a line break ends with the run (``\\s*[\\r\\n]+``;
``' ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*'`` in ``o200k_base``, ``[\\r\\n]*`` in ``cl100k_base``; ``\\s+``
holds only whitespace), and no alternative starts with a line break and goes on past it into
anything but whitespace. Python's ``\\s`` holds every character the encodings' ``\\s`` holds (and a
few more: fewer cuts, never a wrong one).

Engine-made texts are counted again and again with small changes: a session-notes rendering at
each step of its capping loop, the notes with one more line, a summary with one more section, the
transcript skeleton with one more block. Counted piecewise, only the pieces that changed are
tokenized; the rest is a dictionary lookup (``tokens.memo``). ``tests/test_counter.py`` checks
the sums against whole counts on every long text of the shared transcripts and on generated text
built from the characters the patterns treat specially.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from ctxengine.tokens.memo import TextMemo

PIECEWISE_MIN_CHARS = 4_096  # shorter texts are counted whole: splitting would cost what it saves
PIECES_MAX_CHARS = 8_000_000  # characters of pieces remembered per encoding
EDGE_CHARS = 64  # a text's head and tail, by which a text derived from an earlier one is known
EDGES_MAX = 100_000  # heads and tails remembered (all forgotten at once past this)

LONG_PIECE_CHARS = 1_024  # a line this long is cut at its words too
GROUP_MASK = 7  # a piece ends at a line (word) whose hash has these bits clear: ~8 lines a piece

# after a run of line breaks, before a character that is neither whitespace nor "/"
_LINE_CUT = re.compile(r"\n(?=[^\s/])")
# between a non-space and a space that a long word follows (a long line of paths or ids)
_WORD_CUT = re.compile(r"(?<=\S) (?=\S{16})")


def pieces(text: str) -> list[str]:
    """``text`` cut at places where the encodings' pre-tokenizer always splits;
    ``"".join(pieces(text)) == text``.

    The places are the ends of its lines (``_LINE_CUT``) and, in a long line, the starts of its
    long words (``_WORD_CUT``). A piece ends after a line (or word) whose hash has the
    ``GROUP_MASK`` bits clear, so where the pieces end depends only on the text around each end
    (content-defined chunking): two texts that share a run of lines, or a suffix of a long line,
    share the pieces inside it, wherever each text starts."""
    out: list[str] = []
    start = line = 0  # where the current piece and the current line start
    for end in [*(m.end() for m in _LINE_CUT.finditer(text)), len(text)]:
        if end - line >= LONG_PIECE_CHARS:
            if line > start:
                out.append(text[start:line])
            out.extend(_words(text[line:end]))
            start = end
        elif end == len(text) or not hash(text[line:end]) & GROUP_MASK:
            out.append(text[start:end])
            start = end
        line = end
    return out


def _words(line: str) -> list[str]:
    out: list[str] = []
    start = word = 0
    for end in [*(m.start() for m in _WORD_CUT.finditer(line)), len(line)]:
        if end == len(line) or not hash(line[word:end]) & GROUP_MASK:
            out.append(line[start:end])
            start = end
        word = end
    return out


class PiecewiseCounter:
    """``count(text)``: the exact count of ``text`` by ``fn``; a long text (``PIECEWISE_MIN_CHARS``)
    that shares its first or last ``EDGE_CHARS`` characters with a long text counted before (a
    rendering of the same notes, a cut of the same section) is summed over its pieces, each piece
    remembered (bounded by ``PIECES_MAX_CHARS``). Other texts (a new tool result) are counted
    whole: cutting a text nothing will share costs more than it saves.

    ``fn`` must count a text as tiktoken's ``encode_ordinary`` does in an encoding whose
    pre-tokenizer splits as described above (``o200k_base``, ``cl100k_base``)."""

    def __init__(self, fn: Callable[[str], int], *, max_chars: int = PIECES_MAX_CHARS) -> None:
        self._fn = fn
        self._memo = TextMemo(fn, max_chars=max_chars, min_chars=1)  # a short piece is a lookup too
        self._edges: dict[str, None] = {}  # heads and tails of the long texts counted (bounded)

    def count(self, text: str) -> int:
        """Tokens of ``text``."""
        if len(text) < PIECEWISE_MIN_CHARS:
            return self._fn(text)
        head, tail = "h" + text[:EDGE_CHARS], "t" + text[-EDGE_CHARS:]
        edges = self._edges
        shared = head in edges or tail in edges
        if len(edges) >= EDGES_MAX:
            edges.clear()
        edges[head] = edges[tail] = None
        if not shared:
            return self._fn(text)
        memo = self._memo.count
        return sum(memo(piece) for piece in pieces(text))
