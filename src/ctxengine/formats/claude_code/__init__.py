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
* ``//`` comment lines and blank lines (JSON whitespace only: ``formats.json_line``; a line of
  form feeds is a bad record) are skipped silently (``meta["comment_lines"]`` counts the
  former). A line that is not text (NUL bytes from an interrupted write, not UTF-8; see
  ``formats.bad_line_reason``), wherever it is in the file, is one bad record. A line that is
  not JSON or not an object, or a user/assistant record without a usable ``message``, is a
  ``Malformed`` entry plus a ``MalformedRecordWarning``; the rest loads.
* Image sizes are read from the header of the base64 data by ``ctxengine.messages.media.image_size``
  (``imagesize``; decoded progressively, so a large JPEG is not decoded whole unless its SOF
  marker is late).
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

Modules
-------
``blocks`` (content blocks -> neutral blocks, scalar helpers), ``attachments`` (attachment records
-> text), ``usage`` (Anthropic usage -> ``Usage``), ``tree`` (uuids and parents, sidechains,
compaction boundaries), ``builder`` (session state, message order, ``finish``), ``records`` (one
handler per record type); this module reads the file and splits off the sub-agents' sessions.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import msgspec

from ctxengine.formats import TOO_DEEP, bad_line_reason, json_line
from ctxengine.formats.claude_code.builder import MAX_WARNINGS as MAX_WARNINGS
from ctxengine.formats.claude_code.builder import SYNTHETIC_MODEL as SYNTHETIC_MODEL
from ctxengine.formats.claude_code.builder import MalformedRecordWarning as MalformedRecordWarning
from ctxengine.formats.claude_code.records import Builder
from ctxengine.formats.claude_code.tree import is_main_file, mark_sidechain, sidechain_key
from ctxengine.messages.media import image_size as image_size
from ctxengine.messages.model import Session, TranscriptError

__all__ = ["MalformedRecordWarning", "image_size", "read"]

_decoder = msgspec.json.Decoder()


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
    builder = Builder(str(path))
    records = _records(raw, builder)
    main_file = is_main_file(records)
    agents: dict[str, Builder] = {}
    for lineno, record in records:
        key = sidechain_key(record, main_file)
        if key is not None:
            if key not in agents:
                agents[key] = Builder(str(path))
            agents[key].add(record, lineno)
        else:
            builder.add(record, lineno)
    session = builder.finish()
    subagents = [mark_sidechain(sub.finish(), session, key) for key, sub in agents.items()]
    if subagents:
        session.meta["subagents"] = [s.name for s in subagents]
    return [session, *subagents]


def _records(raw: bytes, builder: Builder) -> list[tuple[int, dict[str, Any]]]:
    """The JSON-object records of the file's lines, with their line numbers. Comment lines are
    counted on ``builder``; unreadable lines are recorded there as malformed."""
    records: list[tuple[int, dict[str, Any]]] = []
    for lineno, line in enumerate(raw.split(b"\n"), start=1):
        stripped = json_line(line)
        if not stripped:
            continue
        if stripped.startswith(b"//"):
            builder.comment_lines += 1
            continue
        # a line that decodes is readable text (``formats.bad_line_reason``): a line is judged
        # only when it does not (an interrupted write, a stray binary line: one bad record)
        try:
            record = _decoder.decode(stripped)
        except msgspec.DecodeError as exc:
            builder.malformed(lineno, bad_line_reason(stripped) or f"invalid JSON: {exc}")
            continue
        except RecursionError:
            builder.malformed(lineno, bad_line_reason(stripped) or f"invalid JSON: {TOO_DEEP}")
            continue
        if not isinstance(record, dict):
            builder.malformed(lineno, f"record is a JSON {type(record).__name__}, not an object")
            continue
        records.append((lineno, record))
    return records
