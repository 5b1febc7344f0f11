"""The structured summary in each preset's format (Claude Code, OpenClaw, pi, Letta), within its limits.

``render_style`` renders a ``SummaryState`` and the span of this compaction (``StyleInput``) in a
harness's format (``summary_formats``): Claude Code's nine sections; OpenClaw's required headings
with tool failures, preserved recent turns and file lists; pi's sections in a ``<summary>`` user
message with the split-turn context and the cumulative ``<read-files>`` / ``<modified-files>``;
Letta's sections within its word limit in a ``system_alert`` (``letta_wrap``). Sections a model
would write from judgement are stated as not extracted. When the text is over ``max_tokens``
(or Letta's words), lists are halved from their oldest end level by level (at most
``MAX_LEVEL``), then the text is cut. ``style_envelope`` wraps an LLM-written summary as the
harness delivers it. Pure.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence

import msgspec

from ctxengine.messages import identifiers
from ctxengine.messages.model import Message, Text, ToolCall, ToolResult
from ctxengine.summary.formats import (
    CC_CONTINUE,
    CC_RESUME,
    CONSTRAINT_RE,
    LETTA_ALL_SECTIONS,
    LETTA_CLIP_CHARS,
    LETTA_SECTIONS,
    NOT_EXTRACTED,
    OPENCLAW_FAILURE_CHARS,
    OPENCLAW_HEADINGS,
    OPENCLAW_IDENTIFIER_MESSAGES,
    OPENCLAW_MAX_FAILURES,
    OPENCLAW_MAX_IDENTIFIERS,
    OPENCLAW_RECENT_TURNS,
    OPENCLAW_TURN_CHARS,
    PI_INTRO,
    PI_SECTIONS,
    StyleInput,
)
from ctxengine.summary.render import _cut_to_tokens
from ctxengine.summary.state import (
    PLAN_CHARS,
    SummaryState,
    _cut,
    _describe_call,
    _result_text,
    current_plan,
    update,
)


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
