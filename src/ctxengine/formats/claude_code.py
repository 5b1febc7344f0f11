"""Reader for Claude Code session JSONL (``~/.claude/projects/<proj>/<session>.jsonl`` and
``.../subagents/agent-*.jsonl``).

What it follows
---------------
* **File order, not the parentUuid chain.** The parent links form a tree (parallel tool calls,
  resumed sessions, background tasks), so following one chain loses messages. Messages are rebuilt
  in the order their records appear in the file.
* **One assistant message per API call.** Claude Code writes one ``assistant`` record per content
  block; records sharing ``message.id`` are grouped into one neutral ``Message`` (blocks in file
  order). Blocks are deduplicated: tool calls by ``tool_use`` id across the session, text and
  thinking by content within the message. ``usage`` is the call's LAST non-zero usage (the first
  records of a call often carry all-zero placeholders, and the same usage is repeated on every
  record); an all-zero usage becomes ``None``. ``<synthetic>`` messages (made by the harness, no
  API call) are kept with ``usage=None`` and ``meta["synthetic"]=True``; ``isApiErrorMessage``
  adds ``meta["api_error"]=True``.
* **Tool results.** Parallel calls get one ``user`` record per result; consecutive result records
  for the same assistant message are merged into one user ``Message``. User records that are not
  tool results (attachments, meta records, text) and arrive while the latest assistant message
  still has unanswered calls are held back and placed after the results (Claude Code hoists tool
  results to the front of the merged user turn it sends), so the history reads
  ``assistant(a, b) -> user(result a, result b) -> user(attachment)``. A result that arrives after
  another assistant message has started (a background task, a branch) stays where the file puts
  it; this reader does no pairing repair. ``ToolResult.name`` is filled from the matching call.
* **Resumed sessions.** Re-logged records (new uuids, same message ids/timestamps) are dropped:
  a record whose uuid was already seen, tool results whose ``tool_use_id`` was already seen, and
  user/attachment blocks whose (timestamp, content) was already seen. Dropped records are counted
  in ``Session.skipped`` as ``duplicate:<type>``.
* **Recorded compactions.** A ``system``/``compact_boundary`` record becomes a
  ``RecordedCompaction`` whose ``at`` is the index of the next message; the following
  ``isCompactSummary`` user record is ``origin="compact_summary"`` and the attachments (and
  ``isMeta`` user records) after it, up to the next real user/assistant message, are
  ``origin="compact_restore"``; all carry ``compaction=k``. An ``isCompactSummary`` record with no
  boundary before it opens a compaction with ``trigger="unknown"``. The full pre-boundary history
  stays in ``messages``.
* **Attachments** are context the model saw: each becomes a user ``Message`` with
  ``origin="attachment"`` and ``meta["attachment_type"]``, rendered as text close to what Claude
  Code sends (``file`` as a Read tool call + line-numbered content, ``todo_reminder`` as the
  TodoWrite nudge plus the items, ``queued_command`` as the prompt, skills with names and
  content, hook output, plan references, ...). Unknown types render as compact JSON without
  bulky base64. Types that render to nothing (``command_permissions``, a ``hook_success`` with
  empty ``content``, ...) are counted as ``skipped["attachment:<type>"]``. The wording is an
  approximation of Claude Code's own (which is not recorded); ``todo_reminder`` with no items is
  kept because Claude Code still sends its nudge text.
* ``isMeta`` user records were sent: kept as user messages with ``meta["is_meta"]=True``.
* Other record types (file-history-snapshot, queue-operation, last-prompt, ai-title, progress,
  summary, custom-title, ...) are counted in ``Session.skipped[type]``; ``system`` records other
  than ``compact_boundary`` as ``system:<subtype>``.

Edges
-----
* ``//`` comment lines and blank lines are skipped silently (``meta["comment_lines"]`` counts the
  former). A line that is not text (NUL bytes from an interrupted write, not UTF-8; see
  ``formats.bad_line_reason``), wherever it is in the file, is one bad record. A line that is
  not JSON or not an object, or a user/assistant record without a usable ``message``, is a
  ``Malformed`` entry plus a ``MalformedRecordWarning``; the rest loads.
* Image sizes are decoded from the PNG/GIF/WebP/JPEG header bytes of the base64 data (decoded
  progressively, so a large JPEG is not decoded whole unless its SOF marker is late).
* Redacted thinking becomes ``Thinking(thinking=<data>, redacted=True)``: the opaque ``data`` is
  kept whole in ``thinking`` (where the Anthropic writer looks for it) so it can be sent back as
  ``redacted_thinking``; it is not readable reasoning.
* Block types this reader does not model (``server_tool_use``, ``web_search_tool_result``, ...)
  become a ``Text`` block holding their compact JSON, and are listed in
  ``meta["unknown_blocks"]`` of the message.
* Every message keeps ``meta["uuids"]`` (the records it was built from) and
  ``meta["parent_uuid"]`` (the parent of its first record), so a later layer can inspect the
  record tree (e.g. branches interleaved in file order) without re-reading the file.
* One file is one ``Session``. A sidechain (subagent) file has ``sidechain=True``,
  ``session_id`` = the parent's ``sessionId`` and ``meta["agent_id"]``.
* Sidechain records in a main file: older Claude Code versions wrote a sub-agent's records
  (``isSidechain: true``, its ``agentId``) into the parent's file, between the parent's Task call
  and its result. They belong to the sub-agent, which ran its own model calls in its own context:
  they are kept out of the parent's messages and read as one more ``Session`` per ``agentId``
  (``sidechain=True``, ``parent`` = this file, ``name="subagent <agentId>"``, listed in the
  parent's ``meta["subagents"]``), after the parent. A main file is one with a user or assistant
  record marked ``isSidechain: false``; a file of sidechain records only is one sidechain
  session, as above.
"""

