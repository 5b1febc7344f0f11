"""``ContextEngine`` lifecycle: bootstrap / ingest / assemble / after_turn / compact / maintain /
dispose, the append-only store, the ledger's anchoring, recorded compactions (policy
``recorded``, on the real mimo autocompact transcript) and failure containment.

Tokens are counted by the engine's own counter (``claude-sonnet-4-5``: calibrated estimate).
"""

from __future__ import annotations

import contextlib
import itertools
import random
import warnings
from pathlib import Path
from typing import Any

import msgspec
import pytest

import ctxengine.engine.ingest as ingest_module
import ctxengine.engine.steps.clearing as clearing_module
import ctxengine.engine.steps.overflow as overflow_module
from conftest import CLAUDE_CODE
from ctxengine.engine.core import CompactionError, ContextEngine, Projection
from ctxengine.engine.usage_gap import UsageGapWarning
from ctxengine.formats import load
from ctxengine.layers.base import artifact_id, result_text
from ctxengine.layers.pairing import MISSING_RESULT_TEXT, find_violations
from ctxengine.messages.model import Message, Session, Text, ToolCall, ToolResult, Usage
from ctxengine.models.registry import WindowWarning
from ctxengine.policy.registry import (
    NONE,
    RECORDED,
    CacheClear,
    ClearedResults,
    CompactionSettings,
    IdleClear,
    Policy,
    SessionMemory,
    ToolResultBudget,
)
from ctxengine.store import SQLiteStore, StoreError
from policies import LAYER_DEFAULT as DEFAULT
from policies import off

MODEL = "claude-sonnet-4-5"
MIMO = CLAUDE_CODE / "cc_mimo-v2.5-pro_2x-autocompact_db3f6604.jsonl"
WORDS = ("alpha", "beta", "gamma", "delta", "file", "value", "result", "line", "output", "check")


