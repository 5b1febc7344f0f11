"""Cache-aware clearing of old tool results under pressure.

After Anthropic's ``clear_tool_uses_20250919`` edit (trigger, keep, ``clear_at_least``): once the
context passes ``cache_clear_trigger`` of the window, clear the oldest tool results, newest
``cache_clear_keep_recent`` kept, down to ``cache_clear_target`` of the window, in ONE batch; a
batch that would free less than ``cache_clear_at_least`` tokens is not made, since every clearing
invalidates the prompt cache from the first cleared result on. With ``reach_target`` (ours) a batch
that cannot bring the context down to the target is not made either: the context is then filled
by what clearing leaves (placeholders, calls, text), and compaction frees more for its one cache
miss. Decisions are frozen per tool call id. Cost: $0 (one cache miss, bought with many tokens).

Settings: ``CacheClear`` and ``ClearedResults`` (``ctxengine.policy.layer_settings``).
"""

from __future__ import annotations

from ctxengine.layers.base import LayerContext, LayerEvent, Replacements
from ctxengine.layers.clearing import clear_batch
from ctxengine.policy.layer_settings import CacheClear

LAYER = "cache_clear"


def cache_clear(ctx: LayerContext) -> Replacements | None:
    """Clear a batch of old tool results when the context is over the trigger."""
    s = CacheClear.of(ctx.policy)
    if not s.enabled:
        return None
    trigger = int(ctx.window * s.trigger)
    if ctx.predicted <= trigger:
        return None
    want = ctx.predicted - int(ctx.window * s.target)
    out, freed = clear_batch(
        ctx, s.keep_recent, s.min_result_tokens, want, "pressure", s.at_least, all_or_none=s.reach_target
    )
    if not out:
        return None
    return Replacements(
        out,
        LayerEvent(
            layer=LAYER,
            reason=f"context {ctx.predicted:,} > {trigger:,} tokens",
            tokens_before=ctx.predicted,
            tokens_after=ctx.predicted - freed,
            details={"cleared": len(out), "wanted": want},
        ),
    )
