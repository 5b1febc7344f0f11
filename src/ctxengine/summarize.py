"""The structured summary without an LLM: the embedded default summarizer ($0).

It follows the content of Claude Code's nine-section compaction summary where it can be computed
without a model: the primary request and every user message verbatim (each cut to a cap), files
read and modified, errors and what followed them, pending todos from todo/plan tool calls, the
current plan (the latest plan proposed with Claude Code's ``ExitPlanMode``, and whether the user
approved it: ``current_plan``), the current work (the latest assistant text), and the exact
identifiers (paths, URLs, ids) of the span, newest first. State accumulates across compactions
(pi's cumulative file lists), so a second compaction extends the first summary rather than
summarising a summary.

Pure: it reads messages and returns text; the engine decides where it goes. The size is bounded by
``max_tokens`` (counted with the caller's counter): sections are cut from the least valuable end.

The presets render the same facts in their harness's format and size limit
(``render_style``): Claude Code's nine sections; OpenClaw's required headings (Decisions, Open
TODOs, Constraints/Rules, Pending user asks, Exact identifiers: at most 12, from the last 10
messages) with tool failures, preserved recent turns and file lists; pi's Goal / Constraints &
Preferences / Progress / Key Decisions / Next Steps / Critical Context in a ``<summary>`` user
message with the split-turn context and the cumulative ``<read-files>`` / ``<modified-files>``;
Letta's sections within its word limit in a ``system_alert``. Sections a model would write from
judgement are stated as not extracted. ``STYLE_PROMPTS`` / ``STYLE_SECTIONS`` are the LLM
prompts and audited headings of the same formats; ``style_envelope`` wraps an LLM summary as the
harness delivers it.
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
                plan = _plan_input(b)
                if plan is not None:
                    state.plan, state.plan_status, plan_call = _cut(plan, PLAN_CHARS), PLAN_PROPOSED, b.id
                    path = b.input.get("planFilePath") if isinstance(b.input, dict) else None
                    state.plan_file = path if isinstance(path, str) else ""
                if pending_error is not None:
                    state.errors.append(f"{pending_error}\n  then: {_describe_call(b)}")
                    pending_error = None
            elif isinstance(b, ToolResult):
                text = _result_text(b)
                for ident in sorted(identifiers.extract(text)):
                    state.identifiers[ident] = state.position
                call = calls.get(b.call_id)
                if b.call_id == plan_call or (call is None and state.plan and b.name.lower() in PLAN_TOOLS):
                    _plan_result(state, b, text)  # (the call may have been folded with an earlier span)
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
    if state.plan:
        parts.append("## Current plan (latest plan from ExitPlanMode)\n" + current_plan(state))
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


# ====================================================================== preset styles
#
# The same facts (``SummaryState`` plus the span of this compaction), rendered as each harness's
# summary looks, within that harness's size limit. Sections a model would write from judgement
# (Claude Code's "Key Technical Concepts", pi's "Key Decisions") are stated as not extracted: the
# $0 summary does not invent them. Our own long identifier list is not part of any preset.

CC_CONTINUE = (
    "This session is being continued from a previous conversation that ran out of context. The "
    "summary below covers the earlier portion of the conversation."
)
CC_RESUME = (
    "Please continue the conversation from where we left it off without asking the user any "
    "further questions. Continue with the last task that you were asked to work on."
)
PI_INTRO = "The conversation history before this point was compacted into the following summary:"
NOT_EXTRACTED = "(not extracted: structured summary, no model involved)"
OPENCLAW_HEADINGS = (
    "## Decisions",
    "## Open TODOs",
    "## Constraints/Rules",
    "## Pending user asks",
    "## Exact identifiers",
)
OPENCLAW_MAX_IDENTIFIERS = 12  # extracted identifiers: at most 12 ...
OPENCLAW_IDENTIFIER_MESSAGES = 10  # ... from the last 10 messages
OPENCLAW_MAX_FAILURES = 8  # ## Tool Failures: 8 entries ...
OPENCLAW_FAILURE_CHARS = 240  # ... of 240 chars
OPENCLAW_RECENT_TURNS = 3  # recentTurnsPreserve
OPENCLAW_TURN_CHARS = 600  # per preserved message
PI_SECTIONS = (
    "## Goal",
    "## Constraints & Preferences",
    "## Progress",
    "## Key Decisions",
    "## Next Steps",
    "## Critical Context",
)
LETTA_SECTIONS = (
    "High level goals",
    "What happened",
    "Important details",
    "Errors and fixes",
    "Lookup hints",
)
LETTA_ALL_SECTIONS = (*LETTA_SECTIONS[:4], "Current state", "Optional next step", LETTA_SECTIONS[4])
LETTA_CLIP_CHARS = 50_000  # clip_chars, then "... [summary truncated to fit]"
CONSTRAINT_RE = re.compile(
    r"(?i)\b(must|never|always|do not|don't|dont|should not|shouldn't|only|avoid|without)\b"
)


class StyleInput(msgspec.Struct, kw_only=True):
    """What a style needs besides the cumulative state: the messages summarized by this
    compaction (``span``, oldest first; for pi without the split turn's prefix), the prefix of a
    split turn (pi), the number of messages hidden so far (Letta), whether everything was
    summarized (Letta's "all" mode), and word / token limits."""

    span: list[Message] = msgspec.field(default_factory=list)
    turn_prefix: list[Message] = msgspec.field(default_factory=list)
    hidden_messages: int = 0
    all_mode: bool = False
    max_words: int = 0
    turn_prefix_max_tokens: int = 8_192
    timestamp: float | None = None
    turn_text: str = ""  # the split turn's section, already cut to ``turn_prefix_max_tokens``


def _clip(text: str, limit: int) -> str:
    text = " ".join(text.split()) if "\n" not in text[:limit] else text
    return text if len(text) <= limit else text[: max(0, limit - 3)] + "..."


def _latest_request(state: SummaryState, span: Sequence[Message]) -> str:
    for m in reversed(span):
        if m.role == "user" and m.origin == "message" and not m.tool_results and m.text().strip():
            return m.text().strip()
    return state.user_messages[-1] if state.user_messages else state.primary_request


def ordered_identifiers(messages: Sequence[Message]) -> list[str]:
    """Identifiers of ``messages`` in order of first appearance (text, tool inputs, results)."""
    out: list[str] = []
    seen: set[str] = set()
    for m in messages:
        for b in m.blocks:
            if isinstance(b, Text):
                text = b.text
            elif isinstance(b, ToolCall):
                text = b.input if isinstance(b.input, str) else json.dumps(b.input, ensure_ascii=False)
            elif isinstance(b, ToolResult):
                text = _result_text(b)
            else:
                continue
            found = [i for i in identifiers.extract(text) if i not in seen]
            found.sort(key=lambda i: (text.find(i), i))
            for i in found:
                seen.add(i)
                out.append(i)
    return out


def tool_failures(messages: Sequence[Message], limit: int, chars: int) -> list[str]:
    """Tool results flagged as errors (deduplicated by call id), at most ``limit``, each cut to
    ``chars`` (OpenClaw's ``## Tool Failures``)."""
    names: dict[str, str] = {}
    out: list[str] = []
    seen: set[str] = set()
    for m in messages:
        for b in m.blocks:
            if isinstance(b, ToolCall):
                names[b.id] = b.name
            elif isinstance(b, ToolResult) and b.is_error and b.call_id not in seen:
                seen.add(b.call_id)
                name = names.get(b.call_id) or b.name or "tool"
                out.append(f"- {name}: {_clip(_result_text(b).strip(), chars)}")
    return out[-limit:]


def recent_turns(messages: Sequence[Message], turns: int, chars: int) -> list[str]:
    """The last ``turns`` user turns' text messages (user and assistant), each cut to ``chars``."""
    picked: list[str] = []
    users = 0
    for m in reversed(messages):
        text = m.text().strip()
        if not text or m.tool_results or m.origin != "message":
            continue
        if m.role == "user":
            picked.append(f"- User: {_clip(text, chars)}")
            users += 1
            if users >= turns:
                break
        elif m.role == "assistant":
            picked.append(f"- Assistant: {_clip(text, chars)}")
    return list(reversed(picked))


def _file_lists(state: SummaryState, limit: int | None = None) -> str:
    modified = list(state.files_modified)
    read_only = [f for f in state.files_read if f not in set(modified)]
    if limit is not None:
        modified, read_only = modified[-limit:], read_only[-limit:]
    parts = []
    if read_only:
        parts.append("<read-files>\n" + "\n".join(read_only) + "\n</read-files>")
    if modified:
        parts.append("<modified-files>\n" + "\n".join(modified) + "\n</modified-files>")
    return "\n\n".join(parts)


def _bullets(items: Sequence[str], empty: str = "- (none recorded)") -> str:
    return "\n".join(i if i.startswith("- ") else f"- {i}" for i in items) if items else empty


def _shrink(items: list[str], level: int, floor: int = 1) -> list[str]:
    """The newest ``len / 2**level`` items (at least ``floor``, when there are any)."""
    if level <= 0 or not items:
        return items
    keep = max(floor, len(items) >> level)
    return items[-keep:]


def _tasks(state: SummaryState, level: int, empty: str = "- (none recorded)") -> str:
    """The latest todo list, then the current plan (cut shorter at each level), labelled."""
    parts = [state.todos] if state.todos else []
    plan = current_plan(state)
    if plan:
        plan = _cut(plan, max(1_000, PLAN_CHARS >> level))
        parts.append("Current plan (latest plan from ExitPlanMode):\n" + plan)
    return "\n\n".join(parts) or empty


def _render_claude_code(state: SummaryState, si: StyleInput, level: int) -> str:
    users = _shrink([_clip(u, max(200, 2_000 >> level)) for u in state.user_messages], level, 2)
    errors = _shrink(list(state.errors), level, 1)
    files = _shrink(
        [f"{f} (modified)" for f in state.files_modified]
        + [f"{f} (read)" for f in state.files_read if f not in state.files_modified],
        level,
        5,
    )
    latest = _latest_request(state, si.span)
    sections = [
        ("Primary Request and Intent", state.primary_request or "(none recorded)"),
        ("Key Technical Concepts", NOT_EXTRACTED),
        ("Files and Code Sections", _bullets(files)),
        ("Errors and fixes", "\n".join(errors) if errors else "- (none recorded)"),
        ("Problem Solving", "See Errors and fixes; " + NOT_EXTRACTED),
        ("All user messages", _bullets(users)),
        ("Pending Tasks", _tasks(state, level)),
        ("Current Work", state.current_work or "(none recorded)"),
        (
            "Optional Next Step",
            f'Continue with the latest request: "{_clip(latest, 1_000)}"' if latest else "-",
        ),
    ]
    body = "\n\n".join(f"{n}. {title}:\n{text}" for n, (title, text) in enumerate(sections, 1))
    return f"{CC_CONTINUE}\n\nSummary:\n{body}\n\n{CC_RESUME}"


def _render_openclaw(state: SummaryState, si: StyleInput, level: int) -> str:
    latest = _latest_request(state, si.span)
    ids = ordered_identifiers(si.span[-OPENCLAW_IDENTIFIER_MESSAGES:])[:OPENCLAW_MAX_IDENTIFIERS]
    rules = [
        _clip(line.strip(), OPENCLAW_FAILURE_CHARS)
        for u in state.user_messages
        for line in u.splitlines()
        if line.strip() and CONSTRAINT_RE.search(line)
    ]
    failures = _shrink(tool_failures(si.span, OPENCLAW_MAX_FAILURES, OPENCLAW_FAILURE_CHARS), level)
    turns = recent_turns(si.span, OPENCLAW_RECENT_TURNS, OPENCLAW_TURN_CHARS >> min(level, 2))
    decisions = (
        f"- (latest assistant message) {_clip(state.current_work, OPENCLAW_TURN_CHARS)}"
        if state.current_work
        else "- (none recorded)"
    )
    parts = [
        f"{OPENCLAW_HEADINGS[0]}\n{decisions}",
        f"{OPENCLAW_HEADINGS[1]}\n{_tasks(state, level)}",
        f"{OPENCLAW_HEADINGS[2]}\n{_bullets(_shrink(rules, level + 1, 3))}",
        f"{OPENCLAW_HEADINGS[3]}\n" + (f"- {_clip(latest, OPENCLAW_TURN_CHARS)}" if latest else "- (none)"),
        f"{OPENCLAW_HEADINGS[4]}\n" + ("\n".join(f"- {i}" for i in ids) if ids else "- (none)"),
    ]
    if failures:
        parts.append("## Tool Failures\n" + "\n".join(failures))
    if turns:
        parts.append("## Recent turns (preserved)\n" + "\n".join(turns))
    files = _file_lists(state, None if level < 2 else max(5, 200 >> level))
    if files:
        parts.append(files)
    return "\n\n".join(parts)


def _turn_prefix_text(si: StyleInput, level: int) -> str:
    if not si.turn_prefix:
        return ""
    prefix = SummaryState()
    update(prefix, si.turn_prefix, user_message_chars=2_000)
    request = next(
        (m.text().strip() for m in si.turn_prefix if m.role == "user" and m.text().strip()), "(none)"
    )
    calls = [_describe_call(c) for m in si.turn_prefix for c in m.tool_calls]
    calls = _shrink(calls, level + 1, 3)
    return (
        "---\n\n**Turn Context (split turn):**\n\n"
        f"## Original Request\n{_clip(request, 2_000)}\n\n"
        f"## Early Progress\n{_bullets(calls)}\n\n"
        f"## Context for Suffix\n{prefix.current_work or '(none recorded)'}"
    )


def _render_pi(state: SummaryState, si: StyleInput, level: int) -> str:
    latest = _latest_request(state, si.span or si.turn_prefix)
    constraints = [_clip(u, 500) for u in state.user_messages[1:] if CONSTRAINT_RE.search(u)]
    errors = _shrink(list(state.errors), level, 1)
    done = [f"Modified {f}" for f in state.files_modified]
    in_progress = _clip(state.current_work, 2_000) if state.current_work else "(none recorded)"
    blocked = errors[-1:] if errors else []
    body = "\n\n".join(
        [
            f"{PI_SECTIONS[0]}\n{state.primary_request or '(none recorded)'}",
            f"{PI_SECTIONS[1]}\n{_bullets(_shrink(constraints, level + 1, 2))}",
            f"{PI_SECTIONS[2]}\n### Done\n{_bullets(_shrink(done, level, 5))}\n\n"
            f"### In Progress\n- {in_progress}"
            f"\n\n### Blocked\n{_bullets(blocked, '- (none)')}",
            f"{PI_SECTIONS[3]}\n- {NOT_EXTRACTED}",
            f"{PI_SECTIONS[4]}\n"
            + (
                _tasks(state, level, "")
                or (f"- Continue: {_clip(latest, 1_000)}" if latest else "- (none recorded)")
            ),
            f"{PI_SECTIONS[5]}\n" + ("\n".join(errors) if errors else "- (none recorded)"),
        ]
    )
    turn = si.turn_text or _turn_prefix_text(si, level)
    if turn:
        body += "\n\n" + turn
    text = f"{PI_INTRO}\n\n<summary>\n{body}\n</summary>"
    files = _file_lists(state, None if level < 3 else max(5, 400 >> level))
    return text + ("\n\n" + files if files else "")


def _render_letta(state: SummaryState, si: StyleInput, level: int) -> str:
    users = _shrink([_clip(u, max(60, 400 >> level)) for u in state.user_messages], level + 1, 1)
    files = _shrink(
        state.files_modified + [f for f in state.files_read if f not in state.files_modified], level + 1, 2
    )
    errors = _shrink([_clip(e, 200 >> min(level, 2)) for e in state.errors], level + 2, 1)
    sections = {
        "High level goals": _clip(state.primary_request, max(80, 600 >> level)) or "(none recorded)",
        "What happened": _bullets(users),
        "Important details": _bullets(files),
        "Errors and fixes": "\n".join(errors) if errors else "- (none recorded)",
        "Current state": _clip(state.current_work, max(80, 600 >> level)) or "(none recorded)",
        "Optional next step": _clip(_latest_request(state, si.span), max(60, 300 >> level)) or "-",
        "Lookup hints": "Search the conversation history for the exact files and errors named above.",
    }
    names = LETTA_ALL_SECTIONS if si.all_mode else LETTA_SECTIONS
    return "\n\n".join(f"## {n}\n{sections[n]}" for n in names)


def letta_wrap(summary: str, hidden: int, timestamp: float | None) -> str:
    """Letta's summary message: a ``system_alert`` naming how many messages are hidden."""
    import datetime

    when = (
        datetime.datetime.fromtimestamp(timestamp, datetime.UTC).strftime("%Y-%m-%d %I:%M:%S %p UTC")
        if timestamp is not None
        else ""
    )
    if len(summary) > LETTA_CLIP_CHARS:
        summary = summary[:LETTA_CLIP_CHARS] + "... [summary truncated to fit]"
    return json.dumps(
        {
            "type": "system_alert",
            "message": f"Note: {hidden} prior messages have been hidden from view due to conversation "
            f"memory constraints.\nThe following is a summary of the previous messages:\n {summary}",
            "time": when,
        },
        ensure_ascii=False,
    )


_STYLE_RENDERERS = {
    "claude-code": _render_claude_code,
    "openclaw": _render_openclaw,
    "pi": _render_pi,
    "letta": _render_letta,
}
MAX_LEVEL = 8


def render_style(
    style: str, state: SummaryState, si: StyleInput, *, max_tokens: int, count: Callable[[str], int]
) -> str:
    """The structured summary in ``style``'s format (claude-code, openclaw, pi, letta) within
    ``max_tokens`` (and, for Letta, ``si.max_words`` words): lists are halved from their oldest
    end level by level, and the text finally cut to fit. ``ctxengine`` is ``render``."""
    renderer = _STYLE_RENDERERS[style]
    if style == "pi" and si.turn_prefix and not si.turn_text:
        turn = _turn_prefix_text(si, 0)
        if count(turn) > si.turn_prefix_max_tokens:
            turn = _cut_to_tokens(turn, si.turn_prefix_max_tokens, count)
        si = msgspec.structs.replace(si, turn_text=turn)

    def fits(text: str) -> bool:
        if si.max_words and len(text.split()) > si.max_words:
            return False
        return count(text) <= max_tokens

    text = ""
    for level in range(MAX_LEVEL + 1):
        text = renderer(state, si, level)
        if fits(text):
            break
    else:
        if si.max_words:
            text = " ".join(text.split(" ")[: si.max_words])
            while len(text.split()) > si.max_words:
                text = text.rsplit(None, 1)[0]
        if count(text) > max_tokens:
            text = _cut_to_tokens(text, max_tokens, count)
    if style == "letta":
        return letta_wrap(text, si.hidden_messages, si.timestamp)
    return text


def style_envelope(style: str, summary: str, state: SummaryState, si: StyleInput) -> str:
    """An LLM-written summary wrapped as ``style`` delivers it: Claude Code's continuation
    message, pi's ``<summary>`` user message with the cumulative file lists, OpenClaw's appended
    tool failures and file lists, Letta's ``system_alert``."""
    if style == "claude-code":
        return f"{CC_CONTINUE}\n\n{summary}\n\n{CC_RESUME}"
    if style == "pi":
        files = _file_lists(state)
        return f"{PI_INTRO}\n\n<summary>\n{summary}\n</summary>" + ("\n\n" + files if files else "")
    if style == "openclaw":
        parts = [summary]
        failures = tool_failures(si.span, OPENCLAW_MAX_FAILURES, OPENCLAW_FAILURE_CHARS)
        if failures:
            parts.append("## Tool Failures\n" + "\n".join(failures))
        files = _file_lists(state)
        if files:
            parts.append(files)
        return "\n\n".join(parts)
    if style == "letta":
        return letta_wrap(summary, si.hidden_messages, si.timestamp)
    return summary


STYLE_SECTIONS: dict[str, tuple[str, ...]] = {
    "openclaw": tuple(h.removeprefix("## ") for h in OPENCLAW_HEADINGS),
    "pi": (
        "Goal",
        "Constraints & Preferences",
        "Progress",
        "Done",
        "In Progress",
        "Blocked",
        "Key Decisions",
        "Next Steps",
        "Critical Context",
    ),
    "letta": LETTA_SECTIONS,
}
"""The headings an LLM summary must carry in each style (audited); Claude Code's nine sections
are ``llm_summary.NINE_SECTIONS``."""

STYLE_PROMPTS: dict[str, str] = {
    "openclaw": (
        "Summarize the conversation {where} so the agent can continue the work. Use exactly these "
        "headings, in this order:\n## Decisions\n## Open TODOs\n## Constraints/Rules\n"
        "## Pending user asks\n## Exact identifiers\nPut literal values (paths, URLs, ids, hashes, "
        "hosts, ports) in the last one. Never omit unresolved user asks. Preserve active tasks with "
        "their status, batch progress, the user's last request and what was being done about it, "
        "decisions and their rationale, open questions and promised follow-ups; favour recent "
        "context. Keep every opaque identifier exactly as written, without shortening or "
        "reconstructing it. Write in the conversation's main language; do not translate code, "
        "paths, identifiers or error messages.{extra}"
    ),
    "pi": (
        "Summarize the conversation {where}. Do not continue the conversation and do not answer "
        "questions in it. Use this format:\n\n## Goal\n## Constraints & Preferences\n## Progress\n"
        "### Done\n### In Progress\n### Blocked\n## Key Decisions\n## Next Steps\n"
        "## Critical Context\n\nKeep exact file paths, function names and error messages.{extra}"
    ),
    "letta": (
        "Your job is to summarize the history of a conversation {where} between an AI agent and a "
        "user, in the first person, as the agent. Keep every identifier (file paths, ids, URLs, "
        "error codes) verbatim. Use these sections:\nHigh level goals\nWhat happened\n"
        "Important details\nErrors and fixes\nLookup hints\nStay under {words} words.{extra}"
    ),
}
"""The summary prompts of the presets (wording ours, content after the references); each takes
``{where}`` and ``{extra}`` (and Letta's ``{words}``)."""
