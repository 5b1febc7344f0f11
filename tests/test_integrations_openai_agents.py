"""ctxengine in the OpenAI Agents SDK: a real ``Runner`` loop with ``EngineSession`` (the input
filter, the usage hooks, the Session over our store) against the example's loopback Chat
Completions server, and the item conversion on real sessions."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import msgspec
import pytest
from agents.memory import Session

from ctxengine.engine.core import ContextEngine
from ctxengine.formats.validate import validate_openai_chat
from ctxengine.integrations.bridge import IntegrationWarning
from ctxengine.integrations.openai_agents import ITEMS_SESSION, EngineSession
from ctxengine.integrations.openai_agents_items import from_message, to_message
from ctxengine.messages.model import Block, Message, ToolResult
from integrations_common import canonical, example, replayed_messages, without_image_size

sdk = example("openai_agents")
task = example("_scripted_task")


def run(session: EngineSession) -> Any:
    with sdk.LoopbackModel() as server:
        answer = asyncio.run(sdk.run_task(server, session))
    return server, answer


@pytest.fixture(scope="module")
def finished() -> tuple[EngineSession, Any, str]:
    session = EngineSession("s1", model=task.MODEL, window=task.WINDOW)
    server, answer = run(session)
    return session, server, answer


def test_the_model_gets_valid_requests_under_the_window(finished: Any) -> None:
    session, server, answer = finished
    assert answer == task.FINAL and len(server.requests) == task.STEPS + 1
    for k, body in enumerate(server.requests):
        assert validate_openai_chat(body) == [], f"call {k}"
        assert task.count_tokens(json.dumps(body["messages"])) < task.WINDOW
    stats = session.filter.bridge.stats
    assert stats.compactions >= 1 and stats.fallbacks == 0
    assert stats.largest_input < task.WINDOW < session.filter.bridge.transcript_tokens


def test_a_large_tool_output_reaches_the_model_as_an_offloaded_preview(finished: Any) -> None:
    session, server, _ = finished
    log = task.run_tests("module_07")
    sent = next(m for m in server.requests[8]["messages"] if m.get("tool_call_id") == "call_7")
    assert "<persisted-output>" in sent["content"] and len(sent["content"]) < len(log) // 10
    assert session.filter.bridge.engine.retrieve("tool-result/call_7") == log


def test_the_session_keeps_the_full_history(finished: Any) -> None:
    session, _, _ = finished
    items = asyncio.run(session.get_items())
    outputs = [i for i in items if i.get("type") == "function_call_output"]
    assert len(outputs) == task.STEPS
    assert next(i for i in outputs if i["call_id"] == "call_7")["output"] == task.run_tests("module_07")
    assert asyncio.run(session.get_items(limit=2)) == items[-2:]


def test_usage_reports_reach_the_ledger(finished: Any) -> None:
    session, server, _ = finished
    bridge = session.filter.bridge
    assert bridge.stats.usage_reports == len(server.requests)
    assert bridge.engine.ledger.state.anchor_total is not None


def test_pop_and_clear_append_to_the_store_and_lose_nothing() -> None:
    session = EngineSession("s2")
    assert isinstance(session, Session)  # the SDK's runtime-checkable protocol
    items = [{"role": "user", "content": "one"}, {"role": "user", "content": "two"}]
    asyncio.run(session.add_items(items))
    assert asyncio.run(session.pop_item()) == items[1]
    assert asyncio.run(session.get_items()) == items[:1]
    asyncio.run(session.clear_session())
    assert asyncio.run(session.get_items()) == [] and asyncio.run(session.pop_item()) is None
    kinds = [e.kind for e in session.store.entries(ITEMS_SESSION.format("s2"))]
    assert kinds == ["message", "message", "event", "event"]


def test_an_engine_failure_passes_the_input_through_with_one_warning(monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(self: ContextEngine, *args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("engine down")

    monkeypatch.setattr(ContextEngine, "ingest", broken)
    session = EngineSession("s3", model=task.MODEL, window=task.WINDOW)
    with pytest.warns(IntegrationWarning, match="engine down") as caught:
        server, answer = run(session)
    assert len([w for w in caught if issubclass(w.category, IntegrationWarning)]) == 1
    assert answer == task.FINAL
    assert session.filter.bridge.stats.fallbacks == len(server.requests)
    last = server.requests[-1]["messages"]
    assert any(m.get("content") == task.run_tests("module_07") for m in last)  # unchanged, in full


def for_responses(block: Block) -> Block:
    """What the Responses format has no field for: a result's error flag and tool name, sizes."""
    block = without_image_size(block)
    if isinstance(block, ToolResult):
        return msgspec.structs.replace(block, is_error=False, name="")
    return block


@pytest.mark.parametrize("name,messages", replayed_messages(), ids=lambda v: v if isinstance(v, str) else "")
def test_real_sessions_round_trip_through_responses_items(name: str, messages: list[Message]) -> None:
    items = [x for m in messages for x in from_message(m)]
    back = [to_message(x, str(k)) for k, x in enumerate(items)]
    assert canonical(back) == canonical(messages, for_responses)
