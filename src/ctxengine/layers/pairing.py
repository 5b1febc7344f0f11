"""The pairing invariant (DESIGN principle 3): check, repair, and the cut-point helpers.

"After every transformation, each tool call in the projection has exactly one result right after
it, and no result lacks its call (interrupted calls get a synthetic error result; aborted
assistant turns are left alone)." The engine runs ``repair`` after every layer; the layers use
``tool_groups`` / ``safe_cut_points`` to pick cut points that never split a pair. Pure functions
over ``Sequence[Message]``, linear in the number of blocks; nothing here touches a store or a
provider. Follows OpenClaw's ``repairToolUseResultPairing`` (one linear pass; first result wins;
missing results become synthetic errors; aborted turns left alone, openclaw #4597), made precise
below and extended to results that come *before* their call and to duplicate call ids.

Definitions (message indices into the list given):

- An **assistant turn** is a maximal run of consecutive ``assistant`` messages. One model
  response may be recorded as several assistant messages (Claude Code writes thinking, text and
  each tool_use as separate records); both writers merge such runs into one provider message, so
  the run, not the single message, is the unit that must be answered.
- Its **result zone** is the maximal run of consecutive ``user`` messages right after it. A
  ``system`` message or the next assistant message ends the zone (a notice between a call and
  its result would split them in the OpenAI encoding). Messages with no blocks are transparent:
  they neither end a turn nor a zone (repair drops them).
- A tool call is **paired** when the first ``ToolResult`` with its id that lies in its turn's
  zone is its result. The list is **valid** when ``find_violations`` returns ``[]``:

  ``missing_result``   a call of a non-aborted assistant message has no result anywhere
                       (index: the assistant message);
  ``misplaced_result`` a call has no result in its zone, but one elsewhere (before the call, after
                       a later assistant message, behind a system message, inside a non-user
                       message; index: where that result is);
  ``duplicate_result`` a further result for an already answered call (index: the duplicate);
  ``orphan_result``    a result whose id matches no tool call in the list;
  ``duplicate_call``   a tool call whose id an earlier call already used (Anthropic rejects a
                       request with repeated tool_use ids; the first call is the one that counts;
                       index: the later call). With a result of its own in its zone it is a
                       distinct call whose id was reused (tau-bench does this across turns):
                       repair keeps both under a new id ``<id>-<n>``. Without one it is a copy
                       (openclaw #93320): repair drops it;
  ``misplaced_call``   a tool call in a ``user`` or ``system`` message (not in the brief's list:
                       no provider accepts it, so repair drops it);
  ``empty_message``    a message with no blocks (not in the brief's list: the providers reject
                       empty content; repair drops it).

- An **aborted** assistant message (``meta["stop_reason"]`` in ``ABORTED_STOP_REASONS`` or
  ``meta["aborted"] is True``) is left alone: its calls may be partial, so an unanswered one is
  not a violation and gets no synthetic result (a synthetic result for a half-written call is what
  makes providers answer 400, openclaw #4597). Both writers leave such unanswered calls out of the
  request body. Its calls still count as calls (for orphans and duplicate ids), and a result it
  did get is kept and paired like any other.

``repair`` fixes every violation, and ``find_violations(x) == []`` exactly when
``repair(x)[0] == x``; hence repair is idempotent and its output always valid.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

import msgspec

from ctxengine.messages import Block, Message, Text, ToolCall, ToolResult
from ctxengine.tool_turns import Turn, is_aborted, turns_of
from ctxengine.tool_turns import aborted_unanswered as aborted_unanswered  # moved: import it from tool_turns

# The text of the synthetic error result given to an interrupted call (the only content repair
# ever adds).
MISSING_RESULT_TEXT = "[tool result missing: the call was interrupted]"

# Suffix of the id of a user message that repair inserts to hold results (see ``repair``).
INSERTED_ID_SUFFIX = ":tool-results"

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


class PairingViolation(msgspec.Struct, frozen=True):
    """One breach of the invariant. ``index`` is the index of the offending message in the list
    checked (see the module docstring for which message each kind points at); ``call_id`` is the
    tool call id concerned ("" for ``empty_message``); ``detail`` one human-readable line."""

    kind: ViolationKind
    index: int
    call_id: str = ""
    detail: str = ""


class Dropped(msgspec.Struct, frozen=True):
    """What repair left out of the projection. Nothing is lost: the block is still in the
    transcript under ``message_id`` (and kept here by reference, so the engine can log or store
    it). ``block`` is None for an empty message."""

    message_id: str
    reason: DropReason
    call_id: str = ""
    block: Block | None = None


class RepairReport(msgspec.Struct):
    """What ``repair`` did (facts for the caller's event, cf. pi's truncation results).

    ``synthesized``: call ids that got the synthetic error result; ``moved``: call ids whose
    result was moved into the call's result zone; ``dropped``: blocks and empty messages left out
    (orphan and duplicate results, duplicate and misplaced calls, empty messages);
    ``inserted_messages``: ids of new user messages made to hold moved or synthetic results;
    ``removed_messages``: ids of input messages not in the output (empty, or emptied by drops and
    moves); ``renamed``: (message id, old id, new id) of each call that reused an earlier call's id
    and, having its own result, was kept under a new id (its result renamed alike);
    ``violations``: what ``find_violations`` reported on the input.
    """

    synthesized: list[str] = msgspec.field(default_factory=list)
    moved: list[str] = msgspec.field(default_factory=list)
    dropped: list[Dropped] = msgspec.field(default_factory=list)
    inserted_messages: list[str] = msgspec.field(default_factory=list)
    removed_messages: list[str] = msgspec.field(default_factory=list)
    renamed: list[tuple[str, str, str]] = msgspec.field(default_factory=list)
    violations: list[PairingViolation] = msgspec.field(default_factory=list)

    @property
    def changed(self) -> bool:
        """True when the output differs from the input."""
        return bool(self.violations)

    @property
    def dropped_orphans(self) -> int:
        return sum(1 for d in self.dropped if d.reason == "orphan_result")

    @property
    def dropped_duplicates(self) -> int:
        return sum(1 for d in self.dropped if d.reason == "duplicate_result")


# --------------------------------------------------------------------------------------------
# Analysis shared by find_violations and repair (one plan, so the two can never disagree).


class _Plan(msgspec.Struct):
    turns: list[Turn]
    violations: list[PairingViolation]
    drop: dict[tuple[int, int], tuple[DropReason, str]]  # (message, block) -> why, call id
    moved_from: set[tuple[int, int]]  # (message, block) of results that move to their zone
    rename: dict[tuple[int, int], str]  # (message, block) of a reused call id or its result -> new id
    add: dict[int, list[tuple[str, ToolResult, bool]]]  # turn -> (call id, result, moved?)
    empty: list[int]


def _plan(messages: Sequence[Message]) -> _Plan:
    turns, turn_of, zone_of = turns_of(messages)
    violations: list[PairingViolation] = []
    drop: dict[tuple[int, int], tuple[DropReason, str]] = {}
    empty: list[int] = []

    def flag(kind: ViolationKind, i: int, cid: str, detail: str) -> None:
        violations.append(PairingViolation(kind, i, cid, detail))

    # Calls: the first call with an id counts. A later call reusing the id is a duplicate; it is
    # kept under a new id when it has a result of its own in its zone (tau-bench reuses ids across
    # turns), and dropped otherwise (a copy, openclaw #93320). Calls outside assistant messages go.
    calls: dict[str, int] = {}  # call id -> message index of the first call
    reused: dict[tuple[int, str], list[tuple[int, int]]] = {}  # (turn, id) -> duplicate calls
    for i, m in enumerate(messages):
        if not m.blocks:
            empty.append(i)
            flag("empty_message", i, "", f"message {m.id!r} has no blocks")
        for b, block in enumerate(m.blocks):
            if not isinstance(block, ToolCall):
                continue
            if m.role != "assistant":
                drop[(i, b)] = ("misplaced_call", block.id)
                flag("misplaced_call", i, block.id, f"tool call {block.id!r} in a {m.role} message")
            elif block.id in calls:
                reused.setdefault((turn_of[i], block.id), []).append((i, b))
            else:
                calls[block.id] = i

    # Results: the first one in its call's zone stays; failing that, the first one found
    # elsewhere moves there. Every other result for the id is a duplicate.
    in_zone: set[str] = set()
    elsewhere: dict[str, list[tuple[int, int, ToolResult]]] = {}
    rename: dict[tuple[int, int], str] = {}  # (message, block) -> new call id
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
                flag("orphan_result", i, cid, f"tool result for unknown call {cid!r}")
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
                flag(
                    "duplicate_call",
                    ci,
                    cid,
                    f"tool call id {cid!r} already used at message {call_at}; "
                    f"this call and its result are renamed {new_id!r}",
                )
            elif own:
                drop[(i, b)] = ("duplicate_result", cid)
                flag("duplicate_result", i, cid, f"second result for call {cid!r} in its zone")
            else:
                elsewhere.setdefault(cid, []).append((i, b, block))
    for (_, cid), left in reused.items():
        for i, b in left:
            drop[(i, b)] = ("duplicate_call", cid)
            flag(
                "duplicate_call",
                i,
                cid,
                f"tool call id {cid!r} already used at message {calls[cid]}; no result of its own",
            )

    moved_from: set[tuple[int, int]] = set()
    for cid, found in elsewhere.items():
        rest = found
        if cid not in in_zone:
            i, b, _ = found[0]
            moved_from.add((i, b))
            flag(
                "misplaced_result",
                i,
                cid,
                f"result for call {cid!r} (message {calls[cid]}) is not in its zone",
            )
            rest = found[1:]
        for i, b, _ in rest:
            drop[(i, b)] = ("duplicate_result", cid)
            flag("duplicate_result", i, cid, f"further result for call {cid!r}")

    # Additions per turn, in call order.
    add: dict[int, list[tuple[str, ToolResult, bool]]] = {}
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
                    flag("missing_result", i, block.id, f"tool call {block.id!r} has no result")
    violations.sort(key=lambda v: v.index)
    return _Plan(turns, violations, drop, moved_from, rename, add, empty)


def find_violations(messages: Sequence[Message]) -> list[PairingViolation]:
    """Every breach of the pairing invariant in ``messages``, ordered by message index (see the
    module docstring for the definitions). ``[]`` means the list is valid, and then ``repair``
    returns it unchanged. Linear time."""
    return _plan(messages).violations


def repair(messages: Sequence[Message]) -> tuple[list[Message], RepairReport]:
    """Return a valid copy of ``messages`` and what was done. The input is never mutated.

    - a call (of a non-aborted message) with no result gets a synthetic error ``ToolResult``
      (``is_error=True``, text ``MISSING_RESULT_TEXT``, the call's tool name) in its result zone;
    - a result that is not in its call's zone is moved there (the first one found; later ones are
      duplicates);
    - a call reusing an earlier call's id that has a result of its own in its zone is kept, and
      it and that result get the new id ``<id>-<n>`` (the smallest n >= 2 unused in the input);
    - orphan results, duplicate results (the first one wins) and other duplicate or misplaced
      calls are dropped, not turned into text notes: a note would show the model a result it
      cannot relate to any call, and the original stays retrievable in the transcript by message
      id (and by reference in ``RepairReport.dropped``);
    - messages with no blocks, or with none left, are dropped.

    Added results go into the first message of the zone, after its leading results, in call
    order; when the turn has no zone, a new user message holding them is inserted right after the
    turn's last assistant message, with id ``<that message's id>:tool-results`` (made unique), its
    timestamp and ``meta={"pairing_repair": True}``. Every other message keeps its id, role and
    place; a message that needs no change is returned as the same object (treat messages as
    immutable), a changed one is a copy. Linear time.
    """
    plan = _plan(messages)
    report = RepairReport(violations=plan.violations)
    if not plan.violations:
        return list(messages), report

    for (i, b), (reason, cid) in sorted(plan.drop.items()):
        report.dropped.append(Dropped(messages[i].id, reason, cid, messages[i].blocks[b]))
    into_zone = {turn.first_zone: t for t, turn in enumerate(plan.turns) if turn.first_zone >= 0}
    after_turn = {turn.last: t for t, turn in enumerate(plan.turns) if turn.first_zone < 0}
    ids = {m.id for m in messages}
    out: list[Message] = []
    for i, m in enumerate(messages):
        keep: list[Block] = []
        for b, blk in enumerate(m.blocks):
            if (i, b) in plan.drop or (i, b) in plan.moved_from:
                continue
            new_id = plan.rename.get((i, b))
            if isinstance(blk, ToolCall) and new_id is not None:
                report.renamed.append((m.id, blk.id, new_id))
                blk = msgspec.structs.replace(blk, id=new_id)
            elif isinstance(blk, ToolResult) and new_id is not None:
                blk = msgspec.structs.replace(blk, call_id=new_id)
            keep.append(blk)
        t = into_zone.get(i, -1)
        if t in plan.add:
            lead = 0
            while lead < len(keep) and isinstance(keep[lead], ToolResult):
                lead += 1
            keep[lead:lead] = _take(report, plan.add[t])
        if not keep:
            report.removed_messages.append(m.id)
            if not m.blocks:
                report.dropped.append(Dropped(m.id, "empty_message"))
        elif len(keep) == len(m.blocks) and all(x is y for x, y in zip(keep, m.blocks, strict=True)):
            out.append(m)
        else:
            out.append(msgspec.structs.replace(m, blocks=tuple(keep), meta=dict(m.meta)))
        t = after_turn.get(i, -1)
        if t in plan.add:
            new_id = m.id + INSERTED_ID_SUFFIX
            n = 2
            while new_id in ids:
                new_id = f"{m.id}{INSERTED_ID_SUFFIX}-{n}"
                n += 1
            ids.add(new_id)
            blocks = _take(report, plan.add[t])
            out.append(
                Message(
                    role="user",
                    blocks=tuple(blocks),
                    id=new_id,
                    timestamp=m.timestamp,
                    meta={"pairing_repair": True},
                )
            )
            report.inserted_messages.append(new_id)
    return out, report


def _take(report: RepairReport, additions: list[tuple[str, ToolResult, bool]]) -> list[Block]:
    """The result blocks to add, recording each as moved or synthesized."""
    for cid, _, moved in additions:
        (report.moved if moved else report.synthesized).append(cid)
    return [r for _, r, _ in additions]


# --------------------------------------------------------------------------------------------
# Cut points


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

    # reach[u]: the last unit that must share a span with unit u. A result is tied to the nearest
    # call with its id before it (ids may be reused), or to the first call after it.
    reach = list(range(len(unit_starts)))
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
