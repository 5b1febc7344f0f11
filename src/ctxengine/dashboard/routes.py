"""The proxy's dashboard: ``GET /ctxengine/`` (the page), ``/ctxengine/assets/NAME`` (its script
and style, from the package), ``GET /ctxengine/sessions/{id}/calls`` (one point per call of a
session: ``timeline``) and ``GET /ctxengine/stream`` (both, as server-sent events, while they
change).

The page holds no figures itself: its script reads ``/ctxengine/stream`` (the report of ``GET
/ctxengine/sessions`` and the calls of one session, sent again whenever they change, checked every
``TICK_S`` seconds), sending the key or admin token the user typed (kept in the tab's
``sessionStorage``) as the JSON API expects it, so a caller sees on the page exactly what the API
shows it (``admin.scope``: its key's sessions, every session with the admin token; every session
without ``--admin-token``). The stream is read with ``fetch`` (``EventSource`` cannot send the key)
and ends after ``STREAM_S`` seconds (the page reconnects at once): an open page never holds the
proxy's shutdown longer than that. When the stream fails the page polls the two JSON routes.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, RedirectResponse, Response, StreamingResponse
from starlette.routing import BaseRoute, Route

import ctxengine.proxy.admin as admin
from ctxengine.dashboard.assets import ASSETS, asset, render
from ctxengine.dashboard.timeline import points_json
from ctxengine.proxy.config import ProxyConfig
from ctxengine.proxy.sessions import SessionTable
from ctxengine.store.base import StoreError

TICK_S = 0.25  # how often a stream checks for news (a new session shows within a second)
STREAM_S = 10.0  # a stream's life; the page reconnects at once
POLL_MS = 500  # the page's polling when the stream fails
Report = Callable[[str | None], Awaitable[dict[str, Any]]]  # ``Proxy.sessions_report``


def calls_of(table: SessionTable, scope: str, sid: str) -> dict[str, Any] | None:
    """The body of ``GET /ctxengine/sessions/{sid}/calls`` for a caller of ``scope``
    (``admin.scope``); None when the session is unknown on this node or another key's."""
    s = table.sessions.get(sid)
    if s is None or (scope is not admin.ALL and s.key != scope):
        return None
    points = list(s.timeline)
    return {
        "id": s.id,
        "calls": s.stats.calls,
        "window_tokens": s.engine.window,
        "first_call": points[0].call if points else None,
        "points": points_json(points),
    }


def newest_with_calls(report: dict[str, Any]) -> str | None:
    """The id of the newest session of ``report`` that has calls (the chart's default)."""
    ids = [s["id"] for s in report["sessions"] if s.get("calls")]
    return ids[-1] if ids else None


def _event(name: str, data: Any) -> str:
    return f"event: {name}\ndata: {json.dumps(data, separators=(',', ':'))}\n\n"


async def events(table: SessionTable, report: Report, scope: str, want: str | None) -> AsyncIterator[str]:
    """The stream's events: ``sessions`` (the JSON API's report), ``calls`` (the chart's session:
    ``want``, else the newest with calls) and ``failure`` (the store failed), each sent when it
    differs from what the stream sent last; for ``STREAM_S`` seconds."""
    loop = asyncio.get_running_loop()
    ends = loop.time() + STREAM_S
    sent: dict[str, str] = {}
    while True:
        try:
            rep = await report(None if scope is admin.ALL else scope)
            news = [("sessions", rep)]
            sid = want or newest_with_calls(rep)
            calls = calls_of(table, scope, sid) if sid is not None else None
            if calls is not None:
                news.append(("calls", calls))
        except StoreError as exc:
            news = [("failure", {"error": f"the session store failed: {exc}"})]
        for name, data in news:
            text = _event(name, data)
            if sent.get(name) != text:
                sent[name] = text
                yield text
        if loop.time() >= ends:
            return
        await asyncio.sleep(TICK_S)


def dashboard_routes(config: ProxyConfig, table: SessionTable, report: Report) -> list[BaseRoute]:
    """The dashboard's routes for the app of a proxy with ``config``, sessions ``table`` and
    ``report`` (``Proxy.sessions_report``); before its catch-all pass-through route."""

    async def page(request: Request) -> Response:
        html = render("dashboard.html", poll_ms=POLL_MS, admin_header=admin.ADMIN_HEADER)
        return HTMLResponse(html, headers={"cache-control": "no-store"})

    async def to_page(request: Request) -> Response:
        return RedirectResponse("/ctxengine/", status_code=308)

    async def static(request: Request) -> Response:
        name = request.path_params["name"]
        if name not in ASSETS:
            return JSONResponse({"error": f"no asset {name!r}"}, status_code=404)
        return Response(asset(name), media_type=ASSETS[name], headers={"cache-control": "max-age=3600"})

    async def calls(request: Request) -> Response:
        scope = admin.scope(request.headers, config.admin_token)
        if scope is admin.NONE:
            return JSONResponse(admin.REFUSED, status_code=401)
        sid = request.path_params["sid"]
        found = calls_of(table, scope, sid)
        if found is None:  # another key's session answers as an unknown one
            return JSONResponse({"error": f"no session of yours with this id on this node: {sid}"}, 404)
        return JSONResponse(found)

    async def stream(request: Request) -> Response:
        scope = admin.scope(request.headers, config.admin_token)
        if scope is admin.NONE:
            return JSONResponse(admin.REFUSED, status_code=401)
        want = request.query_params.get("session") or None
        headers = {"cache-control": "no-store", "x-accel-buffering": "no"}
        return StreamingResponse(
            events(table, report, scope, want), media_type="text/event-stream", headers=headers
        )

    return [
        Route("/ctxengine", to_page, methods=["GET"]),
        Route("/ctxengine/", page, methods=["GET"]),
        Route("/ctxengine/assets/{name}", static, methods=["GET"]),
        Route("/ctxengine/sessions/{sid}/calls", calls, methods=["GET"]),
        Route("/ctxengine/stream", stream, methods=["GET"]),
    ]
