"""The analysis behind the pairing check and its repair: one plan of every violation and of what
repair must drop, move, rename and add (``plan_pairing``), so that ``find_violations`` and
``repair`` (``layers.pairing``, where the invariant and each violation kind are defined) can
never disagree.

The plan is made in four passes over the messages, in this order (the order of the violations
found is part of the result): the tool calls (the first call with an id counts), the tool
results (each matched to its call's zone), the results found outside their zone, and the
results each turn must get (moved or synthetic), in call order. Linear in the number of blocks.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

import msgspec

from ctxengine.messages.model import Message, Text, ToolCall, ToolResult
from ctxengine.messages.tool_turns import Turn, is_aborted, turns_of

# The text of the synthetic error result given to an interrupted call (the only content repair
# ever adds).
MISSING_RESULT_TEXT = "[tool result missing: the call was interrupted]"

ViolationKind = Literal[
    "missing_result",
    "orphan_result",
    "duplicate_result",
    "duplicate_call",
    "misplaced_result",
    "misplaced_call",
    "empty_message",
]

DropReason = Literal["orphan_result", "duplicate_result", "duplicate_call", "misplaced_call", "empty_message"]

Slot = tuple[int, int]  # (message index, block index)
Addition = tuple[str, ToolResult, bool]  # (call id, result, moved? else synthetic)


class PairingViolation(msgspec.Struct, frozen=True):
    """One breach of the invariant. ``index`` is the index of the offending message in the list
    checked (see the module docstring for which message each kind points at); ``call_id`` is the
    tool call id concerned ("" for ``empty_message``); ``detail`` one human-readable line."""

    kind: ViolationKind
    index: int
    call_id: str = ""
    detail: str = ""


class PairingPlan(msgspec.Struct):
    """What ``plan_pairing`` found: the turns, the violations (by message index) and what repair
    must do, by (message, block) slot."""

    turns: list[Turn]
    violations: list[PairingViolation]
    drop: dict[Slot, tuple[DropReason, str]]  # (message, block) -> why, call id
    moved_from: set[Slot]  # (message, block) of results that move to their zone
    rename: dict[Slot, str]  # (message, block) of a reused call id or its result -> new id
    add: dict[int, list[Addition]]  # turn -> (call id, result, moved?)
    empty: list[int]


def _flag(violations: list[PairingViolation], kind: ViolationKind, i: int, cid: str, detail: str) -> None:
    violations.append(PairingViolation(kind, i, cid, detail))


def plan_pairing(messages: Sequence[Message]) -> PairingPlan:
    """The plan of ``messages``: its violations and repair's work (see the module docstring)."""
    turns, turn_of, zone_of = turns_of(messages)
    violations: list[PairingViolation] = []
    drop: dict[Slot, tuple[DropReason, str]] = {}
    empty: list[int] = []
    calls, reused = _scan_calls(messages, turn_of, violations, drop, empty)
    in_zone, elsewhere, rename = _scan_results(messages, turn_of, zone_of, calls, reused, violations, drop)
    _drop_copies(reused, calls, violations, drop)
    moved_from = _place_elsewhere(elsewhere, in_zone, calls, violations, drop)
    add = _additions(messages, turns, drop, rename, in_zone, elsewhere, violations)
    violations.sort(key=lambda v: v.index)
    return PairingPlan(turns, violations, drop, moved_from, rename, add, empty)


def _scan_calls(
    messages: Sequence[Message],
    turn_of: list[int],
    violations: list[PairingViolation],
    drop: dict[Slot, tuple[DropReason, str]],
    empty: list[int],
) -> tuple[dict[str, int], dict[tuple[int, str], list[Slot]]]:
    """Calls: the first call with an id counts (call id -> its message index). A later call
    reusing the id is a duplicate ((turn, id) -> its slots); it is kept under a new id when it
    has a result of its own in its zone (tau-bench reuses ids across turns), and dropped
    otherwise (a copy, openclaw #93320). Calls outside assistant messages go; empty messages are
    flagged."""
    calls: dict[str, int] = {}  # call id -> message index of the first call
    reused: dict[tuple[int, str], list[Slot]] = {}  # (turn, id) -> duplicate calls
    for i, m in enumerate(messages):
        if not m.blocks:
            empty.append(i)
            _flag(violations, "empty_message", i, "", f"message {m.id!r} has no blocks")
        for b, block in enumerate(m.blocks):
            if not isinstance(block, ToolCall):
                continue
            if m.role != "assistant":
                drop[(i, b)] = ("misplaced_call", block.id)
                _flag(
                    violations, "misplaced_call", i, block.id, f"tool call {block.id!r} in a {m.role} message"
                )
            elif block.id in calls:
                reused.setdefault((turn_of[i], block.id), []).append((i, b))
            else:
                calls[block.id] = i
    return calls, reused


