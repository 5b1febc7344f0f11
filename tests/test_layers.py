"""Threshold behaviour of every layer of the cascade, driven through ``ContextEngine``'s public
lifecycle: small hand-built sessions pin each threshold (just under: nothing; just over: the
decision), and the real shared transcripts show each layer acting on real input.

Sizes: ``*_chars`` are Python characters, everything else is tokens as the engine counts them
(``claude-sonnet-4-5``: the calibrated Claude estimate; no usage reported, so the ledger scale is 1).
"""

from __future__ import annotations

import itertools
import random
import warnings
from collections.abc import Iterator
from typing import Any

import pytest

from conftest import CLAUDE_CODE
from ctxengine.engine.core import RECORDED_ORIGINS, ContextEngine, Projection
from ctxengine.formats import load
from ctxengine.formats.anthropic_writer import to_anthropic
from ctxengine.layers.base import artifact_id, result_text
from ctxengine.layers.pairing import MISSING_RESULT_TEXT, find_violations
from ctxengine.layers.tool_result_budget import density
from ctxengine.messages import identifiers
from ctxengine.messages.model import Image, Message, Session, Text, ToolCall, ToolResult, Usage
from ctxengine.models.registry import WindowWarning
from ctxengine.policy.registry import (
    CacheClear,
    ClearedResults,
    CompactionSettings,
    IdleClear,
    OverflowGuard,
    Policy,
    SessionMemory,
    ToolResultBudget,
)
from policies import LAYER_DEFAULT as DEFAULT
from policies import off

MODEL = "claude-sonnet-4-5"
MIMO = CLAUDE_CODE / "cc_mimo-v2.5-pro_2x-autocompact_db3f6604.jsonl"
MIMO_VSCODE = CLAUDE_CODE / "cc_mimo-v2.5-pro_vscode_2x-autocompact_4530697c.jsonl"
SONNET = CLAUDE_CODE / "cc_sonnet-4.5_long-290-tools_redacted_3cfce0ff.jsonl"

# Filler with none of the words that make a result's tail "important" (error, total, passed...).
WORDS = ("alpha", "beta", "gamma", "delta", "file", "value", "result", "line", "output", "check")
CLEARED = "[Old tool result content cleared"


def filler(chars: int, seed: int = 0) -> str:
    rnd = random.Random(seed)
    out: list[str] = []
    size = 0
    while size <= chars:  # joined, the words take size - 1 >= chars characters
        word = rnd.choice(WORDS)
        out.append(word)
        size += len(word) + 1
    return " ".join(out)[:chars]


class Chat:
    """Builds a conversation; every message is also fed to ``engine`` when one is given."""

    def __init__(self, engine: ContextEngine | None = None, t0: float = 1_700_000_000.0) -> None:
        self.engine = engine
        self.t = t0
        self.messages: list[Message] = []
        self.events: list[Any] = []
        self._n = itertools.count()

    def _add(self, role: str, blocks: tuple[Any, ...], dt: float) -> Message:
        self.t += dt
        msg = Message(role, blocks, f"{role[0]}{next(self._n)}", timestamp=self.t)  # type: ignore[arg-type]
        self.messages.append(msg)
        if self.engine is not None:
            self.events += self.engine.ingest(msg)
        return msg

    def user(self, text: str, dt: float = 1.0) -> Message:
        return self._add("user", (Text(text),), dt)

    def assistant(self, text: str, dt: float = 1.0) -> Message:
        return self._add("assistant", (Text(text),), dt)

    def calls(self, *names: str, paths: tuple[str, ...] = (), text: str = "", dt: float = 1.0) -> list[str]:
        ids = [f"toolu_{next(self._n)}" for _ in names]
        paths = paths or tuple(f"/src/file{i}.py" for i in ids)
        blocks: tuple[Any, ...] = (Text(text),) if text else ()
        blocks += tuple(ToolCall(i, n, {"file_path": p}) for i, n, p in zip(ids, names, paths, strict=True))
        self._add("assistant", blocks, dt)
        return ids

    def results(self, *pairs: tuple[str, Any], dt: float = 1.0) -> Message:
        blocks = []
        for cid, content in pairs:
            parts = (Text(content),) if isinstance(content, str) else tuple(content)
            blocks.append(ToolResult(cid, parts))
        return self._add("user", tuple(blocks), dt)

    def round(self, content: Any, name: str = "Read", path: str = "", text: str = "", dt: float = 1.0) -> str:
        (cid,) = self.calls(name, paths=(path,) if path else (), text=text, dt=dt)
        self.results((cid, content), dt=dt)
        return cid


def engine_for(policy: Policy, window: int | None = None, **kw: Any) -> ContextEngine:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", WindowWarning)
        engine = ContextEngine(policy, model=MODEL, window=window, **kw)
    engine.bootstrap(system="You are a coding agent.", fixed_prefix_tokens=0)
    return engine


