"""The proxy's ASGI app (Starlette): routes, the request path, fail open.

Routes: ``POST /v1/messages`` (Anthropic), ``POST /v1/chat/completions`` and ``POST
/v1/responses`` (OpenAI) go through the engine; ``GET /ctxengine/sessions`` reports the
sessions; every other request (Anthropic's ``count_tokens``, model lists, ...) is passed through
unchanged to the upstream of its provider (by path, else by its auth header).

A managed request: parse (a body that is not a request gets the provider's 400) -> the session
(``identity`` chain or ``x-ctxengine-session``; its lock held until the response ends) ->
``apply.prepare`` on the engine thread -> upstream -> the response back as the upstream sent it
(JSON or the stream byte for byte) -> ``apply.finish``. Fail open: when the engine raises, the
client's body goes upstream unchanged, the session is dropped (the next request starts a new one)
and the log line says why. A request whose context the provider manages itself
(``wire.LeftToProvider``: ``previous_response_id``, server-side compaction) goes upstream as sent,
without a session, and its log line says why. Engine work runs on one worker thread (the engine
is single-threaded); the event loop stays free, so the upstream calls of different sessions run
in parallel. With a store (``--store DIR``: SQLite; ``--store postgresql://...``: shared by
every node) sessions are found, locked and recorded through ``shared`` (a restart loses none);
without one, in the in-memory table. With ``--admin-token`` the sessions report is scoped by
``admin``.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import time
import warnings
from collections.abc import AsyncIterator, Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, TypeVar

import httpx
import msgspec
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

import ctxengine.proxy.admin as admin
import ctxengine.proxy.upstream as upstream
from ctxengine.dashboard.routes import dashboard_routes
from ctxengine.dashboard.timeline import agent_name
from ctxengine.engine.core import ContextEngine
from ctxengine.models.registry import ModelWindowWarning
from ctxengine.proxy.apply import Prepared, prepare
from ctxengine.proxy.cache_ttl import IdleGaps, hour_prefix
from ctxengine.proxy.config import ProxyConfig, Totals, live_policy
from ctxengine.proxy.identity import SESSION_HEADER, key_digest, root
from ctxengine.proxy.job_process import notes_in, notes_process
from ctxengine.proxy.locks import LockUnavailable
from ctxengine.proxy.retrieve_rounds import forward_rounds
from ctxengine.proxy.sessions import ProxySession, SessionTable, branched_off
from ctxengine.proxy.shared import SharedSessions
from ctxengine.proxy.shared_open import open_sessions
from ctxengine.proxy.store import ProxyStore
from ctxengine.proxy.turn import Turn, TurnResponse, TurnStream, log
from ctxengine.proxy.warm import warm_start
from ctxengine.proxy.wire import BadRequest, ClientRequest, LeftToProvider, Wire, read_request
from ctxengine.proxy.wire_anthropic import AnthropicWire
from ctxengine.proxy.wire_openai import OpenAIWire
from ctxengine.proxy.wire_responses import ResponsesWire
from ctxengine.store.base import SessionStore, StoreError

T = TypeVar("T")
STORE_FILE = "proxy.sqlite"  # inside ``--store DIR``
DISCONNECT_POLL_S = 0.25  # how often a request waiting on the upstream checks that its client is still there


class Proxy:
    """The proxy's state: sessions, the engine thread, the upstream client."""

    def __init__(self, config: ProxyConfig) -> None:
        self.config = config
        self.table = SessionTable()
        self.totals = Totals()
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="ctxengine-engine")
        self._store: ProxyStore | None = None
        self._client: httpx.AsyncClient | None = None
        self._creating = asyncio.Lock()
        self.anthropic: Wire = AnthropicWire()
        self.openai: Wire = OpenAIWire()
        self.responses: Wire = ResponsesWire()
        self._said: dict[str, set[str]] = {}  # per session id: what its log lines said once
        self.gaps = IdleGaps()  # Anthropic sessions' pauses (cache_ttl)
        key = config.prompt_cache_key
        self.cache_key = key if key is not None else config.openai_upstream.rstrip("/") == upstream.OPENAI_API
        self.policy = live_policy(config)
        self.shared: SharedSessions | None
        self.shared = open_sessions(config, STORE_FILE, self.table, self.run, self._engine)
        self.notes = notes_process(config) if self.shared is None else None

    @property
    def client(self) -> httpx.AsyncClient:
        if self._client is None:
            self._client = upstream.make_client()
        return self._client

    async def run(self, fn: Callable[..., T], *args: Any) -> T:
        """``fn(*args)`` on the engine thread."""
        return await asyncio.get_running_loop().run_in_executor(self._pool, functools.partial(fn, *args))

    async def close(self) -> None:
        if self._client is not None:
            await self._client.aclose()
        if self._store is not None:
            await self.run(self._store.close)
        if self.shared is not None:
            await self.shared.close()
        if self.notes is not None:
            await asyncio.to_thread(self.notes.close)
        self._pool.shutdown(wait=True)

    # ------------------------------------------------------------------ sessions

    def _engine(
        self, sid: str, model: str, window: int | None = None, store: SessionStore | None = None
    ) -> ContextEngine:
        """A new engine (engine thread: the store is opened there); ``window``: the request's own
        (the 1M-context beta), else ``--window`` or the model's; ``store``: a shared store's
        writer, else the proxy's SQLite store."""
        if store is None and self._store is None:
            path = Path(self.config.store) if self.config.store is not None else None
            if path is not None:
                path.mkdir(parents=True, exist_ok=True)
            self._store = ProxyStore(path / STORE_FILE if path is not None else ":memory:")
        with warnings.catch_warnings():
            if window is not None and not self.config.window:  # the beta's window is the model's
                warnings.simplefilter("ignore", ModelWindowWarning)
            engine = ContextEngine(
                self.policy, model=model, window=self.config.window or window, registry=self.config.registry,
                store=store or self._store, session_id=sid, background_notes=self.config.background_notes,
            )  # fmt: skip
        return notes_in(self.notes, engine, model)  # without a store: the $0 notes in the job process

    async def session(self, wire: Wire, request: ClientRequest, headers: Any) -> ProxySession:
        """The session of ``request`` (continued, or new: a new conversation or a branch), its lock
        held and the request's chain recorded in it. New sessions are made one at a time, so that
        concurrent first requests of one conversation share one session. With a shared store the
        store finds it (``shared``); raises ``StoreError`` or ``LockUnavailable`` then."""
        if self.shared is not None:
            shared = await self.shared.session(wire, request, headers, upstream.beta_window(headers))
            shared.agent = shared.agent or agent_name(headers.get("user-agent", ""))
            self.shared.store_outage.ok()
            self.shared.lock_outage.ok()
            return shared
        key = key_digest(headers)
        start = root(wire.provider, key, request.fixed_prefix)
        links, digests = self.table.chains.chain(start, request.conversation, request.raws)
        label = headers.get(SESSION_HEADER)
        name = (key, label) if label else None
        while True:
            found, whole = self.table.match(links, name, start)
            moved = None if found is None or whole else found.realigns(digests)  # ``align``
            if found is not None and (whole or moved is not None):
                await found.lock.acquire()
                again = self.table.match(links, name, start)
                if again == (found, whole) and moved == found.realigns(digests):
                    found.last_used, found.realign = time.monotonic(), moved
                    self.table.advance(found, links, digests, moved)
                    return found
                found.lock.release()  # extended meanwhile: match again
                continue
            async with self._creating:
                if self.table.match(links, name, start) != (found, whole):
                    continue  # made meanwhile by a concurrent request: match again
                sid = self.table.new_id(wire.provider)
                engine = await self.run(self._engine, sid, request.model, upstream.beta_window(headers))
                new = ProxySession(sid, wire.provider, request.model, engine, wire.reader(), key=key)
                new.agent, new.root = agent_name(headers.get("user-agent", "")), start
                self.table.add(new, branch_of=branched_off(found, links, name), name=name)
                await new.lock.acquire()
                self.table.advance(new, links, digests)  # a concurrent request of it now waits for this one
                return new

    async def abandon(self, turn: Turn, exc: BaseException) -> None:
        """Drop the turn's session (its engine state is unknown after ``exc``) and unlock it."""
        s = turn.session
        if s is not None:
            try:
                if self.shared is not None:
                    await self.shared.abandon(s, exc)
                else:
                    self.table.drop(s)
            finally:
                if s.lock.locked():
                    s.lock.release()
                turn.session = None

    # ------------------------------------------------------------------ requests

    async def managed(self, request: Request, wire: Wire, base: str, strip_v1: bool) -> Response:
        """A request the engine applies to (see the module docstring)."""
        self.totals.requests += 1
        turn = Turn(request.url.path, wire, self.run)
        if self.shared is not None:
            turn.finish, turn.release = self.shared.finish, self.shared.release
        raw = await request.body()
        parsed: ClientRequest | None
        try:
            parsed = read_request(wire, raw)
        except (msgspec.DecodeError, BadRequest) as exc:
            return await self._bad_request(turn, exc)
        except RecursionError:  # valid JSON nested past any parser's limit: a 500 before
            return await self._bad_request(turn, BadRequest("the body is JSON nested too deeply to read"))
        except LeftToProvider as exc:
            self.totals.left_to_provider += 1
            turn.note = f"left to the provider (forwarded as sent): {exc}"
            parsed = None
        content = raw
        if parsed is not None:
            turn.stream = parsed.stream
            prepared = await self._prepare(turn, request, wire, parsed, raw)
            if isinstance(prepared, Response):
                return prepared
            content = prepared
        url = upstream.upstream_url(base, request.url.path, request.url.query, strip_v1=strip_v1)
        headers = upstream.request_headers(request.headers)
        try:
            if self.config.retrieve_tool and turn.prepared is not None:
                work = forward_rounds(self.client, turn, url, headers, turn.prepared.body)
            else:
                work = self.forward(turn, url, headers, content)
            return await self._unless_gone(request, turn, work)
        except Exception as exc:  # a bug on the way back: the session must not stay locked
            turn.failures.append(f"{type(exc).__name__}: {exc}")
            await turn.complete(502, None, None)
            msg = f"ctxengine proxy: failed relaying the upstream's response ({type(exc).__name__})"
            return JSONResponse(wire.error_body(msg, "api_error"), status_code=502)

    async def _prepare(
        self, turn: Turn, request: Request, wire: Wire, parsed: ClientRequest, raw: bytes
    ) -> bytes | Response:
        """The body to send upstream (the engine's projection; ``raw`` when the engine failed:
        fail open), or the provider-shaped 400 for client messages of the wrong shape."""
        try:
            turn.session = await self.session(wire, parsed, request.headers)
            if self.shared is not None:
                turn.prepared = await self.shared.prepare(turn.session, wire, parsed)
            else:
                turn.prepared = await self.run(prepare, turn.session, wire, parsed)
            body = turn.prepared.body
            if wire.provider == "openai" and self.cache_key and "prompt_cache_key" not in body:
                body["prompt_cache_key"] = turn.session.id
            hour = False
            if wire.provider == "anthropic":
                self.gaps.note(turn.session.id)
                hour = self.gaps.outlast_five_minutes(turn.session.id) and hour_prefix(body)
            turn.note = self._news(turn.session, turn.prepared, hour)
            return msgspec.json.encode(body)
        except BadRequest as exc:
            await self.abandon(turn, exc)
            return await self._bad_request(turn, exc)
        except Exception as exc:
            self.totals.fail_open += 1
            if self.shared is not None and isinstance(exc, StoreError | LockUnavailable):
                self.totals.store_failures += 1
                self.shared.failed(exc)
            await self.abandon(turn, exc)
            turn.prepared = None
            turn.note = f"fail open (request forwarded unchanged): {type(exc).__name__}: {exc}"
            return raw

    def _news(self, session: ProxySession, prepared: Prepared, hour: bool) -> str:
        """What the log line says: that the client moved messages (``align``, every time); once per
        session, that it is a branch (the client's history differs from the session it began as),
        that the client's output ask shrank the prompt's budget, that its fixed prefix is now
        cached for an hour (``cache_ttl``)."""
        if len(self._said) > 2 * len(self.table.sessions) + 100:  # forget those evicted or dropped
            self._said = {k: v for k, v in self._said.items() if k in self.table.sessions}
            self.gaps.forget(set(self.table.sessions))
        said, budget = self._said.setdefault(session.id, set()), prepared.budget
        news = [f"realigned: {prepared.moved} messages moved"] if prepared.moved else []
        if session.branch_of is not None and "branch" not in said:
            news.append(f"new session, a branch of {session.branch_of}: the client's history differs from it")
            said.add("branch")
        if budget is not None and "budget" not in said:
            w = session.engine.window
            news.append(f"the client's output ask leaves the prompt {budget:,} of the {w:,}-token window")
            said.add("budget")
        if hour and "hour" not in said:
            news.append("its pauses outlast 5 minutes: the fixed prefix is cached for 1 hour")
            said.add("hour")
        return "; ".join(news)

    async def _unless_gone(self, request: Request, turn: Turn, work: Awaitable[Response]) -> Response:
        """``work`` (the upstream call), cancelled when the client goes away before it ends: a
        client that timed out and retries must not wait behind its own abandoned request (its
        session locked, the upstream still billing: 14 s behind a 15 s call)."""
        task = asyncio.ensure_future(work)
        while True:
            done, _ = await asyncio.wait({task}, timeout=DISCONNECT_POLL_S)
            if done:
                return task.result()
            if await request.is_disconnected():
                task.cancel()
                with contextlib.suppress(BaseException):
                    await task
                turn.note = "the client went away before the upstream answered: its request cancelled"
                await turn.complete(499, None, None)
                return Response(status_code=499)

    async def _bad_request(self, turn: Turn, exc: Exception) -> Response:
        """The provider-shaped 400 for a request the proxy cannot parse (nothing goes upstream)."""
        self.totals.bad_requests += 1
        turn.note = f"bad request: {exc}"
        await turn.complete(400, None, None)
        return JSONResponse(turn.wire.error_body(str(exc)), status_code=400)

    async def forward(self, turn: Turn, url: str, headers: dict[str, str], content: bytes) -> Response:
        """Send ``content`` upstream; return the response as the upstream sent it."""
        turn.mark_sent()
        try:
            resp = await self.client.send(
                self.client.build_request("POST", url, content=content, headers=headers), stream=True
            )
        except httpx.HTTPError as exc:
            self.totals.upstream_unreachable += 1
            turn.note = f"upstream unreachable: {type(exc).__name__}"
            await turn.complete(502, None, None)
            body = turn.wire.error_body(
                f"ctxengine proxy: upstream unreachable ({type(exc).__name__})", "api_error"
            )
            return JSONResponse(body, status_code=502)
        back = upstream.response_headers(resp.headers)
        streamed = "text/event-stream" in resp.headers.get("content-type", "")
        if streamed:
            return TurnStream(turn, resp, turn.wire.tap(), back)
        try:
            data = await resp.aread()
        finally:  # read, or cancelled (the client went away): the connection goes back to the pool
            await resp.aclose()
        out = TurnResponse(turn, resp, data, back)  # completes once it has gone out
        if resp.status_code < 400:
            try:  # the body goes back as sent whatever its shape; what cannot be read is said once
                decoded = msgspec.json.decode(out.body)
                out.usage, out.reply = turn.wire.usage(decoded), turn.wire.reply(decoded)
            except msgspec.DecodeError:
                pass
            except Exception as exc:
                out.usage = out.reply = None
                why = f"{type(exc).__name__}: {exc}"
                log.warning("proxy: the upstream's response could not be read (%s)", why)
        return out

    async def passthrough(self, request: Request) -> Response:
        """Any other request, unchanged, to its provider's upstream."""
        self.totals.passed_through += 1
        anthropic = upstream.is_anthropic(request.url.path, request.headers)
        base = self.config.anthropic_upstream if anthropic else self.config.openai_upstream
        url = upstream.upstream_url(base, request.url.path, request.url.query, strip_v1=not anthropic)
        req = self.client.build_request(
            request.method,
            url,
            content=await request.body(),
            headers=upstream.request_headers(request.headers),
        )
        try:
            resp = await self.client.send(req, stream=True)
        except httpx.HTTPError as exc:
            wire = self.anthropic if anthropic else self.openai
            return JSONResponse(
                wire.error_body(f"ctxengine proxy: upstream unreachable ({type(exc).__name__})", "api_error"),
                status_code=502,
            )
        log.info("%s %s passed through status=%d", request.method, request.url.path, resp.status_code)
        return StreamingResponse(
            _bytes(resp), status_code=resp.status_code, headers=upstream.response_headers(resp.headers)
        )

    async def sessions_report(self, key: str | None = None) -> dict[str, Any]:
        """``GET /ctxengine/sessions``: per session its figures (``key``'s sessions only, when
        given: a key digest), and this node's totals. With a shared store, the store's figures
        (the same on every node). Raises ``StoreError`` when the shared store fails."""
        if self.shared is not None:
            rows = await self.shared.report(key)
        else:
            rows = [s.report() for s in self.table.sessions.values() if key is None or s.key == key]
        totals = vars(self.totals) | {"sessions": len(rows), "sessions_evicted": self.table.evicted}
        if self.shared is not None:
            totals |= {"sessions_rebuilt": self.shared.rebuilt, "turns_replayed": self.shared.replayed}
            if self.shared.jobs is not None:
                totals |= vars(self.shared.jobs.stats)
        return {"sessions": rows, "totals": totals}


