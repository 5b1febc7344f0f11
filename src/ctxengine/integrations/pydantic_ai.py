"""ctxengine as a PydanticAI history processor (extra ``pydantic-ai``).

    from pydantic_ai import Agent
    from ctxengine.integrations.pydantic_ai import ContextEngineProcessor

    context = ContextEngineProcessor(model="gpt-4.1", window=64_000)
    agent = Agent(model, capabilities=[context.capability()])   # capability(use_async=True)

The installed PydanticAI (2.x) takes history processors as the ``ProcessHistory`` capability;
``capability()`` wraps the processor in it (releases that still take
``Agent(history_processors=[...])`` accept ``context`` or ``context.aprocess`` there). PydanticAI
runs the processors before every model request over the whole message list, and the
processed list *becomes* the run's history (``ctx.messages[:] = ...``): the next request starts
from what the processor returned. The processor therefore keeps the full transcript itself
(``transcript``; ``full_history(result.all_messages())`` adds what came after the last request)
and recognises its own output at the head of the next list (``bridge``). The system prompt parts
are the fixed prefix, with the newest request's ``instructions``; they stay at the head of the
first request the model gets, also after a compaction. Usage: each ``ModelResponse.usage`` (the
framework's own report) anchors the ledger before the next request. Tool definitions are not
visible to a history processor and are not counted in the fixed prefix.
Conversion: ``pydantic_ai_messages``; failure and pairing rules: ``bridge``.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from pydantic_ai.capabilities import ProcessHistory
from pydantic_ai.messages import ModelMessage, ModelRequest, ModelRequestPart, SystemPromptPart

from ctxengine.integrations.bridge import EngineBridge
from ctxengine.integrations.pydantic_ai_messages import PydanticAIConverter, system_prompt
from ctxengine.llm import LLMClient
from ctxengine.policy.registry import Policy
from ctxengine.store import SessionStore


class ContextEngineProcessor:
    """A PydanticAI history processor (sync ``__call__``, async ``aprocess``) shaping every request.

    One processor is one conversation.

    Args:
        policy: a ``Policy`` or a built-in name.
        model: the registry name (window, prices, tokenizer).
        window: overrides the context window, tokens.
        store: keeps the engine's transcript and offloaded originals (None: in memory).
        session_id: the engine's session in ``store``.
        llm: a ``ctxengine.llm`` client for LLM summaries (None: the $0 structured summary).

    Raises:
        KeyError: for an unknown policy name.
    """

    def __init__(
        self,
        *,
        policy: Policy | str = "default",
        model: str | None = None,
        window: int | None = None,
        store: SessionStore | None = None,
        session_id: str = "pydantic-ai",
        llm: LLMClient | None = None,
    ) -> None:
        self.bridge: EngineBridge[ModelMessage] = EngineBridge(
            PydanticAIConverter(),
            policy=policy,
            model=model,
            window=window,
            store=store,
            session_id=session_id,
            llm=llm,
        )
        self._system: list[SystemPromptPart] = []

    def __call__(self, messages: list[ModelMessage]) -> list[ModelMessage]:
        """The messages for the next request (never raises: on an engine failure they go through
        unchanged, see ``bridge``)."""
        found = system_prompt(messages)
        if found:
            self._system = found
        instructions = next(
            (m.instructions for m in reversed(messages) if isinstance(m, ModelRequest) and m.instructions),
            None,
        )
        system = "\n\n".join([p.content for p in self._system] + ([instructions] if instructions else []))
        return self.bridge.project(messages, system=system, finish=self._with_system)

    def capability(self, *, use_async: bool = False) -> ProcessHistory[Any]:
        """PydanticAI's ``ProcessHistory`` capability running this processor.

        Args:
            use_async: whether the capability runs ``aprocess`` instead of the sync ``__call__``.

        Returns:
            The capability, for ``Agent(capabilities=[...])``.
        """
        return ProcessHistory(self.aprocess if use_async else self)

    async def aprocess(self, messages: list[ModelMessage]) -> list[ModelMessage]:
        """The messages for the next request, asynchronously (the async form of ``__call__``).

        Never raises: on an engine failure the messages go through unchanged.

        Args:
            messages: the conversation so far, as PydanticAI hands it.

        Returns:
            The engine's projection of them, the system prompt at the head.
        """
        return self(messages)

    def full_history(self, messages: list[ModelMessage] | None = None) -> list[ModelMessage]:
        """The whole conversation, unshaped.

        Args:
            messages: the run's messages (e.g. ``result.all_messages()``); those after the last
                request the processor shaped are added (None: none).

        Returns:
            Every message the processor saw, then those new ones of ``messages``.
        """
        out = list(self.bridge.transcript)
        if messages:
            out.extend(self.bridge.after_last_output(messages))
        return out

    def _with_system(self, out: list[ModelMessage]) -> list[ModelMessage]:
        """``out`` with the system prompt parts at the head of its first request (unless it
        holds them already)."""
        if not self._system or system_prompt(out):
            return out
        system: list[ModelRequestPart] = list(self._system)
        if out and isinstance(out[0], ModelRequest):
            return [replace(out[0], parts=[*system, *out[0].parts]), *out[1:]]
        return [ModelRequest(parts=system), *out]