def shown(proj: Projection, call_id: str) -> ToolResult:
    """The result block the projection shows for ``call_id``."""
    found = [r for m in proj.messages for r in m.tool_results if r.call_id == call_id]
    assert len(found) == 1, f"{call_id} shown {len(found)} times"
    return found[0]


def original(chat: Chat, call_id: str) -> ToolResult:
    return next(r for m in chat.messages for r in m.tool_results if r.call_id == call_id)


def events_of(proj: Projection, layer: str) -> list[Any]:
    return [e for e in proj.events if e.layer == layer]


def results_in(proj: Projection) -> list[ToolResult]:
    return [r for m in proj.messages for r in m.tool_results]


def suffix_of_history(proj: Projection, engine: ContextEngine, skip: int) -> int:
    """Assert ``proj.messages[skip:]`` are history's messages, a contiguous suffix of it (no
    repair-made message, no synthetic result, no split pair); returns the history index where it
    starts."""
    kept = proj.messages[skip:]
    assert kept, "nothing kept"
    start = next(i for i, m in enumerate(engine.history) if m.id == kept[0].id)
    visible = [m for m in engine.history[start:] if m.origin not in RECORDED_ORIGINS]
    assert [m.id for m in kept] == [m.id for m in visible]
    for m in kept:
        assert all(MISSING_RESULT_TEXT not in result_text(r) for r in m.tool_results)
    assert not kept[0].tool_results, "the kept part opens with a tool result: a pair was split"
    return start


# ================================================================ tool-result budget


@pytest.mark.parametrize("policy", [DEFAULT, Policy()], ids=["default", "claude-code"])
def test_result_at_the_cap_stays_and_one_char_over_is_offloaded(policy: Policy) -> None:
    engine = engine_for(policy)
    # the cap as resolved for the window (default: min(20,000, 2% of the window x 4) = 16,000)
    cap = policy.for_window(engine.window).tool_result_max_chars
    assert cap == (16_000 if policy.name == "default" else 50_000)
    chat = Chat(engine)
    chat.user("read both files")
    assert (len(filler(cap, 1)), len(filler(cap + 1, 2))) == (cap, cap + 1)
    at_cap = chat.round(filler(cap, 1))
    over = chat.round(filler(cap + 1, 2))
    proj = engine.assemble()

    assert shown(proj, at_cap) is original(chat, at_cap)
    preview = result_text(shown(proj, over))
    assert preview.startswith("<persisted-output>")
    assert preview.rstrip().endswith("</persisted-output>")
    assert artifact_id(over) in preview
    assert f"{cap + 1:,} chars" in preview
    assert filler(cap + 1, 2)[:500] in preview  # the head is shown
    assert len(preview) < policy.preview_chars + 1_000
    budget_events = [e for e in chat.events if e.layer == "tool_result_budget"]
    assert [e.details["call_ids"] for e in budget_events] == [[over]]
    assert engine.retrieve(artifact_id(over)) == filler(cap + 1, 2)
    assert find_violations(proj.messages) == []


def test_per_message_aggregate_cap_offloads_the_largest_first() -> None:
    policy = Policy().with_(ToolResultBudget(max_chars=100_000, message_max_chars=150_000))
    engine = engine_for(policy)
    chat = Chat(engine)
    chat.user("read four files")
    sizes = [55_000, 65_000, 50_000, 60_000]  # 230,000 chars in one message, each under the per-tool cap
    ids = chat.calls(*["Read"] * 4)
    chat.results(*[(cid, filler(n, n)) for cid, n in zip(ids, sizes, strict=True)])
    proj = engine.assemble()

    offloaded = {cid for cid in ids if result_text(shown(proj, cid)).startswith("<persisted-output>")}
    assert offloaded == {ids[1], ids[3]}  # 65,000 then 60,000: 230,000 -> 165,000 -> 105,000
    assert sum(len(result_text(shown(proj, cid))) for cid in ids) <= policy.message_results_max_chars
    for cid, n in zip(ids, sizes, strict=True):
        if cid in offloaded:
            assert engine.retrieve(artifact_id(cid)) == filler(n, n)
        else:
            assert shown(proj, cid) is original(chat, cid)


@pytest.mark.parametrize(
    "tail",
    [
        "\nError: connection refused by db.internal:5432 while migrating",
        '\nTraceback (most recent call last):\n  File "/srv/app/main.py", line 3, in <module>\n'
        "    main()\nValueError: bad config key 'retries'",
    ],
    ids=["error", "traceback"],
)
def test_preview_keeps_head_and_tail_when_the_tail_matters(tail: str) -> None:
    engine = engine_for(DEFAULT)
    chat = Chat(engine)
    chat.user("run it")
    text = filler(30_000, 3) + tail
    cid = chat.round(text, name="Bash")
    plain = chat.round(filler(30_000, 4), name="Bash")
    proj = engine.assemble()

    preview = result_text(shown(proj, cid))
    assert text[-DEFAULT.tail_chars :] in preview
    assert tail.strip() in preview
    assert "chars omitted" in preview
    assert text[:500] in preview
    control = result_text(shown(proj, plain))
    assert "chars omitted" not in control
    assert filler(30_000, 4)[-200:] not in control