def filler(chars: int, seed: int = 0) -> str:
    rnd = random.Random(seed)
    return " ".join(rnd.choice(WORDS) for _ in range(chars // 5 + 1))[:chars]


def make_engine(policy: Policy = DEFAULT, window: int | None = None, **kw: Any) -> ContextEngine:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", WindowWarning)
        return ContextEngine(policy, model=MODEL, window=window, **kw)


def conversation(rounds: int, result_chars: int = 3_000, t0: float = 1_700_000_000.0) -> list[Message]:
    """A user request, then ``rounds`` of (assistant text + Read call, its result)."""
    msgs = [Message("user", (Text("Fix the parser in /srv/app/parser.py"),), "u0", timestamp=t0)]
    for i in range(rounds):
        cid = f"toolu_{i}"
        msgs.append(
            Message(
                "assistant",
                (Text(f"Reading module {i}."), ToolCall(cid, "Read", {"file_path": f"/srv/app/m{i}.py"})),
                f"a{i}",
                timestamp=t0 + 10 * i + 1,
            )
        )
        msgs.append(
            Message(
                "user",
                (ToolResult(cid, (Text(filler(result_chars, i)),)),),
                f"r{i}",
                timestamp=t0 + 10 * i + 2,
            )
        )
    return msgs


def ids(proj: Projection) -> list[str]:
    return [m.id for m in proj.messages]


# ================================================================ lifecycle


def test_lifecycle_end_to_end(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "session.db")
    engine = make_engine(DEFAULT, store=store, session_id="s1")
    engine.bootstrap(system="You are a coding agent.", fixed_prefix_tokens=1_234)

    empty = engine.assemble()
    assert (empty.messages, empty.tokens, empty.system) == ([], 1_234, "You are a coding agent.")

    msgs = conversation(5)
    for m in msgs:
        assert engine.ingest(m) == []  # nothing to decide on small messages
    proj = engine.assemble(now=msgs[-1].timestamp)
    assert proj.messages == msgs and all(a is b for a, b in zip(proj.messages, msgs, strict=True))
    assert proj.content_estimate == sum(engine.counter.count_message(m) for m in msgs)
    assert proj.tokens == 1_234 + proj.content_estimate
    assert proj.window == engine.window == 200_000
    assert engine.assemble(budget=50_000).window == 50_000

    engine.after_turn(Usage(input_tokens=2_000, cache_read_tokens=5_000, output_tokens=300))
    assert engine.assemble().tokens == 7_000  # anchored on the reported total input
    assert engine.maintain() == []
    assert ids(engine.assemble()) == [m.id for m in msgs]

    assert engine.compact(force=False) is None  # far below the threshold
    engine.dispose()
    with pytest.raises(Exception):  # noqa: B017 - the store is closed
        store.entries("s1")


def test_every_ingested_message_is_an_entry_that_survives_reopening(tmp_path: Path) -> None:
    path = tmp_path / "session.db"
    engine = make_engine(
        DEFAULT.with_(DEFAULT.settings(ToolResultBudget).with_(max_chars=5_000)),
        store=SQLiteStore(path),
        session_id="s",
    )
    engine.bootstrap()
    msgs = conversation(4)
    msgs.append(Message("user", (ToolResult("toolu_3", (Text("dup"),)),), "late"))  # odd, still kept
    big = Message("user", (Text("big"),), "u-big")
    msgs += [
        Message("assistant", (ToolCall("toolu_big", "Bash", {"command": "cat log"}),), "a-big"),
        Message("user", (ToolResult("toolu_big", (Text(filler(9_000, 99)),)),), "r-big"),
        big,
    ]
    for m in msgs:
        engine.ingest(m)
    engine.assemble()
    engine.dispose()

    reopened = SQLiteStore(path)
    entries = reopened.entries("s", "message")
    assert [e.payload["id"] for e in entries] == [m.id for m in msgs]
    assert [e.seq for e in entries] == sorted(e.seq for e in entries)
    decoded = [msgspec.convert(e.payload, Message) for e in entries]
    assert decoded == msgs
    offloads = reopened.entries("s", "offload")
    assert [e.payload["call_ids"] for e in offloads] == [["toolu_big"]]
    content, meta = reopened.get_artifact("s", artifact_id("toolu_big"))
    assert content == filler(9_000, 99)
    assert meta["call_id"] == "toolu_big"
    reopened.close()


def test_appended_entries_are_durable_before_close(tmp_path: Path) -> None:
    path = tmp_path / "session.db"
    engine = make_engine(DEFAULT, store=SQLiteStore(path), session_id="s")
    engine.bootstrap()
    for m in conversation(2):
        engine.ingest(m)
    other = SQLiteStore(path)  # e.g. ``ctxengine inspect`` while the agent runs, or after a crash
    assert len(other.entries("s", "message")) == 5


# ================================================================ the ledger


def test_after_turn_anchors_the_next_prediction() -> None:
    engine = make_engine(DEFAULT)
    engine.bootstrap(fixed_prefix_tokens=3_000)
    msgs = conversation(6)
    for m in msgs:
        engine.ingest(m)
    first = engine.assemble()
    assert first.tokens == 3_000 + first.content_estimate  # unanchored: fixed + estimate

    with pytest.warns(UsageGapWarning, match="content the engine was not given"):  # 3x its prediction
        engine.after_turn(Usage(input_tokens=1_000, cache_read_tokens=20_000))  # the provider saw 21,000
    reply = Message("assistant", (Text("The parser drops time zones; fixing."),), "a-reply")
    follow = Message("user", (Text(filler(2_000, 7)),), "u-follow")
    engine.ingest(reply)
    engine.ingest(follow)
    nxt = engine.assemble()
    added = engine.counter.count_message(reply) + engine.counter.count_message(follow)
    assert nxt.tokens == 21_000 + added
    assert nxt.content_estimate == first.content_estimate + added

    # a second call whose reported growth is twice the estimate teaches the scale
    engine.after_turn(Usage(input_tokens=21_000 + 2 * added))
    more = Message("user", (Text(filler(3_000, 8)),), "u-more")
    engine.ingest(more)
    assert engine.ledger.scale == pytest.approx(2.0)
    assert engine.assemble().tokens == 21_000 + 2 * added + 2 * engine.counter.count_message(more)


def test_a_compaction_resets_the_anchor() -> None:
    policy = off(DEFAULT, SessionMemory, CacheClear)
    engine = make_engine(policy)
    engine.bootstrap(fixed_prefix_tokens=2_000)
    for m in conversation(60):  # ~40,000 tokens of content, under the 120,000 threshold
        engine.ingest(m)
    assert engine.assemble().events == []
    with pytest.warns(UsageGapWarning):  # the provider says: far more than estimated
        engine.after_turn(Usage(input_tokens=150_000))
    proj = engine.assemble()
    (event,) = [e for e in proj.events if e.layer == "summary_compact"]
    assert event.tokens_before == 150_000
    assert not engine.ledger.anchored
    assert proj.tokens == 2_000 + proj.content_estimate  # back to fixed prefix + estimate
    assert proj.tokens < 40_000


# ================================================================ recorded compactions


def recorded_messages() -> list[Message]:
    return [
        Message("user", (Text("first request"),), "u0"),
        Message("assistant", (Text("working"),), "a0"),
        Message(
            "user",
            (Text("Summary of the earlier conversation"),),
            "s0",
            origin="compact_summary",
            compaction=0,
        ),
        Message("user", (Text("Restored file /a.py"),), "s1", origin="compact_restore", compaction=0),
        Message("user", (Text("go on"),), "u1"),
    ]


@pytest.mark.parametrize("policy", [DEFAULT, NONE], ids=["default", "none"])
def test_recorded_compaction_messages_are_ignored_unless_policy_recorded(policy: Policy) -> None:
    engine = make_engine(policy)
    engine.bootstrap()
    msgs = recorded_messages()
    for m in msgs:
        assert engine.ingest(m) == []
    assert ids(engine.assemble()) == ["u0", "a0", "u1"]
    assert [m.id for m in engine.history] == ["u0", "a0", "u1"]
    # the store still has every message: the transcript is the truth
    assert [e.payload["id"] for e in engine.store.entries("session", "message")] == [m.id for m in msgs]


def test_policy_recorded_keeps_them_and_restarts_at_the_compaction() -> None:
    engine = make_engine(RECORDED)
    engine.bootstrap()
    events = [e for m in recorded_messages() for e in engine.ingest(m)]
    assert [e.layer for e in events] == ["recorded_compaction"]
    assert events[0].llm_calls == 1
    proj = engine.assemble()
    assert ids(proj)[0] == "s0" and set(ids(proj)) == {"s0", "s1", "u1"}
    assert [m.id for m in engine.history] == [m.id for m in recorded_messages()]


def test_policy_recorded_sends_the_recorded_summary_once() -> None:
    engine = make_engine(RECORDED)
    engine.bootstrap()
    for m in recorded_messages():
        engine.ingest(m)
    assert ids(engine.assemble()) == ["s0", "s1", "u1"]


@pytest.fixture(scope="module")
def mimo(transcripts: Any) -> Session:
    (session,) = load(MIMO)
    return session


@pytest.fixture(scope="module")
def mimo_recorded(mimo: Session) -> tuple[list[Projection], dict[int, Projection]]:
    """Every projection under policy ``recorded``, and the first one after each compaction."""
    engine = ContextEngine(RECORDED, model=mimo.model)
    engine.bootstrap(recorded_compactions=mimo.compactions)
    starts = {c.at: c for c in mimo.compactions}
    first_after: dict[int, Projection] = {}
    projections = []
    prev = ""
    current = None
    for i, m in enumerate(mimo.messages):
        if i in starts:
            current = starts[i]
        if m.role == "assistant" and prev != "assistant":
            proj = engine.assemble(now=m.timestamp)
            projections.append(proj)
            if current is not None and current.index not in first_after:
                first_after[current.index] = proj
        engine.ingest(m)
        prev = m.role
    return projections, first_after


def test_policy_recorded_on_the_real_mimo_autocompact_transcript(
    mimo: Session, mimo_recorded: tuple[list[Projection], dict[int, Projection]]
) -> None:
    assert len(mimo.compactions) == 2
    projections, first_after = mimo_recorded
    events = [e for p in projections for e in p.events]
    assert all(find_violations(p.messages) == [] for p in projections)
    assert sorted(first_after) == [0, 1]
    for c in mimo.compactions:
        proj = first_after[c.index]
        head = proj.messages[0]
        assert head is mimo.messages[c.at]
        assert head.origin == "compact_summary" and head.compaction == c.index
        # nothing from before the boundary is sent
        before = {m.id for m in mimo.messages[: c.at]}
        assert not before & set(ids(proj))
    recorded = [e for e in events if e.layer == "recorded_compaction"]
    assert len(recorded) == 2
    for e, c in zip(recorded, mimo.compactions, strict=True):
        assert e.llm_calls == 1
        assert e.llm_input_tokens == c.pre_tokens
        assert e.details["pre_tokens"] == c.pre_tokens and e.details["post_tokens"] == c.post_tokens
        assert e.llm_output_tokens > 0 and e.llm_cost_usd > 0


# ================================================================ failure containment


def pressured_engine(policy: Policy, window: int = 40_000) -> tuple[ContextEngine, float]:
    """An engine with 30 rounds ingested (~20,000 tokens, 2,000-char results) and a last call
    two hours ago: idle clear, cache clear, compaction and (with a small window) the overflow
    guard all have something to do at the next ``assemble``."""
    engine = make_engine(policy, window)
    engine.bootstrap()
    msgs = conversation(30, result_chars=3_000)
    engine.assemble(now=msgs[0].timestamp)  # the previous call, on an empty session
    for m in msgs:
        engine.ingest(m)
    return engine, (msgs[-1].timestamp or 0.0) + 7_200


LAYERS = {
    "idle_clear": off(DEFAULT, CacheClear, CompactionSettings),
    "cache_clear": off(DEFAULT, IdleClear, CompactionSettings).with_(
        DEFAULT.settings(CacheClear).with_(trigger=0.3, target=0.1)
    ),
    "overflow_guard": off(DEFAULT, IdleClear, CacheClear, CompactionSettings, ToolResultBudget),
}


def state(engine: ContextEngine) -> tuple[Any, ...]:
    return (
        [m.id for m in engine.view.messages],
        list(engine.history),
        dict(engine.replacements),
        engine.kept_from,
        list(engine.prefix),
    )


@pytest.mark.parametrize("layer", sorted(LAYERS))
def test_a_failing_layer_leaves_the_engine_unchanged(layer: str, monkeypatch: pytest.MonkeyPatch) -> None:
    window = 20_000 if layer == "overflow_guard" else 40_000
    # control: without the failure the layer does decide something
    control, now = pressured_engine(LAYERS[layer], window)
    assert layer in [e.layer for e in control.assemble(now=now).events]

    engine, now = pressured_engine(LAYERS[layer], window)
    before = state(engine)

    def boom(*_args: Any, **_kw: Any) -> None:
        raise RuntimeError(f"{layer} exploded")

    steps = overflow_module if layer == "overflow_guard" else clearing_module
    monkeypatch.setattr(steps, layer, boom)  # the cascade steps call the layers
    proj = engine.assemble(now=now)
    assert engine.failures == 1
    assert state(engine) == before
    assert ids(proj) == before[0]
    assert [e.layer for e in proj.events if e.layer == layer] == []


def test_a_failing_compaction_leaves_the_engine_unchanged(monkeypatch: pytest.MonkeyPatch) -> None:
    policy = off(DEFAULT, IdleClear, CacheClear, SessionMemory)
    control, now = pressured_engine(policy)
    assert "summary_compact" in [e.layer for e in control.assemble(now=now).events]

    engine, now = pressured_engine(policy)
    before = state(engine)

    def boom(*_args: Any, **_kw: Any) -> None:
        raise RuntimeError("summarizer exploded")

    monkeypatch.setattr(engine.compactor, "compact", boom)
    proj = engine.assemble(now=now)
    assert engine.failures == 1
    assert state(engine) == before
    assert ids(proj) == before[0]
    with pytest.raises(CompactionError):
        engine.compact(force=True)
    assert state(engine) == before


def test_a_failing_tool_result_budget_does_not_lose_the_message(monkeypatch: pytest.MonkeyPatch) -> None:
    engine = make_engine(DEFAULT)
    engine.bootstrap()

    def boom(*_args: Any, **_kw: Any) -> None:
        raise RuntimeError("budget exploded")

    monkeypatch.setattr(ingest_module, "budget_message", boom)
    msg = Message("user", (Text("hello"),), "u0")
    with contextlib.suppress(RuntimeError):  # raising is acceptable; losing the message is not
        engine.ingest(msg)
    proj = engine.assemble()
    assert [m.id for m in engine.history] == ids(proj)


class FailingStore(SQLiteStore):
    """A store whose writes start failing on demand (a full disk)."""

    def __init__(self) -> None:
        super().__init__()
        self.fail_artifacts_after: int | None = None
        self.fail_kind: str | None = None
        self.artifacts = 0

    def put_artifact(self, session: str, artifact_id: str, content: str, meta: dict[str, Any]) -> None:
        self.artifacts += 1
        if self.fail_artifacts_after is not None and self.artifacts > self.fail_artifacts_after:
            raise StoreError("disk full")
        super().put_artifact(session, artifact_id, content, meta)

    def append(self, session: str, kind: Any, payload: Any) -> Any:
        if kind == self.fail_kind:
            raise StoreError("disk full")
        return super().append(session, kind, payload)


@pytest.mark.parametrize("what", ["replacements", "cut"])
def test_a_store_failure_while_committing_leaves_the_engine_unchanged(what: str) -> None:
    store = FailingStore()
    if what == "replacements":
        policy = off(DEFAULT, CacheClear, CompactionSettings)
    else:
        policy = off(DEFAULT, IdleClear, CacheClear, SessionMemory)
    engine = make_engine(policy, 40_000, store=store)
    engine.bootstrap()
    msgs = conversation(30)
    for m in msgs:
        engine.ingest(m)
    t = msgs[-1].timestamp or 0.0
    if what == "replacements":
        engine.assemble(now=t)
        store.fail_artifacts_after = store.artifacts + 1  # the 2nd artifact of the idle batch fails
        t += 7_200
    else:
        store.fail_kind = "compaction"  # the first call is over the threshold: it compacts
    before = state(engine)
    facts = msgspec.to_builtins(engine.compactor.summary_state)
    engine.assemble(now=t)
    assert engine.failures == 1  # precondition: the layer did fail
    assert state(engine) == before
    # the compactor keeps nothing of a compaction that was not committed
    assert msgspec.to_builtins(engine.compactor.summary_state) == facts
    assert engine.compactor.compactions == 0
    if what == "cut":  # control: once the store works, the same compaction commits and is kept
        store.fail_kind = None
        assert "summary_compact" in [e.layer for e in engine.assemble(now=t).events]
        assert engine.compactor.compactions == 1
        assert engine.compactor.summary_state.messages_summarized > 0
        assert msgspec.to_builtins(engine.compactor.summary_state) != facts


def test_a_store_failure_keeps_the_identifier_index_segments_unchanged() -> None:
    """Session-memory compaction with append-only index segments: a failed commit adds no
    segment (the next compaction lists the same identifiers again)."""
    policy = off(DEFAULT, IdleClear, CacheClear).with_(
        DEFAULT.settings(SessionMemory).with_(identifier_index=True, index_segments=True)
    )
    store = FailingStore()
    engine = make_engine(policy, 40_000, store=store)
    engine.bootstrap()
    msgs = conversation(30)
    for m in msgs:
        engine.ingest(m)
    engine.after_turn(None)  # the notes exist: a session-memory compaction can run
    store.fail_kind = "compaction"
    engine.assemble(now=msgs[-1].timestamp)
    assert engine.failures == 1
    assert engine.compactor._segments == () and engine.compactor._segment_ids == set()
    store.fail_kind = None
    proj = engine.assemble(now=msgs[-1].timestamp)
    assert "session_memory_compact" in [e.layer for e in proj.events]
    assert len(engine.compactor._segments) == 1 and engine.compactor._segment_ids
    assert proj.messages[0] is engine.compactor._segments[0]


# ================================================================ incremental projection


def test_maintain_between_a_call_and_its_result_does_not_lose_the_result() -> None:
    engine = make_engine(NONE)
    engine.bootstrap()
    engine.ingest(Message("user", (Text("read a.py"),), "u0"))
    engine.ingest(Message("assistant", (ToolCall("c1", "Read", {"file_path": "/a.py"}),), "a1"))
    engine.maintain()  # background upkeep while the tool runs
    engine.ingest(Message("user", (ToolResult("c1", (Text("print('hello')"),)),), "r1"))
    proj = engine.assemble()
    texts = [result_text(r) for m in proj.messages for r in m.tool_results]
    assert texts == ["print('hello')"]
    assert MISSING_RESULT_TEXT not in texts


def test_a_call_id_reused_by_a_later_turn_is_renamed_in_the_projection() -> None:
    msgs = [
        Message("user", (Text("go"),), "u0"),
        Message("assistant", (ToolCall("c1", "Read", {"path": "a.py"}),), "a1"),
        Message("user", (ToolResult("c1", (Text("AAA"),)),), "r1"),
        Message("assistant", (Text("ok"),), "a2"),
        Message("user", (Text("again"),), "u2"),
        Message("assistant", (ToolCall("c1", "Read", {"path": "b.py"}),), "a3"),
        Message("user", (ToolResult("c1", (Text("BBB"),)),), "r3"),
    ]
    once = make_engine(NONE)
    once.bootstrap()
    for m in msgs:
        once.ingest(m)
    assert find_violations(once.assemble().messages) == []  # one full repair renames the reuse

    live = make_engine(NONE)
    live.bootstrap()
    for m in msgs:
        if m.role == "assistant":
            live.assemble()  # a model call before each response
        live.ingest(m)
    assert find_violations(live.assemble().messages) == []


def test_the_projection_of_a_valid_session_is_the_same_however_often_it_is_assembled() -> None:
    msgs = conversation(12)
    once = make_engine(DEFAULT)
    once.bootstrap()
    for m in msgs:
        once.ingest(m)
    every = make_engine(DEFAULT)
    every.bootstrap()
    for m in msgs:
        if m.role == "assistant":
            every.assemble()
        every.ingest(m)
    assert ids(once.assemble()) == ids(every.assemble()) == [m.id for m in msgs]


def test_ingest_never_changes_the_message_it_is_given() -> None:
    engine = make_engine(DEFAULT.with_(DEFAULT.settings(ToolResultBudget).with_(max_chars=1_000)))
    engine.bootstrap()
    msgs = conversation(5, result_chars=5_000)
    snapshot = [msgspec.to_builtins(m) for m in msgs]
    for m in msgs:
        engine.ingest(m)
    proj = engine.assemble(now=(msgs[-1].timestamp or 0) + 10_000)
    assert any(result_text(r).startswith("<persisted-output>") for m in proj.messages for r in m.tool_results)
    assert [msgspec.to_builtins(m) for m in msgs] == snapshot
    assert all(a is b for a, b in zip(engine.history, msgs, strict=True))


def test_compaction_counter_ids_are_unique_across_compactions() -> None:
    policy = off(DEFAULT, SessionMemory, CacheClear, IdleClear)
    engine = make_engine(policy, 40_000)
    engine.bootstrap()
    seen: list[str] = []
    counter = itertools.count()
    for m in conversation(80):
        engine.ingest(m)
        if m.role == "user" and next(counter) % 3 == 0:
            proj = engine.assemble()
            for e in proj.events:
                if e.layer == "summary_compact":
                    seen.append(proj.messages[0].id)
            assert len({m.id for m in proj.messages}) == len(proj.messages)
    assert len(seen) >= 2
    assert len(set(seen)) == len(seen)


def test_real_mimo_recorded_projections_have_no_repeated_message(
    mimo_recorded: tuple[list[Projection], dict[int, Projection]],
) -> None:
    projections, _ = mimo_recorded
    for proj in projections:
        assert len(set(ids(proj))) == len(proj.messages)


def test_offloading_and_clearing_notify_the_listeners() -> None:
    """Content leaving the context (offload, clear, compaction) resets e.g. the read tool's
    dedup cache, whose 'unchanged since last read' stub would otherwise point at nothing."""
    engine = make_engine(
        off(DEFAULT, CompactionSettings).with_(DEFAULT.settings(ToolResultBudget).with_(max_chars=100))
    )
    calls: list[str] = []
    engine.compaction_listeners.append(lambda: calls.append("reset"))
    engine.bootstrap()
    engine.ingest(Message("user", (Text("run it"),), "u0"))
    engine.ingest(Message("assistant", (ToolCall("c1", "Bash", {"command": "make"}),), "a1"))
    assert calls == []
    engine.ingest(Message("user", (ToolResult("c1", (Text("x" * 1_000),), name="Bash"),), "r1"))
    assert calls == ["reset"]  # the 1,000-char result was offloaded


def test_a_managed_block_rides_with_the_newest_user_turn_and_moves_only_on_change() -> None:
    """The open-files block is not in the system prompt: it is shown with the newest user turn
    and moves (one cache miss) only when its text changes."""
    engine = make_engine(NONE)
    engine.bootstrap()
    engine.ingest(Message("user", (Text("open a.py"),), "u0"))
    engine.ingest(Message("assistant", (Text("ok"),), "a0"))
    assert engine.set_block("<open_files>a.py v1</open_files>")
    first = engine.assemble().messages
    assert first[0].blocks[-1] == Text("<open_files>a.py v1</open_files>")
    engine.ingest(Message("user", (Text("next"),), "u1"))
    assert not engine.set_block("<open_files>a.py v1</open_files>")  # unchanged: stays put
    second = engine.assemble().messages
    assert second[0] is first[0]  # the cached prefix is intact
    assert engine.set_block("<open_files>a.py v2</open_files>")  # changed: moves to u1
    third = engine.assemble().messages
    texts = [b.text for m in third for b in m.blocks if isinstance(b, Text)]
    assert texts.count("<open_files>a.py v2</open_files>") == 1
    assert "<open_files>a.py v1</open_files>" not in texts
    assert third[-1].blocks[-1] == Text("<open_files>a.py v2</open_files>")
    assert engine.history[0].blocks == (Text("open a.py"),)  # history is never edited


# ================================================================ notes in the background


def test_background_notes_compact_waits_for_the_running_update(monkeypatch: pytest.MonkeyPatch) -> None:
    """``compact`` needs the notes: it waits for the update running on the worker thread, applies
    it on the caller's thread and reports its event; the worker never touched the engine."""
    import threading

    import ctxengine.compaction.notes as compaction_notes
    from ctxengine.summary.notes import DeterministicNotesUpdater, NotesState, NotesUpdate

    started, gate = threading.Event(), threading.Event()
    workers: list[str] = []

    class Gated(DeterministicNotesUpdater):
        def update(self, state: NotesState, new: Any) -> tuple[NotesState, NotesUpdate]:
            workers.append(threading.current_thread().name)
            started.set()
            gate.wait(30)
            return super().update(state, new)

    real_wait = compaction_notes.wait_for

    def release_then_wait(fs: Any, timeout: float | None = None) -> Any:
        gate.set()  # the compaction reached the wait with the update still running
        return real_wait(fs, timeout=timeout)

    monkeypatch.setattr(compaction_notes, "wait_for", release_then_wait)
    engine = make_engine(DEFAULT, background_notes=True)
    engine.compactor.updater = Gated(engine.counter.count_text)
    engine.bootstrap(system="You are a coding agent.")
    try:
        for m in conversation(60):
            engine.ingest(m)
            if m.role == "assistant":
                engine.after_turn(None)
                if engine.notes_update_pending:
                    break
        assert engine.notes_update_pending and started.wait(30)
        assert not gate.is_set() and engine.compactor.notes.updates == 0
        history = len(engine.history)
        assert not [e for e in engine.maintain() if e.layer == "session_notes"]  # not finished
        event = engine.compact()
    finally:
        gate.set()
    assert event is not None and event.layer == "session_memory_compact"
    assert not engine.notes_update_pending
    assert engine.compactor.notes.updates == 1 and engine.compactor.notes_from == history
    notes = [e for e in engine.maintain() if e.layer == "session_notes"]
    assert [e.reason for e in notes] == ["cadence"] and "error" not in notes[0].details
    assert workers == ["ctxengine-notes"]  # computed off the caller's thread
    assert engine.prefix[0].origin == "summary" and "/srv/app/parser.py" in engine.prefix[0].text()


def test_a_notes_runner_gets_the_job_and_is_never_waited_for() -> None:
    """With a ``notes_runner`` (the proxy's job queue) the cadence's update goes to the runner,
    not a thread; the compaction that needs the notes does not wait for it (it goes on with the
    notes as they are); the outcome handed over later is applied at the next step."""
    from concurrent.futures import Future

    from ctxengine.compaction.notes import NotesJob, NotesOutcome, run_notes_update
    from ctxengine.summary.notes import NotesUpdater

    engine = make_engine(DEFAULT, background_notes=True)
    started: list[tuple[NotesJob, NotesUpdater, Future[NotesOutcome]]] = []

    def runner(job: NotesJob, updater: NotesUpdater) -> Future[NotesOutcome]:
        started.append((job, updater, Future()))
        return started[-1][2]

    engine.compactor.notes_runner = runner
    engine.bootstrap(system="You are a coding agent.")
    for m in conversation(60):
        engine.ingest(m)
        if m.role == "assistant":
            engine.after_turn(None)
            if started:
                break
    assert len(started) == 1 and engine.notes_update_pending
    # the compaction needs the notes; a wait for this future (never resolved so far) would not end
    engine.compact()
    assert engine.notes_update_pending and engine.compactor.notes.updates == 0
    job, updater, future = started[0]
    future.set_result(run_notes_update(updater, job, engine.counter.count_text))
    engine.assemble()
    assert not engine.notes_update_pending and engine.compactor.notes.updates == 1
    assert engine.compactor.notes_from == job.end


# ================================================================ review fixes


def test_a_running_notes_update_is_waited_for_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """The compaction chain and the pre-compaction flushes each ask for the notes: an update
    still running after one full wait is not waited for again (minutes with an LLM client)."""
    engine = make_engine(DEFAULT, background_notes=True)
    compactor = engine.compactor
    waits: list[bool] = []

    def settle(*, wait: bool = False) -> bool:
        waits.append(wait)
        return False  # the update is still running

    monkeypatch.setattr(compactor, "settle_notes", settle)
    compactor.notes_job = object()  # type: ignore[assignment]  # a job that never finishes
    assert compactor.await_notes() is False and compactor.await_notes() is False
    assert waits == [True, False]


def test_blank_compaction_instructions_are_no_focus() -> None:
    engine = make_engine(off(DEFAULT, SessionMemory))
    engine.bootstrap()
    for m in conversation(40):
        engine.ingest(m)
    event = engine.compact(force=True, instructions="   ")
    assert event is not None and "instructions" not in event.details
    assert "Focus requested" not in engine.assemble().messages[0].text()


def test_a_clearing_counts_identifiers_still_shown_in_the_tool_calls() -> None:
    """Idle clear without identifier lists in its placeholders: the paths the cleared results
    named are still in the Read calls, so identifier retention counts them; no user request was
    cleared, so the latest request is still verbatim."""
    policy = off(DEFAULT, CacheClear, CompactionSettings).with_(
        DEFAULT.settings(ClearedResults).with_(keep_identifiers=False)
    )
    engine = make_engine(policy)
    engine.bootstrap()
    t0 = 1_700_000_000.0
    msgs = [Message("user", (Text("Read the modules"),), "u0", timestamp=t0)]
    for i in range(12):
        cid = f"toolu_{i}"
        path = f"/srv/app/m{i}.py"
        msgs.append(
            Message("assistant", (ToolCall(cid, "Read", {"file_path": path}),), f"a{i}", timestamp=t0 + i)
        )
        msgs.append(
            Message(
                "user", (ToolResult(cid, (Text(f"{path}\n" + filler(4_000, i)),)),), f"r{i}", timestamp=t0 + i
            )
        )
    for m in msgs:
        engine.ingest(m)
    engine.assemble(now=t0 + 20)
    proj = engine.assemble(now=t0 + 20 + 2 * 3_600)  # two hours later: the cache is cold
    (event,) = [e for e in proj.events if e.layer == "idle_clear"]
    q = event.details["quality"]
    assert q["identifier_retention"] == 1.0
    assert q["latest_request_verbatim"] is True
