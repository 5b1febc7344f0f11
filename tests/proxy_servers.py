"""Test helpers for the proxy: servers on loopback ports, and an upstream that checks requests.

``serve(app)`` runs an ASGI app under uvicorn in a thread on a free loopback port. ``Upstream``
is the loopback provider the proxy forwards to: it checks every request against the provider's
rules with the project's validators (``formats.validate``: pairing, roles, content, at most 4
cache breakpoints), records it, and answers like the provider (JSON or server-sent events) with
usage ``input_tokens = body chars // 4``. ``Upstream.script`` can queue special answers (an
error status, a tool call, ``sse``: a stream exactly as given) for the next requests; ``Upstream.plan``
answers when the script is empty (an agent's task: ``agent_task``).
"""

from __future__ import annotations

import asyncio
import json
import socket
import threading
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from ctxengine.formats.validate import validate_anthropic, validate_openai_chat
from ctxengine.formats.validate_responses import validate_responses


@contextmanager
def serve(app: Any) -> Iterator[str]:
    """Serve ``app`` on a free loopback port; yields its base URL."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", access_log=False, lifespan="on"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    for _ in range(500):
        if server.started:
            break
        threading.Event().wait(0.01)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=10)
        sock.close()


@dataclass
class Seen:
    """One request the upstream received."""

    path: str
    headers: dict[str, str]
    body: dict[str, Any]
    chars: int
    problems: list[str]
    input_tokens: int


@dataclass
class Upstream:
    """The loopback provider (see the module docstring)."""

    seen: list[Seen] = field(default_factory=list)
    script: list[dict[str, Any]] = field(default_factory=list)  # answers for the next requests
    in_flight: dict[str, int] = field(default_factory=dict)  # per x-test-tag header
    max_in_flight: dict[str, int] = field(default_factory=dict)
    delay_s: float = 0.0
    # the answer to a request when ``script`` is empty (None: the default answer): an agent's task
    plan: Callable[[Seen], dict[str, Any] | None] | None = None
    stream_pause_s: float = 0.0  # a stream stops this long after its first event (a slow model)

    def app(self) -> Starlette:
        return Starlette(
            routes=[
                Route("/v1/messages", self._anthropic, methods=["POST"]),
                Route("/v1/messages/count_tokens", self._count, methods=["POST"]),
                Route("/v1/chat/completions", self._openai, methods=["POST"]),
                Route("/v1/responses", self._responses, methods=["POST"]),
                Route("/v1/models", self._models, methods=["GET"]),
                Route("/", self._root, methods=["GET", "HEAD"]),
            ]
        )

    async def _models(self, request: Request) -> Response:
        return JSONResponse(
            {"object": "list", "data": [{"id": "gpt-4o", "object": "model", "owned_by": "up"}]}
        )

    async def _root(self, request: Request) -> Response:  # a client's connectivity check
        return Response(status_code=200)

    async def _record(self, request: Request, problems_of: Any) -> tuple[Seen, dict[str, Any] | None]:
        raw = await request.body()
        body = json.loads(raw)
        seen = Seen(request.url.path, dict(request.headers), body, len(raw), problems_of(body), len(raw) // 4)
        self.seen.append(seen)
        tag = request.headers.get("x-test-tag", "")
        self.in_flight[tag] = self.in_flight.get(tag, 0) + 1
        self.max_in_flight[tag] = max(self.max_in_flight.get(tag, 0), self.in_flight[tag])
        try:
            if self.delay_s:
                await asyncio.sleep(self.delay_s)
        finally:
            self.in_flight[tag] -= 1
        if self.script:
            return seen, self.script.pop(0)
        return seen, self.plan(seen) if self.plan is not None and not seen.problems else None

    async def _count(self, request: Request) -> Response:
        raw = await request.body()
        return JSONResponse({"input_tokens": len(raw) // 4})

    async def _anthropic(self, request: Request) -> Response:
        beta = request.headers.get("anthropic-beta", "")
        seen, special = await self._record(request, lambda body: anthropic_problems(body, beta))
        if seen.problems:
            error = {"type": "invalid_request_error", "message": seen.problems[0]}
            return JSONResponse({"type": "error", "error": error}, status_code=400)
        if special is not None and "status" in special:
            return JSONResponse(special["body"], status_code=special["status"])
        if special is not None and "sse" in special:  # a stream exactly as given
            return Response(special["sse"], media_type="text/event-stream")
        content = (special or {}).get("content") or [
            {"type": "text", "text": f"ok {len(seen.body['messages'])}"}
        ]
        usage = {
            "input_tokens": seen.input_tokens,
            "output_tokens": 7,
            "cache_read_input_tokens": 0,
            "cache_creation_input_tokens": 0,
        }
        stop = "tool_use" if any(b["type"] == "tool_use" for b in content) else "end_turn"
        msg = {
            "id": f"msg_up_{len(self.seen)}",  # unique, as the API gives (Claude Code groups by it)
            "type": "message",
            "role": "assistant",
            "model": seen.body["model"],
            "content": content,
            "stop_reason": stop,
            "stop_sequence": None,
            "usage": usage,
        }
        if not seen.body.get("stream"):
            return JSONResponse(msg)
        if self.stream_pause_s:
            return StreamingResponse(self._paused(anthropic_events(msg)), media_type="text/event-stream")
        return Response(anthropic_events(msg), media_type="text/event-stream")

    async def _paused(self, events: str) -> AsyncIterator[bytes]:
        first, rest = events.split("\n\n", 1)
        yield (first + "\n\n").encode()
        await asyncio.sleep(self.stream_pause_s)
        yield rest.encode()

    async def _openai(self, request: Request) -> Response:
        seen, special = await self._record(request, validate_openai_chat)
        if seen.problems:
            return _openai_error(seen.problems[0])
        if special is not None and "status" in special:
            return JSONResponse(special["body"], status_code=special["status"])
        if special is not None and "sse" in special:  # a stream exactly as given
            return Response(special["sse"], media_type="text/event-stream")
        message = (special or {}).get("message") or {
            "role": "assistant",
            "content": f"ok {len(seen.body['messages'])}",
        }
        usage = {
            "prompt_tokens": seen.input_tokens,
            "completion_tokens": 7,
            "total_tokens": seen.input_tokens + 7,
        }
        finish = "tool_calls" if message.get("tool_calls") else "stop"
        base = {"id": "chatcmpl-up", "created": 0, "model": seen.body["model"]}
        if not seen.body.get("stream"):
            choice = {"index": 0, "message": message, "finish_reason": finish}
            return JSONResponse(base | {"object": "chat.completion", "choices": [choice], "usage": usage})
        return Response(openai_chunks(base, message, finish, usage), media_type="text/event-stream")

    async def _responses(self, request: Request) -> Response:
        """The Responses API: ``output`` items from the script (default: one assistant message);
        usage with ``cached_tokens`` (a quarter of the input, as a warm cache would give)."""
        seen, special = await self._record(request, validate_responses)
        if seen.problems:
            return _openai_error(seen.problems[0])
        if special is not None and "status" in special:
            return JSONResponse(special["body"], status_code=special["status"])
        n = len(self.seen)
        output = (special or {}).get("output") or [
            {
                "type": "message",
                "id": f"msg_{n}",
                "role": "assistant",
                "status": "completed",
                "content": [{"type": "output_text", "text": f"ok {n}", "annotations": []}],
            }
        ]
        usage = {
            "input_tokens": seen.input_tokens,
            "input_tokens_details": {"cached_tokens": seen.input_tokens // 4},
            "output_tokens": 7,
            "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": seen.input_tokens + 7,
        }
        response = {
            "id": f"resp_{n}",
            "object": "response",
            "created_at": 0,
            "status": "completed",
            "model": seen.body["model"],
            "output": output,
            "usage": usage,
        }
        if not seen.body.get("stream"):
            return JSONResponse(response)
        return Response(responses_events(response), media_type="text/event-stream")


def anthropic_problems(body: dict[str, Any], beta: str) -> list[str]:
    """The Messages API's rules; with the ``mid-conversation-system`` beta a ``system`` message
    may stand inside the conversation (never first, never empty): the rest is checked with it
    left out, the messages around it taken as one turn when of one role."""
    if "mid-conversation-system" not in beta:
        return validate_anthropic(body)
    problems: list[str] = []
    rest: list[dict[str, Any]] = []
    for k, msg in enumerate(body.get("messages") or []):
        if msg.get("role") != "system":
            if rest and rest[-1]["role"] == msg["role"]:
                both = _as_blocks(rest[-1]["content"]) + _as_blocks(msg["content"])
                rest[-1] = {**rest[-1], "content": both}
            else:
                rest.append(msg)
        elif k == 0 or not msg.get("content"):
            problems.append(f"messages.{k}: a system message must not be first or empty")
        elif body["messages"][k - 1].get("role") == "system":
            problems.append(f"messages.{k}: two system messages in a row (the API merges them)")
    return problems + validate_anthropic({**body, "messages": rest})


def _as_blocks(content: Any) -> list[Any]:
    return [{"type": "text", "text": content}] if isinstance(content, str) else list(content)


def _openai_error(message: str) -> JSONResponse:
    error = {"message": message, "type": "invalid_request_error", "param": None, "code": None}
    return JSONResponse({"error": error}, status_code=400)


def responses_events(response: dict[str, Any]) -> str:
    """``response`` as the Responses API streams it (created, items added / text deltas / done,
    completed)."""
    events: list[dict[str, Any]] = [
        {"type": "response.created", "response": dict(response, status="in_progress", output=[], usage=None)}
    ]
    for k, item in enumerate(response["output"]):
        events.append({"type": "response.output_item.added", "output_index": k, "item": item})
        for part in item.get("content") or [] if item["type"] == "message" else []:
            events.append(
                {
                    "type": "response.output_text.delta",
                    "output_index": k,
                    "content_index": 0,
                    "item_id": item.get("id", ""),
                    "delta": part.get("text", ""),
                }
            )
        events.append({"type": "response.output_item.done", "output_index": k, "item": item})
    events.append({"type": "response.completed", "response": response})
    for seq, event in enumerate(events):
        event["sequence_number"] = seq
    return "".join(f"event: {e['type']}\ndata: {json.dumps(e)}\n\n" for e in events)


def anthropic_events(msg: dict[str, Any]) -> str:
    """``msg`` as the Messages API streams it."""
    start = dict(msg, content=[], stop_reason=None, usage=dict(msg["usage"], output_tokens=1))
    events: list[tuple[str, dict[str, Any]]] = [
        ("message_start", {"type": "message_start", "message": start})
    ]
    for k, block in enumerate(msg["content"]):
        if block["type"] == "text":
            events.append(
                (
                    "content_block_start",
                    {
                        "type": "content_block_start",
                        "index": k,
                        "content_block": {"type": "text", "text": ""},
                    },
                )
            )
            delta = {"type": "text_delta", "text": block["text"]}
        else:
            events.append(
                (
                    "content_block_start",
                    {"type": "content_block_start", "index": k, "content_block": dict(block, input={})},
                )
            )
            delta = {"type": "input_json_delta", "partial_json": json.dumps(block["input"])}
        events.append(("content_block_delta", {"type": "content_block_delta", "index": k, "delta": delta}))
        events.append(("content_block_stop", {"type": "content_block_stop", "index": k}))
    events.append(
        (
            "message_delta",
            {
                "type": "message_delta",
                "delta": {"stop_reason": msg["stop_reason"], "stop_sequence": None},
                "usage": {"output_tokens": msg["usage"]["output_tokens"]},
            },
        )
    )
    events.append(("message_stop", {"type": "message_stop"}))
    return "".join(f"event: {n}\ndata: {json.dumps(d)}\n\n" for n, d in events)


def openai_chunks(base: dict[str, Any], message: dict[str, Any], finish: str, usage: dict[str, Any]) -> str:
    """A chat completion as streamed chunks (usage in a final chunk, as with include_usage)."""
    chunk = dict(base, object="chat.completion.chunk")
    delta: dict[str, Any] = {"role": "assistant", "content": message.get("content")}
    if message.get("tool_calls"):
        delta["tool_calls"] = [dict(c, index=k) for k, c in enumerate(message["tool_calls"])]
    chunks = [
        dict(chunk, choices=[{"index": 0, "delta": delta, "finish_reason": None}]),
        dict(chunk, choices=[{"index": 0, "delta": {}, "finish_reason": finish}]),
        dict(chunk, choices=[], usage=usage),
    ]
    return "".join(f"data: {json.dumps(c)}\n\n" for c in chunks) + "data: [DONE]\n\n"
