"""Gateway history limits (session keys, per-kind user-turn limits evicted in batches at
ceil(1.5 x N)) and eviction by seed 002's importance score."""

from __future__ import annotations

import math

import msgspec
import pytest

from conftest import OPENAI_CHAT
from ctxengine.engine.core import ContextEngine
from ctxengine.formats import load
from ctxengine.layers.importance import W_RECENCY, W_RELEVANCE, W_ROLE, W_TOOL, eviction_order, score_units
from ctxengine.layers.pairing import find_violations
from ctxengine.messages.model import Message, Text, ToolCall, ToolResult
from ctxengine.policy.registry import DEFAULT, CacheClear, EvictionSettings, ToolResultBudget, get_policy
from ctxengine.policy.session_keys import HistoryLimits, SessionKey, SessionKeyError, turns_to_keep
from ctxengine.replay import replay_session
from policies import off

TAU = OPENAI_CHAT / "tau-bench_gpt-4o_airline_200-trajectories_tool_calls.json"


def test_session_keys_parse_in_openclaws_shape() -> None:
    key = SessionKey.parse("agent:main:telegram:direct:alice:thread:42")
    parts = (key.agent, key.provider, key.kind, key.peer, key.thread)
    assert parts == ("main", "telegram", "dm", "alice", "thread:42")
    assert str(SessionKey.parse("agent:main:slack:channel:C01")) == "agent:main:slack:channel:C01"
    for bad in ("session", "agent:main:slack:room:C01", "agent:main:slack:dm:", "user:main:slack:dm:bob"):
        with pytest.raises(SessionKeyError):
            SessionKey.parse(bad)
    limits = HistoryLimits(dm=10, channel=30, group=20, peers={"telegram:alice": 3})
    assert limits.limit_for("agent:main:telegram:dm:alice") == 3  # the peer's own limit first
    assert limits.limit_for("agent:main:telegram:dm:bob") == 10
    assert limits.limit_for("agent:main:slack:channel:C01:topic:9") == 30
    assert limits.limit_for("agent:main:discord:group:G7") == 20
    assert limits.limit_for("replay.jsonl#") == 0  # not a key: ``unkeyed`` (no limit by default)
    with pytest.raises(msgspec.ValidationError, match="must not be negative"):
        msgspec.convert({"dm": -1}, HistoryLimits)


@pytest.mark.parametrize("n", [1, 2, 4, 7, 10])
def test_turns_to_keep_drops_to_n_only_past_ceil_one_and_a_half_n(n: int) -> None:
    top = math.ceil(1.5 * n)
    kept = [turns_to_keep(c, n) for c in range(1, 4 * n + 3)]
    for count, keep in enumerate(kept, 1):
        assert keep == (count if count <= top else n)
    assert [turns_to_keep(c, n, batch=False) for c in range(1, 3 * n)] == [min(c, n) for c in range(1, 3 * n)]


def _turn(engine: ContextEngine, k: int, text: str = "") -> None:
    """One user turn: a request, a read round, an answer."""
    engine.ingest(Message("user", (Text(text or f"request {k}: look at module{k}.py"),), f"u{k}"))
    engine.ingest(Message("assistant", (ToolCall(f"c{k}", "read", {"path": f"module{k}.py"}),), f"a{k}"))
    result = ToolResult(f"c{k}", (Text(f"body of module{k}"),), False, "read")
    engine.ingest(Message("user", (result,), f"r{k}"))
    engine.ingest(Message("assistant", (Text(f"module{k} does thing {k}"),), f"b{k}"))


def _requests(messages: list[Message]) -> list[str]:
    return [m.id for m in messages if m.role == "user" and not m.tool_results]


def _gateway(key: str, limits: HistoryLimits, order: str = "oldest") -> ContextEngine:
    policy = DEFAULT.with_(
        DEFAULT.settings(EvictionSettings).with_(limits=limits, order=order), name="gateway"
    )
    engine = ContextEngine(policy, model="gpt-4o", session_id=key)
    engine.bootstrap(system="You are a helpful assistant.")
    return engine


def test_a_dm_over_its_limit_is_evicted_in_batches_down_to_n() -> None:
    """N = 4: nothing goes until turn 7 (> ceil(6)), then back to 4; the next batch at turn 10.
    Between batches the projection only grows at its end (the cached prefix holds)."""
    engine = _gateway("agent:main:telegram:dm:alice", HistoryLimits(dm=4, channel=50))
    seen, events, previous = [], [], None
    for k in range(1, 14):
        _turn(engine, k)
        proj = engine.assemble()
        seen.append(len(_requests(proj.messages)))
        events.append([e.layer for e in proj.events if e.layer == "history_limit"])
        assert find_violations(proj.messages) == []
        assert _requests(proj.messages)[-1] == f"u{k}"  # never the latest request
        if previous is not None and not events[-1]:
            assert all(a is b for a, b in zip(previous, proj.messages, strict=False))
            assert len(proj.messages) > len(previous)
        previous = proj.messages
    assert seen == [1, 2, 3, 4, 5, 6, 4, 5, 6, 4, 5, 6, 4]
    assert [k for k, e in enumerate(events, 1) if e] == [7, 10, 13]
    assert _requests(engine.assemble().messages) == ["u10", "u11", "u12", "u13"]  # oldest first
    assert len(engine.history) == 13 * 4  # the transcript keeps everything


def test_unbatched_limits_evict_at_every_turn_and_channels_use_their_own_limit() -> None:
    old_way = _gateway("agent:main:slack:channel:C1", HistoryLimits(dm=1, channel=3, batch=False))
    fired = []
    for k in range(1, 8):
        _turn(old_way, k)
        proj = old_way.assemble()
        fired.append(any(e.layer == "history_limit" for e in proj.events))
        assert len(_requests(proj.messages)) == min(k, 3)
    assert fired == [False, False, False, True, True, True, True]


