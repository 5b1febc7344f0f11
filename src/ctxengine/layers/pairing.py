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

The analysis is ``layers.pairing_plan`` (one plan for the check and the repair), the cut-point
helpers are ``layers.pairing_cuts``; their names are importable from here too.
"""

from __future__ import annotations

from collections.abc import Sequence

import msgspec

from ctxengine.layers.pairing_cuts import safe_cut_points, tool_groups
from ctxengine.layers.pairing_plan import (
    MISSING_RESULT_TEXT,
    Addition,
    DropReason,
    PairingPlan,
    PairingViolation,
    ViolationKind,
    plan_pairing,
)
from ctxengine.messages.model import Block, Message, ToolCall, ToolResult
from ctxengine.messages.tool_turns import aborted_unanswered

__all__ = [  # aborted_unanswered moved to tool_turns; the others to pairing_plan and pairing_cuts
    "INSERTED_ID_SUFFIX",
    "MISSING_RESULT_TEXT",
    "DropReason",
    "Dropped",
    "PairingViolation",
    "RepairReport",
    "ViolationKind",
    "aborted_unanswered",
    "find_violations",
    "repair",
    "safe_cut_points",
    "tool_groups",
]

# Suffix of the id of a user message that repair inserts to hold results (see ``repair``).
INSERTED_ID_SUFFIX = ":tool-results"


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


def find_violations(messages: Sequence[Message]) -> list[PairingViolation]:
    """Every breach of the pairing invariant in ``messages``, ordered by message index (see the
    module docstring for the definitions). ``[]`` means the list is valid, and then ``repair``
    returns it unchanged. Linear time."""
    return plan_pairing(messages).violations


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
    plan = plan_pairing(messages)
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
        keep = _kept_blocks(i, m, plan, report)
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
            out.append(_inserted(m, ids, report, plan.add[t]))
    return out, report


def _kept_blocks(i: int, m: Message, plan: PairingPlan, report: RepairReport) -> list[Block]:
    """Message ``i``'s blocks that stay where they are (neither dropped nor moved), a reused call
    id and its result renamed (each renamed call recorded)."""
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
    return keep


def _inserted(m: Message, ids: set[str], report: RepairReport, additions: list[Addition]) -> Message:
    """The user message inserted after the turn ending with ``m`` to hold its added results, with
    id ``<m.id>:tool-results`` made unique among ``ids`` (taken then)."""
    new_id = m.id + INSERTED_ID_SUFFIX
    n = 2
    while new_id in ids:
        new_id = f"{m.id}{INSERTED_ID_SUFFIX}-{n}"
        n += 1
    ids.add(new_id)
    blocks = _take(report, additions)
    inserted = Message(
        role="user",
        blocks=tuple(blocks),
        id=new_id,
        timestamp=m.timestamp,
        meta={"pairing_repair": True},
    )
    report.inserted_messages.append(new_id)
    return inserted


def _take(report: RepairReport, additions: list[Addition]) -> list[Block]:
    """The result blocks to add, recording each as moved or synthesized."""
    for cid, _, moved in additions:
        (report.moved if moved else report.synthesized).append(cid)
    return [r for _, r, _ in additions]
