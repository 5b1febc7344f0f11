"""The structured summary's state: the facts of the compacted span, folded message by message.

``SummaryState`` is what the $0 structured summary (``ctxengine.summary.structured``) remembers across
compactions (pi's cumulative file lists): the primary request and every user message (each cut
to a cap), files read and modified, errors and what followed them, the latest todo list, the
current plan (Claude Code's ``ExitPlanMode``: the latest plan and whether the user approved it),
the current work (the latest assistant text) and the exact identifiers with the position where
each was last seen. ``update`` folds a span into it; the renderers (``summary_render``,
``summary_styles``) turn it into text. Pure: no I/O.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from typing import Any

import msgspec

from ctxengine.messages import identifiers
from ctxengine.messages.model import Message, Text, ToolCall, ToolResult

READ_TOOLS = {"read", "read_file", "view", "cat", "open_files", "notebookread"}
WRITE_TOOLS = {"edit", "write", "multiedit", "str_replace_editor", "apply_patch", "notebookedit", "create"}
TODO_TOOLS = {"todowrite", "update_plan", "taskcreate", "taskupdate", "todo_write"}
PLAN_TOOLS = {"exitplanmode"}  # Claude Code's plan mode: the input's ``plan`` is the plan (markdown)
PLAN_CHARS = 8_000  # a longer plan keeps its head and tail (``_cut``)
PATH_KEYS = ("file_path", "path", "filename", "notebook_path", "file")
ERROR_RE = re.compile(r"(?im)^.*\b(error|exception|traceback|failed|fatal|not found|denied)\b.*$")
PATCH_FILE_RE = re.compile(r"^\*\*\* (?:Update|Add|Delete) File: (.+)$", re.M)
# ExitPlanMode's result on approval: "User has approved your plan. ... Your plan has been saved
# to: PATH ... ## Approved Plan (edited by user):\nPLAN" (the plan as approved, edits included)
APPROVED_PLAN_RE = re.compile(r"^## Approved Plan[^\n]*:[ \t]*\n", re.M)
PLAN_FILE_RE = re.compile(r"plan has been saved to: *(.+?) *$", re.M)
PLAN_PROPOSED = "proposed, awaiting the user's approval"
PLAN_APPROVED = "approved by the user"

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
    plan: str = ""  # the latest ExitPlanMode plan (cut to PLAN_CHARS); see ``current_plan``
    plan_status: str = ""  # PLAN_PROPOSED, PLAN_APPROVED or "not approved: <the result>"
    plan_file: str = ""  # where Claude Code saved it, when recorded
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


def _plan_input(call: ToolCall) -> str | None:
    """The plan of a plan-tool call (``ExitPlanMode``'s ``plan``), or None."""
    if call.name.lower() not in PLAN_TOOLS or not isinstance(call.input, dict):
        return None
    plan = call.input.get("plan")
    return plan.strip() if isinstance(plan, str) and plan.strip() else None


def _plan_result(state: SummaryState, result: ToolResult, text: str) -> None:
    """Fold the result of the plan call that set ``state.plan``: approved (the plan as approved,
    which may carry the user's edits, and the plan file) or not (the result's first line)."""
    if not result.is_error:  # a plan the user rejects comes back as an error result
        m = APPROVED_PLAN_RE.search(text)
        if m is not None and text[m.end() :].strip():
            state.plan = _cut(text[m.end() :].strip(), PLAN_CHARS)
        f = PLAN_FILE_RE.search(text)
        if f is not None:
            state.plan_file = f.group(1)
        state.plan_status = PLAN_APPROVED
    else:
        first = text.strip().splitlines()[0] if text.strip() else "no answer recorded"
        state.plan_status = "not approved: " + first[:ERROR_LINE_CHARS]


def current_plan(state: SummaryState) -> str:
    """The current plan as the summaries and the restore show it: its status (proposed, approved
    by the user, or not approved), the plan file when recorded, then the plan; "" when none."""
    if not state.plan:
        return ""
    head = f"Status: {state.plan_status or PLAN_PROPOSED}"
    if state.plan_file:
        head += f"\nPlan file: {state.plan_file}"
    return f"{head}\n\n{state.plan}"


def update(state: SummaryState, messages: Sequence[Message], *, user_message_chars: int) -> SummaryState:
    """Fold ``messages`` (the span being compacted, oldest first) into ``state``; returns it."""
    calls: dict[str, ToolCall] = {}
    plan_call: str | None = None  # the call that set ``state.plan`` in this span
    pending_error: str | None = None
    for msg in messages:
        state.position += 1
        state.messages_summarized += 1
        for b in msg.blocks:
            if isinstance(b, Text):
                _note_identifiers(state, b.text)
            elif isinstance(b, ToolCall):
                calls[b.id] = b
                plan_call = _fold_call(state, b, plan_call)
                if pending_error is not None:
                    state.errors.append(f"{pending_error}\n  then: {_describe_call(b)}")
                    pending_error = None
            elif isinstance(b, ToolResult):
                pending_error = _fold_result(state, b, calls.get(b.call_id), plan_call, pending_error)
        _fold_text(state, msg, user_message_chars=user_message_chars)
    if pending_error is not None:
        state.errors.append(pending_error)
    state.errors = state.errors[-MAX_ERRORS:]
    return state


def _note_identifiers(state: SummaryState, text: str) -> None:
    """Record the identifiers of ``text`` as last seen at the current position."""
    ids = identifiers.extract_sorted(text)
    if ids:  # in order: a new identifier joins the end, a known one keeps its place
        state.identifiers.update(dict.fromkeys(ids, state.position))


def _fold_call(state: SummaryState, b: ToolCall, plan_call: str | None) -> str | None:
    """Fold one tool call: its identifiers, the files it read or modified, a todo list, a plan.
    Returns the id of the call that set ``state.plan`` in this span (``plan_call`` or ``b``'s)."""
    raw = b.input if isinstance(b.input, str) else json.dumps(b.input, ensure_ascii=False)
    _note_identifiers(state, raw)
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
    plan = _plan_input(b)
    if plan is not None:
        state.plan, state.plan_status, plan_call = _cut(plan, PLAN_CHARS), PLAN_PROPOSED, b.id
        path = b.input.get("planFilePath") if isinstance(b.input, dict) else None
        state.plan_file = path if isinstance(path, str) else ""
    return plan_call


def _fold_result(
    state: SummaryState,
    b: ToolResult,
    call: ToolCall | None,
    plan_call: str | None,
    pending_error: str | None,
) -> str | None:
    """Fold one tool result (``call``: its call, when in this span): its identifiers, the answer
    to the plan call, an error. Returns the error waiting for what followed it (the previous one,
    recorded alone, when this result is a new error)."""
    text = _result_text(b)
    _note_identifiers(state, text)
    if b.call_id == plan_call or (call is None and state.plan and b.name.lower() in PLAN_TOOLS):
        _plan_result(state, b, text)  # (the call may have been folded with an earlier span)
    if b.is_error or (text and ERROR_RE.search(text[:4000]) and b.is_error is not False):
        line = _first_error_line(text)
        if line:
            where = _describe_call(call) if call else b.name or "tool"
            if pending_error is not None:
                state.errors.append(pending_error)
            pending_error = f"- {where}: {line}"
    return pending_error


def _fold_text(state: SummaryState, msg: Message, *, user_message_chars: int) -> None:
    """Fold a message's text: a user's message (the first is the primary request), or the
    assistant's latest text (the current work)."""
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