def test_images_are_never_cut_by_the_character_cap() -> None:
    engine = engine_for(DEFAULT)
    chat = Chat(engine)
    chat.user("take screenshots")
    big_image = Image("image/png", data="A" * 300_000, width=1200, height=800)
    image_only = chat.round((Text("screenshot taken"), big_image), name="Screenshot")
    with_text = chat.round((Text(filler(25_000, 5)), big_image), name="Screenshot")
    proj = engine.assemble()

    assert shown(proj, image_only) is original(chat, image_only)  # 300,000 chars of base64: kept
    replaced = shown(proj, with_text)
    assert result_text(replaced).startswith("<persisted-output>")  # the text part was offloaded
    images = [p for p in replaced.content if isinstance(p, Image)]
    assert images == [big_image] and images[0].data == big_image.data


def test_the_offload_decision_is_frozen_per_call_id() -> None:
    policy = DEFAULT.with_(DEFAULT.settings(IdleClear).with_(gap_s=60.0, keep_recent=1))
    engine = engine_for(policy)
    chat = Chat(engine)
    chat.user("go")
    cid = chat.round(filler(25_000, 6))
    first = shown(engine.assemble(now=chat.t), cid)
    for i in range(4):
        chat.round(filler(2_000, 10 + i))
    second = shown(engine.assemble(now=chat.t), cid)
    # an idle clear rebuilds the projection: the offloaded result is left as it was decided
    later = engine.assemble(now=chat.t + 3_600)
    assert events_of(later, "idle_clear")
    assert first is second is shown(later, cid)

    # the same history projects to the same bytes in a fresh engine
    again = engine_for(policy)
    for m in chat.messages:
        again.ingest(m)
    again.assemble(now=chat.t)
    replay = again.assemble(now=chat.t + 3_600)
    assert to_anthropic(replay.messages, model=MODEL) == to_anthropic(later.messages, model=MODEL)


def test_the_offload_event_reports_the_tokens_it_saved() -> None:
    engine = engine_for(DEFAULT)
    chat = Chat(engine)
    chat.user("go")
    chat.round(filler(60_000, 7))
    (event,) = [e for e in chat.events if e.layer == "tool_result_budget"]
    assert event.tokens_saved > 5_000


def test_a_reused_call_id_does_not_inherit_the_earlier_offload() -> None:
    engine = engine_for(DEFAULT)
    chat = Chat(engine)
    chat.user("go")
    engine.ingest(Message("assistant", (ToolCall("c1", "Bash", {"command": "cat big.log"}),), "a-big"))
    engine.ingest(Message("user", (ToolResult("c1", (Text(filler(30_000, 1)),)),), "r-big"))
    engine.ingest(Message("assistant", (Text("Large log; checking once more."),), "a-text"))
    engine.ingest(Message("user", (Text("again"),), "u-again"))
    engine.ingest(Message("assistant", (ToolCall("c1", "Bash", {"command": "echo hi"}),), "a-small"))
    engine.ingest(Message("user", (ToolResult("c1", (Text("hi"),)),), "r-small"))
    proj = engine.assemble()
    last = proj.messages[-1].tool_results
    assert [result_text(r) for r in last] == ["hi"]


# ================================================================ idle clear


def idle_session(policy: Policy, n: int = 8) -> tuple[ContextEngine, Chat, list[str]]:
    engine = engine_for(policy)
    chat = Chat(engine)
    chat.user("look around")
    ids = [
        chat.round(
            filler(2_000, i) + f"\nsee /srv/mod{i}/handler{i}.py job 123e4567-e89b-12d3-a456-42661417400{i}",
            dt=10.0,
        )
        for i in range(n)
    ]
    return engine, chat, ids


@pytest.mark.parametrize("delta", [-1.0, 0.0])
def test_idle_gap_up_to_the_threshold_clears_nothing(delta: float) -> None:
    engine, chat, ids = idle_session(DEFAULT)
    engine.assemble(now=chat.t)
    proj = engine.assemble(now=chat.t + DEFAULT.idle_gap_s + delta)
    assert proj.events == []
    assert all(shown(proj, cid) is original(chat, cid) for cid in ids)


@pytest.mark.parametrize(("gap", "keep"), [(3_600.0, 5), (300.0, 2)])
def test_idle_gap_over_the_threshold_clears_all_but_the_newest(gap: float, keep: int) -> None:
    policy = DEFAULT.with_(DEFAULT.settings(IdleClear).with_(gap_s=gap, keep_recent=keep))
    engine, chat, ids = idle_session(policy)
    engine.assemble(now=chat.t)
    proj = engine.assemble(now=chat.t + gap + 1)

    (event,) = events_of(proj, "idle_clear")
    assert event.details["cleared"] == len(ids) - keep
    assert event.tokens_after < event.tokens_before
    for cid in ids[:-keep]:
        text = result_text(shown(proj, cid))
        assert text.startswith(CLEARED) and artifact_id(cid) in text
        assert engine.retrieve(artifact_id(cid)) == result_text(original(chat, cid))
    for cid in ids[-keep:]:
        assert shown(proj, cid) is original(chat, cid)
    assert find_violations(proj.messages) == []


