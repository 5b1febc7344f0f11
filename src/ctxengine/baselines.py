"""Baseline engines that prove the metrics, not policies anyone should run.

``identifiers-only`` sends the fixed prefix, the latest user request (the human's text, not tool
results) and a list of every identifier seen so far, nothing else. It scores high on *reference
recall* (every identifier is in the list) and low on *content recall* (no file, command output or
edit text survives): a metric that rewards it measures names, not what a model can work from.
Registered as a core engine; ``bench`` runs it under the name ``identifiers-only``.
"""

from __future__ import annotations

from typing import Any

from ctxengine.audit import latest_user_request, span_identifiers
from ctxengine.engine import Projection
from ctxengine.history_engine import HistoryEngine
from ctxengine.layers.base import LayerEvent
from ctxengine.messages import Message, Text
from ctxengine.policy import NONE, Policy

BASELINES: dict[str, str] = {
    "identifiers-only": "baseline: the latest user request and a list of every identifier seen, nothing else",
}
"""Baseline engine ids (each runs under the policy of the same name) and what each sends."""

def policy_for(name: str) -> Policy:
    """The policy record a baseline runs under (ours does nothing; the engine decides).
    Raises ``KeyError``."""
    if name not in BASELINES:
        raise KeyError(f"unknown baseline {name!r}; known: {', '.join(BASELINES)}")
    return NONE.with_(name=name, description=BASELINES[name])


class IdentifiersOnlyEngine(HistoryEngine):
    """The ``identifiers-only`` baseline (see the module docstring): one user message with the
    latest user request and every identifier seen so far, in first-seen order. Tokens."""

    engine_id = "identifiers-only"

    def __init__(self, policy: Policy, **kwargs: Any) -> None:
        super().__init__(policy, **kwargs)
        self._ids: dict[str, None] = {}  # first-seen order

    def ingest(self, message: Message) -> list[LayerEvent]:
        n = len(self.history)
        super().ingest(message)
        if len(self.history) > n:
            for ident in sorted(span_identifiers([message])):
                self._ids.setdefault(ident, None)
        return []

    def assemble(self, budget: int | None = None, *, now: float | None = None) -> Projection:
        window = min(self.window, budget) if budget else self.window
        request = latest_user_request(self.history) or "(no user request yet)"
        listing = "Identifiers seen so far:\n" + "\n".join(self._ids)
        msg = Message(role="user", blocks=(Text(request), Text(listing)), id="identifiers-only")
        return self.projection([msg], self.counter.count_message(msg), window, [])

    def dispose(self) -> None:
        super().dispose()
        self._ids.clear()
