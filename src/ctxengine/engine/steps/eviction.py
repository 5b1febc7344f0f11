"""Eviction: the user-turn limit of this session's key when it has one, else pressure eviction
(``layers.history_limit``; both off unless the policy sets them): evicted messages leave the
projection for good."""

from __future__ import annotations

from ctxengine.engine.state import content_left
from ctxengine.engine.steps.base import EngineParts
from ctxengine.layers.base import LayerContext, LayerEvent
from ctxengine.layers.history_limit import evict_under_pressure, history_limit
from ctxengine.policy.layer_settings import EvictionSettings
from ctxengine.policy.registry import Policy


class Eviction:
    """Evicts messages without a summary; the store gets an ``event`` entry naming them."""

    name = "eviction"

    def __init__(self, parts: EngineParts) -> None:
        self.state, self.view, self.commits = parts.state, parts.view, parts.commits
        self._turn_limits: tuple[Policy, int] | None = None  # (policy, this session's turn limit)

    def apply(self, context: LayerContext) -> LayerEvent | None:
        """Evict what the limit or the pressure asks; the event carries its quality figures."""
        state = self.state
        limit = self._turn_limit(context.policy)
        d = history_limit(context, limit) if limit else evict_under_pressure(context)
        if d is None:
            return None
        before = self.view.predict()
        removed = [state.history[context.src[i]] for i in d.indices]
        entry = {"layer": d.event.layer, "evicted": [m.id for m in removed]}
        state.store.append(state.session_id, "event", entry)
        state.evicted.update(context.src[i] for i in d.indices)
        self.view.rebuild()
        content_left(state)
        d.event.tokens_before, d.event.tokens_after = before, self.view.predict()
        self.commits.add_quality(d.event, removed)
        return d.event

    def _turn_limit(self, policy: Policy) -> int:
        """This session's user-turn limit under ``policy`` (0: none), parsed from the session key
        once per policy object rather than at every call."""
        known = self._turn_limits
        if known is None or known[0] is not policy:
            limit = EvictionSettings.of(policy).limits.limit_for(self.state.session_id)
            known = self._turn_limits = (policy, limit)
        return known[1]
