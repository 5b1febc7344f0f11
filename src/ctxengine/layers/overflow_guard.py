"""Overflow guard: the last resort before a call that cannot fit the window.

Drops the oldest whole API rounds (tool groups) behind a notice until the request fits in
window - ``overflow_reserve`` tokens, never orphaning a tool result and always keeping the newest
group. Content is not lost: it stays in the transcript. Cost: $0.

Three rules make it a guard rather than a loop (issue 9, item 5):
- it drops down to the compaction threshold (at least ``compact_min_gain`` of the window below
  its limit), not just under the limit, so a context near the window does not set it off again
  on every call (hysteresis);
- the latest user request is never dropped: when it lies in the dropped span it stays in the
  context, right after the notice (the same message, so the prompt cache keeps serving it);
- when dropping rounds is not enough (a single tool result larger than the window: the newest
  group is always kept), ``fit_results`` cuts the largest tool results to head + tail, their
  original content kept retrievable in the artifact store (as the tool-result budget does); what
  still does not fit (a user message or a fixed prefix over the window) is said in an event
  (``unfit``), never silently sent.

Settings: ``OverflowGuard`` (``ctxengine.policy.layer_settings``).
"""

from __future__ import annotations

import msgspec

from ctxengine.layers.base import (
    Cut,
    LayerContext,
    LayerEvent,
    Replacements,
    artifact_id,
    request_key,
    result_key,
)
from ctxengine.layers.pairing import safe_cut_points
from ctxengine.layers.request_fit import partial_request, request_room, retrieval_handle
from ctxengine.messages.model import Message, Text, ToolResult
from ctxengine.policy.layer_settings import OverflowGuard
from ctxengine.summary.audit import latest_request_index, user_request

LAYER = "overflow_guard"
NOTICE = (
    "[{n} earlier messages were dropped to fit the context window; they remain in the session transcript]"
)
FIT_MIN_CHARS = 400  # a tool result cut to fit keeps at least this much (head + tail)
FIT_TAIL_SHARE = 0.3  # ... of which this share from its end (errors and totals come last)
FIT_MARKER_TOKENS = 64  # what the "[... chars cut ...]" line costs, kept free when cutting


def request_only(msg: Message) -> Message:
    """``msg`` without its tool results: what the guard keeps of a request whose message also
    answers tool calls it drops (a result without its call breaks the request)."""
    if not msg.tool_results:
        return msg
    return msgspec.structs.replace(msg, blocks=tuple(b for b in msg.blocks if not isinstance(b, ToolResult)))


def guard_limit(ctx: LayerContext) -> int:
    """Tokens the whole request may take: window - ``overflow_reserve``."""
    return ctx.window - OverflowGuard.of(ctx.policy).reserve


def guard_excess(ctx: LayerContext) -> int:
    """Tokens by which the predicted request exceeds the guard's limit; 0 when it fits or the
    guard is off (what every fitting step of the guard checks first)."""
    if not OverflowGuard.of(ctx.policy).enabled:
        return 0
    return max(0, ctx.predicted - guard_limit(ctx))


