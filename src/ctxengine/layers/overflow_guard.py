"""Overflow guard: the last resort before a call that cannot fit the window.

Drops the oldest whole API rounds (tool groups) behind a notice until the request fits in
window - ``overflow_reserve`` tokens, never orphaning a tool result and always keeping the newest
group. Content is not lost: it stays in the transcript. Cost: $0.
"""

from __future__ import annotations

from ctxengine.layers.base import Cut, LayerContext, LayerEvent
from ctxengine.layers.pairing import safe_cut_points
from ctxengine.messages import Message, Text

LAYER = "overflow_guard"


def overflow_guard(ctx: LayerContext) -> Cut | None:
    """Cut the oldest rounds when the predicted request would not fit."""
    p = ctx.policy
    if not p.overflow_guard:
        return None
    limit = ctx.window - p.overflow_reserve
    if ctx.predicted <= limit:
        return None
    start = 0
    while start < len(ctx.view) and ctx.src[start] < 0:
        start += 1
    need = ctx.predicted - limit
    prefix_tokens = sum(ctx.tokens[:start])
    cuts = [c for c in safe_cut_points(ctx.view) if c > start]
    if not cuts:
        return None
    removed = 0
    chosen = None
    running = 0
    pos = start
    for c in cuts:
        running += sum(ctx.tokens[pos:c])
        pos = c
        chosen = c
        removed = running
        if removed >= need:
            break
    if chosen is None:
        return None
    notice = Message(
        role="user",
        blocks=(
            Text(
                f"[{chosen - start} earlier messages were dropped to fit the context window; "
                "they remain in the session transcript]"
            ),
        ),
        id=f"overflow-notice-{chosen}",
        timestamp=ctx.now,
        origin="notice",
    )
    kept_prefix = list(ctx.view[:start])
    event = LayerEvent(
        layer=LAYER,
        reason=f"request {ctx.predicted:,} > {limit:,} tokens",
        tokens_before=ctx.predicted,
        tokens_after=ctx.predicted - removed,
        details={"dropped_messages": chosen - start, "prefix_tokens": prefix_tokens},
    )
    return Cut(
        keep_from=chosen, prefix=[*kept_prefix, notice], event=event, summarized=list(ctx.view[start:chosen])
    )