from __future__ import annotations

import binascii
import json
import struct
import warnings
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import msgspec

from ctxengine.formats import bad_line_reason
from ctxengine.messages import (
    Block,
    Document,
    Image,
    Malformed,
    Message,
    Origin,
    RecordedCompaction,
    ResultPart,
    Session,
    Text,
    Thinking,
    ToolCall,
    ToolResult,
    TranscriptError,
    Usage,
)

__all__ = ["MalformedRecordWarning", "image_size", "read"]

SYNTHETIC_MODEL = "<synthetic>"
MAX_WARNINGS = 20  # per file; further malformed lines are still recorded in Session.malformed
_BULKY_CHARS = 2000  # strings at least this long that look like base64 are elided in JSON dumps

_decoder = msgspec.json.Decoder()
_TURNS = ("user", "assistant")


class MalformedRecordWarning(UserWarning):
    """A transcript line could not be read; it was recorded in ``Session.malformed``."""


# --------------------------------------------------------------------------------------------
# public entry point


def read(path: Path) -> list[Session]:
    """Read the Claude Code session JSONL at ``path``.

    Returns the ``Session`` of the file (``format="claude-code"``, ``source=str(path)``) whose
    ``messages`` are the full history in file order, followed by one sidechain ``Session`` per
    sub-agent whose ``isSidechain`` records are interleaved in a main session file (older Claude
    Code versions wrote them there; see the module notes). Malformed lines are recorded in
    ``Session.malformed`` and reported with a ``MalformedRecordWarning``.

    Raises ``TranscriptError`` if the file cannot be opened.
    """
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise TranscriptError(f"{path}: cannot read ({exc.strerror or exc})") from None
    builder = _Builder(str(path))
    records: list[tuple[int, dict[str, Any]]] = []
    for lineno, line in enumerate(raw.split(b"\n"), start=1):
        stripped = line.strip()
        if not stripped:
            continue
        if stripped.startswith(b"//"):
            builder.comment_lines += 1
            continue
        reason = bad_line_reason(stripped)
        if reason is not None:  # an interrupted write, a stray binary line: one bad record
            builder.malformed(lineno, reason)
            continue
        try:
            record = _decoder.decode(stripped)
        except msgspec.DecodeError as exc:
            builder.malformed(lineno, f"invalid JSON: {exc}")
            continue
        if not isinstance(record, dict):
            builder.malformed(lineno, f"record is a JSON {type(record).__name__}, not an object")
            continue
        records.append((lineno, record))
    main_file = any(r.get("isSidechain") is False and r.get("type") in _TURNS for _, r in records)
    agents: dict[str, _Builder] = {}
    for lineno, record in records:
        if main_file and record.get("isSidechain") is True:
            agent = record.get("agentId")
            key = agent if isinstance(agent, str) else ""
            if key not in agents:
                agents[key] = _Builder(str(path))
            agents[key].add(record, lineno)
        else:
            builder.add(record, lineno)
    session = builder.finish()
    subagents: list[Session] = []
    for key, sub in agents.items():
        side = sub.finish()
        side.sidechain = True
        side.parent = session.source
        side.name = f"subagent {key}".rstrip()
        subagents.append(side)
    if subagents:
        session.meta["subagents"] = [s.name for s in subagents]
    return [session, *subagents]


