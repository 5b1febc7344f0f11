"""The latest user request against the window: how much of it a context can hold, and its head
and tail when it is larger (read by the compactions and the overflow guard).

A request *fits* when it is at most half of what the window leaves after the fixed prefix and the
output reserve (``request_room``); a larger one keeps its head (3/4) and tail (1/4) within that
room verbatim, the middle named as retrievable by the message's id (``partial_request``). Issue 9:
a request too large for the budget keeps head and tail and says so, every other request whole.
"""

from __future__ import annotations

from ctxengine.layers.base import LayerContext
from ctxengine.summary.audit import user_request


def request_room(ctx: LayerContext) -> int:
    """Tokens a quoted request may take: half of what the window leaves after the fixed prefix
    (system prompt, tool definitions) and the output reserve, at least 200. The output reserve
    is at least what the overflow guard keeps free for the response: letta reserves none for
    its threshold, and at 16,000 its quote (half of the window after a 7,660-token prefix) left
    the summary alone over the guard's limit, the next rounds over the window."""
    p = ctx.policy
    fixed = max(0, ctx.predicted - sum(ctx.tokens))
    guard = p.overflow_reserve if p.overflow_guard else 0
    reserve = max(min(ctx.max_output, p.compact_reserve_output), guard)
    return max(200, (ctx.window - fixed - reserve) // 2)


def partial_request(text: str, message_id: str, room: int, size: int, what: str = "request") -> str:
    """A request of ``size`` tokens too large for ``room`` tokens: its head (3/4) and tail (1/4)
    verbatim within the room, the middle named as retrievable (``'message:<id>'``, which
    ``ContextEngine.retrieve`` serves from the history). ``what`` names it in the marker (an
    earlier user message cut by the guard is a "message")."""
    keep = max(400, int(len(text) * room / size * 0.95))
    first, last = text[: keep * 3 // 4], text[len(text) - keep // 4 :]
    omitted = len(text) - len(first) - len(last)
    return (
        f"{first}\n[... {omitted:,} characters of the {what} omitted here; the whole {what} is "
        f"message {message_id} of the transcript, retrievable as {retrieval_handle(message_id)} ...]\n{last}"
    )


def retrieval_handle(message_id: str) -> str:
    """How a cut request names its whole text: ``'message:<id>'``."""
    return f"'message:{message_id}'"


def too_large_request(ctx: LayerContext) -> bool:
    """The newest message is the user's request (no tool results beside it) and larger than
    ``request_room``: it cannot be sent whole, and a compaction may summarize it too (quoted
    head and tail). Any other newest message is always sent as it is."""
    if not ctx.view:
        return False
    last = ctx.view[-1]
    return bool(user_request(last)) and not last.tool_results and ctx.tokens[-1] > request_room(ctx)
