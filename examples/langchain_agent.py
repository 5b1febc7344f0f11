"""A LangChain v1 agent (``create_agent``) whose every model call goes through ctxengine.

``ContextEngineMiddleware`` ingests the agent state's messages and hands the model the engine's
projection; the state (and the checkpointer) keeps the whole transcript. The model is LangChain's
``GenericFakeChatModel`` taught ``bind_tools`` and a script (``_scripted_task``): no key, no
network. Run: ``python examples/langchain_agent.py``; it ends with one line
``transcript N tokens, largest model input M tokens, compactions K``.
"""

from __future__ import annotations

import json
from typing import Any

import _scripted_task as task  # examples/_scripted_task.py: the scripted task and its tools
from langchain.agents import create_agent
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, BaseMessage, ToolMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.tools import tool
from langgraph.checkpoint.memory import InMemorySaver

from ctxengine import ContextEngineMiddleware


class ScriptedChatModel(GenericFakeChatModel):
    """``GenericFakeChatModel`` with ``bind_tools``, answering from the script; it records every
    input it got and reports usage (its input counted with o200k)."""

    messages: Any = iter(())
    inputs: list[list[BaseMessage]] = []  # noqa: RUF012 (a pydantic field: copied per instance)
    step: int = 0

    def bind_tools(self, tools: Any, **kwargs: Any) -> ScriptedChatModel:
        return self

    def _generate(
        self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None, **kw: Any
    ) -> ChatResult:
        self.inputs.append(list(messages))
        if self.step and task.step_call(self.step - 1) and not isinstance(messages[-1], ToolMessage):
            raise AssertionError("the newest tool result did not reach the model")
        text = "".join(json.dumps(m.content) + json.dumps(getattr(m, "tool_calls", [])) for m in messages)
        usage = {"input_tokens": task.count_tokens(text), "output_tokens": 20, "total_tokens": 0}
        call = task.step_call(self.step)
        calls = [{"id": f"call_{self.step}", "name": call[0], "args": call[1]}] if call else []
        reply = AIMessage(
            content=f"step {self.step}" if call else task.FINAL, tool_calls=calls, usage_metadata=usage
        )
        self.step += 1
        return ChatResult(generations=[ChatGeneration(message=reply)])


@tool
def read_module(path: str) -> str:
    """Read a file of the repository."""
    return task.read_module(path)


@tool
def run_tests(module: str) -> str:
    """Run the tests of a module and return the log."""
    return task.run_tests(module)


def build(model: ScriptedChatModel, context: ContextEngineMiddleware, checkpointer: Any = None) -> Any:
    """The agent: the scripted model, the two tools, ctxengine as middleware, a checkpointer."""
    return create_agent(
        model,
        [read_module, run_tests],
        system_prompt=task.SYSTEM,
        middleware=[context],
        checkpointer=checkpointer if checkpointer is not None else InMemorySaver(),
    )


def config(thread: str) -> Any:
    """The run config of a thread (the recursion limit fits the script)."""
    return {"configurable": {"thread_id": thread}, "recursion_limit": 4 * task.STEPS + 10}


def run(thread: str = "review-1") -> tuple[ContextEngineMiddleware, ScriptedChatModel, dict[str, Any]]:
    """Run the scripted task; returns the middleware, the model (its ``inputs``) and the state."""
    model = ScriptedChatModel(inputs=[])
    context = ContextEngineMiddleware(model=task.MODEL, window=task.WINDOW)
    state = build(model, context).invoke(
        {"messages": [{"role": "user", "content": task.TASK}]}, config(thread)
    )
    return context, model, state


def main() -> None:
    context, model, state = run()
    bridge = context.bridge("review-1")
    print(f"{len(state['messages'])} messages in the agent state; {len(model.inputs)} model calls")
    print(f"engine: {bridge.stats}")
    print(state["messages"][-1].content)
    print(task.result_line(bridge.transcript_tokens, bridge.stats.largest_input, bridge.stats.compactions))


if __name__ == "__main__":
    main()
