"""The record tree of a Claude Code session: uuids and parents, sidechains, compaction boundaries.

Claude Code links its records by ``parentUuid`` (``logicalParentUuid`` across a compaction). The
reader rebuilds messages in file order, not along one chain (the links form a tree), and keeps the
links on every message: ``meta["uuids"]`` and ``meta["parent_uuid"]`` (``link``). Sidechain
records (``isSidechain: true``) in a main file belong to a sub-agent and are read as its own
session (``is_main_file``, ``sidechain_key``, ``mark_sidechain``). A ``system``/
``compact_boundary`` record opens a ``RecordedCompaction`` at the index of the next message
(``boundary``, ``open_compaction``).
"""

from __future__ import annotations

from typing import Any

from ctxengine.formats.claude_code.blocks import Draft, int_or_none, timestamp
from ctxengine.formats.claude_code.builder import BuilderBase
from ctxengine.messages.model import RecordedCompaction, Session

TURNS = ("user", "assistant")


def is_main_file(records: list[tuple[int, dict[str, Any]]]) -> bool:
    """Whether the file is a main session's: one of its user/assistant records says
    ``isSidechain: false``, or, when none does (older and hand-edited files leave the field out
    or null it), its first one is not marked ``isSidechain: true``. A sidechain file (every
    record marked) stays one sidechain session, a stray unmarked record in it too."""
    turns = [r for _, r in records if r.get("type") in TURNS and isinstance(r.get("message"), dict)]
    if any(r.get("isSidechain") is False for r in turns):
        return True
    return bool(turns) and turns[0].get("isSidechain") is not True


def sidechain_key(record: dict[str, Any], main_file: bool) -> str | None:
    """The sub-agent a record of a main file belongs to (its ``agentId``, "" when it has none);
    None for the main session's own records."""
    if main_file and record.get("isSidechain") is True:
        agent = record.get("agentId")
        return agent if isinstance(agent, str) else ""
    return None


def mark_sidechain(side: Session, parent: Session, key: str) -> Session:
    """Mark ``side``, read from the sidechain records of sub-agent ``key`` in the file of
    ``parent``, as that sub-agent's session."""
    side.sidechain = True
    side.parent = parent.source
    side.name = f"subagent {key}".rstrip()
    return side


def link(draft: Draft, rec: dict[str, Any]) -> None:
    """Note the record's uuid (and, for the first record, its parent) in ``draft.meta``."""
    uuids = draft.meta.setdefault("uuids", [])
    if not uuids:
        parent = rec.get("parentUuid") or rec.get("logicalParentUuid")
        if isinstance(parent, str) and parent:
            draft.meta["parent_uuid"] = parent
    uuid = rec.get("uuid")
    if isinstance(uuid, str) and uuid:
        uuids.append(uuid)


def record_id(rec: dict[str, Any], lineno: int) -> str:
    """The record's ``uuid``, or ``line-<lineno>`` when it has none."""
    uuid = rec.get("uuid")
    return uuid if isinstance(uuid, str) and uuid else f"line-{lineno}"


def boundary(b: BuilderBase, rec: dict[str, Any]) -> None:
    """Open the compaction a ``compact_boundary`` record marks (trigger ``auto`` unless its
    ``compactMetadata`` names one; its pre/post token counts)."""
    meta = rec.get("compactMetadata")
    meta = meta if isinstance(meta, dict) else {}
    trigger = meta.get("trigger")
    open_compaction(
        b,
        timestamp(rec.get("timestamp")),
        meta,
        trigger if isinstance(trigger, str) and trigger else "auto",
    )


def open_compaction(b: BuilderBase, ts: float | None, meta: dict[str, Any] | None, trigger: str) -> None:
    """Record a compaction at the index of the next message and open its restore window; the
    held-back user messages are placed first and no call is pending across the boundary."""
    b.flush_deferred()
    b.pending_calls = set()
    b.open_results = None
    k = len(b.compactions)
    meta = meta or {}
    b.compactions.append(
        RecordedCompaction(
            index=k,
            at=len(b.drafts),
            trigger=trigger,
            pre_tokens=int_or_none(meta.get("preTokens")),
            post_tokens=int_or_none(meta.get("postTokens")),
            timestamp=ts,
        )
    )
    b.restore_k = k
