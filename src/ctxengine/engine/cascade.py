"""The cascade ``ContextEngine.assemble`` runs before every call, cheapest first, each layer
only if still needed: context warning -> idle clear -> cache-TTL pruning -> cache-aware clear ->
eviction (history limit, pressure) -> summary compaction -> overflow guard.

Each step of ``EngineCascade`` runs one layer over the ``LayerContext`` and commits its decision
(``EngineCommits``); it returns the event of what changed, or None when nothing did. A step that
raises is caught by ``assemble`` (the session is then unchanged).
"""

from __future__ import annotations

import logging

from ctxengine.compaction import CompactionFailed
from ctxengine.engine.commit import EngineCommits
from ctxengine.layers.base import LayerContext, LayerEvent
from ctxengine.layers.cache_clear import cache_clear
from ctxengine.layers.cache_ttl_prune import cache_ttl_prune
from ctxengine.layers.call_fit import fit_calls
from ctxengine.layers.history_limit import evict_under_pressure, history_limit
from ctxengine.layers.idle_clear import idle_clear
from ctxengine.layers.overflow_guard import fit_request, fit_results, guard_limit, overflow_guard, unfit_event
from ctxengine.policy.layer_settings import EvictionSettings
from ctxengine.policy.registry import Policy

log = logging.getLogger("ctxengine.engine.core")  # the engine's logger, as before the split


class EngineCascade(EngineCommits):
    """The steps of the ``assemble`` cascade (see the module docstring)."""

    def _warn(self, ctx: LayerContext) -> LayerEvent | None:
        """Letta's memory warning (``warn_at_share``): an event when the context first passes
        that share of the window; nothing sent changes."""
        share = ctx.policy.warn_at_share
        if share <= 0:
            return None
        line = int(ctx.window * share)
        if ctx.predicted <= line:
            self._warned = False
            return None
        if self._warned:
            return None
        self._warned = True
        self._pending_events.append(
            LayerEvent(
                layer="context_warning",
                reason=f"context {ctx.predicted:,} > {share:.0%} of the window ({line:,} tokens)",
                tokens_before=ctx.predicted,
                tokens_after=ctx.predicted,
            )
        )
        return None  # nothing changed: the cascade's view stays as it is

    def _ttl_prune(self, ctx: LayerContext) -> LayerEvent | None:
        d = cache_ttl_prune(ctx)
        return self._commit_replacements(d) if d else None

    def _idle(self, ctx: LayerContext) -> LayerEvent | None:
        d = idle_clear(ctx)
        return self._commit_replacements(d) if d else None

    def _cache_clear(self, ctx: LayerContext) -> LayerEvent | None:
        d = cache_clear(ctx)
        return self._commit_replacements(d) if d else None

    def _evict(self, ctx: LayerContext) -> LayerEvent | None:
        """The user-turn limit of this session's key when it has one, else pressure eviction
        (``layers.history_limit``; both off unless the policy sets them): evicted messages leave
        the projection for good."""
        limit = self._turn_limit(ctx.policy)
        d = history_limit(ctx, limit) if limit else evict_under_pressure(ctx)
        if d is None:
            return None
        before = self._predict()
        removed = [self.history[ctx.src[i]] for i in d.indices]
        entry = {"layer": d.event.layer, "evicted": [m.id for m in removed]}
        self.store.append(self.session_id, "event", entry)
        self.evicted.update(ctx.src[i] for i in d.indices)
        self._rebuild()
        for listener in self.compaction_listeners:
            listener()
        d.event.tokens_before, d.event.tokens_after = before, self._predict()
        self._add_quality(d.event, removed)
        return d.event

    def _turn_limit(self, policy: Policy) -> int:
        """This session's user-turn limit under ``policy`` (0: none), parsed from the session key
        once per policy object rather than at every call."""
        known = self._turn_limits
        if known is None or known[0] is not policy:
            limit = EvictionSettings.of(policy).limits.limit_for(self.session_id)
            known = self._turn_limits = (policy, limit)
        return known[1]

    def _compaction(self, ctx: LayerContext) -> LayerEvent | None:
        if self.policy.compaction != "summary":
            return None
        flush = self.compactor.maybe_memory_flush(ctx, self.history)
        self._take_notes_events()  # a background update the flush waited for comes first
        if flush is not None:
            self._pending_events.append(flush)
            if "error" not in flush.details:
                self.store.append(
                    self.session_id, "notes", {"memory_flush": True, "notes": self.compactor.notes_text()}
                )
        try:
            result = self.compactor.compact(ctx, self.history, system=self.system)
        except CompactionFailed as exc:
            log.warning("compaction failed: %s", exc)
            return exc.event  # the session is unchanged; the overflow guard still runs
        finally:
            self._take_notes_events()  # a background update the compaction waited for
        if result is None:
            return None
        self._pending_events.extend(result.events)
        event = self._commit_cut(result.cut)
        self.compactor.commit(result)
        return event

    def _overflow(self, ctx: LayerContext) -> LayerEvent | None:
        """The guard: drop the oldest rounds; if the request still does not fit, cut the largest
        tool results to fit (originals in the artifact store), then the largest tool-call inputs
        (``layers.call_fit``), then a latest request too large
        for the window to its head and tail (``overflow_guard.fit_request``); if even that is not
        enough, an event says why (``overflow_guard.unfit_event``)."""
        if not ctx.policy.overflow_guard or ctx.predicted <= guard_limit(ctx):
            return None  # the request fits: nothing to do (the case at almost every call)
        d = overflow_guard(ctx)
        event = self._commit_cut(d) if d else None
        if event is not None:
            ctx = self._context(ctx.window, ctx.now)
        # the largest tool results, then the largest tool-call inputs, then the request itself
        for fit in (fit_results, fit_calls, fit_request):
            fitted = fit(ctx)
            if fitted is not None:
                if event is not None:
                    self._pending_events.append(event)
                event = self._commit_replacements(fitted)
                ctx = self._context(ctx.window, ctx.now)
        unfit = unfit_event(ctx, self.ledger.state.fixed_prefix)
        if unfit is not None:
            if event is not None:
                self._pending_events.append(event)
            event = unfit
        return event
