"""The OpenAI Chat Completions wire format (``POST /v1/chat/completions``) for the proxy.

Client messages are read with the project's chat reader (``formats.openai_chat``: a session's
``SessionBuilder`` kept across requests, so consecutive ``tool`` messages become one neutral
message of results and tool call ids stay unique); the projection is written with
``formats.openai_writer.to_openai_chat``. The leading ``system`` / ``developer`` messages are the
fixed prefix: they root the session and go upstream as the client sent them; a system message
later in the conversation is kept in place (``system_messages="inline"``). OpenAI caches prefixes
by itself, so no breakpoints are placed. Usage: ``usage`` of the response; in a stream the final
chunk's (sent when the client asks for it with ``stream_options.include_usage``; without it the
ledger keeps its estimate).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ctxengine.formats.openai_chat import (
    SessionBuilder,
    ShapeError,
    add_chat_message,
    content_text,
    openai_usage,
)
from ctxengine.formats.openai_writer import to_openai_chat
from ctxengine.formats.validate import validate_openai_chat
from ctxengine.messages.model import Message, Text, Usage
from ctxengine.proxy.sse import SSEReader
from ctxengine.proxy.wire import BadRequest, ClientRequest, Unsupported, client_request, require_object

if TYPE_CHECKING:
    from ctxengine.proxy.body_memo import BodyMemo

SYSTEM_ROLES = ("system", "developer")


def _leading_system(messages: list[Any]) -> int:
    n = 0
    while n < len(messages) and isinstance(messages[n], dict) and messages[n].get("role") in SYSTEM_ROLES:
        n += 1
    return n


# what a chat message and a content part may hold for the engine to carry it unchanged
_MESSAGE_KEYS = frozenset({"role", "content", "tool_calls", "tool_call_id", "function_call", "refusal"})
_PART_KEYS = frozenset({"type", "text", "image_url", "file", "refusal"})


def unsupported(m: Any) -> str | None:
    """Why the engine cannot carry chat message ``m`` unchanged (``Unsupported``), or None: a
    field it has no place for (``name``, DeepSeek's ``prefix``, OpenRouter's
    ``reasoning_details``), a part of a type or with a field it does not know (``input_audio``,
    ``cache_control``, an image's ``detail``), a file given by id, a tool call that is not a
    ``function`` call (GPT-5's ``custom``). Shape errors are left to the reader."""
    if not isinstance(m, dict):
        return None
    extra = sorted(set(m) - _MESSAGE_KEYS)
    if extra:
        return f"message field(s) {extra}"
    content = m.get("content")
    for part in content if isinstance(content, list) else ():
        if not isinstance(part, dict):
            continue
        kind = part.get("type")
        if kind not in ("text", "image_url", "file", "refusal", None):
            return f"content part of type {kind!r}"
        if set(part) - _PART_KEYS:
            return f"content part field(s) {sorted(set(part) - _PART_KEYS)}"
        image = part.get("image_url")
        if isinstance(image, dict) and set(image) - {"url"} and image.get("detail", "auto") != "auto":
            return "an image_url with a detail"
        file = part.get("file")
        if kind == "file" and (not isinstance(file, dict) or not file.get("file_data")):
            return "a file part given by id"
    calls = m.get("tool_calls")
    for call in calls if isinstance(calls, list) else ():
        if isinstance(call, dict) and call.get("type", "function") != "function":
            return f"a tool call of type {call.get('type')!r}"
        fn = call.get("function") if isinstance(call, dict) else None
        args = fn.get("arguments") if isinstance(fn, dict) else None
        if isinstance(args, str) and args.strip() and not _json_object(args):
            return "tool-call arguments that are not a JSON object"
    return None


def _json_object(text: str) -> bool:
    try:
        return isinstance(json.loads(text), dict)
    except ValueError:
        return False


class OpenAIReader:
    """The chat reader's ``SessionBuilder`` over one session's messages, ids ``m<index>``."""

    def __init__(self) -> None:
        self._b = SessionBuilder(Path("proxy"))

    def read(self, raw: Sequence[Any], start: int) -> list[Message]:
        b = self._b
        before = len(b.messages)
        for i, m in enumerate(raw, start):
            if (why := unsupported(m)) is not None:
                raise Unsupported(f"messages[{i}]: {why}")
            try:
                if isinstance(m, dict) and m.get("role") in SYSTEM_ROLES:
                    b.close()
                    b.messages.append(Message("system", (Text(content_text(m.get("content"))),), f"m{i}"))
                    continue
                add_chat_message(b, m, i, None)
            except ShapeError as exc:
                raise BadRequest(f"messages[{i}]: {exc}") from None
        b.close()  # the next request's results start a new message
        return b.messages[before:]


class OpenAIShapes:
    """What OpenAI's wires share: the provider, the usage object and the error body."""

    provider = "openai"

    def usage(self, response: Any) -> Usage | None:
        return openai_usage(response.get("usage")) if isinstance(response, dict) else None

    def error_body(self, message: str, kind: str = "invalid_request_error") -> dict[str, Any]:
        return {"error": {"message": message, "type": kind, "param": None, "code": None}}


class OpenAIWire(OpenAIShapes):
    """The Chat Completions adapter (see the module docstring)."""

    listed = "messages"

    def parse(self, body: Any) -> ClientRequest:
        body = require_object(body)
        messages = body["messages"]
        n = _leading_system(messages)
        system = "\n\n".join(content_text(m.get("content")) for m in messages[:n])
        return client_request(body, messages[n:], messages[:n], system)

    def reader(self) -> OpenAIReader:
        return OpenAIReader()

    def build(
        self, request: ClientRequest, messages: Sequence[Message], memo: BodyMemo | None = None
    ) -> dict[str, Any]:
        runs = memo.runs if memo is not None else None
        written = to_openai_chat(messages, model=request.model, system_messages="inline", memo=runs)
        body = dict(request.body)
        body["messages"] = list(request.fixed_prefix) + written["messages"]
        return body

    def validate(self, body: dict[str, Any], memo: BodyMemo | None = None) -> list[str]:
        return memo.checker.validate(body) if memo is not None else validate_openai_chat(body)

    def reply(self, response: Any) -> dict[str, Any] | None:
        if not isinstance(response, dict):
            return None
        choices = response.get("choices")
        if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
            return None
        message = choices[0].get("message")
        return message if isinstance(message, dict) else None

    def tap(self) -> OpenAITap:
        return OpenAITap()


class OpenAITap:
    """Usage (the final chunk's) and reply (choice 0's deltas) of a chat-completions stream."""

    def __init__(self) -> None:
        self._sse = SSEReader()
        self._usage: Usage | None = None
        self._text: list[str] = []
        self._calls: dict[int, dict[str, Any]] = {}
        self._finished = False

    def feed(self, chunk: bytes) -> None:
        for _name, data in self._sse.feed(chunk):
            if not isinstance(data, dict):
                continue
            if isinstance(data.get("usage"), dict):
                self._usage = openai_usage(data["usage"])
            for choice in data.get("choices") or []:
                if isinstance(choice, dict) and choice.get("index", 0) == 0:
                    self._choice(choice)

    def _choice(self, choice: dict[str, Any]) -> None:
        delta = choice.get("delta") or {}
        if isinstance(delta.get("content"), str):
            self._text.append(delta["content"])
        for call in delta.get("tool_calls") or []:
            slot = self._calls.setdefault(
                int(call.get("index", 0)),
                {"id": "", "type": "function", "function": {"name": "", "arguments": ""}},
            )
            slot["id"] = call.get("id") or slot["id"]
            fn = call.get("function") or {}
            slot["function"]["name"] += fn.get("name") or ""
            slot["function"]["arguments"] += fn.get("arguments") or ""
        if choice.get("finish_reason"):
            self._finished = True

    @property
    def usage(self) -> Usage | None:
        return self._usage

    @property
    def reply(self) -> dict[str, Any] | None:
        if not self._finished:
            return None
        reply: dict[str, Any] = {"role": "assistant", "content": "".join(self._text) or None}
        if self._calls:
            reply["tool_calls"] = [self._calls[k] for k in sorted(self._calls)]
        return reply
