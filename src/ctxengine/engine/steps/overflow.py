"""The overflow guard, the last resort: drop the oldest rounds; if the request still does not fit,
cut the largest tool results to fit (originals in the artifact store), then the largest tool-call
inputs (``layers.call_fit``), then a latest request too large for the window to its head and tail
(``overflow_guard.fit_request``); if even that is not enough, an event says why
(``overflow_guard.unfit_event``)."""

from __future__ import annotations

from ctxengine.engine.steps.base import EngineParts
from ctxengine.layers.base import LayerContext, LayerEvent
from ctxengine.layers.call_fit import fit_calls
from ctxengine.layers.overflow_guard import fit_request, fit_results, guard_limit, overflow_guard, unfit_event


class OverflowGuard:
    """Makes the request fit the window, or says why it cannot (see the module docstring)."""

    name = "overflow_guard"

    def __init__(self, parts: EngineParts) -> None:
        self.state, self.view, self.commits = parts.state, parts.view, parts.commits

    def apply(self, context: LayerContext) -> LayerEvent | None:
        """The last event of what the guard did (earlier ones go to the pending events)."""
        ctx = context
        if not ctx.policy.overflow_guard or ctx.predicted <= guard_limit(ctx):
            return None  # the request fits: nothing to do (the case at almost every call)
        d = overflow_guard(ctx)
        event = self.commits.commit_cut(d) if d else None
        if event is not None:
            ctx = self.view.context(ctx.window, ctx.now)
        # the largest tool results, then the largest tool-call inputs, then the request itself
        for fit in (fit_results, fit_calls, fit_request):
            fitted = fit(ctx)
            if fitted is not None:
                if event is not None:
                    self.state.pending_events.append(event)
                event = self.commits.commit_replacements(fitted)
                ctx = self.view.context(ctx.window, ctx.now)
        unfit = unfit_event(ctx, self.state.ledger.state.fixed_prefix)
        if unfit is not None:
            if event is not None:
                self.state.pending_events.append(event)
            event = unfit
        return event