@pytest.mark.parametrize("keep_identifiers", [True, False])
def test_idle_placeholders_keep_an_identifiers_line(keep_identifiers: bool) -> None:
    engine, chat, ids = idle_session(
        DEFAULT.with_(DEFAULT.settings(ClearedResults).with_(keep_identifiers=keep_identifiers))
    )
    engine.assemble(now=chat.t)
    proj = engine.assemble(now=chat.t + 7_200)
    text = result_text(shown(proj, ids[0]))
    assert text.startswith(CLEARED)
    wanted = {"/srv/mod0/handler0.py", "123e4567-e89b-12d3-a456-426614174000"}
    if keep_identifiers:
        line = text.splitlines()[-1]
        assert line.startswith("identifiers: ")
        assert wanted <= set(line.removeprefix("identifiers: ").split())
    else:
        assert len(text.splitlines()) == 1
        assert not any(w in text for w in wanted)


# ================================================================ cache-aware clear

CACHE_POLICY = off(DEFAULT, CompactionSettings, IdleClear, SessionMemory)
CACHE_WINDOW = 40_000  # trigger 20,000, target 14,000, at least 10,000 freed per batch


def test_cache_clear_does_nothing_at_or_below_the_trigger() -> None:
    engine = engine_for(CACHE_POLICY, CACHE_WINDOW)
    chat = Chat(engine)
    chat.user("go")
    trigger = int(CACHE_WINDOW * CACHE_POLICY.cache_clear_trigger)
    projections = []
    while True:
        chat.round(filler(3_000, len(chat.messages)))
        proj = engine.assemble()
        if proj.tokens > trigger:
            break
        projections.append(proj)
    assert len(projections) > 20  # plenty of clearable results below the trigger
    assert all(p.events == [] for p in projections)
    assert not any(result_text(r).startswith(CLEARED) for r in results_in(projections[-1]))


def test_cache_clear_over_the_trigger_clears_one_batch_of_at_least_the_minimum() -> None:
    engine = engine_for(CACHE_POLICY, CACHE_WINDOW)
    chat = Chat(engine)
    chat.user("go")
    trigger = int(CACHE_WINDOW * CACHE_POLICY.cache_clear_trigger)
    ids: list[str] = []
    batches = []
    for i in range(70):
        ids.append(chat.round(filler(3_000, i)))
        proj = engine.assemble()
        for event in events_of(proj, "cache_clear"):
            batches.append(event)
            assert event.tokens_before > trigger
            # one batch brings the context down to about the target (35% of the window)
            assert event.tokens_after <= CACHE_WINDOW * CACHE_POLICY.cache_clear_target + 1_000
        # the newest results are never cleared
        assert not any(
            result_text(r).startswith(CLEARED)
            for r in results_in(proj)[-CACHE_POLICY.cache_clear_keep_recent :]
        )
        assert find_violations(proj.messages) == []
    assert len(batches) >= 2
    cleared = [cid for cid in ids if cid in engine.replacements]
    assert cleared == ids[: len(cleared)]  # oldest first
    assert all(engine.retrieve(artifact_id(cid)) == result_text(original(chat, cid)) for cid in cleared)


def test_cache_clear_makes_no_batch_smaller_than_the_minimum() -> None:
    engine = engine_for(CACHE_POLICY, CACHE_WINDOW)
    chat = Chat(engine)
    chat.user("go")
    for i in range(7):  # 7 results: only the 2 oldest may be cleared (newest 5 kept), ~1,300 tokens
        chat.round(filler(3_000, i))
    for i in range(8):  # large user text: not clearable
        chat.user(filler(12_000, 100 + i))
    proj = engine.assemble()
    assert proj.tokens > CACHE_WINDOW * CACHE_POLICY.cache_clear_trigger
    assert proj.events == []
    assert engine.replacements == {}

    # the same pressure with a lower minimum does clear the two oldest
    low = engine_for(CACHE_POLICY.with_(CACHE_POLICY.settings(CacheClear).with_(at_least=500)), CACHE_WINDOW)
    for m in chat.messages:
        low.ingest(m)
    (event,) = events_of(low.assemble(), "cache_clear")
    assert event.details["cleared"] == 2


# ================================================================ summary compaction

SUMMARY_POLICY = off(DEFAULT, SessionMemory, CacheClear, IdleClear, ToolResultBudget)
FIRST_REQUEST = "Please fix the date parser bug in /srv/app/parser/dates.py and then run the test suite."


