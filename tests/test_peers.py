"""The Python peers as plugin engines through the same replay: LangChain's ``trim_messages`` and
``ClearToolUsesEdit``, measured as they are (their output is not repaired). Skipped when LangChain
(the ``peers`` extra) is not installed."""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("langchain_core")
pytest.importorskip("langchain.agents.middleware")

from langchain_core.messages import trim_messages
from langchain_core.messages.utils import count_tokens_approximately

from conftest import CLAUDE_CODE
from ctxengine import peers
from ctxengine.engine.plugins import EngineRegistry, GuardedEngine
from ctxengine.formats import load
from ctxengine.layers.pairing import find_violations
from ctxengine.messages.model import Message, Text, ToolCall, ToolResult
from ctxengine.models.registry import WindowWarning
from ctxengine.peers.langchain import ClearToolUsesEngine, TrimMessagesEngine, _to_langchain
from ctxengine.replay import replay_session

MIMO = CLAUDE_CODE / "cc_mimo-v2.5-pro_2x-autocompact_db3f6604.jsonl"
OPUS = CLAUDE_CODE / "cc_opus-4.5_general-tool-calls_2-comment-header-lines.jsonl"
SMALL = 64_000


def registry() -> EngineRegistry:
    engines = EngineRegistry()
    assert sorted(peers.register(engines)) == ["langchain-clear", "langchain-trim"]
    return engines


def chat(rounds: int, chars: int = 4_000) -> list[Message]:
    msgs = [Message("user", (Text("look at /srv/app"),), "u0", timestamp=1.0)]
    for i in range(rounds):
        cid = f"call_{i}"
        msgs.append(
            Message(
                "assistant", (Text(f"step {i}"), ToolCall(cid, "Read", {"file_path": f"/f{i}.py"})), f"a{i}"
            )
        )
        msgs.append(Message("user", (ToolResult(cid, (Text(f"{i} " + "x" * chars),), name="Read"),), f"r{i}"))
    return msgs


def peer(cls: Any, name: str, *, window: int, fixed: int) -> Any:
    """A peer engine on the Sonnet model at ``window`` tokens, started with ``fixed`` prefix tokens."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", WindowWarning)
        engine = cls(peers.policy_for(name), model="claude-sonnet-4-5", window=window)
    engine.bootstrap(fixed_prefix_tokens=fixed)
    return engine


def test_register_adds_the_peers_as_plugins() -> None:
    engines = registry()
    assert engines.owner("langchain-trim") == engines.owner("langchain-clear") == "plugin:langchain"
    assert peers.register(engines) == []  # registered once
    assert peers.available() is None
    policy = peers.policy_for("langchain-trim")
    assert policy.name == "langchain-trim" and policy.compaction == "none"
    engine = engines.create("langchain-trim", policy=policy, window=SMALL)
    assert isinstance(engine, GuardedEngine)  # a plugin engine, guarded like any other


def test_conversion_maps_every_block_and_comes_back_unchanged() -> None:
    msgs = chat(3)
    lc = [x for i, m in enumerate(msgs) for x in _to_langchain(m, i)]
    assert [type(m).__name__ for m, _ in lc] == ["HumanMessage"] + ["AIMessage", "ToolMessage"] * 3
    ai = lc[1][0]
    assert ai.tool_calls[0]["id"] == "call_0" and ai.tool_calls[0]["args"] == {"file_path": "/f0.py"}  # type: ignore[attr-defined]
    engine = peer(TrimMessagesEngine, "langchain-trim", window=200_000, fixed=0)
    for m in msgs:
        engine.ingest(m)
    proj = engine.assemble()
    assert all(a is b for a, b in zip(proj.messages, msgs, strict=True))  # under budget: untouched
    assert proj.events == []


def test_trim_keeps_what_trim_messages_keeps_and_is_not_repaired() -> None:
    msgs = chat(40)
    engine = peer(TrimMessagesEngine, "langchain-trim", window=40_000, fixed=5_000)
    for m in msgs:
        engine.ingest(m)
    proj = engine.assemble()
    budget = 40_000 - 5_000 - 20_000  # window - fixed prefix - min(max output, 20,000)
    lc = [x for i, m in enumerate(msgs) for x, _ in _to_langchain(m, i)]
    expected = trim_messages(lc, max_tokens=budget, token_counter=count_tokens_approximately, strategy="last")
    assert [m.id for m in proj.messages] == [msgs[int(x.id.split(":")[0])].id for x in expected]  # type: ignore[union-attr]
    assert proj.messages == msgs[-len(proj.messages) :]
    # strategy "last" without start_on: it may open with a tool result whose call was trimmed;
    # that is sent as is (the replay counts it), never repaired here
    if proj.messages[0].tool_results:
        assert find_violations(proj.messages)
    assert [e.layer for e in proj.events] == []  # the first call: nothing moved yet


def test_clear_tool_uses_keeps_the_newest_three_and_clears_the_rest() -> None:
    msgs = chat(10, chars=8_000)
    engine = peer(ClearToolUsesEngine, "langchain-clear", window=40_000, fixed=0)
    for m in msgs:
        engine.ingest(m)
    proj = engine.assemble()  # ~20,000 approximate tokens > trigger min(100,000, 20,000)
    results = [r for m in proj.messages for r in m.tool_results]
    texts = [r.content[0].text for r in results]  # type: ignore[union-attr]
    assert texts[:-3] == ["[cleared]"] * 7
    assert all(t.endswith("x" * 100) for t in texts[-3:])
    assert len(proj.messages) == len(msgs) and find_violations(proj.messages) == []
    (event,) = proj.events
    assert event.layer == "langchain_clear" and event.details["newly_cleared"] == 7
    assert engine.history == msgs  # the clear edits a copy: history is untouched
    again = engine.assemble()
    assert again.events == []  # the same clear again: not a new change
    assert all(a is b for a, b in zip(again.messages, proj.messages, strict=True))  # same objects


@pytest.mark.parametrize("peer", ["langchain-trim", "langchain-clear"])
def test_peers_through_the_replay_on_a_real_session(peer: str, transcripts: Path) -> None:
    (session,) = load(OPUS)
    report = replay_session(session, peers.policy_for(peer), window=SMALL, engine_id=peer, engines=registry())
    assert report.policy == peer
    s = report.summary
    assert s.recall_uses > 0 and s.reference_recall is not None and s.cost_usd > 0
    layer = peer.replace("-", "_")
    assert any(e["layer"] == layer for c in report.calls for e in c.events)
    if peer == "langchain-trim":
        assert s.peak_sent_tokens < 2 * SMALL  # it trims (the approximate counter runs low)


def test_peers_break_pairing_where_the_recorded_history_does(transcripts: Path) -> None:
    """The mimo session's recorded history has two tool results that arrive late (after the next
    assistant turn); ctxengine repairs that, the peers send it as they get it."""
    (session,) = load(MIMO)
    clear = replay_session(
        session,
        peers.policy_for("langchain-clear"),
        window=200_000,
        engine_id="langchain-clear",
        engines=registry(),
    )
    ours = replay_session(
        session, peers.policy_for("langchain-clear"), window=200_000
    )  # core engine, policy none
    assert clear.summary.pairing_violations > 0
    assert ours.summary.pairing_violations == 0
