"""Piecewise counting (``tokens.pieces``): a long text's count is the sum of its pieces' counts.

The claim rests on where tiktoken's pre-tokenizer always splits; these tests hold the sums to the
whole counts of the Rust tokenizer on every long text of the real transcripts, and on generated
texts made of the characters the split patterns treat specially (line breaks, carriage returns,
spaces and tabs, ``/``, punctuation, apostrophes, digits, letters of both cases, combining
marks, CJK, emoji, non-breaking and other Unicode spaces).
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any, get_args

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ctxengine.tokens.encoders import Encoding, _count_whole, count_tokens
from ctxengine.tokens.pieces import (
    _LINE_CUT,
    _WORD_CUT,
    PIECEWISE_MIN_CHARS,
    PiecewiseCounter,
    pieces,
)

ENCODINGS: tuple[Encoding, ...] = get_args(Encoding)


def _strings(node: Any) -> Iterator[str]:
    if isinstance(node, str):
        yield node
    elif isinstance(node, dict):
        for value in node.values():
            yield from _strings(value)
    elif isinstance(node, list):
        for value in node:
            yield from _strings(value)


def _long_texts(root: Path) -> list[str]:
    out: list[str] = []
    for path in sorted(root.rglob("*")):
        if path.suffix == ".jsonl":
            for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
                try:
                    out.extend(s for s in _strings(json.loads(line)) if len(s) >= PIECEWISE_MIN_CHARS)
                except ValueError:
                    continue
        elif path.suffix in (".json", ".traj"):
            out.extend(s for s in _strings(json.loads(path.read_bytes())) if len(s) >= PIECEWISE_MIN_CHARS)
    return out


@pytest.mark.parametrize("encoding", ENCODINGS)
def test_piecewise_counts_equal_whole_counts_on_the_real_transcripts(
    transcripts: Path, encoding: Encoding
) -> None:
    texts = _long_texts(transcripts)
    assert len(texts) > 500  # tool results, file contents, pasted logs of four harnesses
    cut = 0
    for text in texts:
        parts = pieces(text)
        assert "".join(parts) == text
        cut += len(parts) > 1
        assert count_tokens(text, encoding) == _count_whole(text, encoding), text[:200]
    assert cut > len(texts) // 2  # most of them were really counted in pieces


# characters each alternative of the split patterns treats apart, several of each kind
ALPHABET = [
    *"\n\n\n\r\r \t/'sStT.,;:#-_()[]{}09a",
    *"\u0301\u0308\u00e9\u4e2d\u6587\u00a0\u2028\u3000\u0085\x0b\x1c",
]
ALPHABET += ["\U0001f680", "\U0001f44d\U0001f3fd", "'re", "'ll", "ABC", "abc", "123456", " //", "\r\n"]
ALPHABET += ["\n/", "  \n", " ", "  ", "\u180e", "\u200b", "a.b.c.d.e.f.g.h.i", "!!!???...;;;:::"]
ALPHABET += [
    " src/pkg/module_name.py",
    " 0123456789abcdefXYZ",
    " x.y.z/a.b.c-d_e_f's",
    " ABCDEFGHIJKLMNOPQ\u0301",
]


def _every_cut(text: str) -> list[str]:
    """``text`` cut at every place either pattern finds, whatever the pieces' lengths."""
    cuts = {m.end() for m in _LINE_CUT.finditer(text)} | {m.start() for m in _WORD_CUT.finditer(text)}
    bounds = [0, *sorted(cuts), len(text)]
    return [text[a:b] for a, b in itertools.pairwise(bounds)]


@settings(max_examples=500, deadline=None)
@given(st.lists(st.sampled_from(ALPHABET), min_size=1, max_size=400))
def test_piecewise_counts_equal_whole_counts_on_adversarial_text(parts: list[str]) -> None:
    text = "".join(parts)
    for encoding in ENCODINGS:
        whole = _count_whole(text, encoding)
        assert sum(_count_whole(p, encoding) for p in _every_cut(text)) == whole, repr(text)
        assert sum(_count_whole(p, encoding) for p in pieces(text)) == whole, repr(text)


def test_pieces_end_only_at_safe_cuts_and_a_suffix_shares_them() -> None:
    notes = "".join(f"- [{i}] ran pytest tests/test_mod_{i}.py -x: {i % 3} failed\n" for i in range(300))
    paths = " ".join(f"docs/architecture/overview_{i}.md" for i in range(400))
    for text in (notes, "Exact identifiers (newest first): " + paths, notes + paths + "\n" + notes):
        parts = pieces(text)
        assert "".join(parts) == text
        assert len(parts) > 10
        safe = set(itertools.accumulate(map(len, _every_cut(text))))
        assert set(itertools.accumulate(map(len, parts))) <= safe
        tail = pieces("[...]\n" + text[1_000:])  # a capping loop's cut keeps the end
        assert len(set(tail) & set(parts)) >= len(parts) * 0.6
    assert pieces("no line breaks at all") == ["no line breaks at all"]
    assert pieces("") == [""]


def test_a_piecewise_counter_tokenizes_each_piece_once() -> None:
    seen: list[str] = []

    def fn(text: str) -> int:
        seen.append(text)
        return _count_whole(text, "o200k_base")

    counter = PiecewiseCounter(fn)
    lines = [f"- [{i}] edited src/pkg/mod_{i}.py: renamed load_{i} to read_{i}\n" for i in range(200)]
    notes = "".join(lines)
    assert len(notes) >= PIECEWISE_MIN_CHARS
    assert counter.count(notes) == _count_whole(notes, "o200k_base")
    assert seen == [notes]  # a text that shares nothing with an earlier one is counted whole
    grown = notes + "- [200] ran pytest -x: 3 failed\n"  # the notes with one more line
    assert counter.count(grown) == _count_whole(grown, "o200k_base")
    assert "".join(seen[1:]) == grown  # it shares the head: counted in pieces, each remembered
    first = len(seen)
    grown2 = grown + "- [201] ran pytest -x: 0 failed\n"
    assert counter.count(grown2) == _count_whole(grown2, "o200k_base")
    again = sum(map(len, seen[first:]))  # the new line and the lines of its piece before it
    assert 0 < again < len(notes) // 2
    cut = "[...]\n" + grown2[-3_000:] + "x" * 1_200  # a cut that keeps the end, then grown: no shared edge
    assert counter.count(cut) == _count_whole(cut, "o200k_base")
    assert seen[-1] == cut