def overflow_guard(ctx: LayerContext) -> Cut | None:
    """Cut the oldest rounds when the predicted request would not fit (see the module docstring).
    Drops down to the compaction threshold (at least ``compact_min_gain`` of the window below
    the limit) where the history allows;
    ``details["fits"]`` says whether the request fits after the cut."""
    p = ctx.policy
    if not OverflowGuard.of(p).enabled:
        return None
    limit = guard_limit(ctx)
    if ctx.predicted <= limit:
        return None
    start = 0
    while start < len(ctx.view) and ctx.src[start] < 0:
        start += 1
    # earlier notices are replaced by one new notice; summaries, restores and a kept request stay
    kept_prefix = [m for m in ctx.view[:start] if m.origin != "notice"]
    dropped_notices = sum(
        t for m, t in zip(ctx.view[:start], ctx.tokens[:start], strict=True) if m.origin == "notice"
    )
    notice_tokens = ctx.count_text(NOTICE.format(n=10**6))
    must = ctx.predicted - limit + notice_tokens - dropped_notices
    # down to the compaction threshold when it is lower, and at least the minimum gain below
    # the limit: a context near the window does not set the guard off on every call
    threshold = p.compact_threshold(ctx.window, ctx.max_output)
    target = min(limit - int(p.compact_min_gain * ctx.window), threshold)
    need = max(must, ctx.predicted - target + notice_tokens - dropped_notices)
    prefix_tokens = sum(ctx.tokens[:start])
    cuts = [c for c in safe_cut_points(ctx.view) if c > start]
    if not cuts:
        return None
    view = list(ctx.view)
    request = latest_request_index(view)
    removed = 0
    chosen = None
    pos = start
    for c in cuts:
        removed += sum(t for i, t in enumerate(ctx.tokens[pos:c], pos) if i != request)
        pos = c
        chosen = c
        if removed >= need:
            break
    if chosen is None:
        return None
    keep_request = request is not None and start <= request < chosen
    if chosen - start - int(keep_request) == 0 or removed <= notice_tokens - dropped_notices:
        return None  # nothing but the latest request to drop: a new notice alone frees nothing
    earlier = next((m for m in ctx.view[:start] if m.origin == "notice"), None)
    before = int(earlier.meta.get("dropped", 0)) if earlier else 0
    total_dropped = chosen - start - int(keep_request) + before
    notice = Message(
        role="user",
        blocks=(Text(NOTICE.format(n=total_dropped)),),
        id="overflow-notice",
        timestamp=ctx.now,
        origin="notice",
        meta={"dropped": total_dropped},
    )
    after = ctx.predicted - removed - dropped_notices + notice_tokens
    event = LayerEvent(
        layer=LAYER,
        reason=f"request {ctx.predicted:,} > {limit:,} tokens",
        tokens_before=ctx.predicted,
        tokens_after=after,
        details={
            "dropped_messages": chosen - start - int(keep_request),
            "prefix_tokens": prefix_tokens,
            "latest_request_kept": keep_request,
            "fits": removed >= must,
        },
    )
    kept = [request_only(view[request])] if keep_request and request is not None else []
    summarized = [m for i, m in enumerate(view[start:chosen], start) if i != request]
    return Cut(keep_from=chosen, prefix=[*kept_prefix, notice, *kept], event=event, summarized=summarized)


def fit_results(ctx: LayerContext) -> Replacements | None:
    """When the request is still over the guard's limit once only the newest group is left (a
    tool result larger than the window): cut the largest tool results in the view to head +
    tail (``FIT_TAIL_SHARE`` from the end, at least ``FIT_MIN_CHARS``) until it fits, each
    replaced result naming its artifact id (the engine stores the original). None when the
    request fits or there is no tool result to cut."""
    over = guard_excess(ctx)
    if over <= 0:
        return None
    limit = guard_limit(ctx)
    found: list[tuple[int, str, ToolResult]] = []
    for k, m in enumerate(ctx.view):
        if ctx.src[k] < 0:
            continue  # an engine-made message (a restore): the decisions apply to history only
        for r in m.tool_results:
            text = "\n".join(x.text for x in r.content if isinstance(x, Text))
            if len(text) > FIT_MIN_CHARS:
                found.append((round(ctx.count_text(text) * ctx.scale), m.id, r))
    found.sort(key=lambda f: -f[0])
    out: dict[str, ToolResult] = {}
    for tokens, msg_id, r in found:
        if over <= 0:
            break
        text = "\n".join(x.text for x in r.content if isinstance(x, Text))
        new = head_and_tail(
            text,
            tokens,
            over,
            f"chars cut to fit the context window; the full result is artifact {artifact_id(r.call_id)}",
        )
        new_tokens = round(ctx.count_text(new) * ctx.scale)
        if new_tokens >= tokens:
            continue  # a short result: its head, tail and the line are no shorter
        out[result_key(msg_id, r.call_id)] = ToolResult(r.call_id, (Text(new),), r.is_error, r.name)
        over -= tokens - new_tokens
    if not out:
        return None
    event = LayerEvent(
        layer=LAYER,
        reason=f"request {ctx.predicted:,} > {limit:,} tokens with only the newest round left: "
        f"{len(out)} tool result(s) cut to fit",
        tokens_before=ctx.predicted,
        tokens_after=ctx.predicted,  # the engine fills in the measured figure
        details={"fitted_results": sorted(k.split("\x00", 1)[1] for k in out)},
    )
    return Replacements(out, event)


