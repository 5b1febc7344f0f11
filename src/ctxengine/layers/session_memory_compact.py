"""Session-memory compaction (Claude Code's SM-compact): the session notes are the summary.

$0 at compaction time: the notes were kept up to date in the background (``ctxengine.summary.notes``);
a pre-compaction flush gives them a last update first (the engine does it). Keeps the most
recent ``sm_keep_min_tokens`` (10,000) tokens and at least ``keep_recent_min_messages`` (5) text
messages, at most ``sm_keep_max_tokens`` (40,000) where a safe cut allows; the cut never splits a
tool call from its result. Runs before summary compaction in the cascade; when there are no notes
yet, or the cut would free too little, it passes and summary compaction takes over.

Settings: ``SessionMemory`` (``ctxengine.policy.compaction_settings``).
"""

from __future__ import annotations

from collections.abc import Callable

from ctxengine.layers.base import Cut, LayerContext, LayerEvent
from ctxengine.layers.summary_compact import choose_cut, within_room
from ctxengine.messages.model import Message, Text
from ctxengine.policy.compaction_settings import SessionMemory

LAYER = "session_memory_compact"
INTRO = (
    "This session is being continued from a previous conversation that ran out of context. "
    "The session notes below were kept up to date during the conversation and cover everything "
    "before the messages that follow.\n\n"
)


def session_memory_cut(ctx: LayerContext, *, force: bool = False) -> tuple[int, int] | None:
    """Where a session-memory compaction cuts (pure): ``(start, cut)``, ``start`` the first view
    index that is history, ``cut`` the view index where the kept tail starts (at least
    ``sm_keep_min_tokens`` and ``keep_recent_min_messages`` text messages kept, at most
    ``sm_keep_max_tokens`` where a safe cut allows). None when session memory is off, the context
    is under the threshold (unless ``force``), no safe cut exists, or the span frees less than
    ``compact_min_gain`` of the window (unless ``force``)."""
    p = ctx.policy
    s = SessionMemory.of(p)
    threshold = p.compact_threshold(ctx.window, ctx.max_output)
    if not s.enabled or (not force and ctx.predicted <= threshold):
        return None
    start = 0
    while start < len(ctx.view) and ctx.src[start] < 0:
        start += 1
    cut = choose_cut(ctx, start, keep_tokens=s.keep_min_tokens, max_tokens=s.keep_max_tokens)
    cut = within_room(ctx, start, cut, threshold)
    if cut is None:
        return None
    if sum(ctx.tokens[start:cut]) < p.compact_min_gain * ctx.window and not force:
        return None
    return start, cut


def session_memory_compact(
    ctx: LayerContext, notes: str, count: Callable[[str], int], *, force: bool = False, reason: str = ""
) -> Cut | None:
    """Compact with ``notes`` as the summary when over the threshold (or ``force``)."""
    p = ctx.policy
    threshold = p.compact_threshold(ctx.window, ctx.max_output)
    if not notes.strip():
        return None
    found = session_memory_cut(ctx, force=force)
    if found is None:
        return None
    start, cut = found
    removed = sum(ctx.tokens[:cut])
    text = INTRO + notes
    summary = Message(
        role="user", blocks=(Text(text),), id=f"session-notes-{cut}", timestamp=ctx.now, origin="summary"
    )
    event = LayerEvent(
        layer=LAYER,
        reason=reason or f"context {ctx.predicted:,} > threshold {threshold:,} tokens",
        tokens_before=ctx.predicted,
        tokens_after=ctx.predicted - removed + count(text),
        details={
            "messages_summarized": cut - start,
            "summary_tokens": count(text),
            "kept_messages": len(ctx.view) - cut,
        },
    )
    return Cut(keep_from=cut, prefix=[summary], event=event, summarized=list(ctx.view[start:cut]))
