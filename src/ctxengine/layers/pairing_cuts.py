"""Cut points that never split a tool call from its result: ``tool_groups`` partitions messages
into spans (API rounds and single messages) and ``safe_cut_points`` says where a projection may
start. The layers pick their cut points here. Pure functions over ``Sequence[Message]``, linear
time; turns and result zones as defined in ``layers.pairing``.
"""

from __future__ import annotations

from collections.abc import Sequence

from ctxengine.messages.model import Message, ToolCall, ToolResult
from ctxengine.messages.tool_turns import Turn, turns_of


def tool_groups(messages: Sequence[Message]) -> list[tuple[int, int]]:
    """Partition ``messages`` into spans ``[start, end)`` (in order, covering every index) such
    that cutting between two spans never separates a tool call from its result.

    An assistant turn with tool calls plus its result zone (the user messages after it) is one
    span (an "API round"); an assistant turn without calls is one span, and each message after it
    its own; any other message (a leading user prompt, a system notice) is its own span. On an
    invalid list (a result far from its call) the spans from the call to the result are merged
    into one; a result is tied to the nearest call with its id before it, or else to the first
    call after it. Linear time.
    """
    n = len(messages)
    if n == 0:
        return []
    turns, _, _ = turns_of(messages)
    unit_starts, unit_of = _units(messages, turns)
    reach = _reach(messages, unit_of, len(unit_starts))
    groups: list[tuple[int, int]] = []
    first = 0
    far = reach[0]
    for u in range(1, len(unit_starts)):
        if u > far:
            groups.append((unit_starts[first], unit_starts[u]))
            first = u
        far = max(far, reach[u])
    groups.append((unit_starts[first], n))
    return groups


def _units(messages: Sequence[Message], turns: list[Turn]) -> tuple[list[int], list[int]]:
    """The units spans are made of (an assistant turn with calls plus its zone, an assistant
    turn without calls, any other message): each unit's first index, and each message's unit."""
    n = len(messages)
    unit_starts: list[int] = []
    unit_of = [0] * n
    i = 0
    for turn in turns:
        while i < turn.start:
            unit_of[i] = len(unit_starts)
            unit_starts.append(i)
            i += 1
        has_calls = any(messages[k].tool_calls for k in range(turn.start, turn.last + 1))
        end = turn.end if has_calls else turn.last + 1
        u = len(unit_starts)
        unit_starts.append(turn.start)
        for k in range(turn.start, end):
            unit_of[k] = u
        i = end
    while i < n:
        unit_of[i] = len(unit_starts)
        unit_starts.append(i)
        i += 1
    return unit_starts, unit_of


def _reach(messages: Sequence[Message], unit_of: list[int], units: int) -> list[int]:
    """reach[u]: the last unit that must share a span with unit u. A result is tied to the
    nearest call with its id before it (ids may be reused), or to the first call after it."""
    reach = list(range(units))
    first_call: dict[str, int] = {}
    for k, m in enumerate(messages):
        for block in m.blocks:
            if isinstance(block, ToolCall):
                first_call.setdefault(block.id, unit_of[k])
    last_call: dict[str, int] = {}
    for k, m in enumerate(messages):
        for block in m.blocks:
            if isinstance(block, ToolCall):
                last_call[block.id] = unit_of[k]
            elif isinstance(block, ToolResult):
                call_u = last_call.get(block.call_id, first_call.get(block.call_id))
                if call_u is not None:
                    lo, hi = sorted((call_u, unit_of[k]))
                    reach[lo] = max(reach[lo], hi)
    return reach


def safe_cut_points(messages: Sequence[Message]) -> list[int]:
    """Indices where a projection may start: the starts of ``tool_groups`` whose first message
    holds no tool result (a projection never opens with a result). Ascending; ``len(messages)``
    (the empty projection) is not included. On a valid list, ``messages[k:]`` is valid for every
    returned ``k``, and so is the list with any run of whole groups taken out."""
    return [
        start
        for start, _ in tool_groups(messages)
        if not any(isinstance(b, ToolResult) for b in messages[start].blocks)
    ]
