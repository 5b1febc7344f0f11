"""What the proxy needs of a wire format (Anthropic Messages, OpenAI Chat Completions).

An adapter parses a client's request body into a ``ClientRequest`` (the conversation, the fixed
prefix that roots its session, the model), turns client messages into the neutral model with the
project's readers, writes the engine's projection back into a request body with the project's
writers (every field the engine does not own is copied from the client's body unchanged), checks
the body against the provider's rules (``formats.validate``), and reads the usage and the reply
out of the upstream's response, JSON or a stream (``StreamTap``).
"""

from __future__ import annotations

import functools
import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

import msgspec

from ctxengine.messages.model import Message, Usage
from ctxengine.proxy.identity import raw_messages

if TYPE_CHECKING:
    from ctxengine.proxy.body_memo import BodyMemo


class BadRequest(ValueError):
    """The client's request cannot be parsed; the proxy answers with the provider's 400 shape."""


class Unsupported(Exception):
    """The client's request may well be valid but holds what the engine's messages cannot carry
    unchanged (a newer content part, a source or field they have no place for): rewriting it
    would drop or corrupt it, so the proxy forwards the request as sent (fail open, one log
    line) instead of a 400 or a lossy rewrite."""


class LeftToProvider(Exception):
    """The request is one whose context the provider manages itself (the server holds the
    history: ``previous_response_id``; or it compacts / edits the context server-side): the
    proxy forwards it as sent, without a session, and its log line says why. The message is
    that reason."""


@dataclass
class ClientRequest:
    """One parsed client request.

    ``body``: the client's JSON body (never modified); ``conversation``: the raw client messages
    the engine manages; ``fixed_prefix``: what roots the session (Anthropic ``system``; OpenAI the
    leading system/developer messages); ``prefix_text``: system prompt and tool definitions as
    text, for the ledger's fixed prefix (tokens are counted from it; made when first read: only a
    session's first request needs it, and Claude Code's tools are most of a ~29,000-token
    prefix); ``raws``: each message of ``conversation`` as the client's JSON bytes, when the proxy
    read them (``identity.ChainMemo`` compares them with the previous request's)."""

    body: dict[str, Any]
    conversation: list[Any]
    fixed_prefix: Any
    system: str  # the system prompt's text (``prefix_text`` without the tools)
    model: str
    stream: bool
    raws: Sequence[Any] | None = None

    @functools.cached_property
    def prefix_text(self) -> str:
        tools = self.body.get("tools")
        return self.system + "\n" + json.dumps(tools, ensure_ascii=False) if tools else self.system


class StreamTap(Protocol):
    """Reads a forwarded stream's events: the usage and the reply, once the stream has ended."""

    def feed(self, chunk: bytes) -> None: ...

    @property
    def usage(self) -> Usage | None: ...

    @property
    def reply(self) -> dict[str, Any] | None: ...


class MessageReader(Protocol):
    """Turns a session's raw client messages into neutral messages, in order, across requests."""

    def read(self, raw: Sequence[Any], start: int) -> list[Message]:
        """Neutral messages of ``raw``, the client messages from index ``start`` on. Raises
        ``BadRequest`` for a message of the wrong shape."""
        ...


class Wire(Protocol):
    """One wire format."""

    provider: str  # "anthropic" or "openai": the registry's provider names
    listed: str  # the body's key of the conversation's list ("messages"; Responses: "input")

    def parse(self, body: Any) -> ClientRequest: ...

    def reader(self) -> MessageReader: ...

    def build(
        self, request: ClientRequest, messages: Sequence[Message], memo: BodyMemo | None = None
    ) -> dict[str, Any]:
        """The body to send upstream: ``messages`` written in this wire's format, every other
        field the client's. ``memo``: the session's (``body_memo``), reused where a wire can."""
        ...

    def validate(self, body: dict[str, Any], memo: BodyMemo | None = None) -> list[str]:
        """The provider's rules ``body`` breaks, one line each (``memo``: the session's
        incremental checker, where a wire has one: the same lines)."""
        ...

    def usage(self, response: Any) -> Usage | None: ...

    def reply(self, response: Any) -> dict[str, Any] | None: ...

    def tap(self) -> StreamTap: ...

    def error_body(self, message: str, kind: str = "invalid_request_error") -> dict[str, Any]: ...


def read_request(wire: Wire, raw: bytes) -> ClientRequest:
    """``wire.parse`` of the JSON body ``raw``, with each conversation message's bytes
    (``ClientRequest.raws``). Raises ``msgspec.DecodeError``, ``BadRequest``, ``LeftToProvider``."""
    request = wire.parse(msgspec.json.decode(raw))
    request.raws = raw_messages(raw, request.conversation, wire.listed)
    return request


def require_object(body: Any) -> dict[str, Any]:
    """``body`` as a JSON object with a ``messages`` list and a ``model`` string, else
    ``BadRequest`` naming what is missing (the provider's own wording where it has one)."""
    if not isinstance(body, dict):
        raise BadRequest("request body must be a JSON object")
    if not isinstance(body.get("model"), str):
        raise BadRequest("model: Field required")
    if not isinstance(body.get("messages"), list):
        raise BadRequest("messages: Field required (a list)")
    if not body["messages"]:
        raise BadRequest("messages: at least one message is required")
    return body


def client_request(
    body: dict[str, Any], conversation: list[Any], fixed_prefix: Any, system: str
) -> ClientRequest:
    """The ``ClientRequest`` of a checked ``body``: ``system`` (the system prompt's text) and the
    tool definitions make its ``prefix_text``."""
    return ClientRequest(
        body=body,
        conversation=conversation,
        fixed_prefix=fixed_prefix,
        system=system,
        model=body["model"],
        stream=bool(body.get("stream")),
    )
