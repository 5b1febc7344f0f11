"""ctxengine as a LangChain v1 agent middleware (extra ``langchain``).

    from langchain.agents import create_agent
    from ctxengine.integrations.langchain import ContextEngineMiddleware

    agent = create_agent(model, tools, middleware=[ContextEngineMiddleware(window=64_000)])

``ContextEngineMiddleware`` implements ``wrap_model_call`` / ``awrap_model_call``, the hook
LangChain documents for changing what one model call gets without touching the agent state (its
own ``ContextEditingMiddleware`` works the same way): the state's messages are ingested into a
``ContextEngine`` and the call gets ``request.override(messages=<the projection>)``. The state, and
a checkpointer with it, keeps the full transcript; only the model call sees the projection. One
engine per thread (``configurable.thread_id``, "default" without one); a thread resumed from a
checkpoint in a new process is ingested whole at its first call. The fixed prefix is the
request's system message and tool schemas (counted by the engine's counter). Usage comes from each
``AIMessage.usage_metadata`` (the framework's own report), fed to the ledger before the next call.
Conversion: ``langchain_messages``; the bridge's failure and pairing rules: ``bridge``.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from langchain.agents.middleware import AgentMiddleware, ModelRequest, ModelResponse
from langchain_core.messages import BaseMessage
from langchain_core.utils.function_calling import convert_to_openai_tool

from ctxengine.integrations.bridge import EngineBridge
from ctxengine.integrations.langchain_messages import LangChainConverter
from ctxengine.llm import LLMClient
from ctxengine.policy.registry import Policy
from ctxengine.store import SessionStore

log = logging.getLogger(__name__)

DEFAULT_THREAD = "default"


class ContextEngineMiddleware(AgentMiddleware):
    """Shapes every model call of a LangChain ``create_agent`` agent with ctxengine.

    One engine per thread (``configurable.thread_id``, "default" without one); the state keeps
    the full transcript, only the model call sees the projection.

    Args:
        policy: a ``Policy`` or a built-in name (resolved at a thread's first call).
        model: the registry name for the window, prices and tokenizer (None: the chat model's
            ``model_name`` / ``model``).
        window: overrides the model's context window, tokens.
        store: where transcripts and offloaded originals go (None: in memory), shared by the
            threads (each its own session).
        llm: a ``ctxengine.llm`` client for LLM summaries (None: the $0 structured summary).
    """

    def __init__(
        self,
        *,
        policy: Policy | str = "default",
        model: str | None = None,
        window: int | None = None,
        store: SessionStore | None = None,
        llm: LLMClient | None = None,
    ) -> None:
        super().__init__()
        self.policy, self.model, self.window, self.store, self.llm = policy, model, window, store, llm
        self.bridges: dict[str, EngineBridge[BaseMessage]] = {}

    def bridge(self, thread_id: str = DEFAULT_THREAD) -> EngineBridge[BaseMessage]:
        """The engine bridge of a thread (its ``stats``, ``transcript``, ``engine``).

        Args:
            thread_id: the thread's ``configurable.thread_id``.

        Returns:
            The thread's ``EngineBridge``.

        Raises:
            KeyError: when no model call was seen yet on that thread.
        """
        found = self.bridges.get(thread_id)
        if found is None:
            raise KeyError(f"no model call seen yet on thread {thread_id!r}")
        return found

    def wrap_model_call(
        self, request: ModelRequest, handler: Callable[[ModelRequest], ModelResponse]
    ) -> ModelResponse:
        """Call the model with the engine's projection of the state's messages.

        Args:
            request: the model call LangChain is about to make.
            handler: calls the model (the next middleware or the model itself).

        Returns:
            The handler's response.

        Raises:
            KeyError: for an unknown policy name, at a thread's first call (``shape``).
        """
        return handler(self.shape(request))

    async def awrap_model_call(
        self, request: ModelRequest, handler: Callable[[ModelRequest], Awaitable[ModelResponse]]
    ) -> ModelResponse:
        """Call the model with the engine's projection, asynchronously (``wrap_model_call``).

        Args:
            request: the model call LangChain is about to make.
            handler: calls the model, a coroutine function.

        Returns:
            The handler's response.

        Raises:
            KeyError: for an unknown policy name, at a thread's first call (``shape``).
        """
        return await handler(self.shape(request))

    def shape(self, request: ModelRequest) -> ModelRequest:
        """A model request with its messages replaced by the engine's projection.

        An engine failure never raises: the messages then stay as they are (see ``bridge``). The
        fixed prefix is the request's system message and tool schemas.

        Args:
            request: the model call LangChain is about to make.

        Returns:
            ``request.override(messages=<the projection>)``.

        Raises:
            KeyError: for an unknown policy name, at a thread's first call.
        """
        thread = _thread_id()
        bridge = self.bridges.get(thread)
        if bridge is None:
            bridge = self.bridges[thread] = EngineBridge(
                LangChainConverter(),
                policy=self.policy,
                model=self.model or _model_name(request.model),
                window=self.window,
                store=self.store,
                session_id=f"langchain:{thread}",
                llm=self.llm,
            )
        system = request.system_message.text if request.system_message is not None else ""
        messages = bridge.project(
            request.messages, system=system, prefix=system + _tool_schemas(request.tools)
        )
        return request.override(messages=messages)  # type: ignore[arg-type]


def _tool_schemas(tools: list[Any]) -> str:
    """The tools' schemas as the JSON the model gets (counted in the fixed prefix)."""
    try:
        return (
            json.dumps([convert_to_openai_tool(t) for t in tools], sort_keys=True, default=str)
            if tools
            else ""
        )
    except Exception as exc:  # a tool LangChain cannot describe: the system prompt alone counts
        log.warning("tool schemas not counted in the fixed prefix: %s", exc)
        return ""


def _thread_id() -> str:
    """The running graph's ``configurable.thread_id`` (``DEFAULT_THREAD`` outside a graph or
    without a checkpointer thread)."""
    from langgraph.config import get_config

    try:
        config = get_config()
    except RuntimeError:  # called outside a runnable context
        return DEFAULT_THREAD
    thread = (config.get("configurable") or {}).get("thread_id")
    return str(thread) if thread is not None else DEFAULT_THREAD


def _model_name(model: Any) -> str | None:
    for attr in ("model_name", "model"):
        value = getattr(model, attr, None)
        if isinstance(value, str) and value:
            return value
    return None
