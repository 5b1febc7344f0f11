"""A scripted loopback server speaking the Anthropic Messages and OpenAI Chat Completions wire
formats, for driving the real SDK clients in tests.

``POST .../messages`` answers in Anthropic's shape, ``POST .../chat/completions`` in OpenAI's (so
both ``http://127.0.0.1:PORT`` and ``http://127.0.0.1:PORT/v1`` work as base URLs). Replies come
from a script, consumed in order across both endpoints, then ``default``:

- ``("ok", text)`` or ``("ok", text, usage)``: 200 with ``text``; ``usage`` (provider-native
  fields) is merged over plausible defaults (Anthropic: with the cache fields);
- ``("status", code, body, headers)``: that status, JSON ``body`` and headers (optional);
- ``("sleep", seconds)``: wait (to trigger a client timeout), then answer ``("ok", "late")``;
- a callable ``(request_json) -> str``: a 200 with the returned text.

Every request is recorded in ``server.requests`` (path, headers without the auth headers, JSON
body). Helpers build canonical error replies in each provider's shape.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

Reply = tuple[Any, ...] | Callable[[dict[str, Any]], str]

AUTH_HEADERS = frozenset({"authorization", "x-api-key", "api-key", "proxy-authorization"})
FAST_RETRY = {"retry-after-ms": "1"}  # the SDKs ignore "retry-after: 0" and back off 0.5 s instead


@dataclass(frozen=True)
class Recorded:
    """One request: ``path``, headers (lower-case names, auth headers removed), JSON ``body``."""

    path: str
    headers: dict[str, str]
    body: dict[str, Any]

    @property
    def provider(self) -> str:
        return "openai" if self.path.endswith("/chat/completions") else "anthropic"


class ScriptedLLMServer:
    """Context manager: ``with ScriptedLLMServer([...]) as server: server.url`` (no ``/v1``),
    ``server.openai_url`` (with ``/v1``). ``server.requests`` lists what arrived."""

    def __init__(self, script: Iterable[Reply] = (), default: Reply = ("ok", "ok")) -> None:
        self.script: list[Reply] = list(script)
        self.default = default
        self.requests: list[Recorded] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self))
        self._httpd.daemon_threads = True
        self._httpd.block_on_close = False
        self._thread = threading.Thread(target=self._httpd.serve_forever, args=(0.02,), daemon=True)

    @property
    def port(self) -> int:
        return int(self._httpd.server_address[1])

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def openai_url(self) -> str:
        return f"{self.url}/v1"

    def __enter__(self) -> ScriptedLLMServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join(timeout=5)

    def next_reply(self, recorded: Recorded) -> Reply:
        with self._lock:
            self.requests.append(recorded)
            return self.script.pop(0) if self.script else self.default


def _handler(server: ScriptedLLMServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:
            pass

        def _send(self, code: int, payload: Any, headers: dict[str, str] | None = None) -> None:
            data = json.dumps(payload).encode()
            try:
                self.send_response(code)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(data)))
                for k, v in (headers or {}).items():
                    self.send_header(k, v)
                self.end_headers()
                self.wfile.write(data)
            except OSError:  # the client gave up (timeout)
                pass

        def do_GET(self) -> None:
            self._send(200, {"object": "list", "data": [{"id": "stub-model", "object": "model"}]})

        def do_POST(self) -> None:
            raw = self.rfile.read(int(self.headers.get("content-length") or 0))
            try:
                body = json.loads(raw or b"{}")
            except json.JSONDecodeError:
                body = {"_raw": raw.decode("utf-8", "replace")}
            path = self.path.split("?", 1)[0]
            headers = {k.lower(): v for k, v in self.headers.items() if k.lower() not in AUTH_HEADERS}
            rec = Recorded(path=path, headers=headers, body=body)
            if not (path.endswith("/messages") or path.endswith("/chat/completions")):
                server.requests.append(rec)
                self._send(404, {"error": {"type": "not_found_error", "message": f"no route {path}"}})
                return
            reply = server.next_reply(rec)
            if callable(reply):
                self._send(200, ok_body(rec, reply(body)))
                return
            kind = reply[0]
            if kind == "ok":
                usage = reply[2] if len(reply) > 2 else None
                self._send(200, ok_body(rec, reply[1], usage, raw_len=len(raw)))
            elif kind == "status":
                hdrs = reply[3] if len(reply) > 3 else None
                self._send(reply[1], reply[2], hdrs)
            elif kind == "sleep":
                server._stop.wait(reply[1])
                self._send(200, ok_body(rec, "late"))
            else:  # pragma: no cover - a broken script
                self._send(500, {"error": {"message": f"bad script entry {reply!r}"}})

    return Handler


def ok_body(
    rec: Recorded, text: str, usage: dict[str, Any] | None = None, raw_len: int = 400
) -> dict[str, Any]:
    """A 200 reply body with ``text`` in the provider's shape of ``rec``."""
    model = str(rec.body.get("model", "stub"))
    tin = max(1, raw_len // 4)
    tout = max(1, len(text) // 4)
    if rec.provider == "openai":
        u: dict[str, Any] = {"prompt_tokens": tin, "completion_tokens": tout, "total_tokens": tin + tout}
        u.update(usage or {})
        return {
            "id": "chatcmpl-test",
            "object": "chat.completion",
            "created": 0,
            "model": model,
            "choices": [
                {"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": text}}
            ],
            "usage": u,
        }
    u = {
        "input_tokens": tin,
        "output_tokens": tout,
        "cache_read_input_tokens": 0,
        "cache_creation_input_tokens": 0,
    }
    u.update(usage or {})
    return {
        "id": "msg_test",
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": [{"type": "text", "text": text}],
        "stop_reason": "end_turn",
        "stop_sequence": None,
        "usage": u,
    }


# --------------------------------------------------------------------------------------------
# Canonical replies
# --------------------------------------------------------------------------------------------


def anthropic_error(code: int, type_: str, message: str, headers: dict[str, str] | None = None) -> Reply:
    """An Anthropic error reply: ``{"type": "error", "error": {"type", "message"}}``."""
    body = {"type": "error", "error": {"type": type_, "message": message}, "request_id": "req_test"}
    return ("status", code, body, dict(headers or {}))


def openai_error(
    code: int,
    message: str,
    *,
    type_: str = "invalid_request_error",
    err_code: str | None = None,
    headers: dict[str, str] | None = None,
) -> Reply:
    """An OpenAI error reply: ``{"error": {"message", "type", "param", "code"}}``."""
    body = {"error": {"message": message, "type": type_, "param": None, "code": err_code}}
    return ("status", code, body, dict(headers or {}))


def anthropic_prompt_too_long(actual: int | None = 208380, limit: int | None = 200000) -> Reply:
    """Anthropic's 400 for an over-long prompt, with the token counts unless either is None."""
    msg = "prompt is too long"
    if actual is not None and limit is not None:
        msg += f": {actual} tokens > {limit} maximum"
    return anthropic_error(400, "invalid_request_error", msg)


def openai_context_length_exceeded(actual: int | None = 130000, limit: int | None = 128000) -> Reply:
    """OpenAI's 400 ``context_length_exceeded``, with the token counts unless either is None (then
    the Responses-API wording without numbers)."""
    if actual is not None and limit is not None:
        msg = (
            f"This model's maximum context length is {limit} tokens. However, your messages resulted "
            f"in {actual} tokens. Please reduce the length of the messages."
        )
    else:
        msg = "Your input exceeds the context window of this model. Please adjust your input and try again."
    return openai_error(400, msg, err_code="context_length_exceeded")


def rate_limited(provider: str, headers: dict[str, str] | None = None) -> Reply:
    """A 429 in ``provider``'s shape, asking for a 1 ms wait unless ``headers`` say otherwise."""
    hdrs = headers if headers is not None else FAST_RETRY
    if provider == "anthropic":
        return anthropic_error(
            429, "rate_limit_error", "Number of request tokens has exceeded your rate limit.", hdrs
        )
    return openai_error(
        429, "Rate limit reached for requests", type_="requests", err_code="rate_limit_exceeded", headers=hdrs
    )


def server_error(provider: str, code: int = 500) -> Reply:
    """A 5xx in ``provider``'s shape, asking for a 1 ms wait before the retry."""
    if provider == "anthropic":
        kind = "overloaded_error" if code == 529 else "api_error"
        return anthropic_error(code, kind, "Internal server error", FAST_RETRY)
    return openai_error(
        code,
        "The server had an error while processing your request.",
        type_="server_error",
        headers=FAST_RETRY,
    )


def auth_failed(provider: str, message: str = "invalid x-api-key") -> Reply:
    """A 401 in ``provider``'s shape."""
    if provider == "anthropic":
        return anthropic_error(401, "authentication_error", message)
    return openai_error(401, message, err_code="invalid_api_key")