def _scan_results(
    messages: Sequence[Message],
    turn_of: list[int],
    zone_of: list[int],
    calls: dict[str, int],
    reused: dict[tuple[int, str], list[Slot]],
    violations: list[PairingViolation],
    drop: dict[Slot, tuple[DropReason, str]],
) -> tuple[set[str], dict[str, list[tuple[int, int, ToolResult]]], dict[Slot, str]]:
    """Results: the first one in its call's zone stays (``in_zone``); a result in the zone of a
    reused call id renames that call and itself (``rename``); failing that, results found
    elsewhere are kept for ``_place_elsewhere``. Orphans and further results in the zone are
    dropped. Takes the reused calls it renames out of ``reused``."""
    in_zone: set[str] = set()
    elsewhere: dict[str, list[tuple[int, int, ToolResult]]] = {}
    rename: dict[Slot, str] = {}  # (message, block) -> new call id
    taken: set[str] = set()
    if reused:
        taken = {
            b.id if isinstance(b, ToolCall) else b.call_id
            for m in messages
            for b in m.blocks
            if isinstance(b, ToolCall | ToolResult)
        }
    for i, m in enumerate(messages):
        for b, block in enumerate(m.blocks):
            if not isinstance(block, ToolResult):
                continue
            cid = block.call_id
            call_at = calls.get(cid)
            zone = zone_of[i]
            own = zone >= 0 and call_at is not None and zone == turn_of[call_at]
            if call_at is None:
                drop[(i, b)] = ("orphan_result", cid)
                _flag(violations, "orphan_result", i, cid, f"tool result for unknown call {cid!r}")
            elif own and cid not in in_zone:
                in_zone.add(cid)
            elif zone >= 0 and reused.get((zone, cid)):
                ci, cb = reused[(zone, cid)].pop(0)
                n = 2
                while f"{cid}-{n}" in taken:
                    n += 1
                new_id = f"{cid}-{n}"
                taken.add(new_id)
                rename[(i, b)] = rename[(ci, cb)] = new_id
                _flag(
                    violations,
                    "duplicate_call",
                    ci,
                    cid,
                    f"tool call id {cid!r} already used at message {call_at}; "
                    f"this call and its result are renamed {new_id!r}",
                )
            elif own:
                drop[(i, b)] = ("duplicate_result", cid)
                _flag(violations, "duplicate_result", i, cid, f"second result for call {cid!r} in its zone")
            else:
                elsewhere.setdefault(cid, []).append((i, b, block))
    return in_zone, elsewhere, rename


def _drop_copies(
    reused: dict[tuple[int, str], list[Slot]],
    calls: dict[str, int],
    violations: list[PairingViolation],
    drop: dict[Slot, tuple[DropReason, str]],
) -> None:
    """Reused call ids left without a result of their own: copies, dropped."""
    for (_, cid), left in reused.items():
        for i, b in left:
            drop[(i, b)] = ("duplicate_call", cid)
            _flag(
                violations,
                "duplicate_call",
                i,
                cid,
                f"tool call id {cid!r} already used at message {calls[cid]}; no result of its own",
            )


def _place_elsewhere(
    elsewhere: dict[str, list[tuple[int, int, ToolResult]]],
    in_zone: set[str],
    calls: dict[str, int],
    violations: list[PairingViolation],
    drop: dict[Slot, tuple[DropReason, str]],
) -> set[Slot]:
    """Results outside their zone: for a call with no result in its zone, the first one found
    moves there (returned); every other is a duplicate, dropped."""
    moved_from: set[Slot] = set()
    for cid, found in elsewhere.items():
        rest = found
        if cid not in in_zone:
            i, b, _ = found[0]
            moved_from.add((i, b))
            _flag(
                violations,
                "misplaced_result",
                i,
                cid,
                f"result for call {cid!r} (message {calls[cid]}) is not in its zone",
            )
            rest = found[1:]
        for i, b, _ in rest:
            drop[(i, b)] = ("duplicate_result", cid)
            _flag(violations, "duplicate_result", i, cid, f"further result for call {cid!r}")
    return moved_from


def _additions(
    messages: Sequence[Message],
    turns: list[Turn],
    drop: dict[Slot, tuple[DropReason, str]],
    rename: dict[Slot, str],
    in_zone: set[str],
    elsewhere: dict[str, list[tuple[int, int, ToolResult]]],
    violations: list[PairingViolation],
) -> dict[int, list[Addition]]:
    """Additions per turn, in call order: a call with no result in its zone gets its moved
    result, or (unless its message is aborted) a synthetic error result."""
    add: dict[int, list[Addition]] = {}
    for t, turn in enumerate(turns):
        for i in range(turn.start, turn.last + 1):
            m = messages[i]
            for b, block in enumerate(m.blocks):
                if (
                    not isinstance(block, ToolCall)
                    or (i, b) in drop
                    or (i, b) in rename
                    or block.id in in_zone
                ):
                    continue
                misplaced = elsewhere.get(block.id)
                if misplaced:
                    add.setdefault(t, []).append((block.id, misplaced[0][2], True))
                elif not is_aborted(m):
                    synthetic = ToolResult(
                        call_id=block.id,
                        content=(Text(MISSING_RESULT_TEXT),),
                        is_error=True,
                        name=block.name,
                    )
                    add.setdefault(t, []).append((block.id, synthetic, False))
                    _flag(violations, "missing_result", i, block.id, f"tool call {block.id!r} has no result")
    return add
