"""ctxengine as a PydanticAI history processor: a real ``Agent`` run (sync and async processor)
against the example's scripted ``FunctionModel``, and the message conversion on real sessions."""

from __future__ import annotations

import warnings
from typing import Any

import msgspec
import pytest
from pydantic_ai.messages import ModelRequest, SystemPromptPart, ToolReturnPart

from ctxengine.engine.core import ContextEngine
from ctxengine.integrations.bridge import IntegrationWarning
from ctxengine.integrations.pydantic_ai_messages import from_message, to_message
from ctxengine.messages.model import Block, Document, Message
from integrations_common import (
    canonical,
    example,
    pairing_problems,
    replayed_messages,
    tokens,
    without_image_size,
)

pai = example("pydantic_ai_agent")
task = example("_scripted_task")


@pytest.fixture(scope="module", params=[False, True], ids=["sync", "async"])
def finished(request: pytest.FixtureRequest) -> Any:
    return pai.run(use_async=request.param)


def test_the_model_sees_a_pairing_valid_projection_under_the_window(finished: Any) -> None:
    context, model, _ = finished
    assert len(model.inputs) == task.STEPS + 1
    for k, messages in enumerate(model.inputs):
        neutral = [to_message(m, f"{k}:{i}") for i, m in enumerate(messages)]
        assert pairing_problems(neutral) == [], f"call {k}"
        assert tokens(neutral) < task.WINDOW
        first = messages[0]
        assert isinstance(first, ModelRequest) and isinstance(first.parts[0], SystemPromptPart)
    stats = context.bridge.stats
    assert stats.compactions >= 1 and stats.fallbacks == 0 and stats.resets == 0
    assert stats.largest_input < task.WINDOW < context.bridge.transcript_tokens


def test_a_large_tool_return_reaches_the_model_as_an_offloaded_preview(finished: Any) -> None:
    context, model, _ = finished
    log = task.run_tests("module_07")
    parts = [p for m in model.inputs[8] if isinstance(m, ModelRequest) for p in m.parts]
    sent = next(p for p in parts if isinstance(p, ToolReturnPart) and p.tool_call_id == "call_7")
    assert "<persisted-output>" in sent.content and len(sent.content) < len(log) // 10
    assert context.bridge.engine.retrieve("tool-result/call_7") == log


def test_the_processor_keeps_the_full_history(finished: Any) -> None:
    context, _, history = finished
    returns = [
        p for m in history if isinstance(m, ModelRequest) for p in m.parts if isinstance(p, ToolReturnPart)
    ]
    assert len(returns) == task.STEPS
    assert next(p for p in returns if p.tool_call_id == "call_7").content == task.run_tests("module_07")
    assert context.bridge.stats.usage_reports >= task.STEPS - 1


def test_an_engine_failure_passes_the_history_through_with_one_warning(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def broken(self: ContextEngine, *args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("engine down")

    monkeypatch.setattr(ContextEngine, "assemble", broken)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        context, model, history = pai.run()
    assert sum(issubclass(w.category, IntegrationWarning) for w in caught) == 1
    assert context.bridge.stats.fallbacks == len(model.inputs) == task.STEPS + 1
    assert model.inputs[-1] == history[:-1]  # everything, unchanged


def for_pydantic_ai(block: Block) -> Block:
    """What PydanticAI has no field for: a document's title, an image's size."""
    block = without_image_size(block)
    return msgspec.structs.replace(block, title="") if isinstance(block, Document) else block


@pytest.mark.parametrize("name,messages", replayed_messages(), ids=lambda v: v if isinstance(v, str) else "")
def test_real_sessions_round_trip_through_model_messages(name: str, messages: list[Message]) -> None:
    converted = [x for m in messages if m.role != "system" for x in from_message(m)]
    back = [to_message(x, str(k)) for k, x in enumerate(converted)]
    expected = [m for m in messages if m.role != "system"]  # system prompt parts are the fixed prefix
    assert canonical(back) == canonical(expected, for_pydantic_ai)
    assert [m.usage for m in back if m.usage] == [
        m.usage for m in expected if m.role == "assistant" and m.usage
    ]
