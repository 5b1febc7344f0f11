"""The structured summary without an LLM: the embedded default summarizer ($0).

It follows the content of Claude Code's nine-section compaction summary where it can be computed
without a model: the primary request and every user message verbatim (each cut to a cap), files
read and modified, errors and what followed them, pending todos from todo/plan tool calls, the
current work (the latest assistant text), and the exact identifiers (paths, URLs, ids) of the span,
newest first. State accumulates across compactions (pi's cumulative file lists), so a second
compaction extends the first summary rather than summarising a summary.

Pure: it reads messages and returns text; the engine decides where it goes. The size is bounded by
``max_tokens`` (counted with the caller's counter): sections are cut from the least valuable end.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Sequence
from typing import Any

import msgspec

from ctxengine import identifiers
from ctxengine.messages import Message, Text, ToolCall, ToolResult

READ_TOOLS = {"read", "read_file", "view", "cat", "open_files", "notebookread"}
WRITE_TOOLS = {"edit", "write", "multiedit", "str_replace_editor", "apply_patch", "notebookedit", "create"}
TODO_TOOLS = {"todowrite", "update_plan", "taskcreate", "taskupdate", "todo_write"}
PATH_KEYS = ("file_path", "path", "filename", "notebook_path", "file")
ERROR_RE = re.compile(r"(?im)^.*\b(error|exception|traceback|failed|fatal|not found|denied)\b.*$")
PATCH_FILE_RE = re.compile(r"^\*\*\* (?:Update|Add|Delete) File: (.+)$", re.M)

MAX_ERRORS = 30
ERROR_LINE_CHARS = 300
CURRENT_WORK_CHARS = 3_000


class SummaryState(msgspec.Struct):
    """What the structured summary remembers across compactions."""

    primary_request: str = ""
    user_messages: list[str] = msgspec.field(default_factory=list)
    files_read: list[str] = msgspec.field(default_factory=list)
    files_modified: list[str] = msgspec.field(default_factory=list)
    errors: list[str] = msgspec.field(default_factory=list)
    todos: str = ""
    current_work: str = ""
    identifiers: dict[str, int] = msgspec.field(default_factory=dict)  # id -> last position seen
    messages_summarized: int = 0
    position: int = 0


def _add_unique(seq: list[str], item: str) -> None:
    if item in seq:
        seq.remove(item)
    seq.append(item)


def _tool_paths(call: ToolCall) -> list[str]:
    if isinstance(call.input, str):
        return [m.strip() for m in PATCH_FILE_RE.findall(call.input)]
    out = []
    for key in PATH_KEYS:
        v = call.input.get(key)
        if isinstance(v, str) and v:
            out.append(identifiers.normalize_path(v))
    if not out and call.name.lower() == "apply_patch":
        patch = call.input.get("input") or call.input.get("patch")
        if isinstance(patch, str):
            out = [m.strip() for m in PATCH_FILE_RE.findall(patch)]
    return out


def _result_text(result: ToolResult) -> str:
    return "\n".join(p.text for p in result.content if isinstance(p, Text))


def _render_todos(call: ToolCall) -> str:
    data: Any = call.input
    if isinstance(data, dict):
        items = data.get("todos") or data.get("plan") or data.get("tasks")
        if isinstance(items, list):
            lines = []
            for it in items:
                if isinstance(it, dict):
                    status = it.get("status", "")
                    text = it.get("content") or it.get("step") or it.get("subject") or json.dumps(it)
                    lines.append(f"- [{status}] {text}")
                else:
                    lines.append(f"- {it}")
            return "\n".join(lines)
    return json.dumps(data, ensure_ascii=False)[:2000]


def update(state: SummaryState, messages: Sequence[Message], *, user_message_chars: int) -> SummaryState:
    """Fold ``messages`` (the span being compacted, oldest first) into ``state``; returns it."""
    calls: dict[str, ToolCall] = {}
    pending_error: str | None = None
    for msg in messages:
        state.position += 1
        state.messages_summarized += 1
        for b in msg.blocks:
            if isinstance(b, Text):
                for ident in sorted(identifiers.extract(b.text)):
                    state.identifiers[ident] = state.position
            elif isinstance(b, ToolCall):
                calls[b.id] = b
                raw = b.input if isinstance(b.input, str) else json.dumps(b.input, ensure_ascii=False)
                for ident in sorted(identifiers.extract(raw)):
                    state.identifiers[ident] = state.position
                name = b.name.lower()
                paths = _tool_paths(b)
                if name in READ_TOOLS:
                    for p in paths:
                        _add_unique(state.files_read, p)
                elif name in WRITE_TOOLS:
                    for p in paths:
                        _add_unique(state.files_modified, p)
                if name in TODO_TOOLS:
                    state.todos = _render_todos(b)
                if pending_error is not None:
                    state.errors.append(f"{pending_error}\n  then: {_describe_call(b)}")
                    pending_error = None
            elif isinstance(b, ToolResult):
                text = _result_text(b)
                for ident in sorted(identifiers.extract(text)):
                    state.identifiers[ident] = state.position
                call = calls.get(b.call_id)
                if b.is_error or (text and ERROR_RE.search(text[:4000]) and b.is_error is not False):
                    line = _first_error_line(text)
                    if line:
                        where = _describe_call(call) if call else b.name or "tool"
                        if pending_error is not None:
                            state.errors.append(pending_error)
                        pending_error = f"- {where}: {line}"
        if msg.role == "user" and msg.origin == "message" and not msg.tool_results:
            text = msg.text().strip()
            if text:
                if not state.primary_request:
                    state.primary_request = text[: user_message_chars * 2]
                state.user_messages.append(_cut(text, user_message_chars))
        elif msg.role == "assistant":
            text = msg.text().strip()
            if text:
                state.current_work = _cut(text, CURRENT_WORK_CHARS)
    if pending_error is not None:
        state.errors.append(pending_error)
    state.errors = state.errors[-MAX_ERRORS:]
    return state


def _first_error_line(text: str) -> str:
    m = ERROR_RE.search(text[:4000])
    line = m.group().strip() if m else text.strip().splitlines()[0] if text.strip() else ""
    return line[:ERROR_LINE_CHARS]


def _describe_call(call: ToolCall | None) -> str:
    if call is None:
        return "tool"
    if isinstance(call.input, str):
        arg = call.input
    else:
        arg = next((str(v) for v in call.input.values() if isinstance(v, str)), "")
    arg = arg.replace("\n", " ")
    return f"{call.name}({arg[:160]})"


def _cut(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    head = limit * 3 // 4
    tail = limit - head
    return f"{text[:head]}\n[... {len(text) - limit} chars cut ...]\n{text[-tail:]}"


def render(state: SummaryState, *, max_tokens: int, count: Callable[[str], int], identifiers_max: int) -> str:
    """The summary text, at most ``max_tokens`` tokens by ``count``.

    Sections are dropped or cut from the least valuable end (older user messages, older
    identifiers) until the text fits.
    """
    ids = sorted(state.identifiers, key=lambda k: (-state.identifiers[k], k))[:identifiers_max]
    user_msgs = list(state.user_messages)
    errors = list(state.errors)
    while True:
        text = _render(state, user_msgs, errors, ids)
        if count(text) <= max_tokens:
            return text
        if len(ids) > 40:
            ids = ids[: len(ids) * 3 // 4]
        elif len(errors) > 5:
            errors = errors[len(errors) // 2 :]
        elif len(user_msgs) > 3:
            user_msgs = user_msgs[:1] + user_msgs[2:]
        elif ids:
            ids = ids[: len(ids) // 2]
        else:
            return _cut_to_tokens(text, max_tokens, count)


def _cut_to_tokens(text: str, max_tokens: int, count: Callable[[str], int]) -> str:
    """The longest head of ``text`` within ``max_tokens`` (binary search on characters)."""
    lo, hi = 0, len(text)
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if count(text[:mid]) <= max_tokens:
            lo = mid
        else:
            hi = mid - 1
    return text[:lo]


def _render(state: SummaryState, user_msgs: list[str], errors: list[str], ids: list[str]) -> str:
    parts = [
        "This session is being continued from a previous conversation that ran out of context. "
        f"The {state.messages_summarized} earlier messages are summarized below (structured summary, "
        "no model involved); exact identifiers are kept verbatim.",
        "## Primary request\n" + (state.primary_request or "(none recorded)"),
    ]
    if user_msgs:
        omitted = len(state.user_messages) - len(user_msgs)
        head = f"## All user messages ({omitted} omitted for space)" if omitted else "## All user messages"
        parts.append(head + "\n" + "\n".join(f"- {u}" for u in user_msgs))
    if state.files_read:
        parts.append("## Files read\n" + "\n".join(f"- {p}" for p in state.files_read[-60:]))
    if state.files_modified:
        parts.append("## Files modified\n" + "\n".join(f"- {p}" for p in state.files_modified[-60:]))
    if errors:
        parts.append("## Errors and what followed\n" + "\n".join(errors))
    if state.todos:
        parts.append("## Pending tasks (latest todo list)\n" + state.todos)
    if state.current_work:
        parts.append("## Current work (latest assistant message)\n" + state.current_work)
    if ids:
        parts.append("## Identifiers (newest first)\n" + " ".join(ids))
    return "\n\n".join(parts)


def identifier_index(
    state: SummaryState, max_tokens: int, count: Callable[[str], int], limit: int = 400
) -> str:
    """A section listing the exact identifiers seen, newest first, within ``max_tokens``."""
    ids = sorted(state.identifiers, key=lambda k: (-state.identifiers[k], k))[:limit]
    while ids:
        text = "## Exact identifiers (newest first)\n" + " ".join(ids)
        if count(text) <= max_tokens:
            return text
        ids = ids[: len(ids) * 3 // 4]
    return ""
