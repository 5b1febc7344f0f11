"""The cascade ``ContextEngine.assemble`` runs before every call, cheapest first, each layer only if
still needed: context warning -> idle clear -> cache-TTL pruning -> cache-aware clear -> eviction
(history limit, pressure) -> summary compaction -> overflow guard. The tool-result budget runs on
ingest, not here.

Each entry names a step class, ``"module:Class"``, built by the engine from its parts
(``ctxengine.engine.cascade.build_cascade``) and run through one protocol
(``ctxengine.engine.steps.base.CascadeLayer``). Whether a step does anything is the policy's
settings (``idle_clear``, ``ttl_prune``, ...); adding a layer is one module under
``ctxengine/engine/steps`` and one line here. The steps are named, not imported, so the policy
stays data below the engine.
"""

from __future__ import annotations

CASCADE: tuple[str, ...] = (
    "ctxengine.engine.steps.warning:ContextWarning",
    "ctxengine.engine.steps.clearing:IdleClearStep",
    "ctxengine.engine.steps.clearing:TtlPruneStep",
    "ctxengine.engine.steps.clearing:CacheClearStep",
    "ctxengine.engine.steps.eviction:Eviction",
    "ctxengine.engine.steps.compaction:SummaryCompaction",
    "ctxengine.engine.steps.overflow:OverflowGuard",
)
