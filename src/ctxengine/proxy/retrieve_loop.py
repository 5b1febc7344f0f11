"""``--retrieve-tool``: the proxy offers the model ctxengine's ``retrieve`` tool and answers its
calls itself, before the client sees a response.

The tool (``tools.retrieve``: page through an offloaded or cleared tool result by the artifact id
its placeholder names) is added to the request's tools, unless the client has a tool of that name
(then the client's own stays, and the proxy resolves nothing). When a reply calls only
``retrieve``, the proxy runs the calls on the session's artifact store, appends the assistant turn
and the results to the request and sends another upstream round (streamed or not, as the client
asked), at most ``MAX_ROUNDS`` times; the client gets the last round's response. A JSON reply that
mixes ``retrieve`` with the client's tools goes back without the ``retrieve`` calls (the client
could not answer them); a streamed one goes back as it came (its events are relayed as sent), and
the log line says so. The extra rounds are not in the client's history: the next request starts
again from what the client keeps.
"""

from __future__ import annotations

import json
from typing import Any

from ctxengine.engine.core import ContextEngine
from ctxengine.messages.model import ToolCall
from ctxengine.tools import retrieve as retrieve_tool
from ctxengine.tools.base import ToolExecutor

NAME = "retrieve"
MAX_ROUNDS = 4  # upstream rounds the proxy adds to one client request


def add_tool(provider: str, body: dict[str, Any]) -> bool:
    """Add the retrieve tool to ``body`` (in place); False when the client has a tool of its name."""
    tools = list(body.get("tools") or [])
    names = {t.get("name") or (t.get("function") or {}).get("name") for t in tools if isinstance(t, dict)}
    if NAME in names:
        return False
    spec = {"name": NAME, "description": retrieve_tool.RETRIEVE_DESCRIPTION}
    if provider == "anthropic":
        tools.append(spec | {"input_schema": retrieve_tool.RETRIEVE_PARAMETERS})
    else:
        tools.append(
            {"type": "function", "function": spec | {"parameters": retrieve_tool.RETRIEVE_PARAMETERS}}
        )
    body["tools"] = tools
    return True


def calls_in(provider: str, reply: dict[str, Any] | None) -> tuple[list[ToolCall], int]:
    """The reply's ``retrieve`` calls, and how many calls to other tools it makes."""
    if reply is None:
        return [], 0
    found: list[ToolCall] = []
    others = 0
    if provider == "anthropic":
        for b in reply.get("content") or []:
            if isinstance(b, dict) and b.get("type") == "tool_use":
                if b.get("name") == NAME:
                    found.append(ToolCall(str(b.get("id")), NAME, b.get("input") or {}))
                else:
                    others += 1
        return found, others
    for c in reply.get("tool_calls") or []:
        fn = c.get("function") or {}
        if fn.get("name") == NAME:
            try:
                args = json.loads(fn.get("arguments") or "{}")
            except ValueError:
                args = {}
            found.append(ToolCall(str(c.get("id")), NAME, args if isinstance(args, dict) else {}))
        else:
            others += 1
    return found, others


def resolve(engine: ContextEngine, calls: list[ToolCall]) -> list[tuple[str, str, bool]]:
    """Run the calls on the engine's artifact store: ``(call id, text, is_error)`` each (engine
    thread). A refusal (an unknown id, a bad argument) is an error result the model can read."""
    executor = ToolExecutor()
    for spec in retrieve_tool.specs(engine.store, engine.session_id, engine.counter):
        executor.register(spec)
    out = []
    for call in calls:
        r = executor.execute(call)
        out.append((call.id, "\n".join(getattr(p, "text", "") for p in r.content), r.is_error))
    return out


def next_round(
    provider: str, body: dict[str, Any], reply: dict[str, Any], results: list[tuple[str, str, bool]]
) -> dict[str, Any]:
    """``body`` with the assistant's reply and the retrieve results appended."""
    out = dict(body)
    if provider == "anthropic":
        blocks = [
            {"type": "tool_result", "tool_use_id": cid, "content": text, "is_error": err}
            for cid, text, err in results
        ]
        out["messages"] = [
            *body["messages"],
            {"role": "assistant", "content": reply["content"]},
            {"role": "user", "content": blocks},
        ]
    else:
        tool_msgs = [{"role": "tool", "tool_call_id": cid, "content": text} for cid, text, _ in results]
        assistant = {k: v for k, v in reply.items() if k in ("role", "content", "tool_calls")}
        out["messages"] = [*body["messages"], assistant, *tool_msgs]
    return out


def without_calls(provider: str, response: dict[str, Any], calls: list[ToolCall]) -> dict[str, Any]:
    """A JSON response with the ``retrieve`` calls taken out (a reply mixing them with the
    client's own tool calls)."""
    ids = {c.id for c in calls}
    if provider == "anthropic":
        content = [
            b for b in response.get("content") or [] if not (isinstance(b, dict) and b.get("id") in ids)
        ]
        return response | {"content": content}
    choices = []
    for ch in response.get("choices") or []:
        msg = dict(ch.get("message") or {})
        msg["tool_calls"] = [c for c in msg.get("tool_calls") or [] if c.get("id") not in ids]
        choices.append(ch | {"message": msg})
    return response | {"choices": choices}
