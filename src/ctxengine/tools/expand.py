"""The ``expand`` tool: the original messages of a range of the session's transcript, paged.

A summary or a skeleton stands for a range of messages; when the model needs a detail it dropped,
``expand(start, end)`` gives the messages back exactly as they were ingested (the store's
``message`` entries: the transcript only grows), numbered from 0 in transcript order. A page holds
at most ``PAGE_CHARS`` characters; a longer range ends with the call that reads on. Ours (issue
29); the retrieve tool gives back one offloaded result, this one a stretch of the conversation.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import msgspec

from ctxengine.messages.model import Message, Text, Thinking, ToolCall, ToolResult
from ctxengine.store.base import SessionStore, StoreError
from ctxengine.tools.base import ToolError, ToolSpec

PAGE_CHARS = 20_000  # a page of expand's output at most, chars
MAX_MESSAGES = 200  # messages in one range at most

EXPAND_DESCRIPTION = (
    "Return the original messages of a range of this session's transcript (numbered from 0 in "
    "order), exactly as they were, to recover a detail a summary left out. Paged: a long range "
    "ends with the call that reads on."
)
EXPAND_PARAMETERS: dict[str, Any] = {
    "type": "object",
    "properties": {
        "start": {"type": "integer", "minimum": 0, "description": "First message, 0-based."},
        "end": {
            "type": "integer",
            "minimum": 1,
            "description": "One past the last message (default start + 20).",
        },
        "offset": {"type": "integer", "minimum": 0, "description": "Character offset in the range's text."},
    },
    "required": ["start"],
    "additionalProperties": False,
}


def render(index: int, msg: Message) -> str:
    """One message as text: its number, role and every block (tool calls with their input,
    tool results with their text; thinking, images and documents named)."""
    parts = [f"#{index} {msg.role}" + (f" ({msg.id})" if msg.id else "") + ":"]
    for b in msg.blocks:
        if isinstance(b, Text):
            parts.append(b.text)
        elif isinstance(b, ToolCall):
            inp = b.input if isinstance(b.input, str) else msgspec.json.encode(b.input).decode()
            parts.append(f"[tool call {b.name} id={b.id}] {inp}")
        elif isinstance(b, ToolResult):
            text = "\n".join(p.text for p in b.content if isinstance(p, Text))
            parts.append(f"[tool result id={b.call_id}{' error' if b.is_error else ''}] {text}")
        elif isinstance(b, Thinking):
            parts.append("[thinking]")
        else:
            parts.append(f"[{type(b).__name__.lower()}]")
    return "\n".join(parts)


def expand(store: SessionStore, session: str, start: int, end: int | None = None, offset: int = 0) -> str:
    """Messages ``start`` .. ``end`` - 1 of ``session`` rendered (``render``), from character
    ``offset``, at most ``PAGE_CHARS``. Raises ``ToolError`` for an empty or reversed range, one
    past the transcript's end, or a store that cannot be read."""
    stop = start + 20 if end is None else end
    if start < 0 or stop <= start:
        raise ToolError(f"expand: empty range {start}..{stop}")
    if stop - start > MAX_MESSAGES:
        raise ToolError(f"expand: at most {MAX_MESSAGES} messages at a time (asked {stop - start})")
    try:
        entries = store.entries(session, "message")
    except StoreError as exc:
        raise ToolError(f"expand: the session store cannot be read: {exc}") from exc
    if start >= len(entries):
        raise ToolError(f"expand: the transcript has {len(entries)} messages (0..{len(entries) - 1})")
    msgs = [msgspec.convert(e.payload, Message) for e in entries[start:stop]]
    text = "\n\n".join(render(start + k, m) for k, m in enumerate(msgs))
    page = text[offset : offset + PAGE_CHARS]
    shown = f"[messages {start}..{start + len(msgs) - 1} of {len(entries)}]\n"
    if offset + PAGE_CHARS < len(text):
        nxt = offset + PAGE_CHARS
        page += f"\n[... {len(text) - nxt:,} more chars: expand(start={start}, end={stop}, offset={nxt})]"
    return shown + page


def specs(store: SessionStore, session: str | Callable[[], str]) -> list[ToolSpec]:
    """The ``expand`` tool on ``store``'s transcript of ``session`` (an id, or a callable
    returning the current one)."""

    def run(start: int, end: int | None = None, offset: int = 0) -> str:
        sid = session() if callable(session) else session
        return expand(store, sid, start, end, offset)

    return [ToolSpec("expand", EXPAND_DESCRIPTION, EXPAND_PARAMETERS, run)]


__all__ = ["EXPAND_DESCRIPTION", "PAGE_CHARS", "expand", "render", "specs"]