def test_compact_threshold_formula() -> None:
    claude_code = Policy()
    assert claude_code.compact_threshold(200_000, 64_000) == 167_000  # 200,000 - 20,000 - 13,000
    assert claude_code.compact_threshold(200_000, 8_000) == 179_000  # max output below the reserve
    assert DEFAULT.compact_threshold(200_000, 64_000) == 60_000  # 0.3 x window
    engine = engine_for(claude_code)
    assert (engine.window, engine.model.max_output) == (200_000, 64_000)


def summary_rounds(chat: Chat, n: int, start: int = 0, text: bool = True) -> list[str]:
    """Rounds of: assistant text + a Read call, its result (with a hex id)."""
    return [
        chat.round(
            filler(3_000, i) + f"\ncommit deadbeef{i:04d}cafe",
            path=f"/srv/app/pkg{i}/mod{i}.py",
            text=f"Reading module {i}." if text else "",
        )
        for i in range(start, start + n)
    ]


def test_summary_compaction_fires_just_over_the_threshold() -> None:
    window = 100_000
    engine = engine_for(SUMMARY_POLICY, window)
    threshold = SUMMARY_POLICY.compact_threshold(window, engine.model.max_output)
    assert threshold == 30_000  # 0.3 x window
    chat = Chat(engine)
    chat.user(FIRST_REQUEST)
    below: list[Projection] = []
    proj = None
    for i in range(200):
        summary_rounds(chat, 1, start=i)
        proj = engine.assemble()
        if proj.events:
            break
        below.append(proj)
    assert proj is not None and below
    assert all(p.tokens <= threshold for p in below)
    assert below[-1].tokens > threshold - 1_500  # the last call below was close to the line
    (event,) = events_of(proj, "summary_compact")
    assert event.tokens_before > threshold
    assert event.tokens_after < threshold

    head = proj.messages[0]
    assert head.origin == "summary"
    prefix = next(i for i, m in enumerate(proj.messages) if m.origin == "message")
    assert all(m.origin in ("summary", "restore") for m in proj.messages[:prefix])
    suffix_of_history(proj, engine, prefix)
    kept_tokens = sum(engine.counter.count_message(m) for m in proj.messages[prefix:])
    assert kept_tokens >= SUMMARY_POLICY.keep_recent_tokens
    assert find_violations(proj.messages) == []


def test_summary_keeps_the_first_request_and_the_identifiers_of_the_span() -> None:
    window = 100_000
    engine = engine_for(SUMMARY_POLICY, window)
    chat = Chat(engine)
    chat.user(FIRST_REQUEST)
    summary_rounds(chat, 70)
    proj = engine.assemble()
    assert events_of(proj, "summary_compact")
    summary = proj.messages[0].text()
    first_kept = next(m for m in proj.messages if m.origin == "message")
    kept_from = next(i for i, m in enumerate(engine.history) if m.id == first_kept.id)
    span = engine.history[:kept_from]
    assert FIRST_REQUEST in summary
    span_ids = set()
    for m in span:
        span_ids |= identifiers.extract(m.text())
        for b in m.blocks:
            if isinstance(b, ToolResult):
                span_ids |= identifiers.extract(result_text(b))
            elif isinstance(b, ToolCall) and isinstance(b.input, dict):
                span_ids |= identifiers.extract(str(b.input.get("file_path", "")))
    assert len(span_ids) > 40
    missing = {i for i in span_ids if i not in summary}
    assert missing == set()
    assert engine.counter.count_text(summary) <= SUMMARY_POLICY.summary_budget(window)


def test_summary_is_bounded_by_the_summary_budget_under_pressure() -> None:
    window = 40_000
    budget = SUMMARY_POLICY.summary_budget(window)
    assert budget == 2_400  # 6% of the window
    engine = engine_for(SUMMARY_POLICY, window)
    chat = Chat(engine)
    chat.user(FIRST_REQUEST)
    summaries = []
    for i in range(40):
        chat.user(f"also consider /srv/extra/note{i}.md: " + filler(1_900, 500 + i))
        summary_rounds(chat, 2, start=2 * i)
        proj = engine.assemble()
        if events_of(proj, "summary_compact"):
            summaries.append(proj.messages[0].text())
    assert len(summaries) >= 3
    for text in summaries:
        assert engine.counter.count_text(text) <= budget
        assert FIRST_REQUEST in text


