"""ctxengine in the OpenAI Agents SDK (extra ``openai-agents``).

    from agents import Runner
    from ctxengine.integrations.openai_agents import EngineSession

    session = EngineSession("chat-1", window=64_000)
    result = await Runner.run(
        agent, task, session=session, run_config=session.run_config(), hooks=session.hooks
    )

- ``ContextEngineFilter``: a ``RunConfig.call_model_input_filter``. The SDK calls it before every
  model call with the run's whole input (session history, the new input, the items generated so
  far); it returns the engine's projection of them as ``ModelInputData`` (the instructions are
  the fixed prefix, with the agent's tool schemas). The filter's output goes to the model only:
  the run's items, and a session, keep everything. Its ``hooks`` (``RunHooks``) feed the usage
  the SDK reports after each call (``on_llm_end``) to the engine's ledger: the filter itself never
  sees it. One filter is one conversation (a history that does not extend the one it saw starts
  a new engine session).
- ``EngineSession``: the SDK's ``Session`` protocol (``get_items``, ``add_items``, ``pop_item``,
  ``clear_session``) over our append-only ``SessionStore``: items are appended as ``message``
  entries of the store session ``agents-sdk:<session_id>``; a pop or a clear is appended as an
  ``event`` entry and the history is replayed from the log, so nothing is ever deleted. It owns a
  ``ContextEngineFilter`` over the same store (offloaded originals persist beside the items).

Item conversion: ``openai_agents_items``; failure and pairing rules: ``bridge``.
"""

from __future__ import annotations

import json
from typing import Any

from agents import Agent, FunctionTool, ModelResponse, RunConfig, RunContextWrapper, RunHooks
from agents.run_config import CallModelData, ModelInputData

from ctxengine.integrations.bridge import EngineBridge
from ctxengine.integrations.openai_agents_items import ResponsesConverter, as_item
from ctxengine.llm import LLMClient
from ctxengine.messages.model import Usage
from ctxengine.policy.registry import Policy
from ctxengine.store import SessionStore, SQLiteStore

ITEMS_SESSION = "agents-sdk:{}"  # store session holding a Session's items


def sdk_usage(usage: Any) -> Usage:
    """The SDK's ``Usage`` of one call (OpenAI semantics: ``input_tokens`` includes the cached
    tokens) in ours (disjoint fields). Tokens."""
    details = getattr(usage, "input_tokens_details", None)
    cached = int(getattr(details, "cached_tokens", 0) or 0)
    written = int(getattr(details, "cache_write_tokens", 0) or 0)
    total = int(getattr(usage, "input_tokens", 0) or 0)
    return Usage(
        input_tokens=max(0, total - cached - written),
        cache_read_tokens=cached,
        cache_write_tokens=written,
        output_tokens=int(getattr(usage, "output_tokens", 0) or 0),
    )


class EngineRunHooks(RunHooks[Any]):
    """``RunHooks`` that feed each model call's reported usage to a bridge's engine."""

    def __init__(self, bridge: EngineBridge[Any]) -> None:
        self.bridge = bridge

    async def on_llm_end(
        self, context: RunContextWrapper[Any], agent: Agent[Any], response: ModelResponse
    ) -> None:
        self.bridge.report_usage(sdk_usage(response.usage))


class ContextEngineFilter:
    """A ``call_model_input_filter`` applying ctxengine to the run's input items.

    ``policy``: a ``Policy`` or a built-in name; ``model``: the registry name (window, prices,
    tokenizer; default: the agent's model when it is a name); ``window`` overrides the context
    window (tokens); ``store`` keeps the engine's transcript and offloaded originals (default: in
    memory) under ``session_id``; ``llm``: a ``ctxengine.llm`` client for LLM summaries.
    ``hooks``: pass them to ``Runner.run`` for the usage feedback; ``bridge.stats``: figures.
    """

    def __init__(
        self,
        *,
        policy: Policy | str = "default",
        model: str | None = None,
        window: int | None = None,
        store: SessionStore | None = None,
        session_id: str = "agents-sdk",
        llm: LLMClient | None = None,
    ) -> None:
        self.bridge: EngineBridge[Any] = EngineBridge(
            ResponsesConverter(),
            policy=policy,
            model=model,
            window=window,
            store=store,
            session_id=session_id,
            llm=llm,
        )
        self.hooks = EngineRunHooks(self.bridge)

    def __call__(self, data: CallModelData[Any]) -> ModelInputData:
        """The projection of ``data.model_data.input`` (never raises: on an engine failure the
        input goes through unchanged, see ``bridge``)."""
        if self.bridge.model is None and isinstance(data.agent.model, str):
            self.bridge.model = data.agent.model  # used when the engine is (re)built
        instructions = data.model_data.instructions
        system = instructions or ""
        items = self.bridge.project(
            data.model_data.input, system=system, prefix=system + _tool_schemas(data.agent)
        )
        return ModelInputData(input=items, instructions=instructions)


