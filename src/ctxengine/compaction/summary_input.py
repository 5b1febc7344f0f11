"""Letta's summarizer-input fallbacks (``simple_summary``), applied up front.

When the transcript to summarize exceeds the window in chars (``CHARS_PER_TOKEN`` x tokens), (A)
every tool return is cut to ``summary_tool_return_chars`` keeping its head, and if it still
exceeds it, (B) the head and the tail are kept within a budget (``summary_input_share`` of the
window, at least ``FALLBACK_MIN_CHARS``, less ``FALLBACK_OVERHEAD_CHARS`` for the prompt) and the
middle is dropped behind a marker.
"""

from __future__ import annotations

from collections.abc import Sequence

import msgspec

from ctxengine.messages.model import Block, Message, Text, ToolResult

CHARS_PER_TOKEN = 4  # Letta's byte budget: tokens x 4
FALLBACK_MIN_CHARS = 2_000  # fallback B's floor
FALLBACK_OVERHEAD_CHARS = 2_048  # the summary prompt + acknowledgement + 1,024 of slack


def _chars(msg: Message) -> int:
    from ctxengine.layers.cache_ttl_prune import message_chars

    return message_chars(msg)


def clamp_summary_input(
    messages: Sequence[Message],
    *,
    tool_return_chars: int,
    overflow_chars: int,
    budget_chars: int,
    keep_share: float,
) -> tuple[list[Message], dict[str, object]]:
    """Letta's ``simple_summary`` fallbacks, applied up front: when the transcript exceeds
    ``overflow_chars`` (0: never), (A) cut every tool return to ``tool_return_chars`` keeping the
    head (+ "... [truncated N chars]"); if it still exceeds it, (B) keep ``keep_share`` of
    ``budget_chars`` from the head and as much from the tail (whole messages) and drop the middle
    behind "[TRUNCATED: dropped N middle chars due to context budget]". Returns the messages the
    summarizer reads and what was done (empty when nothing)."""
    out = list(messages)
    size = sum(_chars(m) for m in out)
    if overflow_chars <= 0 or size <= overflow_chars:
        return out, {}
    details: dict[str, object] = {"summary_input_chars": size}
    if tool_return_chars > 0:
        out = _clamp_tool_returns(out, tool_return_chars)
        size = sum(_chars(m) for m in out)
        details["tool_returns_clamped_to"] = tool_return_chars
    if size > overflow_chars:
        out, dropped = _drop_middle(out, int(budget_chars * keep_share))
        details["middle_dropped_chars"] = dropped
    return out, details


def _clamp_tool_returns(out: list[Message], tool_return_chars: int) -> list[Message]:
    """Fallback A: every tool return cut to ``tool_return_chars`` (its head kept)."""
    clamped: list[Message] = []
    for m in out:
        if not any(
            isinstance(b, ToolResult)
            and sum(len(x.text) for x in b.content if isinstance(x, Text)) > tool_return_chars
            for b in m.blocks
        ):
            clamped.append(m)
            continue
        blocks: list[Block] = []
        for b in m.blocks:
            if isinstance(b, ToolResult):
                text = "\n".join(x.text for x in b.content if isinstance(x, Text))
                if len(text) > tool_return_chars:
                    cut = f"{text[:tool_return_chars]}... [truncated {len(text) - tool_return_chars} chars]"
                    b = ToolResult(b.call_id, (Text(cut),), b.is_error, b.name)
            blocks.append(b)
        clamped.append(msgspec.structs.replace(m, blocks=tuple(blocks)))
    return clamped


def _drop_middle(out: list[Message], each: int) -> tuple[list[Message], int]:
    """Fallback B: whole messages within ``each`` chars from the head and as many from the tail,
    the middle dropped behind a marker. Returns the messages and the chars dropped."""
    head: list[Message] = []
    used = 0
    for m in out:
        n = _chars(m)
        if used + n > each:
            break
        head.append(m)
        used += n
    tail: list[Message] = []
    used = 0
    for m in reversed(out[len(head) :]):
        n = _chars(m)
        if used + n > each:
            break
        tail.append(m)
        used += n
    tail.reverse()
    middle = out[len(head) : len(out) - len(tail)]
    dropped = sum(_chars(m) for m in middle)
    marker = Message(
        role="user",
        blocks=(Text(f"[TRUNCATED: dropped {dropped} middle chars due to context budget]"),),
        id="summary-input-truncated",
        origin="notice",
    )
    return [*head, marker, *tail], dropped
