"""Claude Code ``attachment`` records -> the text the model saw.

Each attachment type is rendered close to what Claude Code sends (``file`` as a Read tool call and
line-numbered content, ``todo_reminder`` as the TodoWrite nudge plus the items, ``queued_command``
as the prompt, skills with names and content, hook output, plan references, ...); the wording is
an approximation of Claude Code's own, which is not recorded. Unknown types render as compact JSON
with bulky base64 elided (``BULKY_CHARS``). An empty result means the attachment sent nothing.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from ctxengine.formats.claude_code.blocks import (
    Draft,
    as_str,
    compact_json,
    content_blocks,
    int_or_none,
)
from ctxengine.messages.media import image_size
from ctxengine.messages.model import Block, Image, Text

BULKY_CHARS = 2000  # strings at least this long that look like base64 are elided in JSON dumps


_TODO_NUDGE = (
    "The TodoWrite tool hasn't been used recently. If you're working on tasks that would benefit "
    "from tracking progress, consider using the TodoWrite tool to track progress. Also consider "
    "cleaning up the todo list if has become stale and no longer matches what you are working on. "
    "Only use it if it's relevant to the current work. This is just a gentle reminder - ignore if "
    "not applicable. Make sure that you NEVER mention this reminder to the user"
)


def render_attachment(att: dict[str, Any]) -> list[Block]:
    """Blocks for one attachment; empty when the attachment sends nothing to the model."""
    kind = att.get("type")
    if kind == "file":
        return _render_file(att)
    if kind == "queued_command":
        prompt = att.get("prompt")
        if isinstance(prompt, list):
            return [b for b in content_blocks(prompt, Draft("user", "", None)) if nonempty(b)]
    render = _TEXT_RENDERERS.get(kind) if isinstance(kind, str) else None
    text = render(att) if render is not None else compact_json(strip_bulky(att))
    return [Text(text)] if text else []


def _queued_command(att: dict[str, Any]) -> str:
    return as_str(att.get("prompt"))


def _todo_reminder(att: dict[str, Any]) -> str:
    items = att.get("content")
    lines = []
    for i, item in enumerate(items if isinstance(items, list) else [], start=1):
        if isinstance(item, dict):
            lines.append(f"{i}. [{as_str(item.get('status'))}] {as_str(item.get('content'))}")
    text = _TODO_NUDGE
    if lines:
        text += "\n\nHere are the existing contents of your todo list:\n\n" + "\n".join(lines)
    return text


def _skill_listing(att: dict[str, Any]) -> str:
    content = as_str(att.get("content"))
    if content:
        return "The following skills are available for use with the Skill tool:\n\n" + content
    return ""


def _invoked_skills(att: dict[str, Any]) -> str:
    parts = []
    for skill in att.get("skills") or []:
        if isinstance(skill, dict):
            head = f"### Skill: {as_str(skill.get('name'))}"
            if skill.get("path"):
                head += f"\nPath: {as_str(skill.get('path'))}"
            parts.append(f"{head}\n\n{as_str(skill.get('content'))}")
    if parts:
        return "The following skills were invoked in this session:\n\n" + "\n\n".join(parts)
    return ""


def _compact_file_reference(att: dict[str, Any]) -> str:
    name = as_str(att.get("filename")) or as_str(att.get("displayPath"))
    return (
        f"Note: {name} was read before the last conversation was summarized, but the contents "
        "are too large to include. Use Read tool if you need to access it."
    )


def _plan_file_reference(att: dict[str, Any]) -> str:
    return (
        f"A plan file exists from plan mode at: {as_str(att.get('planFilePath'))}\n\n"
        f"Plan contents:\n\n{as_str(att.get('planContent'))}"
    )


def _edited_text_file(att: dict[str, Any]) -> str:
    return (
        f"Note: {as_str(att.get('filename'))} was modified, either by the user or by a linter. "
        "Here are the relevant changes (shown with line numbers):\n" + as_str(att.get("snippet"))
    )


_HOOK_LABELS = {
    "hook_success": "hook success",
    "hook_blocking_error": "hook blocking error",
    "hook_non_blocking_error": "hook non-blocking error",
}


def _hook_output(att: dict[str, Any]) -> str:
    kind = att.get("type")
    body = as_str(att.get("content")) if kind == "hook_success" else as_str(att.get("stderr"))
    if body:
        return f"{as_str(att.get('hookName'))} {_HOOK_LABELS[str(kind)]}: {body}"
    return ""


def _hook_additional_context(att: dict[str, Any]) -> str:
    extra = att.get("content")
    body = "\n".join(as_str(c) for c in extra) if isinstance(extra, list) else as_str(extra)
    if body:
        return f"{as_str(att.get('hookName'))} hook additional context: {body}"
    return ""


def _command_permissions(att: dict[str, Any]) -> str:
    tools = att.get("allowedTools")
    if tools:
        return "Allowed tools for this command: " + ", ".join(as_str(t) for t in tools)
    return ""


# attachment type -> its text ("" when it sends nothing); other types render as compact JSON
_TEXT_RENDERERS: dict[str, Callable[[dict[str, Any]], str]] = {
    "queued_command": _queued_command,
    "todo_reminder": _todo_reminder,
    "skill_listing": _skill_listing,
    "invoked_skills": _invoked_skills,
    "compact_file_reference": _compact_file_reference,
    "plan_file_reference": _plan_file_reference,
    "edited_text_file": _edited_text_file,
    "hook_success": _hook_output,
    "hook_blocking_error": _hook_output,
    "hook_non_blocking_error": _hook_output,
    "hook_additional_context": _hook_additional_context,
    "command_permissions": _command_permissions,
}


def _render_file(att: dict[str, Any]) -> list[Block]:
    filename = as_str(att.get("filename"))
    content = att.get("content")
    content = content if isinstance(content, dict) else {}
    file = content.get("file")
    file = file if isinstance(file, dict) else {}
    path = as_str(file.get("filePath")) or filename
    head = (
        "Called the Read tool with the following input: "
        + json.dumps({"file_path": path}, ensure_ascii=False, separators=(",", ":"))
        + "\nResult of calling the Read tool:\n"
    )
    kind = content.get("type")
    if kind == "text":
        start = int_or_none(file.get("startLine")) or 1
        lines = as_str(file.get("content")).split("\n")
        body = "\n".join(f"{start + i}\t{line}" for i, line in enumerate(lines))
        return [Text(head + body)]
    if kind == "image" and isinstance(file.get("base64"), str):
        data = file["base64"]
        size = image_size(data)
        media_type = as_str(file.get("type")) or "image/png"
        return [
            Text(head.rstrip("\n")),
            Image(media_type, data=data, width=size[0] if size else None, height=size[1] if size else None),
        ]
    return [Text(head + compact_json(strip_bulky(content)))]


def nonempty(block: Block) -> bool:
    """Whether ``block`` is anything but whitespace-only text."""
    return not (isinstance(block, Text) and not block.text.strip())


def strip_bulky(obj: Any) -> Any:
    """A copy of ``obj`` with long base64-looking strings replaced by a short note."""
    if isinstance(obj, dict):
        return {k: strip_bulky(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [strip_bulky(v) for v in obj]
    if isinstance(obj, str) and len(obj) >= BULKY_CHARS and " " not in obj[:BULKY_CHARS]:
        return f"<{len(obj)} chars of binary data>"
    return obj
