"""The proxy's dashboard: ``GET /ctxengine/`` (the page), ``/ctxengine/assets/NAME`` (its script
and style, from the package) and ``GET /ctxengine/sessions/{id}/calls`` (one point per call of a
session: ``timeline``).

The page holds no figures itself: its script reads ``GET /ctxengine/sessions`` and the calls of the
chosen session every ``POLL_MS`` milliseconds, sending the key or admin token the user typed (kept
in the tab's ``sessionStorage``) as the JSON API expects it, so a caller sees on the page exactly
what the API shows it (``admin.scope``: its key's sessions, every session with the admin token).
Without ``--admin-token`` every session is listed, as by the API.
"""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, RedirectResponse, Response
from starlette.routing import BaseRoute, Route

import ctxengine.proxy.admin as admin
from ctxengine.dashboard.assets import ASSETS, asset, render
from ctxengine.dashboard.timeline import points_json
from ctxengine.proxy.config import ProxyConfig
from ctxengine.proxy.sessions import SessionTable

POLL_MS = 500  # how often the page asks for the figures (a new session shows within a second)


def dashboard_routes(config: ProxyConfig, table: SessionTable) -> list[BaseRoute]:
    """The dashboard's routes for the app of a proxy with ``config`` and sessions ``table``
    (before its catch-all pass-through route)."""

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
        s = table.sessions.get(sid)
        if s is None or (scope is not admin.ALL and s.key != scope):  # another key's: as unknown
            why = "no session of yours with this id on this node"
            return JSONResponse({"error": f"{why}: {sid}"}, status_code=404)
        points = list(s.timeline)
        return JSONResponse(
            {
                "id": s.id,
                "calls": s.stats.calls,
                "window_tokens": s.engine.window,
                "first_call": points[0].call if points else None,
                "points": points_json(points),
            }
        )

    return [
        Route("/ctxengine", to_page, methods=["GET"]),
        Route("/ctxengine/", page, methods=["GET"]),
        Route("/ctxengine/assets/{name}", static, methods=["GET"]),
        Route("/ctxengine/sessions/{sid}/calls", calls, methods=["GET"]),
    ]
