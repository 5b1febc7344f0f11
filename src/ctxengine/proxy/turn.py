"""One proxied request from the session's lock to the end of its response.

A ``Turn`` ends exactly once (``complete``): the upstream's usage and reply go to the engine
(``apply.finish``, on the engine thread; with a shared store, to the store too) when the upstream
answered 2xx, the session's locks are released (across nodes, then the node's own), and the
request's one log line is written: path, session, status, tokens the client sent against tokens
sent upstream, the layers that acted, the proxy's own time before the upstream call and the whole
time, and when the next compaction was rehearsed while the upstream answered (``engine.ahead``),
the rehearsal's time.
The line never holds a key or any message content.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import httpx
from starlette.responses import Response, StreamingResponse
from starlette.types import Receive, Scope, Send

from ctxengine.messages.model import Usage
from ctxengine.proxy.apply import Prepared, finish
from ctxengine.proxy.sessions import ProxySession
from ctxengine.proxy.wire import StreamTap, Wire

log = logging.getLogger("ctxengine.proxy")

Runner = Callable[..., Awaitable[Any]]  # runs a function on the engine thread


@dataclass
class Turn:
    """State of one request; ``note`` says what happened besides the normal path (fail open)."""

    path: str
    wire: Wire
    run: Runner
    started: float = field(default_factory=time.perf_counter)
    session: ProxySession | None = None
    prepared: Prepared | None = None
    stream: bool = False
    note: str = ""
    added_ms: float = 0.0  # the proxy's own time before the upstream call
    failures: list[str] = field(default_factory=list)
    # ``apply.finish``, or a shared store's (which records the turn's answer and figures there)
    finish: Callable[..., None] = finish
    # gives back the session's lock across nodes (shared store), before the node's own
    release: Callable[[ProxySession], Awaitable[None]] | None = None
    _done: bool = False
    _ahead: asyncio.Future[Any] | None = None  # the rehearsal started when the request was sent

    def mark_sent(self) -> None:
        """The request leaves for the upstream now: the proxy's own time ends here. While the
        upstream answers, the engine thread being idle, the session's next compaction is rehearsed
        if due (``engine.ahead``; ``complete`` waits for it before ``finish``, which the engine
        thread would run after it anyway)."""
        self.added_ms = (time.perf_counter() - self.started) * 1000
        s, p = self.session, self.prepared
        if s is not None and p is not None:
            self._ahead = asyncio.ensure_future(self.run(s.ahead.after_call, s.engine, p.projection.window))

    async def complete(self, status: int, usage: Usage | None, reply: dict[str, Any] | None) -> None:
        """Feed the engine (``apply.finish``), release the session, log the line. Idempotent."""
        if self._done:
            return
        self._done = True
        s = self.session
        try:
            if self._ahead is not None:
                try:
                    await self._ahead
                except Exception as exc:  # a rehearsal changes nothing: only its time is lost
                    self.failures.append(f"compaction rehearsal failed: {type(exc).__name__}: {exc}")
            if s is not None:
                await self.run(self.finish, s, self.wire, self.prepared, status, usage, reply)
        except Exception as exc:  # the response is already on its way; the engine missed one usage
            self.failures.append(f"after_turn failed: {type(exc).__name__}: {exc}")
        finally:
            await self._unlock(s)
            self._log(status, usage)

    async def _unlock(self, s: ProxySession | None) -> None:
        if s is None:
            return
        try:
            if self.release is not None:
                await self.release(s)
        except Exception as exc:
            self.failures.append(f"lock release failed: {type(exc).__name__}: {exc}")
        finally:
            if s.lock.locked():
                s.lock.release()

    def _log(self, status: int, usage: Usage | None) -> None:
        p = self.prepared
        sid = self.session.id if self.session is not None else "-"
        sizes = f"client~{p.client_tokens:,} upstream~{p.projection.tokens:,}" if p else "unchanged"
        layers = ",".join(sorted({e.layer for e in p.projection.events})) if p else ""
        used = f" usage_in={usage.total_input:,}" if usage is not None else ""
        note = f" {self.note}" if self.note else ""
        fails = f" failed: {'; '.join(self.failures)}" if self.failures else ""
        if self.session is not None and self.session.ahead.last:  # this turn's (``mark_sent``)
            note += f" next compaction rehearsed ({self.session.ahead.last * 1000:.1f}ms)"
            self.session.ahead.last = 0.0
        total = (time.perf_counter() - self.started) * 1000
        log.info(
            "POST %s session=%s status=%d stream=%s tokens %s%s layers=[%s] added=%.1fms total=%.0fms%s%s",
            self.path,
            sid,
            status,
            "yes" if self.stream else "no",
            sizes,
            used,
            layers,
            self.added_ms,
            total,
            note,
            fails,
        )


class GuardedTap:
    """``tap`` that can never cut the stream it reads: an event it cannot read (a shape the
    provider did not document: a null index, arguments as an object) stops the reading, logs one
    line and leaves the stream's usage and reply unread (the client's next request carries the
    reply anyway); the bytes go on to the client as sent."""

    def __init__(self, tap: StreamTap) -> None:
        self.tap = tap
        self.failed: str | None = None

    def feed(self, chunk: bytes) -> None:
        if self.failed is not None:
            return
        try:
            self.tap.feed(chunk)
        except Exception as exc:  # any shape the reader does not expect: fail open, said once
            self.failed = f"{type(exc).__name__}: {exc}"
            log.warning("proxy: the upstream's stream could not be read (%s); relayed as sent", self.failed)

    @property
    def usage(self) -> Usage | None:
        return None if self.failed is not None else self.tap.usage

    @property
    def reply(self) -> dict[str, Any] | None:
        return None if self.failed is not None else self.tap.reply


async def relay(response: httpx.Response, tap: StreamTap) -> AsyncIterator[bytes]:
    """The upstream's stream, byte for byte, read by ``tap`` on the way (wrap it in
    ``GuardedTap``: a reading error must not cut the stream)."""
    async for chunk in response.aiter_bytes():
        tap.feed(chunk)
        yield chunk


class TurnResponse(Response):
    """The upstream's JSON (or error) response; the turn completes once it has gone out, or when
    the client went away before (ASGI 2.4 servers raise then, and a background task would never
    run: the session would stay locked)."""

    def __init__(self, turn: Turn, upstream: httpx.Response, data: bytes, headers: dict[str, str]) -> None:
        super().__init__(data, status_code=upstream.status_code, headers=headers)
        self._turn, self._upstream = turn, upstream
        self.usage: Usage | None = None
        self.reply: dict[str, Any] | None = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            await self._turn.complete(self._upstream.status_code, self.usage, self.reply)


class TurnStream(StreamingResponse):
    """The upstream's stream relayed (``relay``); the turn completes with what the tap read once
    the stream has ended or the client went away, and the upstream response is closed then."""

    def __init__(self, turn: Turn, upstream: httpx.Response, tap: StreamTap, headers: dict[str, str]) -> None:
        guarded = GuardedTap(tap)
        super().__init__(relay(upstream, guarded), status_code=upstream.status_code, headers=headers)
        self._turn, self._upstream, self._tap = turn, upstream, guarded

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            await self._upstream.aclose()
            await self._turn.complete(self._upstream.status_code, self._tap.usage, self._tap.reply)
