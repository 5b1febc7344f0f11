"""Summary compaction: replace the older part of the projection by a structured summary.

Trigger: Claude Code's auto-compact threshold, window - min(max_output, 20,000) - 13,000 (167K of
200K). The newest ``keep_recent_tokens`` (and at least ``keep_recent_min_messages`` messages with
text) stay verbatim; the cut moves back to a safe point so no tool call loses its result. The
summary is the deterministic structured summary (``ctxengine.summary.structured``, $0), bounded by
``summary_max_tokens``, and goes in as a user message saying the session continues from a
compacted one. A cut that would summarize nothing is not made (no compaction loops, cf.
claude-code #2283).

Settings: ``CompactionSettings`` and ``SummarySettings`` (``ctxengine.policy.compaction_settings``).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator

import msgspec

from ctxengine.layers.base import Cut, LayerContext, LayerEvent
from ctxengine.layers.overflow_guard import guard_limit
from ctxengine.layers.pairing import safe_cut_points
from ctxengine.layers.request_fit import request_room, too_large_request
from ctxengine.messages.model import Message, Text
from ctxengine.summary import structured as summarize
from ctxengine.summary.audit import latest_request_index

LAYER = "summary_compact"


def choose_cut(
    ctx: LayerContext, start: int, *, keep_tokens: int | None = None, max_tokens: int | None = None
) -> int | None:
    """View index where the kept tail starts: the newest safe cut point that keeps at least
    ``keep_tokens`` (default ``keep_recent_tokens``) and ``keep_recent_min_messages`` text
    messages, and is after ``start``. With ``max_tokens``, a safe cut keeping at most that many is
    preferred over keeping more. None when no such point exists."""
    p = ctx.policy
    want_tokens = p.keep_recent_tokens if keep_tokens is None else keep_tokens
    kept_tokens = 0
    text_msgs = 0
    want = len(ctx.view)
    by_tokens: int | None = None  # where the token floor alone is met
    for i in range(len(ctx.view) - 1, start - 1, -1):
        kept_tokens += ctx.tokens[i]
        if ctx.view[i].text().strip():
            text_msgs += 1
        if kept_tokens >= want_tokens and by_tokens is None:
            by_tokens = i
        if kept_tokens >= want_tokens and text_msgs >= p.keep_recent_min_messages:
            want = i
            break
    else:
        # too few text messages anywhere (tool-only turns): the token floor decides, else nothing
        if by_tokens is None:
            return None
        want = by_tokens
    cuts = [c for c in safe_cut_points(ctx.view) if start < c <= want]
    if cuts:
        return cuts[-1]
    if max_tokens is not None:
        later = [c for c in safe_cut_points(ctx.view) if c > want and sum(ctx.tokens[c:]) >= 0]
        fitting = [c for c in later if sum(ctx.tokens[c:]) <= max_tokens]
        return fitting[0] if fitting else None
    return None


def summary_cut(ctx: LayerContext, *, force: bool = False) -> tuple[int, int] | None:
    """Where a summary compaction cuts (pure): ``(start, cut)``, ``start`` the first view index
    that is history (before it: the engine-made prefix, an earlier summary, folded into the state
    already), ``cut`` the view index where the kept tail starts (``choose_cut``). None when the
    context is under the threshold (unless ``force``), when no safe cut exists, or when the span
    frees less than ``compact_min_gain`` of the window (unless ``force``)."""
    p = ctx.policy
    threshold = p.compact_threshold(ctx.window, ctx.max_output)
    if not force and ctx.predicted <= threshold:
        return None
    start = 0
    while start < len(ctx.view) and ctx.src[start] < 0:
        start += 1  # engine-made prefix (an earlier summary) is folded into the state already
    cut = within_room(ctx, start, choose_cut(ctx, start), threshold)
    if cut is None:
        return None
    if not force:
        cut = with_gain(ctx, start, cut, p.compact_min_gain * ctx.window)
        if cut is None:
            return None  # too little to gain: compacting again right after a compaction loops
    return start, cut


def with_gain(ctx: LayerContext, start: int, cut: int, min_gain: float) -> int | None:
    """``cut`` when its span ``[start, cut)`` frees at least ``min_gain`` tokens; None when it
    does not. When it does only before the latest request it summarizes is quoted back (whole
    when it fits ``request_room``, else that room: ``compaction.summary.quote_latest_request``),
    the first later safe cut point that does once the quote is counted, None when none does:
    a span that is mostly the request, summarized and quoted back whole, grows the context."""
    if sum(ctx.tokens[start:cut]) < min_gain:
        return None
    request = latest_request_index(ctx.view)
    if request is None or not start <= request < cut:
        return cut  # nothing summarized is quoted back
    room = request_room(ctx)

    def later() -> Iterator[int]:
        yield from (c for c in safe_cut_points(ctx.view) if c > cut)
        if too_large_request(ctx):
            yield len(ctx.view)

    for c in itertools.chain((cut,), later()):
        if sum(ctx.tokens[start:c]) - min(ctx.tokens[request], room) >= min_gain:
            return c
    return None


def within_room(ctx: LayerContext, start: int, cut: int | None, threshold: int) -> int | None:
    """``cut`` moved later, when the context is over what the overflow guard allows
    (``guard_limit``) and the tail the cut keeps fills the whole room the threshold leaves for
    history (``threshold`` minus the fixed prefix and the engine-made prefix before ``start``),
    so that no compaction keeping it could bring the context under the threshold: to the first
    safe cut point whose tail fits half of that room, else the
    last safe cut point (the newest round alone). The other half is the summary's, the quoted
    request's and the growth's until the next compaction. At a small window the kept-tail floor
    and the minimum of kept messages can fill the whole room (20,000 tokens of fixed prefix in a
    32,000-token window leave 6,000 under the threshold), and a compaction that keeps them frees
    almost nothing: the context stays over the threshold and the overflow guard takes over. A
    latest request too large for the room is then summarized, and quoted head and tail
    (``compaction.summary.quote_latest_request``); the newest message itself when it is that
    request (``too_large_request``). ``cut`` None: no cut met the floor; the tail is then the
    whole history, moved the same way."""
    if ctx.predicted <= guard_limit(ctx):
        return cut  # under what the guard allows: a compaction keeping the tail can wait
    fixed = max(0, ctx.predicted - sum(ctx.tokens))
    room = max(0, threshold - fixed - sum(ctx.tokens[:start]))
    half = room // 2
    at = start if cut is None else cut
    if sum(ctx.tokens[at:]) <= room:
        return cut  # room is left under the threshold: the next compaction can free more
    later = [c for c in safe_cut_points(ctx.view) if c > at]
    if too_large_request(ctx):
        later.append(len(ctx.view))  # the newest message is a request too large: summarized too
    fitting = [c for c in later if sum(ctx.tokens[c:]) <= half]
    if fitting:
        return fitting[0]
    return later[-1] if later else cut


def summary_compact(
    ctx: LayerContext,
    state: summarize.SummaryState,
    count: Callable[[str], int],
    *,
    force: bool = False,
    reason: str = "",
) -> tuple[Cut, summarize.SummaryState] | None:
    """Compact when over the threshold (or ``force``). Returns the cut and the new summary state
    (``state`` itself is not modified), or None when nothing should or can be done."""
    p = ctx.policy
    threshold = p.compact_threshold(ctx.window, ctx.max_output)
    found = summary_cut(ctx, force=force)
    if found is None:
        return None
    start, cut = found
    removed = sum(ctx.tokens[:cut])
    span = list(ctx.view[start:cut])
    new_state = msgspec.msgpack.decode(msgspec.msgpack.encode(state), type=summarize.SummaryState)
    summarize.update(new_state, span, user_message_chars=p.summary_user_message_chars)
    text = summarize.render(
        new_state,
        max_tokens=p.summary_budget(ctx.window),
        count=count,
        identifiers_max=p.summary_identifiers_max,
    )
    summary = Message(
        role="user",
        blocks=(Text(text),),
        id=f"summary-{new_state.messages_summarized}",
        timestamp=ctx.now,
        origin="summary",
    )
    after = ctx.predicted - removed + count(text)
    event = LayerEvent(
        layer=LAYER,
        reason=reason or f"context {ctx.predicted:,} > threshold {threshold:,} tokens",
        tokens_before=ctx.predicted,
        tokens_after=after,
        details={
            "messages_summarized": len(span),
            "summary_tokens": count(text),
            "kept_messages": len(ctx.view) - cut,
        },
    )
    return Cut(keep_from=cut, prefix=[summary], event=event, summarized=span), new_state
