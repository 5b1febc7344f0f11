"""Idle clear (Claude Code's time-based microcompact).

After an idle gap longer than the prompt-cache TTL the cache is cold anyway, so clearing old tool
results costs no extra cache miss: clear all but the newest ``idle_keep_recent`` (5) tool results
to a one-line placeholder. Claude Code: gap 60 min, keep 5, results of Read/Bash/Grep/Glob/Web*/
Edit/Write; we clear any tool result. Cost: $0.

Settings: ``IdleClear`` (``ctxengine.policy.layer_settings``).
"""

from __future__ import annotations

from ctxengine.layers.base import LayerContext, LayerEvent, Replacements
from ctxengine.layers.clearing import clear_batch
from ctxengine.policy.layer_settings import CacheClear, IdleClear

LAYER = "idle_clear"


def idle_clear(ctx: LayerContext) -> Replacements | None:
    """Clear old tool results when the gap since the last call exceeds ``policy.idle_gap_s``."""
    s = IdleClear.of(ctx.policy)
    if not s.enabled or ctx.now is None or ctx.last_call is None:
        return None
    gap = ctx.now - ctx.last_call
    if gap <= s.gap_s:
        return None
    min_tokens = CacheClear.of(ctx.policy).min_result_tokens
    out, freed = clear_batch(ctx, s.keep_recent, min_tokens, None, "idle")
    if not out:
        return None
    return Replacements(
        out,
        LayerEvent(
            layer=LAYER,
            reason=f"idle {gap / 60:.0f} min > {s.gap_s / 60:.0f} min: cache is cold",
            tokens_before=ctx.predicted,
            tokens_after=ctx.predicted - freed,
            details={"cleared": len(out), "gap_s": round(gap)},
        ),
    )
