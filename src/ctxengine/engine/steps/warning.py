"""The context warning (Letta's memory warning, ``warn_at_share``): an event when the context first
passes that share of the window; nothing sent changes."""

from __future__ import annotations

from ctxengine.engine.steps.base import EngineParts
from ctxengine.layers.base import LayerContext, LayerEvent


class ContextWarning:
    """Warns once per crossing: the event fires when the context first passes the line, and again
    only after it has gone back under it."""

    name = "context_warning"

    def __init__(self, parts: EngineParts) -> None:
        self.state = parts.state
        self._warned = False  # the event fired and the context is still above the line

    def apply(self, context: LayerContext) -> LayerEvent | None:
        """Report the crossing as a pending event; always None (the cascade's view stays)."""
        share = context.policy.warn_at_share
        if share <= 0:
            return None
        line = int(context.window * share)
        if context.predicted <= line:
            self._warned = False
            return None
        if self._warned:
            return None
        self._warned = True
        self.state.pending_events.append(
            LayerEvent(
                layer="context_warning",
                reason=f"context {context.predicted:,} > {share:.0%} of the window ({line:,} tokens)",
                tokens_before=context.predicted,
                tokens_after=context.predicted,
            )
        )
        return None  # nothing changed: the cascade's view stays as it is
