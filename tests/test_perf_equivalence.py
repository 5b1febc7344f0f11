"""The speed-ups give the same answers as the plain computations they replace (issue 10).

Each test runs the fast path and the plain one on real transcript text and compares results; speed
itself is measured in ``benchmarks/``, never here.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import msgspec
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conftest import TRANSCRIPTS
from ctxengine.formats import anthropic_writer as aw
from ctxengine.formats import load
from ctxengine.formats.anthropic_writer import SystemMessages
from ctxengine.layers.pairing import find_violations, repair
from ctxengine.layers.pairing_cache import RepairCache
from ctxengine.messages import identifiers
from ctxengine.messages.model import CACHE_ANCHOR, Message, Text, ToolCall, ToolResult
from ctxengine.summary import notes
from ctxengine.tokens.counter import CLAUDE_PROFILE, EstimateCounter, OpenAICounter, classify_text
from ctxengine.tokens.memo import TextMemo
from strategies import sessions

PROPS = settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
BIG = TRANSCRIPTS / "claude-code-jsonl" / "cc_mimo-v2.5-pro_vscode_2x-autocompact_4530697c.jsonl"


def _real_texts() -> list[str]:
    if not BIG.exists():
        pytest.skip("shared transcripts not found")
    texts: set[str] = set()
    for session in load(BIG):
        for m in session.messages:
            for b in m.blocks:
                if isinstance(b, Text):
                    texts.add(b.text)
                elif isinstance(b, ToolResult):
                    texts.update(p.text for p in b.content if isinstance(p, Text))
                elif isinstance(b, ToolCall) and isinstance(b.input, dict):
                    texts.update(v for v in b.input.values() if isinstance(v, str))
    return sorted(texts)


def test_identifier_prefilter_finds_what_the_full_scan_finds() -> None:
    texts = _real_texts()
    assert len(texts) > 500
    found = 0
    for t in texts:
        fast = identifiers._extract.__wrapped__(t)
        assert fast == identifiers._match(t), t[:200]
        found += len(fast)
    assert found > 1000  # the texts do hold identifiers


def test_the_guarded_identifier_pattern_matches_as_the_alternatives_alone() -> None:
    """The guard in front of ``_PATTERN`` (no alternative starts mid-word but a URL or a ``-``)
    changes no match: the same spans and kinds on every real text and on the odd cases."""
    import re

    bare = re.compile(identifiers._ALTERNATIVES)
    odd = ["Foo-bar.com:8080", "xhttps://a.b/c", "a-b-c.d:80 _/x/y.z", "\u00e9/a/b.py", "ab12345678"]
    for t in [*_real_texts(), *odd]:
        want = [(m.span(), m.lastgroup) for m in bare.finditer(t)]
        assert [(m.span(), m.lastgroup) for m in identifiers._PATTERN.finditer(t)] == want, t[:200]


@pytest.mark.parametrize(
    "text",
    [
        "see /usr/lib/x.py and\u00a0C:\\Users\\a\\b.txt,http://h.io/a?b=1 ",
        "deadbeefcafe-babe-face-feed-abcdefabcdef",  # a UUID of letters only
        "x" * 5000 + " 1234567 " + "y-" * 300,
        "localhost:8080\tsrc/pkg/mod.rs\n0xDEADBEEF12",
        # runs without / \\ : - nor 6 digits nor 8 hex digits in a row are not searched
        "value_12 = load(12345)  # 12345x abcdef1 a1b2c3d4e 99999_99999",
        "v2=ab12cd34ef x:1 y:12345 _deadbeef_ 123456_ a1234567",
    ],
)
def test_identifier_prefilter_edge_cases(text: str) -> None:
    assert identifiers._extract.__wrapped__(text) == identifiers._match(text)


def test_memoized_counts_equal_fresh_counts() -> None:
    texts = _real_texts()[:400]
    memo_counter = EstimateCounter(CLAUDE_PROFILE)
    for t in texts + texts:  # the second pass is served by the memo
        assert memo_counter.count_text(t) == memo_counter._estimate(t, classify_text(t))
    exact = OpenAICounter("o200k_base")
    for t in texts + texts:
        assert exact.count_text(t) == exact._count_uncached(t)


def test_text_memo_is_bounded_by_chars_and_entries() -> None:
    calls: list[str] = []

    def fn(text: str) -> int:
        calls.append(text)
        return len(text)

    memo = TextMemo(fn, max_chars=100, max_entries=3)
    words = [f"{k:03d}" * 10 for k in range(5)]  # 30 chars each
    for w in words:
        assert memo.count(w) == 30
    assert len(memo) == 3  # 100 chars hold three of them
    assert memo.count(words[-1]) == 30 and len(calls) == 5  # a hit: not counted again
    assert memo.count(words[0]) == 30 and len(calls) == 6  # evicted first: counted again
    assert memo.count("short") == 5 and memo.count("short") == 5 and len(calls) == 8  # never kept


# ---------------------------------------------------------------- pairing, checked incrementally


class _WholeRepair:
    """The engine's former projection: the whole view repaired and stabilised at every call."""

    def __init__(self) -> None:
        self.made: dict[tuple[str, int], Message] = {}

    def project(self, view: list[Message]) -> list[Message]:
        repaired, report = repair(view)
        if not report.violations:
            return list(view)
        given = {id(m) for m in view}
        out = []
        for m in repaired:
            if id(m) not in given:
                known = self.made.get((m.id, len(m.blocks)))
                if known is not None and known == m:
                    m = known
                else:
                    self.made[(m.id, len(m.blocks))] = m
            out.append(m)
        return out