def test_compact_min_gain_prevents_a_second_compaction_right_after() -> None:
    # the reference threshold at 40,000 is 7,000 (< keep_recent_tokens 10,000): it would stay
    # over it after compacting. The engine derives the reserves for the window (issue 9, item 4);
    # the minimum gain still keeps a compaction from following the one before it
    window = 40_000
    threshold = SUMMARY_POLICY.compact_threshold(window, 64_000)
    assert threshold == 7_000

    def run(policy: Policy) -> tuple[list[int], list[int]]:
        engine = engine_for(policy, window)
        chat = Chat(engine)
        chat.user(FIRST_REQUEST)
        fired, sent = [], []
        for i in range(60):
            summary_rounds(chat, 1, start=i)
            proj = engine.assemble()
            sent.append(proj.tokens)
            if events_of(proj, "summary_compact"):
                fired.append(i)
        return fired, sent

    guarded, sent = run(SUMMARY_POLICY)
    assert len(guarded) >= 2, "compacted less than twice"
    for i in guarded[:-1]:
        assert sent[i] > threshold and sent[i + 1] > threshold  # over the reference line, yet ...
        assert i + 1 not in guarded  # ... no second compaction right after
    gaps = [b - a for a, b in itertools.pairwise(guarded)]
    assert all(g >= 3 for g in gaps)  # a compaction must free 10% of the window (4,000) first
    unguarded, _ = run(SUMMARY_POLICY.with_(SUMMARY_POLICY.settings(CompactionSettings).with_(min_gain=0.0)))
    assert len(unguarded) > 2 * len(guarded)  # without the minimum it compacts on every call


def test_forced_compaction_works_below_the_threshold() -> None:
    engine = engine_for(SUMMARY_POLICY)
    chat = Chat(engine)
    chat.user(FIRST_REQUEST)
    summary_rounds(chat, 40)
    before = engine.assemble()
    assert before.events == [] and before.tokens < SUMMARY_POLICY.compact_threshold(200_000, 64_000)
    assert engine.compact(force=False) is None

    event = engine.compact(force=True)
    assert event is not None and event.layer == "summary_compact"
    after = engine.assemble()
    assert after.messages[0].origin == "summary"
    assert after.tokens < before.tokens
    assert after.tokens == event.tokens_after
    suffix_of_history(after, engine, 1)


# ================================================================ overflow guard

OVERFLOW_POLICY = off(DEFAULT, CompactionSettings, CacheClear, IdleClear, SessionMemory)
SMALL_WINDOW = 20_000


def test_a_window_under_16k_is_refused() -> None:
    from ctxengine.models.registry import WindowTooSmallError

    with pytest.raises(WindowTooSmallError):
        ContextEngine(OVERFLOW_POLICY, model=MODEL, window=15_999)


def test_overflow_guard_drops_the_oldest_groups_behind_a_notice() -> None:
    engine = engine_for(OVERFLOW_POLICY, SMALL_WINDOW)
    limit = SMALL_WINDOW - OVERFLOW_POLICY.overflow_reserve
    chat = Chat(engine)
    chat.user(FIRST_REQUEST)
    proj = None
    for i in range(60):
        chat.calls("Read", "Grep")  # parallel calls, answered in two user messages
        ids = [b.id for b in chat.messages[-1].blocks if isinstance(b, ToolCall)]
        chat.results((ids[0], filler(1_500, i)))
        chat.results((ids[1], filler(1_500, 1_000 + i)))
        proj = engine.assemble()
        if proj.events:
            break
        assert proj.tokens <= limit
    assert proj is not None
    (event,) = events_of(proj, "overflow_guard")
    assert event.tokens_before > limit
    assert proj.tokens <= limit
    notice = proj.messages[0]
    assert notice.origin == "notice" and "dropped" in notice.text()
    assert proj.messages[1].text() == FIRST_REQUEST  # the latest request is never dropped
    assert event.details["latest_request_kept"] is True
    start = suffix_of_history(proj, engine, 2)
    assert start > 1  # the oldest messages went
    assert proj.messages[-1] is chat.messages[-1]  # the newest stayed
    assert find_violations(proj.messages) == []


def test_overflow_guard_keeps_one_notice_however_often_it_drops() -> None:
    engine = engine_for(OVERFLOW_POLICY, SMALL_WINDOW)
    chat = Chat(engine)
    chat.user(FIRST_REQUEST)
    for i in range(45):
        chat.round(filler(3_000, i))
        proj = engine.assemble()
        notices = [m for m in proj.messages if m.origin == "notice"]
        assert len(notices) <= 1
        assert len({m.id for m in proj.messages}) == len(proj.messages)


# ================================================================ real transcripts


def model_calls(session: Session) -> Iterator[tuple[int, Message]]:
    """(index, message) of each model call: the first assistant message of a run."""
    prev = ""
    for i, m in enumerate(session.messages):
        if m.role == "assistant" and prev != "assistant":
            yield i, m
        prev = m.role


