"""The upstream rounds of ``--retrieve-tool`` (see ``retrieve_loop`` for the rules).

Each round's response is read whole (a stream too: the proxy must see whether the reply calls
``retrieve`` before the client sees anything), so with the tool on a stream reaches the client
when its last round has ended, byte for byte as that round sent it.
"""

from __future__ import annotations

from typing import Any

import httpx
import msgspec
from starlette.responses import JSONResponse, Response

import ctxengine.proxy.retrieve_loop as retrieve_loop
import ctxengine.proxy.upstream as upstream
from ctxengine.messages.model import Usage
from ctxengine.proxy.turn import Turn


async def forward_rounds(
    client: httpx.AsyncClient, turn: Turn, url: str, headers: dict[str, str], body: dict[str, Any]
) -> Response:
    """Send ``body`` (the engine's, the retrieve tool added) and resolve ``retrieve`` calls in
    further rounds; the response of the last round goes back as the upstream sent it."""
    assert turn.session is not None
    wire, session = turn.wire, turn.session
    offered = retrieve_loop.add_tool(wire.provider, body)
    if not offered:
        turn.note = "the client has its own retrieve tool: not offered"
    first_usage: Usage | None = None
    turn.mark_sent()
    for round_no in range(retrieve_loop.MAX_ROUNDS + 1):
        try:
            resp = await client.post(url, content=msgspec.json.encode(body), headers=headers)
        except httpx.HTTPError as exc:
            turn.note = f"upstream unreachable: {type(exc).__name__}"
            await turn.complete(502, first_usage, None)
            msg = f"ctxengine proxy: upstream unreachable ({type(exc).__name__})"
            return JSONResponse(wire.error_body(msg, "api_error"), status_code=502)
        data, status = resp.content, resp.status_code
        usage, reply, decoded = _read(turn, resp)
        if round_no == 0:
            first_usage = usage  # the round the engine's projection went to anchors the ledger
        elif usage is not None:
            session.stats.reported_input_tokens += usage.total_input
            session.stats.output_tokens += usage.output_tokens
        calls, others = retrieve_loop.calls_in(wire.provider, reply) if status < 400 and offered else ([], 0)
        if not calls or round_no == retrieve_loop.MAX_ROUNDS:
            break
        if others:
            if decoded is not None:
                data = msgspec.json.encode(retrieve_loop.without_calls(wire.provider, decoded, calls))
            turn.note = f"{len(calls)} retrieve call(s) beside the client's own tools: not resolved"
            break
        results = await turn.run(retrieve_loop.resolve, session.engine, calls)
        session.stats.retrieve_calls += len(calls)
        assert reply is not None
        body = retrieve_loop.next_round(wire.provider, body, reply, results)
    await turn.complete(status, first_usage, reply)
    return Response(data, status_code=status, headers=upstream.response_headers(resp.headers))


def _read(
    turn: Turn, resp: httpx.Response
) -> tuple[Usage | None, dict[str, Any] | None, dict[str, Any] | None]:
    """Usage, reply and (for JSON) the decoded body of one round's response."""
    if resp.status_code >= 400:
        return None, None, None
    if "text/event-stream" in resp.headers.get("content-type", ""):
        tap = turn.wire.tap()
        tap.feed(resp.content)
        return tap.usage, tap.reply, None
    try:
        decoded = msgspec.json.decode(resp.content)
    except msgspec.DecodeError:
        return None, None, None
    if not isinstance(decoded, dict):
        return None, None, None
    return turn.wire.usage(decoded), turn.wire.reply(decoded), decoded