def _same_projections(msgs: list[Message], rebuild_at: int) -> None:
    cache, whole = RepairCache(), _WholeRepair()
    prev_new: list[Message] = []
    prev_old: list[Message] = []
    for k in range(1, len(msgs) + 1):
        if k == rebuild_at:
            cache.reset()
        view = msgs[:k]
        new, old = cache.project(view), whole.project(view)
        assert new == old
        assert cache.valid == (not find_violations(view))
        # the same messages stay the same objects (what the prompt-cache model compares)
        kept_new = [a is b for a, b in zip(new, prev_new, strict=False)]
        kept_old = [a is b for a, b in zip(old, prev_old, strict=False)]
        assert kept_new == kept_old
        prev_new, prev_old = new, old


@PROPS
@given(sessions(corrupt=None, max_turns=8), st.integers(0, 30))
def test_cached_repair_equals_whole_repair(msgs: list[Message], rebuild_at: int) -> None:
    _same_projections(msgs, rebuild_at)


def test_cached_repair_on_a_real_session_with_a_lasting_violation() -> None:
    if not BIG.exists():
        pytest.skip("shared transcripts not found")
    (session,) = load(BIG)
    msgs = [m for m in session.messages if m.origin not in ("compact_summary", "compact_restore")][:400]
    first_call = next(i for i, m in enumerate(msgs) if m.tool_calls)
    orphan = Message("user", (ToolResult("ghost", (Text("stale"),)),), "orphan-1")
    msgs = [*msgs[: first_call + 2], orphan, *msgs[first_call + 2 :]]
    _same_projections(msgs, rebuild_at=0)
    cache = RepairCache()
    for k in range(1, len(msgs) + 1):
        cache.project(msgs[:k])
    assert not cache.valid
    assert cache.full_repairs <= 3  # the prefix is repaired once, not at every call


# ---------------------------------------------------------------- grep's byte screen


def test_grep_byte_screen_finds_what_the_regex_finds(tmp_path: Path) -> None:
    from ctxengine.tools.grep import grep
    from ctxengine.tools.workspace import Workspace

    files = {
        "utf8.py": "x = 1\nfind_me = 'caf\u00e9'\n".encode(),
        "bom.txt": b"\xef\xbb\xbffind_me first\n",
        "legacy.txt": b"caf\xe9 find_me\r\nmore\r\n",
        "bad_utf8.txt": b"\xff\xfefind_me? no: UTF-16 BOM\n",
        "mixed.txt": b"ok\n\xc3(find_me after a broken sequence\n",
        "bin.dat": b"find_me\0\0",
        "none.py": b"nothing here\n" * 50,
    }
    for k in range(150):  # more than one page of matches, over many files
        files[f"many/f{k:03d}.txt"] = b"line\nfind_me %d\n" % k
    for name, data in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_bytes(data)
    ws = Workspace(tmp_path)
    for offset in (0, 100):
        screened = grep(ws, "find_me", offset=offset)
        plain = grep(ws, "find_m[e]", offset=offset)  # not a literal: no byte screen
        assert screened == plain.replace("find_m[e]", "find_me")
    assert "legacy.txt:1:" in grep(ws, "find_me") and "utf8.py:2:" in grep(ws, "find_me", offset=100)