def _tool_schemas(agent: Agent[Any]) -> str:
    """The agent's function tools as the JSON the model gets (others by name)."""
    tools = [
        {"name": t.name, "description": t.description, "parameters": t.params_json_schema}
        if isinstance(t, FunctionTool)
        else {"name": getattr(t, "name", type(t).__name__)}
        for t in agent.tools
    ]
    return json.dumps(tools, sort_keys=True, default=str) if tools else ""


class EngineSession:
    """The OpenAI Agents SDK ``Session`` over an append-only ``SessionStore`` (see the module docstring).

    Items are appended as entries of the store session ``agents-sdk:<session_id>``; a pop or a
    clear is an appended event, so nothing is ever deleted. It owns a ``ContextEngineFilter``
    (``filter``) over the same store.

    Args:
        session_id: the conversation's id.
        store: where items and offloaded originals go (None: an in-memory ``SQLiteStore``; pass
            ``SQLiteStore("chat.sqlite")`` to keep sessions on disk).
        policy: the filter's policy, a ``Policy`` or a built-in name.
        model: the filter's registry model name (window, prices, tokenizer).
        window: overrides the context window, tokens.
        llm: a ``ctxengine.llm`` client for LLM summaries (None: the $0 structured summary).

    Raises:
        KeyError: for an unknown policy name.
    """

    session_settings: Any = None

    def __init__(
        self,
        session_id: str,
        *,
        store: SessionStore | None = None,
        policy: Policy | str = "default",
        model: str | None = None,
        window: int | None = None,
        llm: LLMClient | None = None,
    ) -> None:
        self.session_id = session_id
        self.store: SessionStore = store if store is not None else SQLiteStore()
        self.filter = ContextEngineFilter(
            policy=policy, model=model, window=window, store=self.store, session_id=session_id, llm=llm
        )

    @property
    def hooks(self) -> EngineRunHooks:
        """The run hooks that feed the SDK's usage reports to the engine."""
        return self.filter.hooks

    def run_config(self, **kwargs: Any) -> RunConfig:
        """A ``RunConfig`` with this session's filter as its ``call_model_input_filter``.

        Args:
            **kwargs: other ``RunConfig`` fields.

        Returns:
            The run config.
        """
        return RunConfig(call_model_input_filter=self.filter, **kwargs)

    def items(self) -> list[dict[str, Any]]:
        """The whole history: the appended items with pops and clears applied.

        Returns:
            The items (JSON dicts), oldest first.
        """
        out: list[dict[str, Any]] = []
        for entry in self.store.entries(ITEMS_SESSION.format(self.session_id)):
            if entry.kind == "message":
                out.append(entry.payload["item"])
            elif entry.kind == "event" and entry.payload.get("op") == "pop_item" and out:
                out.pop()
            elif entry.kind == "event" and entry.payload.get("op") == "clear_session":
                out.clear()
        return out

    async def get_items(self, limit: int | None = None) -> list[Any]:
        """The history, or its newest items (the SDK's ``Session.get_items``).

        Args:
            limit: how many of the newest items (None: all; 0: none).

        Returns:
            The items, oldest first.
        """
        items = self.items()
        return items[-limit:] if limit is not None and limit > 0 else ([] if limit == 0 else items)

    async def add_items(self, items: list[Any]) -> None:
        """Append items to the history (the SDK's ``Session.add_items``).

        Args:
            items: the SDK's items, stored as JSON.

        Raises:
            StoreError: when the store cannot take them.
        """
        key = ITEMS_SESSION.format(self.session_id)
        for item in items:
            self.store.append(key, "message", {"item": json.loads(json.dumps(as_item(item), default=str))})

    async def pop_item(self) -> Any:
        """Remove the newest item, by appending a ``pop_item`` event (the SDK's ``Session.pop_item``).

        Returns:
            The item removed, or None when the history is empty.
        """
        items = self.items()
        if not items:
            return None
        self.store.append(ITEMS_SESSION.format(self.session_id), "event", {"op": "pop_item"})
        return items[-1]

    async def clear_session(self) -> None:
        """Empty the history (by appending a ``clear_session`` event; the log keeps everything)."""
        self.store.append(ITEMS_SESSION.format(self.session_id), "event", {"op": "clear_session"})
