"""Assistant turns of a message list and the tool calls an aborted turn left unanswered.

Below both the layers and the writers: ``layers.pairing`` plans its checks and repairs on these
turns, and the writers (``formats.anthropic_writer``, ``formats.openai_writer``) leave out the
unanswered calls of an aborted assistant message (the provider rejects a call without a result,
and inventing one for a half-written call is worse, openclaw #4597).
"""

from __future__ import annotations

from collections.abc import Sequence

import msgspec

from ctxengine.messages.model import Message, ToolCall

# Assistant messages whose stop reason marks an aborted or failed response (pi / OpenClaw use
# these two values); readers that know a turn was cut short set ``meta["stop_reason"]``.
ABORTED_STOP_REASONS = frozenset({"aborted", "error"})


def is_aborted(message: Message) -> bool:
    """True for an assistant message whose response was aborted or failed (left alone by
    ``repair``; its unanswered calls are left out by the writers)."""
    if message.role != "assistant":
        return False
    meta = message.meta
    return meta.get("aborted") is True or meta.get("stop_reason") in ABORTED_STOP_REASONS


class Turn(msgspec.Struct):
    start: int  # first assistant message of the turn
    last: int  # last non-empty assistant message of the turn
    first_zone: int  # first non-empty user message of the zone, -1 when the zone is empty
    end: int  # one past the zone


def turns_of(messages: Sequence[Message]) -> tuple[list[Turn], list[int], list[int]]:
    """The assistant turns with their zones; for each message the turn it belongs to and the turn
    whose zone holds it (-1 when none). Empty messages are transparent: repair drops them, so
    they neither end a turn nor a zone."""
    n = len(messages)
    turns: list[Turn] = []
    turn_of = [-1] * n
    zone_of = [-1] * n
    i = 0
    while i < n:
        m = messages[i]
        if m.role != "assistant" or not m.blocks:
            i += 1
            continue
        t = len(turns)
        start = last = i
        while i < n and (messages[i].role == "assistant" or not messages[i].blocks):
            if messages[i].blocks:
                turn_of[i] = t
                last = i
            i += 1
        first_zone = -1
        while i < n and (messages[i].role == "user" or not messages[i].blocks):
            if messages[i].blocks:
                zone_of[i] = t
                if first_zone < 0:
                    first_zone = i
            i += 1
        turns.append(Turn(start, last, first_zone, i))
    return turns, turn_of, zone_of


def aborted_unanswered(messages: Sequence[Message]) -> set[str]:
    """Ids of tool calls in aborted assistant messages that have no result in their zone. The
    writers leave these calls out of the request body: the provider rejects a call without a
    result, and inventing one for a half-written call is worse (openclaw #4597)."""
    if not any(is_aborted(m) for m in messages):
        return set()  # the common case, without planning the turns
    turns, _, _ = turns_of(messages)
    out: set[str] = set()
    for turn in turns:
        pending = {
            b.id
            for i in range(turn.start, turn.last + 1)
            if is_aborted(messages[i])
            for b in messages[i].blocks
            if isinstance(b, ToolCall)
        }
        if pending:
            answered = {r.call_id for k in range(turn.last + 1, turn.end) for r in messages[k].tool_results}
            out |= pending - answered
    return out