# ---------------------------------------------------------------- cache breakpoints from shapes


def _breakpoints_from_the_encoding(messages: list[Message], mode: SystemMessages) -> list[int]:
    """The former ``breakpoint_indices``: the whole request encoded, then read (the cache
    anchor's message listed when the encoding found a block of it to mark)."""
    encoded, last_src, _, anchor_block = aw._encode(messages, "", mode)
    skip = aw.aborted_unanswered(messages)
    anchor = max(
        (
            i
            for i, m in enumerate(messages)
            if m.role == "user"
            and m.meta.get(CACHE_ANCHOR)
            and any(b["type"] not in aw._NO_CACHE_TYPES for b in aw._blocks(m, skip))
        ),
        default=-1,
    )
    assert (anchor_block is not None) == (anchor >= 0)
    marks = [
        last_src[k]
        for k in aw._message_breakpoints(encoded)
        if last_src[k] >= 0 and any(b["type"] not in aw._NO_CACHE_TYPES for b in encoded[k]["content"])
    ]
    return sorted({*marks, anchor}) if anchor >= 0 else marks


@PROPS
@given(
    sessions(corrupt=None, max_turns=8),
    st.sampled_from(["hoist", "inline"]),
    st.integers(0, 40),
    st.integers(-1, 40),
)
def test_breakpoints_from_shapes_equal_breakpoints_from_the_encoding(
    msgs: list[Message], mode: SystemMessages, cut: int, anchor: int
) -> None:
    if 0 <= anchor < len(msgs):  # a message marked as the end of a stable stretch (the skeleton)
        msgs = list(msgs)
        msgs[anchor] = msgspec.structs.replace(msgs[anchor], meta={**msgs[anchor].meta, CACHE_ANCHOR: True})
    for view in (msgs, msgs[cut:], msgs[: len(msgs) - cut]):  # projections share message objects
        assert aw.breakpoint_indices(view, system_messages=mode) == _breakpoints_from_the_encoding(view, mode)


# ---------------------------------------------------------------- search: the contentless index


def _hits(ix: Any) -> list[tuple[str, int, float, Any]]:
    return [(h.name, h.start, h.score, h.snippet) for q in ("gamma", "window cache") for h in ix.search(q)]


def test_updated_search_index_ranks_as_a_fresh_one_and_reports_its_size(tmp_path: Path) -> None:
    from ctxengine.tools.search import SearchIndex

    root = tmp_path / "ws"
    (root / "src").mkdir(parents=True)
    words = ["alpha", "beta", "gamma", "delta", "parse", "token", "cache", "window"]
    for k in range(30):
        body = "\n".join(f"def f{k}_{n}(): return {words[(k + n) % 8]} {words[n % 8]}" for n in range(90))
        (root / "src" / f"m{k}.py").write_text(body + "\n")
    with SearchIndex(root, tmp_path / "a.sqlite") as ix:
        first = ix.update()
        assert first.index_bytes == ix.size_bytes() > 0  # the size is reported (bench_search: ratios)
        assert first.text_bytes == sum(p.stat().st_size for p in (root / "src").iterdir())
        for k in range(0, 30, 3):  # modify, delete, add: the deleted rows leave the statistics
            (root / "src" / f"m{k}.py").write_text(f"def changed_{k}(): return gamma gamma\n")
        (root / "src" / "m1.py").unlink()
        (root / "src" / "new.py").write_text("window cache parse\n" * 70)
        ix.update()
        updated = _hits(ix)
    with SearchIndex(root, tmp_path / "b.sqlite") as fresh:
        fresh.update()
        rebuilt = _hits(fresh)
    assert updated == rebuilt and updated