# --------------------------------------------------------------------------------------------
# building


class _Draft:
    """A message under construction (blocks still mutable)."""

    __slots__ = (
        "blocks",
        "compaction",
        "id",
        "keys",
        "meta",
        "model",
        "origin",
        "role",
        "timestamp",
        "usage",
    )

    def __init__(
        self,
        role: str,
        msg_id: str,
        timestamp: float | None,
        origin: Origin = "message",
        compaction: int | None = None,
    ) -> None:
        self.role = role
        self.id = msg_id
        self.timestamp = timestamp
        self.origin: Origin = origin
        self.compaction = compaction
        self.blocks: list[Block] = []
        self.keys: set[tuple[Any, ...]] = set()  # content keys of blocks, for in-message dedupe
        self.usage: Usage | None = None
        self.model: str | None = None
        self.meta: dict[str, Any] = {}


class _Builder:
    def __init__(self, source: str) -> None:
        self.source = source
        self.drafts: list[_Draft] = []
        self.compactions: list[RecordedCompaction] = []
        self.malformed_list: list[Malformed] = []
        self.skipped: Counter[str] = Counter()
        self.comment_lines = 0
        self.warned = 0
        self.ids: set[str] = set()
        self.uuids: set[str] = set()
        self.assistant_by_id: dict[str, _Draft] = {}
        self.latest_assistant: _Draft | None = None
        self.call_ids: set[str] = set()
        self.call_names: dict[str, str] = {}
        self.result_ids: set[str] = set()
        self.user_keys: set[tuple[float, Any]] = set()  # (timestamp, block key) seen in user turns
        self.pending_calls: set[str] = set()  # unanswered calls of the latest assistant message
        self.open_results: _Draft | None = None  # tool-result message after the latest assistant
        self.deferred: list[_Draft] = []  # user messages held back until the results are in
        self.restore_k: int | None = None  # compaction whose restore window is open
        self.session_ids: list[str] = []
        self.agent_id: str | None = None
        self.sidechain_records = 0
        self.message_records = 0
        self.meta: dict[str, Any] = {}

    # -- bookkeeping ---------------------------------------------------------------------------

    def malformed(self, lineno: int, error: str) -> None:
        self.malformed_list.append(Malformed(self.source, lineno, error))
        self.warned += 1
        if self.warned <= MAX_WARNINGS:
            warnings.warn(
                f"{self.source}:{lineno}: malformed record skipped: {error}",
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

    def emit(self, draft: _Draft) -> None:
        """Append a message, placing any held-back user messages first."""
        self.flush_deferred()
        self.drafts.append(draft)

    def flush_deferred(self) -> None:
        if self.deferred:
            self.drafts.extend(self.deferred)
            self.deferred = []

    def emit_user(self, draft: _Draft) -> None:
        """Append a non-result user message, held back while tool calls await their results."""
        if self.pending_calls:
            self.deferred.append(draft)  # results still to come keep merging into open_results
        else:
            self.drafts.append(draft)
            self.open_results = None

    # -- records -------------------------------------------------------------------------------

    def add(self, rec: dict[str, Any], lineno: int) -> None:
        kind = rec.get("type")
        if not isinstance(kind, str):
            self.skipped["<no type>"] += 1
            return
        if kind in ("user", "assistant", "attachment"):
            uuid = rec.get("uuid")
            if isinstance(uuid, str) and uuid:
                if uuid in self.uuids:
                    self.skipped[f"duplicate:{kind}"] += 1
                    return
                self.uuids.add(uuid)
            self._note_session(rec)
        if kind == "assistant":
            self._assistant(rec, lineno)
        elif kind == "user":
            self._user(rec, lineno)
        elif kind == "attachment":
            self._attachment(rec, lineno)
        elif kind == "system":
            subtype = rec.get("subtype")
            if subtype == "compact_boundary":
                self._boundary(rec)
            else:
                self.skipped[f"system:{subtype}"] += 1
        else:
            self.skipped[kind] += 1
            self._note_other(kind, rec)

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

    def _assistant(self, rec: dict[str, Any], lineno: int) -> None:
        msg = rec.get("message")
        if not isinstance(msg, dict) or not isinstance(msg.get("content"), list | str):
            self.malformed(lineno, "assistant record without a message.content")
            return
        ts = _timestamp(rec.get("timestamp"))
        mid = msg.get("id")
        if not isinstance(mid, str) or not mid:
            mid = _record_id(rec, lineno)
        draft = self.assistant_by_id.get(mid)
        is_new = draft is None
        if draft is None:
            draft = _Draft("assistant", self.unique_id(mid), ts)
            self.assistant_by_id[mid] = draft
        _link(draft, rec)
        model = msg.get("model")
        if isinstance(model, str) and model:
            draft.model = model
        if model == SYNTHETIC_MODEL:
            draft.meta["synthetic"] = True
        if rec.get("isApiErrorMessage") is True:
            draft.meta["api_error"] = True
        if self.restore_k is not None:
            self.restore_k = None
        added = 0
        for block in _content_blocks(msg["content"], draft):
            if isinstance(block, ToolCall):
                if block.id in self.call_ids:
                    continue
                self.call_ids.add(block.id)
                self.call_names[block.id] = block.name
                if draft is self.latest_assistant:
                    self.pending_calls.add(block.id)
            else:
                key = _block_key(block)
                if key in draft.keys:
                    continue
                draft.keys.add(key)
            draft.blocks.append(block)
            added += 1
        if not draft.meta.get("synthetic"):
            usage = _usage(msg.get("usage"))
            if usage is not None and not usage.is_zero:
                draft.usage = usage
        if is_new:
            # a new model call: results of the previous one are complete
            self.pending_calls = {b.id for b in draft.blocks if isinstance(b, ToolCall)}
            self.open_results = None
            self.latest_assistant = draft
            self.emit(draft)
        elif added == 0:
            self.skipped["duplicate:assistant"] += 1

    def _user(self, rec: dict[str, Any], lineno: int) -> None:
        msg = rec.get("message")
        if not isinstance(msg, dict) or not isinstance(msg.get("content"), list | str):
            self.malformed(lineno, "user record without a message.content")
            return
        ts = _timestamp(rec.get("timestamp"))
        uuid = _record_id(rec, lineno)
        probe = _Draft("user", "", ts)
        blocks = _content_blocks(msg["content"], probe)
        results: list[Block] = []
        others: list[Block] = []
        for block in blocks:
            if isinstance(block, ToolResult):
                if block.call_id in self.result_ids:
                    continue
                self.result_ids.add(block.call_id)
                results.append(block)
            else:
                others.append(block)
        if not results:
            others = self._new_user_blocks(ts, others)
        if not results and not others:
            self.skipped["duplicate:user"] += 1
            return
        if results:
            for block in others:  # record user content of result records too
                if ts is not None:
                    self.user_keys.add((ts, _block_key(block)))
            self.restore_k = None
            target = self.open_results
            if target is None:
                target = _Draft("user", self.unique_id(uuid), ts)
                self.emit(target)
                self.open_results = target
            target.meta.update(probe.meta)
            _link(target, rec)
            target.blocks.extend(results)
            target.blocks.extend(others)
            for block in results:
                if isinstance(block, ToolResult):
                    self.pending_calls.discard(block.call_id)
            if not self.pending_calls:
                self.flush_deferred()
            return
        draft = _Draft("user", self.unique_id(uuid), ts)
        draft.meta.update(probe.meta)
        _link(draft, rec)
        draft.blocks.extend(others)
        is_meta = rec.get("isMeta") is True
        if is_meta:
            draft.meta["is_meta"] = True
        if rec.get("isCompactSummary") is True:
            if self.restore_k is None:
                self._open_compaction(ts, None, "unknown")
            draft.origin = "compact_summary"
            draft.compaction = self.restore_k
        elif self.restore_k is not None and is_meta:
            draft.origin = "compact_restore"
            draft.compaction = self.restore_k
        else:
            self.restore_k = None
        self.emit_user(draft)

    def _new_user_blocks(self, ts: float | None, blocks: list[Block]) -> list[Block]:
        """Drop blocks already seen at the same timestamp (re-logged after a resume)."""
        if ts is None:
            return blocks
        keys = [(ts, _block_key(b)) for b in blocks]
        fresh = [b for b, k in zip(blocks, keys, strict=True) if k not in self.user_keys]
        self.user_keys.update(keys)
        return fresh

    def _attachment(self, rec: dict[str, Any], lineno: int) -> None:
        att = rec.get("attachment")
        if not isinstance(att, dict):
            self.malformed(lineno, "attachment record without an attachment object")
            return
        att_type = att.get("type") if isinstance(att.get("type"), str) else "unknown"
        blocks = _render_attachment(att)
        if not blocks:
            self.skipped[f"attachment:{att_type}"] += 1
            return
        ts = _timestamp(rec.get("timestamp"))
        blocks = self._new_user_blocks(ts, blocks)
        if not blocks:
            self.skipped["duplicate:attachment"] += 1
            return
        uuid = _record_id(rec, lineno)
        draft = _Draft("user", self.unique_id(uuid), ts, origin="attachment")
        draft.meta["attachment_type"] = att_type
        _link(draft, rec)
        draft.blocks.extend(blocks)
        if self.restore_k is not None:
            draft.origin = "compact_restore"
            draft.compaction = self.restore_k
        self.emit_user(draft)

    def _boundary(self, rec: dict[str, Any]) -> None:
        meta = rec.get("compactMetadata")
        meta = meta if isinstance(meta, dict) else {}
        trigger = meta.get("trigger")
        self._open_compaction(
            _timestamp(rec.get("timestamp")),
            meta,
            trigger if isinstance(trigger, str) and trigger else "auto",
        )

    def _open_compaction(self, ts: float | None, meta: dict[str, Any] | None, trigger: str) -> None:
        self.flush_deferred()
        self.pending_calls = set()
        self.open_results = None
        k = len(self.compactions)
        meta = meta or {}
        self.compactions.append(
            RecordedCompaction(
                index=k,
                at=len(self.drafts),
                trigger=trigger,
                pre_tokens=_int_or_none(meta.get("preTokens")),
                post_tokens=_int_or_none(meta.get("postTokens")),
                timestamp=ts,
            )
        )
        self.restore_k = k

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


# --------------------------------------------------------------------------------------------
# content blocks


def _content_blocks(content: Any, draft: _Draft) -> list[Block]:
    """Convert a ``message.content`` (string or list of blocks) to neutral blocks. Unknown block
    types become JSON text and are noted in ``draft.meta["unknown_blocks"]``."""
    if isinstance(content, str):
        return [Text(content)]
    out: list[Block] = []
    for raw in content:
        if isinstance(raw, str):
            out.append(Text(raw))
            continue
        if not isinstance(raw, dict):
            continue
        block = _block(raw)
        if block is None:
            draft.meta.setdefault("unknown_blocks", []).append(str(raw.get("type")))
            block = Text(_compact_json(raw))
        out.append(block)
    return out


def _block(raw: dict[str, Any]) -> Block | None:
    kind = raw.get("type")
    if kind == "text":
        return Text(_str(raw.get("text")))
    if kind == "thinking":
        return Thinking(_str(raw.get("thinking")), signature=_str(raw.get("signature")))
    if kind == "redacted_thinking":
        return Thinking(_str(raw.get("data")), redacted=True)
    if kind == "tool_use":
        args = raw.get("input")
        if not isinstance(args, dict | str):
            args = {} if args is None else {"input": args}
        return ToolCall(_str(raw.get("id")), _str(raw.get("name")), args)
    if kind == "tool_result":
        return ToolResult(
            call_id=_str(raw.get("tool_use_id")),
            content=_result_content(raw.get("content")),
            is_error=raw.get("is_error") is True,
        )
    if kind == "image":
        return _image(raw)
    if kind == "document":
        return _document(raw)
    return None


def _result_content(content: Any) -> tuple[ResultPart, ...]:
    if content is None or content == "":
        return ()
    if isinstance(content, str):
        return (Text(content),)
    if isinstance(content, dict):
        content = [content]
    if not isinstance(content, list):
        return (Text(_compact_json(content)),)
    parts: list[ResultPart] = []
    for raw in content:
        if isinstance(raw, str):
            parts.append(Text(raw))
            continue
        if not isinstance(raw, dict):
            continue
        kind = raw.get("type")
        if kind == "text":
            parts.append(Text(_str(raw.get("text"))))
        elif kind == "image":
            parts.append(_image(raw))
        elif kind == "document":
            parts.append(_document(raw))
        else:
            parts.append(Text(_compact_json(raw)))
    return tuple(parts)


def _image(raw: dict[str, Any]) -> Image:
    source = raw.get("source")
    source = source if isinstance(source, dict) else {}
    media_type = _str(source.get("media_type"))
    if source.get("type") == "url":
        return Image(media_type=media_type, url=_str(source.get("url")))
    data = _str(source.get("data"))
    size = image_size(data) if data else None
    return Image(
        media_type=media_type,
        data=data,
        width=size[0] if size else None,
        height=size[1] if size else None,
    )


def _document(raw: dict[str, Any]) -> Document:
    source = raw.get("source")
    source = source if isinstance(source, dict) else {}
    kind = source.get("type")
    if kind == "text":
        data = _str(source.get("data"))
        media_type = _str(source.get("media_type")) or "text/plain"
    elif kind == "base64":
        data = _str(source.get("data"))
        media_type = _str(source.get("media_type"))
    else:
        data = _compact_json(source)
        media_type = _str(source.get("media_type")) or "application/json"
    return Document(media_type=media_type, data=data, title=_str(raw.get("title")))


def _block_key(block: Block) -> tuple[Any, ...]:
    """A hashable content key for dedupe (large payloads are keyed by length and ends)."""
    if isinstance(block, Text):
        return ("text", block.text)
    if isinstance(block, Thinking):
        return ("thinking", block.thinking, block.redacted, block.signature if block.redacted else "")
    if isinstance(block, Image | Document):
        data = block.data
        return (
            type(block).__name__,
            block.media_type,
            len(data),
            data[:256],
            data[-256:],
            getattr(block, "url", ""),
        )
    if isinstance(block, ToolCall):
        return ("tool_call", block.id)
    return ("tool_result", block.call_id)


# --------------------------------------------------------------------------------------------
# attachments


_TODO_NUDGE = (
    "The TodoWrite tool hasn't been used recently. If you're working on tasks that would benefit "
    "from tracking progress, consider using the TodoWrite tool to track progress. Also consider "
    "cleaning up the todo list if has become stale and no longer matches what you are working on. "
    "Only use it if it's relevant to the current work. This is just a gentle reminder - ignore if "
    "not applicable. Make sure that you NEVER mention this reminder to the user"
)


def _render_attachment(att: dict[str, Any]) -> list[Block]:
    """Blocks for one attachment; empty when the attachment sends nothing to the model."""
    kind = att.get("type")
    text = ""
    if kind == "file":
        return _render_file(att)
    if kind == "queued_command":
        prompt = att.get("prompt")
        if isinstance(prompt, list):
            return [b for b in _content_blocks(prompt, _Draft("user", "", None)) if _nonempty(b)]
        text = _str(prompt)
    elif kind == "todo_reminder":
        items = att.get("content")
        lines = []
        for i, item in enumerate(items if isinstance(items, list) else [], start=1):
            if isinstance(item, dict):
                lines.append(f"{i}. [{_str(item.get('status'))}] {_str(item.get('content'))}")
        text = _TODO_NUDGE
        if lines:
            text += "\n\nHere are the existing contents of your todo list:\n\n" + "\n".join(lines)
    elif kind == "skill_listing":
        content = _str(att.get("content"))
        if content:
            text = "The following skills are available for use with the Skill tool:\n\n" + content
    elif kind == "invoked_skills":
        parts = []
        for skill in att.get("skills") or []:
            if isinstance(skill, dict):
                head = f"### Skill: {_str(skill.get('name'))}"
                if skill.get("path"):
                    head += f"\nPath: {_str(skill.get('path'))}"
                parts.append(f"{head}\n\n{_str(skill.get('content'))}")
        if parts:
            text = "The following skills were invoked in this session:\n\n" + "\n\n".join(parts)
    elif kind == "compact_file_reference":
        name = _str(att.get("filename")) or _str(att.get("displayPath"))
        text = (
            f"Note: {name} was read before the last conversation was summarized, but the contents "
            "are too large to include. Use Read tool if you need to access it."
        )
    elif kind == "plan_file_reference":
        text = (
            f"A plan file exists from plan mode at: {_str(att.get('planFilePath'))}\n\n"
            f"Plan contents:\n\n{_str(att.get('planContent'))}"
        )
    elif kind == "edited_text_file":
        text = (
            f"Note: {_str(att.get('filename'))} was modified, either by the user or by a linter. "
            "Here are the relevant changes (shown with line numbers):\n" + _str(att.get("snippet"))
        )
    elif kind in ("hook_success", "hook_blocking_error", "hook_non_blocking_error"):
        body = _str(att.get("content")) if kind == "hook_success" else _str(att.get("stderr"))
        if body:
            label = {
                "hook_success": "hook success",
                "hook_blocking_error": "hook blocking error",
                "hook_non_blocking_error": "hook non-blocking error",
            }[kind]
            text = f"{_str(att.get('hookName'))} {label}: {body}"
    elif kind == "hook_additional_context":
        extra = att.get("content")
        body = "\n".join(_str(c) for c in extra) if isinstance(extra, list) else _str(extra)
        if body:
            text = f"{_str(att.get('hookName'))} hook additional context: {body}"
    elif kind == "command_permissions":
        tools = att.get("allowedTools")
        if tools:
            text = "Allowed tools for this command: " + ", ".join(_str(t) for t in tools)
    else:
        text = _compact_json(_strip_bulky(att))
    return [Text(text)] if text else []


def _render_file(att: dict[str, Any]) -> list[Block]:
    filename = _str(att.get("filename"))
    content = att.get("content")
    content = content if isinstance(content, dict) else {}
    file = content.get("file")
    file = file if isinstance(file, dict) else {}
    path = _str(file.get("filePath")) or filename
    head = (
        "Called the Read tool with the following input: "
        + json.dumps({"file_path": path}, ensure_ascii=False, separators=(",", ":"))
        + "\nResult of calling the Read tool:\n"
    )
    kind = content.get("type")
    if kind == "text":
        start = _int_or_none(file.get("startLine")) or 1
        lines = _str(file.get("content")).split("\n")
        body = "\n".join(f"{start + i}\t{line}" for i, line in enumerate(lines))
        return [Text(head + body)]
    if kind == "image" and isinstance(file.get("base64"), str):
        data = file["base64"]
        size = image_size(data)
        media_type = _str(file.get("type")) or "image/png"
        return [
            Text(head.rstrip("\n")),
            Image(media_type, data=data, width=size[0] if size else None, height=size[1] if size else None),
        ]
    return [Text(head + _compact_json(_strip_bulky(content)))]


def _nonempty(block: Block) -> bool:
    return not (isinstance(block, Text) and not block.text.strip())


def _strip_bulky(obj: Any) -> Any:
    """A copy of ``obj`` with long base64-looking strings replaced by a short note."""
    if isinstance(obj, dict):
        return {k: _strip_bulky(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_strip_bulky(v) for v in obj]
    if isinstance(obj, str) and len(obj) >= _BULKY_CHARS and " " not in obj[:_BULKY_CHARS]:
        return f"<{len(obj)} chars of binary data>"
    return obj


# --------------------------------------------------------------------------------------------
# usage, scalars


def _usage(raw: Any) -> Usage | None:
    """Normalise an Anthropic usage dict; None when absent."""
    if not isinstance(raw, dict):
        return None
    write_total = _int(raw.get("cache_creation_input_tokens"))
    write_5m, write_1h = write_total, 0
    split = raw.get("cache_creation")
    if isinstance(split, dict):
        e5 = _int(split.get("ephemeral_5m_input_tokens"))
        e1 = _int(split.get("ephemeral_1h_input_tokens"))
        if e5 or e1:
            write_1h = e1
            write_5m = max(e5, write_total - e1)  # any unsplit rest counts as unspecified TTL
    return Usage(
        input_tokens=_int(raw.get("input_tokens")),
        cache_read_tokens=_int(raw.get("cache_read_input_tokens")),
        cache_write_tokens=write_5m,
        cache_write_1h_tokens=write_1h,
        output_tokens=_int(raw.get("output_tokens")),
    )


def _link(draft: _Draft, rec: dict[str, Any]) -> None:
    """Note the record's uuid (and, for the first record, its parent) in ``draft.meta``."""
    uuids = draft.meta.setdefault("uuids", [])
    if not uuids:
        parent = rec.get("parentUuid") or rec.get("logicalParentUuid")
        if isinstance(parent, str) and parent:
            draft.meta["parent_uuid"] = parent
    uuid = rec.get("uuid")
    if isinstance(uuid, str) and uuid:
        uuids.append(uuid)


def _record_id(rec: dict[str, Any], lineno: int) -> str:
    uuid = rec.get("uuid")
    return uuid if isinstance(uuid, str) and uuid else f"line-{lineno}"


def _timestamp(value: Any) -> float | None:
    """ISO-8601 string (``...Z`` or with offset; naive means UTC) -> epoch seconds."""
    if not isinstance(value, str) or not value:
        return None
    try:
        dt = datetime.fromisoformat(value)
    except ValueError:
        return None
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=UTC)
    return dt.timestamp()


def _int(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def _int_or_none(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _str(value: Any) -> str:
    if value is None:
        return ""
    return value if isinstance(value, str) else _compact_json(value)


def _compact_json(obj: Any) -> str:
    return json.dumps(obj, ensure_ascii=False, separators=(",", ":"), default=str)


# --------------------------------------------------------------------------------------------
# image headers

_SOF_MARKERS = frozenset({0xC0, 0xC1, 0xC2, 0xC3, 0xC5, 0xC6, 0xC7, 0xC9, 0xCA, 0xCB, 0xCD, 0xCE, 0xCF})
_PREFIX_CHARS = (512, 8192, 131072)  # base64 chars decoded before giving up and decoding it all


def image_size(data: str) -> tuple[int, int] | None:
    """``(width, height)`` in pixels of a base64 PNG, GIF, WebP or JPEG image, read from its
    header; None when the format is unknown or the header is damaged.

    Only a prefix is decoded (512 base64 chars, then more for a JPEG whose SOF marker comes
    after large metadata segments)."""
    for n in (*_PREFIX_CHARS, len(data)):
        whole = n >= len(data)
        chunk = data if whole else data[: n - n % 4]
        try:
            raw = binascii.a2b_base64(chunk)
        except binascii.Error:
            if whole:
                return None
            continue
        size, need_more = _header_size(raw)
        if size is not None or not need_more or whole:
            return size
    return None


def _header_size(b: bytes) -> tuple[tuple[int, int] | None, bool]:
    """Parse ``b`` (the start of an image file): (size or None, whether more bytes might help)."""
    if b.startswith(b"\x89PNG\r\n\x1a\n"):
        if len(b) < 24:
            return None, True
        w, h = struct.unpack(">II", b[16:24])
        return (w, h), False
    if b[:6] in (b"GIF87a", b"GIF89a"):
        if len(b) < 10:
            return None, True
        w, h = struct.unpack("<HH", b[6:10])
        return (w, h), False
    if b[:4] == b"RIFF" and b[8:12] == b"WEBP":
        return _webp_size(b)
    if b[:2] == b"\xff\xd8":
        return _jpeg_size(b)
    return None, len(b) < 12


def _webp_size(b: bytes) -> tuple[tuple[int, int] | None, bool]:
    if len(b) < 30:
        return None, True
    chunk = b[12:16]
    if chunk == b"VP8 ":
        w, h = struct.unpack("<HH", b[26:30])
        return (w & 0x3FFF, h & 0x3FFF), False
    if chunk == b"VP8L":
        (bits,) = struct.unpack("<I", b[21:25])
        return ((bits & 0x3FFF) + 1, ((bits >> 14) & 0x3FFF) + 1), False
    if chunk == b"VP8X":
        w = int.from_bytes(b[24:27], "little") + 1
        h = int.from_bytes(b[27:30], "little") + 1
        return (w, h), False
    return None, False


def _jpeg_size(b: bytes) -> tuple[tuple[int, int] | None, bool]:
    i, n = 2, len(b)
    while True:
        while i < n and b[i] != 0xFF:
            i += 1
        while i < n and b[i] == 0xFF:
            i += 1
        if i >= n:
            return None, True
        marker = b[i]
        i += 1
        if marker == 0x01 or 0xD0 <= marker <= 0xD8:
            continue  # standalone markers
        if marker in (0xD9, 0xDA):
            return None, False  # end of image / start of scan before any frame header
        if i + 2 > n:
            return None, True
        (length,) = struct.unpack(">H", b[i : i + 2])
        if marker in _SOF_MARKERS:
            if i + 7 > n:
                return None, True
            h, w = struct.unpack(">HH", b[i + 3 : i + 7])
            return (w, h), False
        if length < 2:
            return None, False
        i += length