async def _bytes(resp: httpx.Response) -> AsyncIterator[bytes]:
    try:
        async for chunk in resp.aiter_bytes():
            yield chunk
    finally:
        await resp.aclose()


def create_app(config: ProxyConfig) -> Starlette:
    """The ASGI app of a proxy with ``config`` (its ``Proxy`` is ``app.state.proxy``)."""
    proxy = Proxy(config)
    cfg = config

    async def messages(request: Request) -> Response:
        if request.method != "POST":  # a CORS preflight, a HEAD: the upstream's to answer
            return await proxy.passthrough(request)
        return await proxy.managed(request, proxy.anthropic, cfg.anthropic_upstream, strip_v1=False)

    async def chat(request: Request) -> Response:
        if request.method != "POST":
            return await proxy.passthrough(request)
        return await proxy.managed(request, proxy.openai, cfg.openai_upstream, strip_v1=True)

    async def responses(request: Request) -> Response:
        if request.method != "POST":
            return await proxy.passthrough(request)
        return await proxy.managed(request, proxy.responses, cfg.openai_upstream, strip_v1=True)

    async def sessions(request: Request) -> Response:
        scope = admin.scope(request.headers, cfg.admin_token)
        if scope is admin.NONE:
            return JSONResponse(admin.REFUSED, status_code=401)
        try:
            return JSONResponse(await proxy.sessions_report(None if scope is admin.ALL else str(scope)))
        except StoreError as exc:
            return JSONResponse({"error": f"the session store failed: {exc}"}, status_code=503)

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        warm = asyncio.ensure_future(proxy.run(warm_start, proxy.policy, cfg.window, cfg.freeze_heap))
        _ = proxy.client  # the upstream client (its TLS context, 0.1-0.25 s) made before the first request
        if proxy.shared is not None:  # its job worker
            await proxy.shared.start()
        if (failed := (await asyncio.wait({warm}))[0].pop().exception()) is not None:
            log.warning("proxy: the warm start failed (%s: %s)", type(failed).__name__, failed)
        yield
        await proxy.close()

    methods = ["GET", "POST", "PUT", "PATCH", "DELETE", "OPTIONS", "HEAD"]
    app = Starlette(
        routes=[
            Route("/v1/messages", messages, methods=methods),
            Route("/v1/chat/completions", chat, methods=methods),
            Route("/v1/responses", responses, methods=methods),
            Route("/ctxengine/sessions", sessions, methods=["GET"]),
            *dashboard_routes(cfg, proxy.table, proxy.sessions_report),
            Route("/{path:path}", proxy.passthrough, methods=methods),
        ],
        lifespan=lifespan,
    )
    app.state.proxy = proxy
    return app
