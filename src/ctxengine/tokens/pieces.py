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

import itertools
import re
from collections.abc import Callable

from ctxengine.tokens.memo import TextMemo

PIECEWISE_MIN_CHARS = 4_096  # shorter texts are counted whole: splitting would cost what it saves
PIECES_MAX_CHARS = 8_000_000  # characters of pieces remembered per encoding

LONG_PIECE_CHARS = 1_024  # a piece between line cuts this long is cut at its words too

# after a run of line breaks, before a character that is neither whitespace nor "/"
_LINE_CUT = re.compile(r"\n(?=[^\s/])")
# between a non-space and a space that a long word follows (a long line of paths or ids: its cuts
# are where its words are, wherever the line starts, so a suffix of it shares the line's pieces)
_WORD_CUT = re.compile(r"(?<=\S) (?=\S{16})")


def pieces(text: str) -> list[str]:
    """``text`` cut at the places where the encodings' pre-tokenizer always splits that
    ``_LINE_CUT`` finds, and a long piece also where ``_WORD_CUT`` does;
    ``"".join(pieces(text)) == text``. The cuts depend only on the characters around them, so
    two texts that share a run of lines share its pieces."""
    bounds = [0, *[m.end() for m in _LINE_CUT.finditer(text)], len(text)]
    out: list[str] = []
    for a, b in itertools.pairwise(bounds):
        if b - a < LONG_PIECE_CHARS:
            out.append(text[a:b])
            continue
        line = text[a:b]
        starts = [0, *[m.start() for m in _WORD_CUT.finditer(line)], len(line)]
        out.extend(line[x:y] for x, y in itertools.pairwise(starts) if y > x)
    return out


class PiecewiseCounter:
    """``count(text)``: the exact count of ``text`` by ``fn``, summed over its pieces when it is
    long (``PIECEWISE_MIN_CHARS``), each piece remembered (bounded by ``PIECES_MAX_CHARS``).

    ``fn`` must count a text as tiktoken's ``encode_ordinary`` does in an encoding whose
    pre-tokenizer splits as described above (``o200k_base``, ``cl100k_base``)."""

    def __init__(self, fn: Callable[[str], int], *, max_chars: int = PIECES_MAX_CHARS) -> None:
        self._fn = fn
        self._memo = TextMemo(fn, max_chars=max_chars, min_chars=1)  # a short piece is a lookup too

    def count(self, text: str) -> int:
        """Tokens of ``text``."""
        if len(text) < PIECEWISE_MIN_CHARS:
            return self._fn(text)
        memo = self._memo.count
        return sum(memo(piece) for piece in pieces(text))