def drive(
    session: Session, policy: Policy, window: int | None = None, newest: list[Message] | None = None
) -> tuple[ContextEngine, list[Projection]]:
    """Feed a recorded session as a live agent would: assemble at every model call (at its
    recorded time), then ingest the response and report the predicted usage. ``newest`` collects
    the newest message ingested before each call."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", WindowWarning)
        engine = ContextEngine(policy, model=session.model, window=window)
    engine.bootstrap(system=session.system, recorded_compactions=session.compactions)
    calls = {i for i, _ in model_calls(session)}
    projections = []
    for i, m in enumerate(session.messages):
        if i in calls:
            proj = engine.assemble(now=m.timestamp)
            projections.append(proj)
            if newest is not None:
                newest.append(engine.history[-1])
            engine.ingest(m)
            engine.after_turn(Usage(input_tokens=proj.tokens))
        else:
            engine.ingest(m)
    return engine, projections


@pytest.fixture(scope="module")
def mimo(transcripts: Any) -> Session:
    (session,) = load(MIMO)
    return session


@pytest.fixture(scope="module")
def sonnet(transcripts: Any) -> Session:
    (session,) = load(SONNET)
    return session


@pytest.fixture(scope="module")
def mimo_default(mimo: Session) -> tuple[ContextEngine, list[Projection]]:
    return drive(mimo, DEFAULT)


def test_real_mimo_offloads_large_results_and_keeps_the_originals(
    mimo: Session, mimo_default: tuple[ContextEngine, list[Projection]]
) -> None:
    engine, projections = mimo_default
    events = [e for p in projections for e in p.events if e.layer == "tool_result_budget"]
    assert len(events) >= 3
    originals = {r.call_id: r for m in mimo.messages for r in m.tool_results}
    offloaded = [cid for e in events for cid in e.details["call_ids"]]
    exempt = {t.lower() for t in DEFAULT.budget_exempt_tools}  # Read has its own limits
    big = [
        cid
        for cid, r in originals.items()
        if len(result_text(r)) > DEFAULT.tool_result_max_chars and r.name.lower() not in exempt
    ]
    assert sorted(offloaded) == sorted(big)
    shown = {key.split("\x00", 1)[1]: r for key, r in engine.replacements.items()}
    for cid in offloaded:
        assert engine.retrieve(artifact_id(cid)) == result_text(originals[cid])
        assert result_text(shown[cid]).startswith("<persisted-output>")
        for proj in projections:  # wherever the call is shown, it is shown as the preview
            for r in results_in(proj):
                if r.call_id == cid:
                    assert r is shown[cid]


def test_real_mimo_dense_results_are_offloaded_by_their_tokens(mimo: Session) -> None:
    """``ToolResultBudget.weigh_tokens`` on the recorded MiMo session at 200,000 tokens: exactly the
    results whose chars, weighed by their density, pass the cap go behind a preview, some of them
    under the cap in raw chars (a 12,000-char table of ~5,300 tokens), each shorter than the result
    and its head about the tokens an English preview's head takes (its identifiers line is not cut:
    see the note on ``identifier_line``)."""
    weighed = DEFAULT.with_(DEFAULT.settings(ToolResultBudget).with_(weigh_tokens=True))
    engine, projections = drive(mimo, weighed, window=200_000)
    cap = weighed.for_window(engine.window, engine.ledger.state.fixed_prefix).tool_result_max_chars
    offloaded = {cid for p in projections for e in p.events if e.layer == "tool_result_budget"
                 for cid in e.details["call_ids"]}  # fmt: skip
    count = engine.counter.count_text
    originals = {r.call_id: r for m in mimo.messages for r in m.tool_results}
    over = {
        cid
        for cid, r in originals.items()
        if len(result_text(r)) * density(result_text(r), count) > cap
        and r.name.lower() not in {t.lower() for t in weighed.budget_exempt_tools}
    }
    assert offloaded == over
    by_density = {cid for cid in offloaded if len(result_text(originals[cid])) <= cap}
    assert by_density  # offloaded only because they are dense
    shown = {key.split("\x00", 1)[1]: r for key, r in engine.replacements.items()}
    for cid in by_density:
        text = result_text(shown[cid])
        assert count(text) < count(result_text(originals[cid]))
        head = "\n".join(ln for ln in text.splitlines() if not ln.startswith("identifiers: "))
        assert count(head) < 1_000  # a 2,000-char head is ~500 tokens of English


IDLE_REAL = off(DEFAULT, CompactionSettings, SessionMemory, CacheClear)
"""Idle clear alone: under the whole default, compaction keeps so little that at the gap there
are hardly results older than the newest 5 left to clear."""


def test_real_mimo_idle_gap_clears_old_results(mimo: Session) -> None:
    _engine, projections = drive(mimo, IDLE_REAL)
    idle = [(p, e) for p in projections for e in p.events if e.layer == "idle_clear"]
    assert len(idle) == 1, "the mimo session has one gap of almost two hours"
    for proj, event in idle:
        assert event.details["gap_s"] > DEFAULT.idle_gap_s
        assert event.details["cleared"] > 20
        newest = results_in(proj)[-DEFAULT.idle_keep_recent :]
        assert not any(result_text(r).startswith(CLEARED) for r in newest)
        assert event.details["cleared"] > 0
    assert all(find_violations(p.messages) == [] for p in projections)


CACHE_REAL = off(DEFAULT, CompactionSettings, SessionMemory)


@pytest.fixture(scope="module")
def mimo_cache(mimo: Session) -> tuple[ContextEngine, list[Projection]]:
    return drive(mimo, CACHE_REAL)


def test_real_mimo_cache_clear_batches(mimo_cache: tuple[ContextEngine, list[Projection]]) -> None:
    policy = CACHE_REAL
    engine, projections = mimo_cache
    trigger = int(engine.window * policy.cache_clear_trigger)
    batches = [(p, e) for p in projections for e in p.events if e.layer == "cache_clear"]
    assert batches
    for proj, event in batches:
        assert event.tokens_before > trigger
        assert event.tokens_saved > 0
        newest = results_in(proj)[-policy.cache_clear_keep_recent :]
        assert not any("(pressure)" in result_text(r) for r in newest)
    assert all(find_violations(p.messages) == [] for p in projections)


def test_real_mimo_summary_compaction(mimo: Session) -> None:
    engine, projections = drive(mimo, SUMMARY_POLICY)
    threshold = SUMMARY_POLICY.compact_threshold(engine.window, engine.model.max_output)
    compacted = [(p, e) for p in projections for e in p.events if e.layer == "summary_compact"]
    assert len(compacted) >= 2
    for proj, event in compacted:
        assert event.tokens_before > threshold
        assert proj.messages[0].origin == "summary"
        assert engine.counter.count_text(proj.messages[0].text()) <= SUMMARY_POLICY.summary_budget(
            engine.window
        )
    assert max(p.tokens for p in projections) < engine.window
    assert all(find_violations(p.messages) == [] for p in projections)
    # no compaction of the recorded session leaks into ours
    assert not any(m.origin in RECORDED_ORIGINS for p in projections for m in p.messages)


def test_real_sonnet_overflow_guard_keeps_pairs_and_the_newest(sonnet: Session) -> None:
    newest: list[Message] = []
    _engine, projections = drive(sonnet, OVERFLOW_POLICY, SMALL_WINDOW, newest)
    guarded = [p for p in projections if events_of(p, "overflow_guard")]
    assert len(guarded) >= 5  # it drops down to the threshold, so not on every call near the window
    _, unguarded = drive(sonnet, off(OVERFLOW_POLICY, OverflowGuard), SMALL_WINDOW)
    assert max(p.tokens for p in unguarded) > 3 * SMALL_WINDOW  # the session does not fit at all
    for proj, last in zip(projections, newest, strict=True):
        assert find_violations(proj.messages) == []
        assert proj.messages[-1].id == last.id  # the newest message is always sent


def test_real_sonnet_overflow_guard_fits_the_window(sonnet: Session) -> None:
    _engine, projections = drive(sonnet, OVERFLOW_POLICY, SMALL_WINDOW)
    limit = SMALL_WINDOW - OVERFLOW_POLICY.overflow_reserve
    for proj in projections:
        if events_of(proj, "overflow_guard"):
            assert proj.tokens <= limit


def test_real_mimo_cache_clear_batches_free_at_least_the_minimum_net(
    mimo_cache: tuple[ContextEngine, list[Projection]],
) -> None:
    _engine, projections = mimo_cache
    batches = [e for p in projections for e in p.events if e.layer == "cache_clear"]
    assert batches
    assert all(e.tokens_saved >= CACHE_REAL.cache_clear_at_least for e in batches)


@pytest.mark.parametrize(
    "policy",
    [SUMMARY_POLICY, off(DEFAULT, CacheClear, IdleClear)],
    ids=["structured", "session-memory"],
)
def test_a_session_of_tool_only_turns_is_compacted_over_the_threshold(policy: Policy) -> None:
    window = 100_000
    engine = engine_for(policy, window)
    threshold = policy.compact_threshold(window, engine.model.max_output)
    chat = Chat(engine)
    chat.user(FIRST_REQUEST)
    fired = []
    for i in range(90):
        summary_rounds(chat, 1, start=i, text=False)
        proj = engine.assemble()
        fired += [e.layer for e in proj.events if e.layer.endswith("compact")]
        engine.after_turn(Usage(input_tokens=proj.tokens))  # lets the session notes update
    assert sum(engine.counter.count_message(m) for m in chat.messages) > 1.3 * threshold
    assert fired, f"never compacted; the last call sent {proj.tokens:,} tokens > {threshold:,}"


def test_summary_of_a_chinese_session_stays_within_the_budget() -> None:
    window = 40_000
    engine = engine_for(SUMMARY_POLICY, window)
    chat = Chat(engine)
    request = "请修复解析器中的日期错误，然后运行全部测试并报告结果。" * 110  # 2,970 characters
    chat.user(request)
    summary_rounds(chat, 40)
    proj = engine.assemble()
    assert events_of(proj, "summary_compact")
    summary = proj.messages[0].text()
    assert request[:500] in summary
    # the summary keeps its budget; the latest request is quoted whole after it (issue 9: it
    # fits, being at most half the window left after the prefix and the output reserve)
    label = "\n\nThe user's latest request (verbatim):\n"
    assert summary.endswith(label + request)
    body = summary[: -len(label + request)]
    assert engine.counter.count_text(body) <= SUMMARY_POLICY.summary_budget(window)
