"""``SessionBuilder``: one ``Session`` under construction, for the OpenAI-style readers.

It enforces the neutral conventions of ``ctxengine.messages.model`` whatever the source format:
consecutive tool results merge into one ``user`` message, message ids and tool call ids are made
unique within the session (a reused id gets ``~2``, ``~3``...), a ``ToolResult`` without a name
gets the name of its call, and malformed records are kept (and warned about, the first
``MAX_WARNINGS`` of a session).
"""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

from ctxengine.formats.chat_common import report_malformed
from ctxengine.messages.model import Block, Malformed, Message, Origin, ToolCall, ToolResult, Usage

MAX_WARNINGS = 20  # per session; every malformed record is still kept in Session.malformed


class SessionBuilder:
    """Accumulates messages for one ``Session`` and enforces the neutral conventions.

    Consecutive tool results merge into one ``user`` message (until any other message is added);
    ids are made unique (a repeated id gets ``~2``, ``~3``...); a ``ToolResult`` without a name
    gets the name of its call. ``open_assistant`` lets a reader (Codex) extend the last assistant
    message with further blocks of the same model call.
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self.messages: list[Message] = []
        self.malformed: list[Malformed] = []
        self.skipped: dict[str, int] = {}
        self.system_parts: list[str] = []
        self.open_assistant: Message | None = None
        self._results: Message | None = None
        self._ids: set[str] = set()
        self._call_names: dict[str, str] = {}
        self._call_ids: set[str] = set()
        self._call_alias: dict[str, str] = {}  # recorded call id -> id of its latest call

    def _id(self, wanted: str) -> str:
        if wanted not in self._ids:
            self._ids.add(wanted)
            return wanted
        n = 2
        while f"{wanted}~{n}" in self._ids:
            n += 1
        self._ids.add(f"{wanted}~{n}")
        return f"{wanted}~{n}"

    def _unique_calls(self, blocks: tuple[Block, ...] | list[Block]) -> tuple[Block, ...]:
        """Tool call ids unique within the session: a recorded id used again (tau-bench reuses
        them across turns) becomes ``id~2``...; later results for that id answer the newest call.
        Layers freeze decisions per call id, so ids must not repeat."""
        out: list[Block] = []
        for b in blocks:
            if isinstance(b, ToolCall):
                new_id = b.id
                n = 2
                while new_id in self._call_ids:
                    new_id = f"{b.id}~{n}"
                    n += 1
                self._call_ids.add(new_id)
                self._call_alias[b.id] = new_id
                if new_id != b.id:
                    b = ToolCall(new_id, b.name, b.input)
                self._call_names[b.id] = b.name
            out.append(b)
        return tuple(out)

    def close(self) -> None:
        """End the open assistant message and the open tool-result message."""
        self.open_assistant = None
        self._results = None

    def user(
        self,
        blocks: list[Block] | tuple[Block, ...],
        *,
        id: str,
        timestamp: float | None = None,
        origin: Origin = "message",
        meta: dict[str, Any] | None = None,
        compaction: int | None = None,
    ) -> Message:
        """Append a ``user`` message."""
        self.close()
        msg = Message(
            role="user",
            blocks=tuple(blocks),
            id=self._id(id),
            timestamp=timestamp,
            origin=origin,
            compaction=compaction,
            meta=meta or {},
        )
        self.messages.append(msg)
        return msg

    def assistant(
        self,
        blocks: list[Block] | tuple[Block, ...],
        *,
        id: str,
        timestamp: float | None = None,
        usage: Usage | None = None,
        model: str | None = None,
        meta: dict[str, Any] | None = None,
        keep_open: bool = False,
    ) -> Message:
        """Append an ``assistant`` message (one model call). With ``keep_open`` it stays
        ``open_assistant`` so ``extend_assistant`` can add blocks of the same call."""
        self.close()
        msg = Message(
            role="assistant",
            blocks=self._unique_calls(blocks),
            id=self._id(id),
            timestamp=timestamp,
            usage=usage,
            model=model,
            meta=meta or {},
        )
        self.messages.append(msg)
        if keep_open:
            self.open_assistant = msg
        return msg

    def extend_assistant(self, blocks: list[Block]) -> None:
        """Add blocks to ``open_assistant`` (which must be set)."""
        assert self.open_assistant is not None
        self.open_assistant.blocks = self.open_assistant.blocks + self._unique_calls(blocks)

    def tool_results(self, results: list[ToolResult], *, id: str, timestamp: float | None = None) -> Message:
        """Append tool results: to the open tool-result message if the previous message is one,
        else as a new ``user`` message."""
        named = []
        for r in results:
            cid = self._call_alias.get(r.call_id, r.call_id)
            name = r.name or self._call_names.get(cid, "")
            named.append(
                r if (cid, name) == (r.call_id, r.name) else ToolResult(cid, r.content, r.is_error, name)
            )
        self.open_assistant = None
        if self._results is not None and self.messages and self.messages[-1] is self._results:
            self._results.blocks = self._results.blocks + tuple(named)
            return self._results
        msg = Message(role="user", blocks=tuple(named), id=self._id(id), timestamp=timestamp)
        self.messages.append(msg)
        self._results = msg
        return msg

    def bad(self, line: int, error: str) -> None:
        """Record a malformed record and warn (the first ``MAX_WARNINGS`` of a session, then one
        notice that more are in ``Session.malformed``)."""
        n = len(self.malformed) + 1
        self.malformed.append(report_malformed(self.path, line, error, warn=n <= MAX_WARNINGS))
        if n == MAX_WARNINGS + 1:
            warnings.warn(f"{self.path}: more malformed records; see Session.malformed", stacklevel=2)

    def skip(self, kind: str, n: int = 1) -> None:
        """Count a record that is neither a message nor context."""
        self.skipped[kind] = self.skipped.get(kind, 0) + n

    @property
    def system(self) -> str:
        return "\n\n".join(p for p in self.system_parts if p)
