"""The Anthropic Messages wire format (``POST /v1/messages``) for the proxy.

Client messages are read with the Claude Code reader's block rules (``formats.claude_code``: the
same content blocks), one neutral message per client message; the projection is written with
``formats.anthropic_writer.to_anthropic`` (engine notices stay inline as ``<system-reminder>``
user text, so the system prompt and its cache entry never change). A ``system`` message inside
the conversation (Claude Code's default model) is carried, pinned and written back in place as
sent (``anthropic_system``). ``system``, ``tools`` and every other field are the client's
(``context_management``, ``output_config``, ``container``, ``mcp_servers``: untouched); a request
whose ``context_management`` compacts or clears tool results server-side is left to the provider
(``server_side_editing``). Prompt cache: the writer's message breakpoints (the last message and
the second-to-last user message, as the cache model plans them), plus one on the last tool
definition (else the last system block) when the client marked none there, so the fixed prefix
stays cached after a compaction; never more than ``MAX_BREAKPOINTS`` (the API's 4: the oldest
message breakpoints go first). Usage: ``usage`` of the response; in a stream ``message_start``
carries the input tokens and ``message_delta`` the output tokens.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from ctxengine.formats.anthropic_writer import CACHE_CONTROL, MAX_BREAKPOINTS, to_anthropic
from ctxengine.formats.claude_code.blocks import to_block
from ctxengine.formats.claude_code.usage import anthropic_usage
from ctxengine.formats.validate import validate_anthropic
from ctxengine.messages.model import Block, Message, Text, Usage
from ctxengine.proxy.anthropic_system import mark, preamble, unmark, without_system
from ctxengine.proxy.pinned import message_id, with_pinned
from ctxengine.proxy.reminders import split_reminders
from ctxengine.proxy.sse import SSEReader

if TYPE_CHECKING:
    from ctxengine.proxy.body_memo import BodyMemo
from ctxengine.proxy.wire import (
    BadRequest,
    ClientRequest,
    LeftToProvider,
    Unsupported,
    client_request,
    require_object,
)

ROLES = ("user", "assistant", "system")
_SOURCES = {"image": ("base64", "url"), "document": ("base64", "text")}
_MEDIA_KEYS = frozenset({"type", "source", "cache_control"})


def _unsupported(raw: dict[str, Any]) -> str | None:
    """Why the engine cannot carry an image or document block unchanged (``Unsupported``): a
    source it has no place for (the Files API's ``file``, a URL or content document) or a field
    (a document's ``citations``, ``context``, ``title``); None for any other block."""
    kind = raw.get("type")
    if kind not in _SOURCES:
        return None
    source = raw.get("source")
    if not isinstance(source, dict) or source.get("type") not in _SOURCES[kind]:
        return f"a {kind} with a {source.get('type') if isinstance(source, dict) else 'missing'} source"
    if set(raw) - _MEDIA_KEYS:
        return f"a {kind} with field(s) {sorted(set(raw) - _MEDIA_KEYS)}"
    return None


def _blocks(content: Any, where: str) -> tuple[Block, ...]:
    if isinstance(content, str):
        return (Text(content),)
    if not isinstance(content, list):
        raise BadRequest(f"{where}.content: Input should be a valid string or list")
    out: list[Block] = []
    for k, raw in enumerate(content):
        if not isinstance(raw, dict) or not isinstance(raw.get("type"), str):
            raise BadRequest(f"{where}.content.{k}: Input should be an object with a type")
        if (why := _unsupported(raw)) is not None:
            raise Unsupported(f"{where}.content.{k}: {why}")
        block = to_block(raw)
        out.append(block if block is not None else Text(json.dumps(raw, ensure_ascii=False)))
    return tuple(out)


class AnthropicReader:
    """One neutral message per client message, id ``m<index>`` (its ``<system-reminder>`` blocks
    apart as an attachment: ``reminders``); a ``system`` message inside the conversation
    (``anthropic_system``) is a neutral system message."""

    def read(self, raw: Sequence[Any], start: int) -> list[Message]:
        out: list[Message] = []
        for i, m in enumerate(raw, start):
            where = f"messages.{i}"
            if not isinstance(m, dict) or m.get("role") not in ROLES:
                raise BadRequest(f"{where}.role: Input should be 'user', 'assistant' or 'system'")
            out.extend(split_reminders(Message(m["role"], _blocks(m.get("content"), where), message_id(i))))
        return out


def system_text(system: Any) -> str:
    """The text of a ``system`` field (a string or a list of text blocks)."""
    if isinstance(system, str):
        return system
    if isinstance(system, list):
        return "\n".join(b.get("text", "") for b in system if isinstance(b, dict))
    return ""


def _marked(blocks: Any) -> int:
    return (
        sum(1 for b in blocks if isinstance(b, dict) and "cache_control" in b)
        if isinstance(blocks, list)
        else 0
    )


def place_breakpoints(body: dict[str, Any]) -> None:
    """Add the fixed-prefix breakpoint and keep at most ``MAX_BREAKPOINTS`` (see module docs)."""
    tools, system = body.get("tools"), body.get("system")
    if not _marked(tools) and not _marked(system):
        if isinstance(tools, list) and tools and isinstance(tools[-1], dict):
            body["tools"] = [*tools[:-1], {**tools[-1], "cache_control": dict(CACHE_CONTROL)}]
        elif isinstance(system, str) and system.strip():
            body["system"] = [{"type": "text", "text": system, "cache_control": dict(CACHE_CONTROL)}]
        elif isinstance(system, list) and system and isinstance(system[-1], dict):
            body["system"] = [*system[:-1], {**system[-1], "cache_control": dict(CACHE_CONTROL)}]
    excess = _marked(body.get("tools")) + _marked(body.get("system")) - MAX_BREAKPOINTS
    for msg in body["messages"]:
        excess += _marked(msg["content"])
    for msg in body["messages"]:
        for block in msg["content"] if msg.get("role") != "system" else ():  # the client's, as sent
            if excess <= 0:
                return
            if isinstance(block, dict) and "cache_control" in block:
                del block["cache_control"]
                excess -= 1


# context_management edits that change what the model sees (``clear_thinking`` only drops thinking
# the engine never keeps for the model; Claude Code sends it with ``keep: "all"``)
SERVER_EDITS = ("clear_tool_uses", "compact")


def server_side_editing(body: dict[str, Any]) -> str | None:
    """The type of the first ``context_management`` edit by which Anthropic compacts or clears
    this conversation server-side (the engine must not compact it twice), or None."""
    cm = body.get("context_management")
    edits = cm.get("edits") if isinstance(cm, dict) else None
    for edit in edits if isinstance(edits, list) else ():
        kind = edit.get("type") if isinstance(edit, dict) else None
        if isinstance(kind, str) and kind.startswith(SERVER_EDITS):
            return kind
    return None


class AnthropicWire:
    """The Anthropic Messages adapter (see the module docstring)."""

    provider = "anthropic"
    listed = "messages"

    def parse(self, body: Any) -> ClientRequest:
        body = require_object(body)
        if (edit := server_side_editing(body)) is not None:
            raise LeftToProvider(f"context_management edit {edit!r}: the provider edits this context itself")
        return client_request(body, body["messages"], body.get("system"), system_text(body.get("system")))

    def reader(self) -> AnthropicReader:
        return AnthropicReader()

    def build(
        self, request: ClientRequest, messages: Sequence[Message], memo: BodyMemo | None = None
    ) -> dict[str, Any]:
        conversation = request.conversation

        def read(i: int) -> Message:
            return Message("system", _blocks(conversation[i].get("content"), f"messages.{i}"), message_id(i))

        pinned = {
            i: memo.pinned_message(i, conversation[i], functools.partial(read, i)) if memo else read(i)
            for i in preamble(conversation)
        }
        marked = mark(with_pinned(messages, pinned), conversation, memo.markers if memo is not None else None)
        blocks = memo.blocks if memo is not None else None
        written = to_anthropic(marked, model=request.model, system_messages="inline", memo=blocks)
        body = dict(request.body)
        body["messages"] = unmark(written["messages"], conversation)
        place_breakpoints(body)
        return body

    def validate(self, body: dict[str, Any], memo: BodyMemo | None = None) -> list[str]:
        checked = {**body, "messages": without_system(body["messages"])}
        return memo.checker.validate(checked) if memo is not None else validate_anthropic(checked)

    def usage(self, response: Any) -> Usage | None:
        return anthropic_usage(response.get("usage")) if isinstance(response, dict) else None

    def reply(self, response: Any) -> dict[str, Any] | None:
        if not isinstance(response, dict) or not isinstance(response.get("content"), list):
            return None
        return {"role": "assistant", "content": response["content"]}

    def tap(self) -> AnthropicTap:
        return AnthropicTap()

    def error_body(self, message: str, kind: str = "invalid_request_error") -> dict[str, Any]:
        return {"type": "error", "error": {"type": kind, "message": message}}


class AnthropicTap:
    """Usage and reply of a Messages stream (``message_start`` / ``content_block_*`` /
    ``message_delta``)."""

    def __init__(self) -> None:
        self._sse = SSEReader()
        self._usage: dict[str, Any] = {}
        self._content: list[dict[str, Any]] = []
        self._json: dict[int, list[str]] = {}
        self._parts: dict[tuple[int, str], list[str]] = {}  # deltas, joined once (not re-copied each time)
        self.done = False

    def feed(self, chunk: bytes) -> None:
        for _name, data in self._sse.feed(chunk):
            if isinstance(data, dict):
                self._event(data)

    def _event(self, data: dict[str, Any]) -> None:
        kind = data.get("type")
        if kind == "message_start":
            self._usage.update((data.get("message") or {}).get("usage") or {})
        elif kind == "message_delta":
            self._usage.update({k: v for k, v in (data.get("usage") or {}).items() if v is not None})
        elif kind == "content_block_start":
            self._content.append(dict(data.get("content_block") or {}))
        elif kind == "content_block_delta" and self._content:
            self._delta(len(self._content) - 1, data.get("delta") or {})
        elif kind == "content_block_stop":
            self._join_text()
            for k, pieces in self._json.items():
                text = "".join(pieces)
                try:
                    self._content[k]["input"] = json.loads(text) if text else {}
                except ValueError:
                    self._content[k]["input"] = {}
            self._json.clear()
        elif kind == "message_stop":
            self.done = True

    def _join_text(self) -> None:
        for (k, field), parts in self._parts.items():
            self._content[k][field] = self._content[k].get(field, "") + "".join(parts)
        self._parts.clear()

    def _delta(self, k: int, delta: dict[str, Any]) -> None:
        for field, key in _DELTA_FIELDS:
            if field in delta and delta.get("type", "").startswith(key):
                self._parts.setdefault((k, field), []).append(str(delta[field]))
        if delta.get("type") == "input_json_delta":
            self._json.setdefault(k, []).append(str(delta.get("partial_json", "")))

    @property
    def usage(self) -> Usage | None:
        return anthropic_usage(self._usage) if self._usage else None

    @property
    def reply(self) -> dict[str, Any] | None:
        if not self.done:
            return None
        self._join_text()  # a block whose stop event never came
        return {"role": "assistant", "content": self._content}


_DELTA_FIELDS = (("text", "text"), ("thinking", "thinking"), ("signature", "signature"))
