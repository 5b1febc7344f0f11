"""The state of one Claude Code session under construction, and the order its messages go in.

``BuilderBase`` holds the drafts (messages still mutable), what the reader has seen (uuids, ids,
tool calls and results, user content keys: for the dedupe of resumed sessions), the held-back
user messages (``emit_user``: placed after the results of the pending tool calls), the session's
metadata notes, and ``finish``, which turns the drafts into a ``Session`` (a ``ToolResult`` gets
the name of its call; the model is the most frequent non-synthetic one). The per-record handlers
are in ``records``; malformed lines are counted and warned about here (the first
``MAX_WARNINGS``).
"""

from __future__ import annotations

import warnings
from collections import Counter
from typing import Any

import msgspec

from ctxengine.formats.claude_code.blocks import Draft
from ctxengine.messages.model import (
    Block,
    Malformed,
    Message,
    RecordedCompaction,
    Session,
    ToolResult,
)

SYNTHETIC_MODEL = "<synthetic>"
MAX_WARNINGS = 20  # per file; further malformed lines are still recorded in Session.malformed


class MalformedRecordWarning(UserWarning):
    """A transcript line could not be read; it was recorded in ``Session.malformed``."""


class BuilderBase:
    """One session's drafts and reader state; see the module docstring."""

    def __init__(self, source: str) -> None:
        self.source = source
        self.drafts: list[Draft] = []
        self.compactions: list[RecordedCompaction] = []
        self.malformed_list: list[Malformed] = []
        self.skipped: Counter[str] = Counter()
        self.comment_lines = 0
        self.warned = 0
        self.ids: set[str] = set()
        self.uuids: set[str] = set()
        self.assistant_by_id: dict[str, Draft] = {}
        self.latest_assistant: Draft | None = None
        self.call_ids: set[str] = set()
        self.call_names: dict[str, str] = {}
        self.call_owner: dict[str, str] = {}  # tool_use id -> id of the message that made the call
        self.result_ids: set[str] = set()
        self.user_keys: set[tuple[float, Any]] = set()  # (timestamp, block key) seen in user turns
        self.pending_calls: set[str] = set()  # unanswered calls of the latest assistant message
        self.open_results: Draft | None = None  # tool-result message after the latest assistant
        self.deferred: list[Draft] = []  # user messages held back until the results are in
        self.restore_k: int | None = None  # compaction whose restore window is open
        self.session_ids: list[str] = []
        self.agent_id: str | None = None
        self.sidechain_records = 0
        self.message_records = 0
        self.meta: dict[str, Any] = {}

    # -- bookkeeping ---------------------------------------------------------------------------

    def malformed(self, lineno: int, error: str, *, kept: bool = False) -> None:
        """Record a malformed record (``kept``: its message was read without the bad part)."""
        self.malformed_list.append(Malformed(self.source, lineno, error))
        self.warned += 1
        if self.warned <= MAX_WARNINGS:
            warnings.warn(
                f"{self.source}:{lineno}: malformed record {'kept in part' if kept else 'skipped'}: {error}",
                MalformedRecordWarning,
                stacklevel=2,
            )
        elif self.warned == MAX_WARNINGS + 1:
            warnings.warn(
                f"{self.source}: more malformed records; see Session.malformed",
                MalformedRecordWarning,
                stacklevel=2,
            )

    def unique_id(self, base: str) -> str:
        msg_id = base
        n = 1
        while msg_id in self.ids:
            n += 1
            msg_id = f"{base}#{n}"
        self.ids.add(msg_id)
        return msg_id

    def emit(self, draft: Draft) -> None:
        """Append a message, placing any held-back user messages first."""
        self.flush_deferred()
        self.drafts.append(draft)

    def flush_deferred(self) -> None:
        if self.deferred:
            self.drafts.extend(self.deferred)
            self.deferred = []

    def emit_user(self, draft: Draft) -> None:
        """Append a non-result user message, held back while tool calls await their results."""
        if self.pending_calls:
            self.deferred.append(draft)  # results still to come keep merging into open_results
        else:
            self.drafts.append(draft)
            self.open_results = None

    # -- session notes -------------------------------------------------------------------------

    def _note_session(self, rec: dict[str, Any]) -> None:
        sid = rec.get("sessionId")
        if isinstance(sid, str) and sid and sid not in self.session_ids:
            self.session_ids.append(sid)
        if rec.get("type") != "attachment":
            self.message_records += 1
            if rec.get("isSidechain") is True:
                self.sidechain_records += 1
        agent = rec.get("agentId")
        if self.agent_id is None and isinstance(agent, str) and agent:
            self.agent_id = agent
        for key, name in (("cwd", "cwd"), ("gitBranch", "git_branch"), ("entrypoint", "entrypoint")):
            value = rec.get(key)
            if isinstance(value, str) and value and name not in self.meta:
                self.meta[name] = value
        version = rec.get("version")
        if isinstance(version, str) and version:
            self.meta["version"] = version  # the last one: the session may span upgrades

    def _note_other(self, kind: str, rec: dict[str, Any]) -> None:
        """Keep the last session title / summary line the harness recorded (for display)."""
        for rec_kind, key, name in (
            ("ai-title", "aiTitle", "ai_title"),
            ("custom-title", "customTitle", "custom_title"),
            ("summary", "summary", "summary"),
        ):
            value = rec.get(key)
            if kind == rec_kind and isinstance(value, str) and value:
                self.meta[name] = value

    # -- result --------------------------------------------------------------------------------

    def finish(self) -> Session:
        self.flush_deferred()
        messages: list[Message] = []
        models: Counter[str] = Counter()
        for d in self.drafts:
            blocks: list[Block] = []
            for b in d.blocks:
                if isinstance(b, ToolResult) and not b.name and b.call_id in self.call_names:
                    b = msgspec.structs.replace(b, name=self.call_names[b.call_id])
                blocks.append(b)
            if d.role == "assistant" and d.model and d.model != SYNTHETIC_MODEL:
                models[d.model] += 1
            messages.append(
                Message(
                    role="assistant" if d.role == "assistant" else "user",
                    blocks=tuple(blocks),
                    id=d.id,
                    timestamp=d.timestamp,
                    origin=d.origin,
                    usage=d.usage,
                    model=d.model,
                    compaction=d.compaction,
                    meta=d.meta,
                )
            )
        meta = dict(self.meta)
        if self.comment_lines:
            meta["comment_lines"] = self.comment_lines
        if len(self.session_ids) > 1:
            meta["session_ids"] = list(self.session_ids)
        sidechain = self.message_records > 0 and self.sidechain_records == self.message_records
        if self.agent_id is not None:
            meta["agent_id"] = self.agent_id
        title = meta.get("custom_title") or meta.get("ai_title")
        if title:
            meta["title"] = title
        return Session(
            source=self.source,
            format="claude-code",
            messages=messages,
            model=models.most_common(1)[0][0] if models else None,
            session_id=self.session_ids[0] if self.session_ids else None,
            compactions=self.compactions,
            malformed=self.malformed_list,
            skipped=dict(self.skipped),
            sidechain=sidechain,
            meta=meta,
        )
