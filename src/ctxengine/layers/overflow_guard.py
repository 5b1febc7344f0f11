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
NOTICE = (
    "[{n} earlier messages were dropped to fit the context window; they remain in the session transcript]"
)


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
    # earlier notices are replaced by one new notice; summaries and restores are kept
    kept_prefix = [m for m in ctx.view[:start] if m.origin != "notice"]
    dropped_notices = sum(
        t for m, t in zip(ctx.view[:start], ctx.tokens[:start], strict=True) if m.origin == "notice"
    )
    notice_tokens = ctx.count_text(NOTICE.format(n=10**6))
    need = ctx.predicted - limit + notice_tokens - dropped_notices
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
    earlier = next((m for m in ctx.view[:start] if m.origin == "notice"), None)
    total_dropped = chosen - start + (int(earlier.meta.get("dropped", 0)) if earlier else 0)
    notice = Message(
        role="user",
        blocks=(Text(NOTICE.format(n=total_dropped)),),
        id="overflow-notice",
        timestamp=ctx.now,
        origin="notice",
        meta={"dropped": total_dropped},
    )
    event = LayerEvent(
        layer=LAYER,
        reason=f"request {ctx.predicted:,} > {limit:,} tokens",
        tokens_before=ctx.predicted,
        tokens_after=ctx.predicted - removed - dropped_notices + notice_tokens,
        details={"dropped_messages": chosen - start, "prefix_tokens": prefix_tokens},
    )
    return Cut(
        keep_from=chosen, prefix=[*kept_prefix, notice], event=event, summarized=list(ctx.view[start:chosen])
    )