def test_read_screened_reads_whole_files_and_hands_back_errors(tmp_path: Path) -> None:
    from ctxengine.tools.file_screen import BLOCK_BYTES, LARGE, read_screened

    for n in (0, 1, 65_535, 65_537, 300_001):
        p = tmp_path / f"f{n}"
        p.write_bytes(bytes(range(256)) * (n // 256) + b"x" * (n % 256))
        assert read_screened(str(p), None) == p.read_bytes()
        assert read_screened(str(p), b"never there") is None
    big = tmp_path / "big"
    big.write_bytes(b"a" * (BLOCK_BYTES + 1))
    assert read_screened(str(big), None) is LARGE
    assert read_screened("/proc/self/status", b"Name:")  # reports size 0, holds text
    assert isinstance(read_screened(str(tmp_path / "missing"), None), FileNotFoundError)


def test_identifiers_of_runs_seen_before_are_the_ones_a_full_scan_finds() -> None:
    identifiers._RUN_IDS.clear()
    first = "read src/app/loader.py and C:\\work\\notes.txt at 0xDEADBEEF12"
    assert identifiers._extract.__wrapped__(first) == identifiers._match(first)
    assert "src/app/loader.py" in identifiers._RUN_IDS  # each run's identifiers remembered
    again = "src/app/loader.py: 12 lines; see http://h.io/a?b=1 and src/app/loader.py again"
    assert identifiers._extract.__wrapped__(again) == identifiers._match(again)
    assert identifiers._extract.__wrapped__(again) == {"src/app/loader.py", "http://h.io/a?b=1"}


# the notes' single patterns before the speed-up (each retried at every character of a line or
# sentence without a match): the reference for result_lines and learnings
OLD_RESULT_RE = re.compile(
    r"(?im)^.*(\b\d+ (passed|failed|errors?|tests?)\b|\bOK\b|\bsuccess(fully)?\b|\bexit code \d+).*$"
)
OLD_LEARNING_RE = re.compile(
    r"(?i)[^.\n]*\b(root cause|the issue is|turns out|because|learned|note that)\b[^.\n]*[.\n]"
)


def test_result_lines_and_learnings_equal_the_single_patterns_on_real_text() -> None:
    texts = _real_texts()
    results = learned = 0
    for t in texts:
        old = [m.group() for m in OLD_RESULT_RE.finditer(t[-4_000:])]
        assert notes.result_lines(t[-4_000:]) == old, t[:200]
        results += len(old)
        old = [m.group() for m in OLD_LEARNING_RE.finditer(t)]
        assert notes.learnings(t) == old, t[:200]
        learned += len(old)
    assert results > 30 and learned > 20  # the texts do hold both (61 and 35 result lines and learnings)


@PROPS
@given(
    st.lists(
        st.sampled_from(
            [
                "because",
                "Turns out",
                "3 passed",
                "ok",
                "OK.",
                "exit code 2",
                "root cause",
                ".",
                "\n",
                "\r\n",
                " ",
                "x",
                "_",
                "9",
                "success",
                "fully",
                "note that",
                "é",
            ]
        ),
        max_size=60,
    )
)
def test_result_lines_and_learnings_equal_the_single_patterns_on_generated_text(parts: list[str]) -> None:
    t = "".join(parts)
    assert notes.result_lines(t) == [m.group() for m in OLD_RESULT_RE.finditer(t)]
    assert notes.learnings(t) == [m.group() for m in OLD_LEARNING_RE.finditer(t)]


def test_remembered_tool_arguments_are_the_json_of_each_calls_input() -> None:
    from ctxengine.formats.openai_writer import tool_arguments

    calls = [ToolCall(f"c{i}", "Bash", {"command": f"ls {i}", "é": [1, None]}) for i in range(50)]
    calls.append(ToolCall("p", "apply_patch", "*** Begin Patch"))
    for _ in range(2):  # the second pass is served from memory
        for call in calls:
            value = call.input if isinstance(call.input, dict) else {"input": call.input}
            assert tool_arguments(call) == json.dumps(value, ensure_ascii=False)
