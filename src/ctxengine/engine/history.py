"""``HistoryEngine``: the lifecycle shared by engines that keep the neutral history and project
all of it with one function before every call (the ``identifiers-only`` baseline, the LangChain
peers).

It resolves the model, window and counter once (``engine.resolve.resolve_model``), keeps the history (the
recorded harness's own compaction messages left out), anchors a ``Ledger`` on the fixed prefix at
``bootstrap`` and on the provider's usage at ``after_turn``, and has no compaction or upkeep of its
own. A subclass implements ``assemble`` and builds its result with ``projection``. Tokens.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from ctxengine.engine.ingest import RECORDED_ORIGINS
from ctxengine.engine.resolve import resolve_model
from ctxengine.engine.view import Projection
from ctxengine.layers.base import LayerEvent
from ctxengine.messages.model import Message, RecordedCompaction, Usage
from ctxengine.models.registry import Registry
from ctxengine.policy.registry import Policy
from ctxengine.tokens.counter import TokenCounter
from ctxengine.tokens.ledger import Ledger

if TYPE_CHECKING:
    from ctxengine.llm import ToolDefinition


class HistoryEngine:
    """See the module docstring. ``history`` holds the ingested messages; ``window`` the resolved
    window (tokens)."""

    engine_id = "history"

    def __init__(
        self,
        policy: Policy,
        *,
        model: str | None = None,
        window: int | None = None,
        agent_cap: int | None = None,
        registry: Registry | None = None,
        counter: TokenCounter | None = None,
        session_id: str = "session",
        **_ignored: Any,
    ) -> None:
        self.policy = policy
        self.registry, self.model, self.window, self.counter = resolve_model(
            model, window=window, agent_cap=agent_cap, registry=registry, counter=counter
        )
        self.session_id = session_id
        self.system = ""
        self.ledger = Ledger()
        self.history: list[Message] = []
        self._last_estimate = 0

    def bootstrap(
        self,
        *,
        system: str = "",
        fixed_prefix_tokens: int | None = None,
        recorded_compactions: Sequence[RecordedCompaction] = (),
        tools: Sequence[ToolDefinition] = (),
    ) -> None:
        self.system = system
        prefix = fixed_prefix_tokens if fixed_prefix_tokens is not None else self.counter.count_text(system)
        self.ledger = Ledger(fixed_prefix=prefix)

    def ingest(self, message: Message) -> list[LayerEvent]:
        """Append ``message`` (not the recorded harness's compaction messages); no events."""
        if message.origin not in RECORDED_ORIGINS:
            self.history.append(message)
        return []

    def assemble(self, budget: int | None = None, *, now: float | None = None) -> Projection:
        raise NotImplementedError

    def projection(
        self, messages: list[Message], content: int, window: int, events: list[LayerEvent]
    ) -> Projection:
        """The projection of ``messages`` (``content``: their counter tokens), predicted by the
        ledger; ``content`` is what the next ``after_turn`` anchors on."""
        self._last_estimate = content
        return Projection(
            messages=messages,
            system=self.system,
            tokens=self.ledger.predict(content),
            content_estimate=content,
            window=window,
            events=events,
        )

    def after_turn(self, usage: Usage | None) -> None:
        if usage is not None and usage.total_input > 0:
            self.ledger.observe(usage.total_input, self._last_estimate)

    def compact(
        self, force: bool = True, reason: str = "manual", instructions: str = ""
    ) -> LayerEvent | None:
        return None  # no compaction of its own

    def maintain(self) -> list[LayerEvent]:
        return []

    def dispose(self) -> None:
        self.history.clear()