def head_and_tail(text: str, tokens: int, over: int, what: str, floor: int = FIT_MIN_CHARS) -> str:
    """``text`` (``tokens`` long) cut to its head and tail so that it is ``over`` tokens shorter
    (and the marker's ``FIT_MARKER_TOKENS``), at least ``floor`` chars kept, ``FIT_TAIL_SHARE``
    of it from the end, with a line between them: ``[... N of M <what> (retrieve it in pages) ...]``."""
    keep_tokens = max(0, tokens - over - FIT_MARKER_TOKENS)
    keep = min(len(text), max(floor, int(len(text) * keep_tokens / max(1, tokens))))
    tail = int(keep * FIT_TAIL_SHARE)
    head = keep - tail
    line = f"[... {len(text) - keep:,} of {len(text):,} {what} (retrieve it in pages) ...]"
    return f"{text[:head]}\n{line}\n{text[len(text) - tail :] if tail else ''}"


def fit_request(ctx: LayerContext) -> Replacements | None:
    """When the request is still over the guard's limit: the latest user request, when it is
    larger than ``request_room`` (half of what the window leaves after the fixed prefix and the
    output reserve), keeps its head and tail within that room, in place, the middle retrievable
    as ``'message:<id>'`` (``request_fit.partial_request``); then, while still over, the largest
    earlier user messages of the view (pastes the guard cannot drop: they are in the newest
    round) are cut the same way to what the limit leaves. Tool results beside them are left as
    they are. A request typed beside tool results, or followed at once by a tool call, cannot be
    summarized by a compaction without parting a call from its result; cut in place it is sent at
    the call it arrives, as a compaction would quote it. None when nothing is cut."""
    limit = guard_limit(ctx)
    if not OverflowGuard.of(ctx.policy).enabled or ctx.predicted <= limit:
        return None
    at = latest_request_index(ctx.view)
    if at is not None and ctx.src[at] < 0:
        at = None  # the guard's copy of it in the prefix: cut in place it would not change
    over = ctx.predicted - limit
    texts: dict[str, Text] = {}
    for k in _user_texts(ctx, at):
        msg = ctx.view[k]
        text = user_request(msg)
        size = round(ctx.count_text(text) * ctx.scale)
        room = request_room(ctx) if k == at else max(0, size - over - FIT_MARKER_TOKENS)
        if k != at and over <= 0:
            break
        if size <= room or retrieval_handle(msg.id) in msg.text():
            continue
        cut = partial_request(text, msg.id, room, size, "request" if k == at else "message")
        texts[request_key(msg.id)] = Text(cut)
        over -= size - round(ctx.count_text(cut) * ctx.scale)
    if not texts:
        return None
    cut_ids = [k.split("\x00", 1)[0] for k in texts]
    event = LayerEvent(
        layer=LAYER,
        reason=f"request {ctx.predicted:,} > {limit:,} tokens: {len(texts)} user message(s) cut to "
        "their head and tail in place",
        tokens_before=ctx.predicted,
        tokens_after=ctx.predicted,  # the engine fills in the measured figure
        details={"request_cut": cut_ids}
        | ({"latest_request_kept": "partial"} if at is not None and ctx.view[at].id in cut_ids else {}),
    )
    return Replacements({}, event, texts)


def _user_texts(ctx: LayerContext, latest: int | None) -> list[int]:
    """View indices of the user messages with user-typed text: the latest request first, then
    the others, largest first (``FIT_MIN_CHARS`` at least)."""
    rest = [
        k
        for k, m in enumerate(ctx.view)
        if k != latest and ctx.src[k] >= 0 and len(user_request(m)) > FIT_MIN_CHARS
    ]
    rest.sort(key=lambda k: -ctx.tokens[k])
    return ([latest] if latest is not None else []) + rest


def unfit_event(ctx: LayerContext, prefix_tokens: int) -> LayerEvent | None:
    """The event that says why a request still does not fit after the guard did what it can
    (``prefix_tokens``: the fixed prefix, system prompt and tools); None when it fits."""
    limit = guard_limit(ctx)
    if not OverflowGuard.of(ctx.policy).enabled or ctx.predicted <= limit:
        return None
    newest = max(ctx.tokens, default=0)
    if prefix_tokens > limit:
        why = f"the fixed prefix (system prompt and tools) alone takes {prefix_tokens:,} tokens"
    else:
        why = (
            f"what is left cannot be dropped or cut (the latest request and the newest round; "
            f"largest message {newest:,} tokens)"
        )
    where = (
        "the window"
        if ctx.predicted > ctx.window
        else f"the guard's limit ({ctx.window - limit:,} kept for the reply)"
    )
    return LayerEvent(
        layer=LAYER,
        reason=f"request {ctx.predicted:,} > {limit:,} tokens and cannot fit: {why}",
        tokens_before=ctx.predicted,
        tokens_after=ctx.predicted,
        details={"error": f"request does not fit {where}: {why}", "unfit": True},
    )
