"""ctxengine as LangChain v1 middleware: a real ``create_agent`` loop (its graph, tool node and
checkpointer) against the example's scripted ``GenericFakeChatModel``, and the message conversion
on real sessions."""

from __future__ import annotations

import asyncio
import warnings
from typing import Any

import pytest
from langchain_core.messages import HumanMessage, ToolMessage

from ctxengine.engine.core import ContextEngine
from ctxengine.integrations.bridge import IntegrationWarning
from ctxengine.integrations.langchain_messages import from_message, to_message
from integrations_common import canonical, example, pairing_problems, replayed_messages, tokens

lc = example("langchain_agent")
task = example("_scripted_task")


@pytest.fixture(scope="module")
def finished() -> tuple[Any, Any, dict[str, Any]]:
    return lc.run("t1")


def test_the_model_sees_a_pairing_valid_projection_under_the_window(finished: Any) -> None:
    context, model, _ = finished
    bridge = context.bridge("t1")
    assert len(model.inputs) == task.STEPS + 1
    for k, messages in enumerate(model.inputs):
        neutral = [to_message(m, f"{k}:{i}") for i, m in enumerate(messages)]
        assert pairing_problems(neutral) == [], f"call {k}"
        assert tokens(neutral) < task.WINDOW
    assert bridge.stats.compactions >= 1 and bridge.stats.fallbacks == 0
    assert bridge.stats.largest_input < task.WINDOW < bridge.transcript_tokens


def test_a_large_tool_result_reaches_the_model_as_an_offloaded_preview(finished: Any) -> None:
    context, model, _ = finished
    log = task.run_tests("module_07")  # step 7's call, answered before call 8
    sent = next(m for m in model.inputs[8] if isinstance(m, ToolMessage) and m.tool_call_id == "call_7")
    assert "<persisted-output>" in sent.content and len(sent.content) < len(log) // 10
    assert log.splitlines()[0] in sent.content
    assert context.bridge("t1").engine.retrieve("tool-result/call_7") == log


def test_the_state_keeps_the_full_transcript(finished: Any) -> None:
    _, _, state = finished
    results = [m for m in state["messages"] if isinstance(m, ToolMessage)]
    assert len(results) == task.STEPS
    assert next(m for m in results if m.tool_call_id == "call_7").content == task.run_tests("module_07")
    assert state["messages"][-1].content == task.FINAL


def test_usage_from_the_model_anchors_the_ledger(finished: Any) -> None:
    context, _, _ = finished
    bridge = context.bridge("t1")
    assert bridge.stats.usage_reports >= task.STEPS - 1
    assert bridge.engine.ledger.state.anchor_total is not None


def test_a_second_turn_on_the_checkpointed_thread_extends_the_transcript() -> None:
    model = lc.ScriptedChatModel(inputs=[])
    context = lc.ContextEngineMiddleware(model=task.MODEL, window=task.WINDOW)
    agent = lc.build(model, context)
    agent.invoke({"messages": [{"role": "user", "content": task.TASK}]}, lc.config("t2"))
    state = agent.invoke({"messages": [{"role": "user", "content": "Anything else?"}]}, lc.config("t2"))
    bridge = context.bridge("t2")
    assert bridge.stats.resets == 0 and bridge.stats.fallbacks == 0
    assert isinstance(model.inputs[-1][-1], HumanMessage) and model.inputs[-1][-1].content == "Anything else?"
    assert len(bridge.transcript) == len(state["messages"]) - 1  # all but the last answer
    assert len(model.inputs[-1]) < len(state["messages"])


def test_the_async_agent_goes_through_awrap_model_call() -> None:
    model = lc.ScriptedChatModel(inputs=[])
    context = lc.ContextEngineMiddleware(model=task.MODEL, window=task.WINDOW)
    agent = lc.build(model, context)
    state = asyncio.run(
        agent.ainvoke({"messages": [{"role": "user", "content": task.TASK}]}, lc.config("t5"))
    )
    stats = context.bridge("t5").stats
    assert state["messages"][-1].content == task.FINAL
    assert stats.calls == len(model.inputs) == task.STEPS + 1 and stats.compactions >= 1
    assert max(tokens([to_message(m, str(k)) for k, m in enumerate(i)]) for i in model.inputs) < task.WINDOW


def test_a_thread_resumed_from_its_checkpoint_by_a_new_middleware_is_ingested_whole() -> None:
    saver = lc.InMemorySaver()
    lc.build(lc.ScriptedChatModel(inputs=[]), lc.ContextEngineMiddleware(window=task.WINDOW), saver).invoke(
        {"messages": [{"role": "user", "content": task.TASK}]}, lc.config("t4")
    )
    model = lc.ScriptedChatModel(inputs=[], step=task.STEPS + 1)  # a new process: answers at once
    context = lc.ContextEngineMiddleware(window=task.WINDOW)
    state = lc.build(model, context, saver).invoke(
        {"messages": [{"role": "user", "content": "More?"}]}, lc.config("t4")
    )
    bridge = context.bridge("t4")
    assert len(bridge.transcript) == len(state["messages"]) - 1 and bridge.stats.calls == 1
    sent = [to_message(m, str(k)) for k, m in enumerate(model.inputs[0])]
    assert pairing_problems(sent) == [] and tokens(sent) < task.WINDOW < bridge.transcript_tokens


def test_an_engine_failure_passes_the_messages_through_with_one_warning(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def broken(self: ContextEngine, *args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("engine down")

    monkeypatch.setattr(ContextEngine, "assemble", broken)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        context, model, state = lc.run("t3")
    assert sum(issubclass(w.category, IntegrationWarning) for w in caught) == 1
    stats = context.bridge("t3").stats
    assert stats.fallbacks == len(model.inputs) == task.STEPS + 1 and stats.calls == 0
    assert "engine down" in stats.last_error
    assert model.inputs[-1][1:] == state["messages"][:-1]  # the whole state unchanged, after the system
    assert state["messages"][-1].content == task.FINAL


@pytest.mark.parametrize("name,messages", replayed_messages(), ids=lambda v: v if isinstance(v, str) else "")
def test_real_sessions_round_trip_through_langchain_messages(name: str, messages: list[Any]) -> None:
    converted = [x for m in messages for x in from_message(m)]
    back = [to_message(x, str(k)) for k, x in enumerate(converted)]
    assert canonical(back) == canonical(messages)
    assert [m.usage for m in back if m.usage] == [
        m.usage for m in messages if m.role == "assistant" and m.usage
    ]
