"""Recovery hints: how the client's own tools get an offloaded or cleared tool result back.

Behind the proxy the agent has its own tools, not ctxengine's ``retrieve`` (unless the proxy runs
with ``--retrieve-tool``). So every tool result the engine replaced (a ``<persisted-output>``
preview, a cleared placeholder) gets one more line, made from the call that produced it: re-run
the command (a ``command`` / ``cmd`` argument: Bash, shell tools), or read the file again (a
``file_path`` / ``path`` / ``filename`` argument, with the lines asked for when the call gave an
offset and limit). A call with neither gets no line. The line depends only on the call, so a
result projects to the same bytes on every request (prompt cache).
"""

from __future__ import annotations

import msgspec

from ctxengine.engine.core import ContextEngine
from ctxengine.messages.model import Message, Text, ToolCall, ToolResult

COMMAND_KEYS = ("command", "cmd")
PATH_KEYS = ("file_path", "path", "filename")
MAX_HINT_CHARS = 300  # a longer command is cut (the call itself is still in the context)


def hint(call: ToolCall) -> str | None:
    """The recovery line for a result of ``call``, or None when the call names no command or file."""
    args = call.input if isinstance(call.input, dict) else {}
    for key in COMMAND_KEYS:
        value = args.get(key)
        if isinstance(value, str | list) and value:
            cmd = value if isinstance(value, str) else " ".join(str(v) for v in value)
            cmd = cmd if len(cmd) <= MAX_HINT_CHARS else cmd[:MAX_HINT_CHARS] + "..."
            return f"[To see this output again, re-run the command with your {call.name} tool: {cmd}]"
    for key in PATH_KEYS:
        value = args.get(key)
        if isinstance(value, str) and value:
            lines = ""
            offset, limit = args.get("offset"), args.get("limit")
            if isinstance(offset, int) and isinstance(limit, int):
                lines = f" (lines {offset}-{offset + limit - 1})"
            return f"[To see this output again, read {value}{lines} with your {call.name} tool]"
    return None


def with_recovery_hints(engine: ContextEngine, messages: list[Message]) -> list[Message]:
    """``messages`` with a recovery line added to each tool result the engine replaced. Messages
    with none are returned as they are (the same objects)."""
    shown = {id(r) for r in engine.replacements.values()}
    if not shown:
        return messages
    calls = {c.id: c for m in messages for c in m.tool_calls}
    out: list[Message] = []
    for m in messages:
        if m.role == "user" and any(id(b) in shown for b in m.blocks):
            m = msgspec.structs.replace(m, blocks=tuple(_hinted(b, calls, shown) for b in m.blocks))
        out.append(m)
    return out


def _hinted(block: object, calls: dict[str, ToolCall], shown: set[int]) -> object:
    if not isinstance(block, ToolResult) or id(block) not in shown:
        return block
    call = calls.get(block.call_id)
    line = hint(call) if call is not None else None
    if line is None:
        return block
    return ToolResult(block.call_id, (*block.content, Text(line)), block.is_error, block.name)


class HintMemo:
    """``with_recovery_hints`` of projection after projection of one session, each hinted message
    made once: the same object while the message and the calls its hints are made from are the
    same objects (what the writer's memo needs to reuse its encoding; ``body_memo``). The
    messages returned are equal to ``with_recovery_hints``'s."""

    def __init__(self) -> None:
        # id(message) -> (the message, per block: (shown, its call), the hinted message)
        self._made: dict[int, tuple[Message, tuple[tuple[bool, ToolCall | None], ...], Message]] = {}

    def apply(self, engine: ContextEngine, messages: list[Message]) -> list[Message]:
        """``with_recovery_hints(engine, messages)``, reusing the previous call's hinted messages."""
        shown = {id(r) for r in engine.replacements.values()}
        if not shown:
            self._made = {}
            return messages
        calls = {c.id: c for m in messages for c in m.tool_calls}
        out: list[Message] = []
        made: dict[int, tuple[Message, tuple[tuple[bool, ToolCall | None], ...], Message]] = {}
        for m in messages:
            if m.role == "user" and any(id(b) in shown for b in m.blocks):
                used = tuple(
                    (True, calls.get(b.call_id))
                    if isinstance(b, ToolResult) and id(b) in shown
                    else (False, None)
                    for b in m.blocks
                )
                prev = self._made.get(id(m))
                if prev is not None and prev[0] is m and _same(prev[1], used):
                    hinted = prev[2]
                else:
                    blocks = tuple(_hinted(b, calls, shown) for b in m.blocks)
                    hinted = msgspec.structs.replace(m, blocks=blocks)
                made[id(m)] = (m, used, hinted)
                m = hinted
            out.append(m)
        self._made = made
        return out


def _same(a: tuple[tuple[bool, ToolCall | None], ...], b: tuple[tuple[bool, ToolCall | None], ...]) -> bool:
    """Whether two blocks' (shown, call) lists are the same: flags equal, calls the same objects."""
    return len(a) == len(b) and all(x[0] == y[0] and x[1] is y[1] for x, y in zip(a, b, strict=True))
