"""The clearing steps: idle clear (Claude Code's time-based microcompact), cache-TTL pruning
(OpenClaw's, off unless the policy asks) and the cache-aware clear (Anthropic's
``clear_tool_uses``); each decides with its layer in ``ctxengine.layers`` and commits as is."""

from __future__ import annotations

from ctxengine.engine.steps.base import ReplacementStep
from ctxengine.layers.base import LayerContext, Replacements
from ctxengine.layers.cache_clear import cache_clear
from ctxengine.layers.cache_ttl_prune import cache_ttl_prune
from ctxengine.layers.idle_clear import idle_clear


class IdleClearStep(ReplacementStep):
    """``layers.idle_clear``: old tool results cleared after a long pause."""

    name = "idle_clear"

    def decide(self, context: LayerContext) -> Replacements | None:
        return idle_clear(context)


class TtlPruneStep(ReplacementStep):
    """``layers.cache_ttl_prune``: tool results pruned once the prompt cache expired."""

    name = "ttl_prune"

    def decide(self, context: LayerContext) -> Replacements | None:
        return cache_ttl_prune(context)


class CacheClearStep(ReplacementStep):
    """``layers.cache_clear``: a batch of old tool results cleared over the trigger."""

    name = "cache_clear"

    def decide(self, context: LayerContext) -> Replacements | None:
        return cache_clear(context)
