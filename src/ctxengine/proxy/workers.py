"""``ctxengine proxy --workers N``: N worker processes, each session kept on one of them.

The node's port is served by a router (this module, the command's own process) that runs no
engine work: it reads a request, picks its worker by the request's *affinity* (``affinity``: a
digest of the key digest and the conversation's first user message in its normal form, or of the
``x-ctxengine-session`` name), and relays it to that worker's Unix socket, the response streamed
back as the worker sends it. Each worker is a whole proxy (``create_app``) on the shared
PostgreSQL store and Redis locks, so a session's requests find its engine warm in one process
(no replay of turns another worker served, as with uvicorn's workers sharing a port, where a
session's requests landed on either), and any worker can still continue any session: when a
worker is down (killed, restarting) its requests go to the next one, which rebuilds the session
from the store. A worker that exits is started again (``Workers.watch``); a worker whose parent
is gone (the router killed with SIGKILL alone) exits by itself, its sockets' folder removed.

A request the worker was given when it died gets a 502 in its provider's shape (the client's
retry is served); a request that could not reach its worker (nothing was sent) goes to the next.
``GET /ctxengine/sessions`` asks every worker: the sessions are the store's (the same from each),
the totals are summed.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import multiprocessing
import os
import shutil
import tempfile
import time
from collections.abc import AsyncIterator
from multiprocessing.process import BaseProcess
from pathlib import Path
from typing import Any

import httpx
import msgspec
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from ctxengine.proxy.identity import SESSION_HEADER, digest, key_digest, message_bytes
from ctxengine.proxy.parent_watch import exit_with_parent
from ctxengine.proxy.upstream import HOP_BY_HOP, READ_TIMEOUT_S

log = logging.getLogger("ctxengine.proxy")
START_TIMEOUT_S = 120.0  # a worker's import and app on a busy machine
WATCH_S = 0.5  # how often the router checks that its workers live
DISCONNECT_POLL_S = 0.25
MANAGED = ("/v1/messages", "/v1/chat/completions", "/v1/responses")
_DROP_REQUEST = HOP_BY_HOP | {"host", "content-length"}
_DROP_RESPONSE = HOP_BY_HOP | {"content-length"}


class _Shape(msgspec.Struct):
    """What the affinity reads of a body: its messages (Anthropic, Chat) or input (Responses)."""

    messages: list[msgspec.Raw] | None = None
    input: list[msgspec.Raw] | str | None = None


class _Role(msgspec.Struct):
    role: Any = None


_SHAPE = msgspec.json.Decoder(_Shape)
_ROLE = msgspec.json.Decoder(_Role)


def affinity(headers: Any, body: bytes) -> bytes:
    """The digest that keeps a conversation on one worker: its key digest with its
    ``x-ctxengine-session`` name, else with its first user message (normal form: the
    ``cache_control`` a client moves between requests left out), else the key digest alone
    (a body that is not a request: the worker answers it). The same for every request of a
    conversation, whatever its length; a branch stays with the conversation it left."""
    key = key_digest(headers).encode()
    name = headers.get(SESSION_HEADER)
    if name:
        return digest(b"name", key, name.encode())
    try:
        shape = _SHAPE.decode(body)
    except (msgspec.DecodeError, RecursionError):
        return digest(b"key", key)
    items = shape.messages if shape.messages is not None else shape.input
    if isinstance(items, str):
        return digest(b"first", key, items.encode())
    for raw in items or []:
        try:
            if _ROLE.decode(raw).role == "user":
                return digest(b"first", key, message_bytes(msgspec.json.decode(raw)))
        except (msgspec.DecodeError, RecursionError):
            continue
    return digest(b"key", key)


def _worker_main(options: dict[str, Any], sock: str, parent: int, common: dict[str, Any]) -> None:
    """One worker process: the whole proxy on the Unix socket ``sock``; it exits when its parent
    (the router) is gone."""
    from ctxengine.proxy.app import create_app
    from ctxengine.proxy.options import config_from_options, logging_setup

    logging_setup()

    # the sockets' folder removed first: the router could not
    exit_with_parent(parent, 1, lambda: shutil.rmtree(os.path.dirname(sock), ignore_errors=True))
    options = dict(options)
    if options.get("policy_file"):
        options["policy_file"] = Path(options["policy_file"])
    config = dataclasses.replace(config_from_options(options), freeze_heap=True, job_process=True)  # its own
    uvicorn.run(create_app(config), uds=sock, **common)


class Workers:
    """The worker processes of a node and the clients that reach them."""

    def __init__(self, options: dict[str, Any], n: int, common: dict[str, Any]) -> None:
        self.options, self.n, self.common = options, n, common
        self.dir = tempfile.mkdtemp(prefix="ctxengine-proxy-")
        self.socks = [os.path.join(self.dir, f"w{i}.sock") for i in range(n)]
        self.procs: list[BaseProcess | None] = [None] * n
        self.restarts = 0
        self._ctx = multiprocessing.get_context("spawn")
        limits = httpx.Limits(max_connections=1000, max_keepalive_connections=200)
        timeout = httpx.Timeout(READ_TIMEOUT_S, connect=5.0)
        self.clients = [
            httpx.AsyncClient(transport=httpx.AsyncHTTPTransport(uds=s, limits=limits), timeout=timeout)
            for s in self.socks
        ]

    def start(self, i: int) -> None:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.socks[i])
        common = {k: v for k, v in self.common.items() if k not in ("host", "port")}
        p = self._ctx.Process(
            target=_worker_main,
            args=(self.options, self.socks[i], os.getpid(), common),
            name=f"ctxengine-worker-{i}",
        )
        p.start()
        self.procs[i] = p

    def start_all(self) -> None:
        """Start every worker and wait until each listens. Raises ``RuntimeError`` when one
        exits or does not listen within ``START_TIMEOUT_S``."""
        for i in range(self.n):
            self.start(i)
        until = time.monotonic() + START_TIMEOUT_S
        for i, sock in enumerate(self.socks):
            while not os.path.exists(sock):
                p = self.procs[i]
                if p is not None and not p.is_alive():
                    raise RuntimeError(f"worker {i} exited while starting (code {p.exitcode})")
                if time.monotonic() > until:
                    raise RuntimeError(f"worker {i} did not listen within {START_TIMEOUT_S:.0f} s")
                time.sleep(0.05)

    async def watch(self) -> None:
        """Start again every worker that exited (said in the log), until cancelled."""
        while True:
            await asyncio.sleep(WATCH_S)
            for i, p in enumerate(self.procs):
                if p is not None and not p.is_alive():
                    log.warning("proxy: worker %d exited (code %s): started again", i, p.exitcode)
                    self.restarts += 1
                    self.start(i)

    async def stop(self) -> None:
        """Stop the workers (SIGTERM, then SIGKILL after 30 s), close the clients."""
        for c in self.clients:
            await c.aclose()
        for p in self.procs:
            if p is not None and p.is_alive():
                p.terminate()
        for p in self.procs:
            if p is not None:
                await asyncio.get_running_loop().run_in_executor(None, p.join, 30)
                if p.is_alive():
                    p.kill()
        shutil.rmtree(self.dir, ignore_errors=True)


def _error(path: str, message: str, status: int) -> JSONResponse:
    """An error in the shape of the request's provider (Anthropic's, else OpenAI's)."""
    if path.startswith("/v1/messages"):
        body: dict[str, Any] = {"type": "error", "error": {"type": "api_error", "message": message}}
    else:
        body = {"error": {"message": message, "type": "server_error", "param": None, "code": None}}
    return JSONResponse(body, status_code=status)


