"""One point per model call of a proxy session: what the dashboard's chart draws.

``call_point`` is taken by ``proxy.apply.finish`` after each call the upstream answered 2xx (the
calls ``GET /ctxengine/sessions`` counts), on the engine thread; ``GET
/ctxengine/sessions/{id}/calls`` returns a session's points. A point holds figures and the names
and reasons of the layers that acted, never message content (the reasons say sizes, e.g.
"context 60,080 > threshold 53,000 tokens"). Tokens; Unix seconds.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable
from typing import Any

import msgspec

from ctxengine.engine.core import ContextEngine
from ctxengine.layers.base import LayerEvent
from ctxengine.messages.model import Usage
from ctxengine.replay.records import COMPACTION_LAYERS

MAX_POINTS = 2_000  # per session: a longer session keeps its newest calls (``first_call`` says where)
OFFLOAD_LAYER = "tool_result_budget"  # tool results written to the store, a preview left in place


class EventNote(msgspec.Struct, frozen=True):
    """A layer's decision at one call: its name, why, and the request's size before and after."""

    layer: str
    reason: str
    tokens_before: int
    tokens_after: int


class CallPoint(msgspec.Struct, frozen=True, kw_only=True):
    """One call the upstream answered: ``client_tokens`` what the client's request held,
    ``upstream_tokens`` what the proxy sent (the ledger's prediction), ``window_tokens`` the window
    it was assembled for and ``threshold_tokens`` the compaction threshold there (None when the
    policy does not compact); ``input_tokens`` / ``cache_read_tokens`` the upstream's usage (None
    when it sent none); ``compaction`` / ``offload``: a compaction layer acted (as counted in
    ``compactions``) / tool results were offloaded (``offloads``)."""

    call: int  # 1-based, the session's ``calls`` after this one
    at: float
    client_tokens: int
    upstream_tokens: int
    window_tokens: int
    threshold_tokens: int | None
    input_tokens: int | None
    cache_read_tokens: int | None
    compaction: bool
    offload: bool
    events: list[EventNote]


def new_timeline() -> deque[CallPoint]:
    """An empty, bounded list of a session's points (``MAX_POINTS``)."""
    return deque(maxlen=MAX_POINTS)


def is_compaction(e: LayerEvent) -> bool:
    """Whether ``e`` counts as a compaction (``SessionStats.compactions``: a compaction layer
    that did not fail)."""
    return e.layer in COMPACTION_LAYERS and "error" not in e.details


def threshold(engine: ContextEngine, window: int) -> int | None:
    """The compaction threshold (tokens) of ``engine``'s policy at ``window``
    (``Policy.compact_threshold`` of the policy resolved for the window and the session's fixed
    prefix, as the layers see it); None when the policy does not compact (mode not "summary")."""
    policy = engine.policy
    if policy.compaction != "summary":
        return None
    resolved = policy.for_window(window, engine.ledger.state.fixed_prefix)
    return resolved.compact_threshold(window, engine.model.max_output)


def call_point(
    *,
    call: int,
    at: float,
    client_tokens: int,
    upstream_tokens: int,
    window: int,
    engine: ContextEngine,
    events: Iterable[LayerEvent],
    usage: Usage | None,
) -> CallPoint:
    """The point of one call (see ``CallPoint``)."""
    evs = list(events)
    return CallPoint(
        call=call,
        at=at,
        client_tokens=client_tokens,
        upstream_tokens=upstream_tokens,
        window_tokens=window,
        threshold_tokens=threshold(engine, window),
        input_tokens=usage.total_input if usage is not None else None,
        cache_read_tokens=usage.cache_read_tokens if usage is not None else None,
        compaction=any(is_compaction(e) for e in evs),
        offload=any(e.layer == OFFLOAD_LAYER for e in evs),
        events=[EventNote(e.layer, e.reason, e.tokens_before, e.tokens_after) for e in evs],
    )


def points_json(points: Iterable[CallPoint]) -> list[dict[str, Any]]:
    """The points as plain builtins (the JSON of ``GET /ctxengine/sessions/{id}/calls``)."""
    out: list[dict[str, Any]] = msgspec.to_builtins(list(points))
    return out


def agent_name(user_agent: str) -> str:
    """The client program of a ``User-Agent`` header: its first product token
    (``claude-cli/2.1.197 (external, cli)`` -> ``claude-cli/2.1.197``; ``""`` when none)."""
    return user_agent.split(" ", 1)[0][:80]