def test_importance_order_keeps_an_old_turn_the_latest_request_needs() -> None:
    """With ``evict_order = "importance"`` the turns least relevant to the latest request go
    first: the first turn (about ledger.py) outlives newer unrelated ones."""
    engine = _gateway("agent:main:cli:dm:bob", HistoryLimits(dm=2), order="importance")
    _turn(engine, 1, "explain the reset in ledger.py and its anchor")
    for k in range(2, 4):
        _turn(engine, k, f"what is the weather in city{k}?")
    proj = engine.assemble()
    assert _requests(proj.messages) == ["u1", "u2", "u3"]  # 3 = ceil(1.5 x 2): not yet
    _turn(engine, 4, "back to ledger.py: why does reset clear the anchor?")
    proj = engine.assemble()
    assert _requests(proj.messages) == ["u1", "u4"]  # down to 2: the relevant old turn stayed
    assert find_violations(proj.messages) == []


def test_importance_score_is_the_weighted_sum_and_evicts_the_least_first() -> None:
    request = "why does ledger.py reset the anchor"
    units = [
        [Message("user", (Text("please look at ledger.py and its anchor"),), "u1")],
        [
            Message("assistant", (ToolCall("c1", "grep", {"pattern": "weather"}),), "a1"),
            Message("user", (ToolResult("c1", (Text("no match"),), False, "grep"),), "r1"),
        ],
        [Message("assistant", (Text("The weather is fine."),), "a2")],
        [Message("user", (Text("thanks"),), "u2", origin="attachment")],
    ]
    scores = score_units(units, request)
    for s in scores:
        expected = W_RECENCY * s.recency + W_RELEVANCE * s.relevance + W_ROLE * s.role + W_TOOL * s.tool
        assert s.importance == pytest.approx(expected, abs=1e-6)
    assert (W_RECENCY, W_RELEVANCE, W_ROLE, W_TOOL) == (0.3, 0.4, 0.2, 0.1)
    assert [s.recency for s in scores] == [0.25, 0.5, 0.75, 1.0]
    assert scores[0].relevance == 1.0 and scores[1].relevance == scores[2].relevance == 0.0
    assert [s.role for s in scores] == [1.0, 0.5, 0.5, 0.25]
    assert [s.tool for s in scores] == [0.0, 1.0, 0.0, 0.0]
    # 0.075+0.4+0.2 | 0.15+0.1+0.1 | 0.225+0.1 | 0.3+0.05: the old relevant request is kept longest
    assert eviction_order(units, request) == [2, 1, 3, 0]


def _pressure_engine(order: str) -> ContextEngine:
    # no offloading or clearing first: the rounds reach the threshold whole
    policy = off(get_policy(f"evict-{order}"), ToolResultBudget, CacheClear)
    engine = ContextEngine(policy, model="gpt-4o", window=32_000, session_id="s")
    engine.bootstrap(system="You are a coding agent.")
    engine.ingest(Message("user", (Text("Fix the crash in ledger.py when the anchor is unset."),), "u0"))
    for k in range(20):
        topic = "ledger.py anchor" if k == 1 else f"unrelated_file_{k}.txt"
        body = f"{topic} " + " ".join(f"line{i} of {topic}" for i in range(180))
        engine.ingest(Message("assistant", (ToolCall(f"c{k}", "read", {"path": topic}),), f"a{k}"))
        engine.ingest(Message("user", (ToolResult(f"c{k}", (Text(body),), False, "read"),), f"r{k}"))
    engine.ingest(Message("user", (Text("Now fix ledger.py: the anchor must be reset."),), "u1"))
    return engine


@pytest.mark.parametrize("order", ["oldest", "importance"])
def test_pressure_eviction_keeps_pairs_the_task_and_the_latest_request(order: str) -> None:
    engine = _pressure_engine(order)
    proj = engine.assemble()
    evict = [e for e in proj.events if e.layer == "evict"]
    assert evict and evict[0].details["order"] == order
    assert proj.tokens <= evict[0].tokens_before
    ids = [m.id for m in proj.messages]
    assert find_violations(proj.messages) == []
    assert ids[0] == "u0" and "u1" in ids  # the opening task and the latest request stay
    assert ("a1" in ids) == (order == "importance")  # the round the request names, by relevance
    assert ("a0" in ids) is False and "a18" in ids  # an old unrelated round goes, recent ones stay


def test_history_limit_batches_raise_prompt_cache_reads_on_a_real_session() -> None:
    """tau-bench (a support chat: 30 user turns) with a 4-turn limit: batched eviction moves the
    cached prefix at 1 turn in 3, the unbatched at every turn past 4, so more is read from the
    prompt cache and the session costs less."""
    session = next(s for s in load(TAU) if s.name == "task 9 trial 3")
    figures = {}
    for batch in (True, False):
        limited = DEFAULT.settings(EvictionSettings).with_(limits=HistoryLimits(unkeyed=4, batch=batch))
        policy = DEFAULT.with_(limited, name=f"limit-{batch}")
        session.model = session.model or "gpt-4o"  # SOURCES.md: tau-bench ran gpt-4o
        report = replay_session(session, policy, window=128_000)
        events = [e for c in report.calls for e in c.events if e["layer"] == "history_limit"]
        read = sum(c.cache_read_tokens for c in report.calls)
        figures[batch] = (len(events), read, report.summary.cost_usd)
        assert report.summary.pairing_violations == 0
    assert 0 < figures[True][0] < figures[False][0]
    assert figures[True][1] > figures[False][1]
    assert figures[True][2] < figures[False][2]
