"""Shared mechanics of the two clearing layers: pick old tool results, newest kept, and replace
them by placeholders. Each layer decides *when*; this module decides *what*. A policy that pins
the latest failure (``Restore.error_tokens``) never clears it."""

from __future__ import annotations

from collections.abc import Iterator

from ctxengine.layers.base import LayerContext, cleared_result, result_key, result_text
from ctxengine.messages.model import ToolResult
from ctxengine.messages.tool_failures import failed
from ctxengine.policy.compaction_settings import Restore

AT_LEAST_MARGIN = 1.05  # the minimum is checked with a margin: per-message overhead is not in the estimate


def clearable(ctx: LayerContext, keep_recent: int, min_tokens: int) -> Iterator[tuple[str, ToolResult, int]]:
    """Tool results of the view that may be cleared, oldest first: (key, result, estimated tokens).

    The newest ``keep_recent`` results are never yielded, nor results already replaced, nor
    results below ``min_tokens`` (not worth a cache miss). A result's tokens are estimated as its
    message's share, split evenly between the message's results.
    """
    positions: list[tuple[int, ToolResult]] = [
        (i, r) for i, m in enumerate(ctx.view) if m.role == "user" for r in m.tool_results
    ]
    cutoff = len(positions) - keep_recent
    pinned = _latest_failure(ctx, positions[:cutoff])
    for n, (i, r) in enumerate(positions):
        if n >= cutoff:
            break
        msg = ctx.view[i]
        key = result_key(msg.id, r.call_id)
        if key in ctx.frozen or r.call_id == pinned:
            continue
        share = ctx.tokens[i] // max(1, len(msg.tool_results))
        if share < min_tokens:
            continue
        yield key, r, share


def _latest_failure(ctx: LayerContext, positions: list[tuple[int, ToolResult]]) -> str:
    """The call id of the newest failed result among ``positions`` when the policy pins the latest
    failure (``Restore.error_tokens``: it is what the agent is working on, never cleared); ""."""
    if Restore.of(ctx.policy).error_tokens <= 0:
        return ""
    return next((r.call_id for _, r in reversed(positions) if failed(r, result_text(r))), "")


def clear_batch(
    ctx: LayerContext,
    keep_recent: int,
    min_tokens: int,
    want: int | None,
    why: str,
    at_least: int = 0,
    *,
    all_or_none: bool = False,
) -> tuple[dict[str, ToolResult], int]:
    """Placeholders for old results, oldest first, until ``want`` tokens are freed (all when
    ``want`` is None). Returns the replacements and the net tokens freed (placeholders counted);
    nothing when the net gain is below ``at_least``, or (``all_or_none``) when the clearable
    results cannot free ``want``. Results are chosen before any placeholder is built, so a batch
    that cannot reach ``at_least`` costs almost nothing."""
    chosen: list[tuple[str, ToolResult, int]] = []
    gross = 0
    for key, r, tokens in clearable(ctx, keep_recent, min_tokens):
        if want is not None and gross >= want:
            break
        chosen.append((key, r, tokens))
        gross += tokens
    if not chosen or gross < at_least or (all_or_none and want is not None and gross < want):
        return {}, 0  # cannot free enough, whatever the placeholders take
    out: dict[str, ToolResult] = {}
    net = 0
    for key, r, tokens in chosen:
        placeholder = cleared_result(r, ctx.policy, why)
        out[key] = placeholder
        net += tokens - round(ctx.count_text(result_text(placeholder)) * ctx.scale)
    if net <= 0 or net < at_least * AT_LEAST_MARGIN:  # a batch that frees too little is not made
        return {}, 0
    if all_or_none and want is not None and net < want:
        return {}, 0
    return out, net