async def _stream(resp: httpx.Response) -> AsyncIterator[bytes]:
    try:
        async for chunk in resp.aiter_raw():
            yield chunk
    finally:
        await resp.aclose()


class Router:
    """The node's front: relays each request to its worker (see the module docstring)."""

    def __init__(self, workers: Workers) -> None:
        self.workers = workers
        self._next = 0

    def pick(self, request: Request, body: bytes) -> int:
        if request.method == "POST" and request.url.path in MANAGED:
            return int.from_bytes(affinity(request.headers, body)[:8], "little") % self.workers.n
        self._next = (self._next + 1) % self.workers.n  # not a session's: any worker
        return self._next

    async def relay(self, request: Request) -> Response:
        body = await request.body()
        first = self.pick(request, body)
        headers = {k: v for k, v in request.headers.items() if k.lower() not in _DROP_REQUEST}
        path = request.url.path + (f"?{request.url.query}" if request.url.query else "")
        for step in range(self.workers.n):
            client = self.workers.clients[(first + step) % self.workers.n]
            req = client.build_request(request.method, "http://worker" + path, content=body, headers=headers)
            try:
                resp = await self._unless_gone(request, client.send(req, stream=True))
            except (httpx.ConnectError, httpx.ConnectTimeout, FileNotFoundError):
                continue  # nothing was sent: the next worker continues the session from the store
            except httpx.HTTPError as exc:  # the worker died with the request
                msg = f"ctxengine proxy: the worker serving the request failed ({type(exc).__name__})"
                return _error(request.url.path, msg, 502)
            if resp is None:
                return Response(status_code=499)
            back = {k: v for k, v in resp.headers.items() if k.lower() not in _DROP_RESPONSE}
            if "content-length" in resp.headers:  # a whole body: sent back with its length
                try:
                    data = await resp.aread()
                except httpx.HTTPError as exc:
                    msg = f"ctxengine proxy: the worker serving the request failed ({type(exc).__name__})"
                    return _error(request.url.path, msg, 502)
                finally:
                    await resp.aclose()
                return Response(data, status_code=resp.status_code, headers=back)
            return StreamingResponse(_stream(resp), status_code=resp.status_code, headers=back)
        return _error(request.url.path, "ctxengine proxy: no worker is running", 503)

    @staticmethod
    async def _unless_gone(request: Request, work: Any) -> httpx.Response | None:
        """``work``, cancelled (None) when the client goes away first: the worker sees its
        connection close and cancels the upstream call."""
        task = asyncio.ensure_future(work)
        while True:
            done, _ = await asyncio.wait({task}, timeout=DISCONNECT_POLL_S)
            if done:
                resp: httpx.Response = task.result()
                return resp
            if await request.is_disconnected():
                task.cancel()
                with contextlib.suppress(BaseException):
                    await task
                return None

    async def sessions(self, request: Request) -> Response:
        """Every worker's report: the store's sessions (the first answer's), totals summed."""
        headers = {k: v for k, v in request.headers.items() if k.lower() not in _DROP_REQUEST}
        rows: list[Any] | None = None
        totals: dict[str, Any] = {}
        for client in self.workers.clients:
            try:
                r = await client.get("http://worker/ctxengine/sessions", headers=headers)
            except httpx.HTTPError:
                continue
            if r.status_code != 200:
                return Response(r.content, status_code=r.status_code, media_type="application/json")
            data = r.json()
            rows = data["sessions"] if rows is None else rows
            for k, v in data.get("totals", {}).items():
                totals[k] = totals.get(k, 0) + v if k != "sessions" else len(rows)
        if rows is None:
            return _error(request.url.path, "ctxengine proxy: no worker is running", 503)
        totals["worker_restarts"] = self.workers.restarts
        totals["worker_pids"] = [p.pid if p is not None else None for p in self.workers.procs]
        return JSONResponse({"sessions": rows, "totals": totals})


def router_app(workers: Workers) -> Starlette:
    """The node's front app over ``workers`` (started by its lifespan, stopped with it)."""
    router = Router(workers)

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        watch = asyncio.ensure_future(workers.watch())
        try:
            yield
        finally:
            watch.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await watch
            await workers.stop()

    methods = ["GET", "POST", "PUT", "PATCH", "DELETE", "OPTIONS", "HEAD"]
    return Starlette(
        routes=[
            Route("/ctxengine/sessions", router.sessions, methods=["GET"]),
            Route("/{path:path}", router.relay, methods=methods),
        ],
        lifespan=lifespan,
    )


def serve_workers(options: dict[str, Any], n: int, common: dict[str, Any]) -> None:
    """Serve the node on ``common``'s host and port with ``n`` session-affine workers, until
    interrupted. Raises ``RuntimeError`` when a worker cannot start."""
    workers = Workers(options, n, common)
    try:
        workers.start_all()
    except BaseException:
        for p in workers.procs:
            if p is not None and p.is_alive():
                p.kill()
        shutil.rmtree(workers.dir, ignore_errors=True)
        raise
    uvicorn.run(router_app(workers), **common)
