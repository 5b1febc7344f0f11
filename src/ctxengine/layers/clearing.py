"""Shared mechanics of the two clearing layers: pick old tool results, newest kept, and replace
them by placeholders. Each layer decides *when*; this module decides *what*."""

from __future__ import annotations

from collections.abc import Iterator

from ctxengine.layers.base import LayerContext, cleared_result
from ctxengine.messages import ToolResult


def clearable(ctx: LayerContext, keep_recent: int, min_tokens: int) -> Iterator[tuple[ToolResult, int]]:
    """Tool results of the view that may be cleared, oldest first, with their estimated tokens.

    The newest ``keep_recent`` results are never yielded, nor results already replaced, nor
    results below ``min_tokens`` (not worth a cache miss). A result's tokens are estimated as its
    message's share, split evenly between the message's results.
    """
    positions: list[tuple[int, ToolResult]] = [
        (i, r) for i, m in enumerate(ctx.view) if m.role == "user" for r in m.tool_results
    ]
    cutoff = len(positions) - keep_recent
    for n, (i, r) in enumerate(positions):
        if n >= cutoff:
            break
        if r.call_id in ctx.frozen:
            continue
        msg = ctx.view[i]
        share = ctx.tokens[i] // max(1, len(msg.tool_results))
        if share < min_tokens:
            continue
        yield r, share


def clear_batch(
    ctx: LayerContext, keep_recent: int, min_tokens: int, want: int | None, why: str
) -> tuple[dict[str, ToolResult], int]:
    """Placeholders for old results, oldest first, until ``want`` tokens are freed (all when
    ``want`` is None). Returns the replacements and the estimated tokens freed."""
    out: dict[str, ToolResult] = {}
    freed = 0
    for r, tokens in clearable(ctx, keep_recent, min_tokens):
        if want is not None and freed >= want:
            break
        out[r.call_id] = cleared_result(r, ctx.policy, why)
        freed += tokens
    return out, freed
