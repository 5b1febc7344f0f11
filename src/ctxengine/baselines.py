"""Baseline engines that prove the metrics, not policies anyone should run.

``identifiers-only`` sends the fixed prefix, the latest user request (the human's text, not tool
results) and a list of every identifier seen so far, nothing else. It scores high on *reference
recall* (every identifier is in the list) and low on *content recall* (no file, command output or
edit text survives): a metric that rewards it measures names, not what a model can work from.
Registered as a core engine; ``bench`` runs it under the name ``identifiers-only``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ctxengine import identifiers
from ctxengine.audit import latest_user_request
from ctxengine.engine import Projection, resolve_model
from ctxengine.layers.base import LayerEvent
from ctxengine.llm.base import ToolDefinition
from ctxengine.messages import Message, RecordedCompaction, Text, ToolCall, ToolResult, Usage
from ctxengine.policy import NONE, Policy
from ctxengine.tokens.ledger import Ledger

BASELINES: dict[str, str] = {
    "identifiers-only": "baseline: the latest user request and a list of every identifier seen, nothing else",
}
"""Baseline engine ids (each runs under the policy of the same name) and what each sends."""

RECORDED_ORIGINS = ("compact_summary", "compact_restore")


def policy_for(name: str) -> Policy:
    """The policy record a baseline runs under (ours does nothing; the engine decides).
    Raises ``KeyError``."""
    if name not in BASELINES:
        raise KeyError(f"unknown baseline {name!r}; known: {', '.join(BASELINES)}")
    return NONE.with_(name=name, description=BASELINES[name])


def _texts(msg: Message) -> list[str]:
    out: list[str] = []
    for b in msg.blocks:
        if isinstance(b, Text):
            out.append(b.text)
        elif isinstance(b, ToolCall):
            out.append(b.input if isinstance(b.input, str) else repr(b.input))
        elif isinstance(b, ToolResult):
            out.extend(p.text for p in b.content if isinstance(p, Text))
    return out


class IdentifiersOnlyEngine:
    """The ``identifiers-only`` baseline (see the module docstring). Follows the engine
    lifecycle (``bootstrap``, ``ingest``, ``assemble``, ``after_turn``, ``compact``, ``maintain``,
    ``dispose``); sizes in tokens."""

    engine_id = "identifiers-only"

    def __init__(
        self,
        policy: Policy,
        *,
        model: str | None = None,
        window: int | None = None,
        agent_cap: int | None = None,
        registry: Any = None,
        counter: Any = None,
        **_ignored: Any,
    ) -> None:
        self.policy = policy
        self.registry, self.model, self.window, self.counter = resolve_model(
            model, window=window, agent_cap=agent_cap, registry=registry, counter=counter
        )
        self.system = ""
        self.ledger = Ledger()
        self.history: list[Message] = []
        self._ids: dict[str, None] = {}  # first-seen order
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
        if message.origin in RECORDED_ORIGINS:
            return []
        self.history.append(message)
        for t in _texts(message):
            for ident in sorted(identifiers.extract(t)):
                self._ids.setdefault(ident, None)
        return []

    def assemble(self, budget: int | None = None, *, now: float | None = None) -> Projection:
        window = min(self.window, budget) if budget else self.window
        request = latest_user_request(self.history) or "(no user request yet)"
        listing = "Identifiers seen so far:\n" + "\n".join(self._ids)
        msg = Message(role="user", blocks=(Text(request), Text(listing)), id="identifiers-only")
        content = self.counter.count_message(msg)
        self._last_estimate = content
        return Projection(
            messages=[msg],
            system=self.system,
            tokens=self.ledger.predict(content),
            content_estimate=content,
            window=window,
            events=[],
        )

    def after_turn(self, usage: Usage | None) -> None:
        if usage is not None and usage.total_input > 0:
            self.ledger.observe(usage.total_input, self._last_estimate)

    def compact(
        self, force: bool = True, reason: str = "manual", instructions: str = ""
    ) -> LayerEvent | None:
        return None

    def maintain(self) -> list[LayerEvent]:
        return []

    def dispose(self) -> None:
        self.history.clear()
        self._ids.clear()
