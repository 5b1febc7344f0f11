"""A PydanticAI agent whose every model request goes through ctxengine.

``ContextEngineProcessor`` is the agent's history processor (``ProcessHistory`` capability): it
hands each request the engine's projection and keeps the whole transcript itself (PydanticAI keeps
a processor's output as the run's history). The model is PydanticAI's ``FunctionModel`` following
a script (``_scripted_task``): no key, no network. Run: ``python examples/pydantic_ai_agent.py``;
it ends with one line ``transcript N tokens, largest model input M tokens, compactions K``.
"""

from __future__ import annotations

import _scripted_task as task  # examples/_scripted_task.py: the scripted task and its tools
from pydantic_ai import Agent
from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.usage import RequestUsage

from ctxengine import ContextEngineProcessor


class ScriptedModel:
    """The ``FunctionModel`` function: answers from the script, records every input it got and
    reports usage (its input counted with o200k)."""

    def __init__(self) -> None:
        self.inputs: list[list[ModelMessage]] = []

    def __call__(self, messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        step = len(self.inputs)
        self.inputs.append(list(messages))
        last = messages[-1]
        if (
            step
            and task.step_call(step - 1)
            and not (
                isinstance(last, ModelRequest) and any(isinstance(p, ToolReturnPart) for p in last.parts)
            )
        ):
            raise AssertionError("the newest tool result did not reach the model")
        text = "".join(
            str(getattr(p, "content", "")) + str(getattr(p, "args", "")) for m in messages for p in m.parts
        )
        usage = RequestUsage(input_tokens=task.count_tokens(text), output_tokens=20)
        call = task.step_call(step)
        if call is None:
            return ModelResponse(parts=[TextPart(task.FINAL)], usage=usage)
        return ModelResponse(parts=[ToolCallPart(call[0], call[1], f"call_{step}")], usage=usage)


def build(
    model: ScriptedModel, context: ContextEngineProcessor, *, use_async: bool = False
) -> Agent[None, str]:
    """The agent: the scripted model, the two tools, ctxengine as the history processor."""
    agent: Agent[None, str] = Agent(
        FunctionModel(model),
        system_prompt=task.SYSTEM,
        capabilities=[context.capability(use_async=use_async)],
    )

    @agent.tool_plain
    def read_module(path: str) -> str:
        """Read a file of the repository."""
        return task.read_module(path)

    @agent.tool_plain
    def run_tests(module: str) -> str:
        """Run the tests of a module and return the log."""
        return task.run_tests(module)

    return agent


def run(*, use_async: bool = False) -> tuple[ContextEngineProcessor, ScriptedModel, list[ModelMessage]]:
    """Run the scripted task; returns the processor, the model (its ``inputs``) and the full
    history."""
    model = ScriptedModel()
    context = ContextEngineProcessor(model=task.MODEL, window=task.WINDOW)
    result = build(model, context, use_async=use_async).run_sync(task.TASK)
    return context, model, context.full_history(result.all_messages())


def main() -> None:
    context, model, history = run()
    stats = context.bridge.stats
    print(f"{len(history)} messages in the conversation; {len(model.inputs)} model requests")
    print(f"engine: {stats}")
    print(task.result_line(context.bridge.transcript_tokens, stats.largest_input, stats.compactions))


if __name__ == "__main__":
    main()
