"""The OpenAI Responses wire format (``POST /v1/responses``, JSON and SSE) for the proxy.

The request's ``input`` is the conversation (a string is one user message). Its fixed prefix,
which roots the session and goes upstream as sent, is ``instructions`` with the leading
``system`` / ``developer`` message items; the items after them are read into neutral messages
and written back by ``responses_items`` (unchanged items byte for byte: ``store: false`` with
encrypted reasoning round-trips whole). Server-side ``compaction`` items, and system / developer
items before the model's first item, are pinned (``pinned``). Every other field is the client's.

Left to the provider (``LeftToProvider``: forwarded as sent, one log line): a request with
``previous_response_id`` or ``conversation`` (the server holds the history, the request only the
new items) and one with ``context_management`` (the server compacts it itself).

Usage: the response's ``usage`` (``input_tokens`` with ``input_tokens_details.cached_tokens``);
in a stream the ``response.completed`` (or ``incomplete`` / ``failed``) event's response. The
reply is the response's first output item.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from ctxengine.formats.chat_common import openai_usage
from ctxengine.formats.validate_responses import validate_responses
from ctxengine.messages.model import Message, Usage
from ctxengine.proxy.pinned import with_pinned
from ctxengine.proxy.responses_items import (
    SYSTEM_ROLES,
    item_type,
    pinned_indices,
    read_item,
    text_of,
    write_items,
)
from ctxengine.proxy.sse import SSEReader
from ctxengine.proxy.wire import BadRequest, ClientRequest, LeftToProvider, client_request
from ctxengine.proxy.wire_openai import OpenAIShapes

if TYPE_CHECKING:
    from ctxengine.proxy.body_memo import BodyMemo

SERVER_HISTORY = ("previous_response_id", "conversation")
FINAL_EVENTS = frozenset({"response.completed", "response.incomplete", "response.failed"})


def _leading_system(items: list[Any]) -> int:
    n = 0
    while n < len(items) and item_type(items[n]) == "message" and items[n].get("role") in SYSTEM_ROLES:
        n += 1
    return n


def _input(body: Any) -> list[Any]:
    """The request's items; ``BadRequest`` for a body that is not a Responses request."""
    if not isinstance(body, dict):
        raise BadRequest("request body must be a JSON object")
    if not isinstance(body.get("model"), str):
        raise BadRequest("model: Field required")
    items = body.get("input")
    if isinstance(items, str) and items:
        return [{"role": "user", "content": items}]
    if not isinstance(items, list) or not items:
        raise BadRequest("input: a non-empty string or list of items is required")
    return items


class ResponsesReader:
    """One neutral message per item, id ``m<index>`` (``responses_items.read_item``)."""

    def read(self, raw: Sequence[Any], start: int) -> list[Message]:
        out: list[Message] = []
        for i, item in enumerate(raw, start):
            try:
                out.append(read_item(item, i))
            except (TypeError, AttributeError, ValueError) as exc:
                raise BadRequest(f"input[{i}]: {exc}") from None
        return out


class ResponsesWire(OpenAIShapes):
    """The Responses adapter (see the module docstring)."""

    listed = "input"

    def parse(self, body: Any) -> ClientRequest:
        items = _input(body)
        for name in SERVER_HISTORY:
            if body.get(name):
                raise LeftToProvider(f"{name}: the server holds the history, the request only new items")
        if body.get("context_management"):
            raise LeftToProvider("context_management: the provider compacts this conversation itself")
        n = _leading_system(items)
        instructions = body.get("instructions")
        prefix_text = "\n\n".join(
            t for t in (instructions if isinstance(instructions, str) else "", text_of(items[:n])) if t
        )
        return client_request(body, items[n:], [instructions, items[:n]], prefix_text)

    def reader(self) -> ResponsesReader:
        return ResponsesReader()

    def build(
        self, request: ClientRequest, messages: Sequence[Message], memo: BodyMemo | None = None
    ) -> dict[str, Any]:
        """The body (``memo``: not used; each item is written from its message every time)."""
        conversation = request.conversation
        pinned = {i: read_item(conversation[i], i) for i in pinned_indices(conversation)}
        items = write_items(with_pinned(messages, pinned), conversation)
        body = dict(request.body)
        if not (isinstance(body["input"], str) and items == conversation):
            body["input"] = list(request.fixed_prefix[1]) + items
        return body

    def validate(self, body: dict[str, Any], memo: BodyMemo | None = None) -> list[str]:
        """The problems of ``body`` (``memo``: not used; checked whole)."""
        return validate_responses(body)

    def reply(self, response: Any) -> dict[str, Any] | None:
        output = response.get("output") if isinstance(response, dict) else None
        first = output[0] if isinstance(output, list) and output else None
        return first if isinstance(first, dict) else None

    def tap(self) -> ResponsesTap:
        return ResponsesTap()


class ResponsesTap:
    """Usage and reply of a Responses stream: the final event's response (``response.completed``,
    ``response.incomplete`` or ``response.failed``); the items of ``response.output_item.done``
    when that response lists no output."""

    def __init__(self) -> None:
        self._sse = SSEReader()
        self._final: dict[str, Any] | None = None
        self._items: list[dict[str, Any]] = []

    def feed(self, chunk: bytes) -> None:
        for _name, data in self._sse.feed(chunk):
            if not isinstance(data, dict):
                continue
            kind = data.get("type")
            if kind == "response.output_item.done" and isinstance(data.get("item"), dict):
                self._items.append(data["item"])
            elif kind in FINAL_EVENTS and isinstance(data.get("response"), dict):
                self._final = data["response"]

    @property
    def usage(self) -> Usage | None:
        return openai_usage(self._final.get("usage")) if self._final is not None else None

    @property
    def reply(self) -> dict[str, Any] | None:
        if self._final is None:
            return None
        output = self._final.get("output") or self._items
        first = output[0] if isinstance(output, list) and output else None
        return first if isinstance(first, dict) else None
