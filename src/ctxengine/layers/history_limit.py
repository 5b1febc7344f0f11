"""Eviction without a summary: a gateway's user-turn limit, and whole rounds under token pressure.

**History limit** (OpenClaw's ``limitHistoryTurns`` with its newer batching; reference/openclaw.md
§6.1): a session keeps at most N **user turns** (a user request and the assistant and tool
messages after it), N by the session key's kind (``session_keys.HistoryLimits``). Nothing is
evicted until the count exceeds ceil(1.5 x N); then it drops back to N at once, so the cached
prefix changes once per ceil(1.5N) - N + 1 turns instead of at every turn
(``session_keys.turns_to_keep``; ``batch = false`` keeps exactly N every time, the old way).
Leading summaries (messages the engine made) always stay; so do messages before the first
request and the latest request's turn.

**Pressure eviction** (``evict_at_pressure``): above the compaction threshold, whole API rounds
(``layers.pairing.tool_groups``) leave the context, in one batch down to
``evict_target_share`` of the free window, with no summary (the $0 alternative a gateway uses).
Protected: the opening user request, the latest user request, the newest
``KEEP_RECENT_ROUNDS`` rounds, and what the engine made.

Which units go first is ``evict_order``: ``oldest`` (a plain cut), or ``importance``
(``layers.importance``, seed 002's score against the latest request). Both only ever remove
whole tool groups, so pairing is never broken, and an evicted message stays evicted (the
projection is stable between batches). Pure: returns an ``Eviction`` (view indices and the
event); the engine applies it.

Settings: ``EvictionSettings`` (``ctxengine.policy.layer_settings``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from ctxengine.layers.base import LayerContext, LayerEvent
from ctxengine.layers.importance import eviction_order
from ctxengine.layers.pairing import tool_groups
from ctxengine.messages.model import Message
from ctxengine.policy.layer_settings import EvictionSettings
from ctxengine.policy.session_keys import turns_to_keep
from ctxengine.summary.audit import latest_user_request, user_request

LIMIT_LAYER = "history_limit"
EVICT_LAYER = "evict"
KEEP_RECENT_ROUNDS = 3  # newest API rounds pressure eviction never takes (the work in progress)


@dataclass
class Eviction:
    """View indices to take out of the projection, and the event that explains it."""

    indices: list[int]
    event: LayerEvent


def _units(ctx: LayerContext) -> list[list[int]]:
    """The view as whole tool groups of history messages (engine-made messages left out)."""
    return [list(range(a, b)) for a, b in tool_groups(ctx.view) if all(ctx.src[i] >= 0 for i in range(a, b))]


def user_turns(ctx: LayerContext) -> list[list[int]]:
    """View indices of each user turn: from a user request that starts a tool group to the next
    one. Messages before the first request and engine-made messages belong to no turn."""
    turns: list[list[int]] = []
    for unit in _units(ctx):
        if user_request(ctx.view[unit[0]]):
            turns.append(list(unit))
        elif turns:
            turns[-1].extend(unit)
    return turns


def _order(ctx: LayerContext, units: Sequence[Sequence[int]]) -> list[int]:
    if EvictionSettings.of(ctx.policy).order == "importance":
        msgs = [[ctx.view[i] for i in u] for u in units]
        return eviction_order(msgs, latest_user_request(ctx.view))
    return list(range(len(units)))


def history_limit(ctx: LayerContext, limit: int) -> Eviction | None:
    """Evict user turns beyond ``limit`` (0: none) in batches (see the module notes)."""
    turns = user_turns(ctx)
    drop = len(turns) - turns_to_keep(len(turns), limit, batch=EvictionSettings.of(ctx.policy).limits.batch)
    if limit <= 0 or drop <= 0:
        return None
    candidates = turns[:-1]  # never the latest request
    chosen = sorted(_order(ctx, candidates)[:drop])
    indices = sorted(i for k in chosen for i in candidates[k])
    removed = sum(ctx.tokens[i] for i in indices)
    event = LayerEvent(
        layer=LIMIT_LAYER,
        reason=f"{len(turns)} user turns > {limit} (evicted down to {len(turns) - len(chosen)})",
        tokens_before=ctx.predicted,
        tokens_after=ctx.predicted - removed,
        details={
            "limit": limit,
            "turns": len(turns),
            "evicted_turns": len(chosen),
            "evicted_messages": len(indices),
            "order": EvictionSettings.of(ctx.policy).order,
        },
    )
    return Eviction(indices, event)


def evict_under_pressure(ctx: LayerContext) -> Eviction | None:
    """Above the compaction threshold, evict whole rounds down to ``evict_target_share`` of the
    free window (see the module notes); None when under it or nothing may go."""
    s = EvictionSettings.of(ctx.policy)
    threshold = ctx.policy.compact_threshold(ctx.window, ctx.max_output)
    if not s.at_pressure or ctx.predicted <= threshold:
        return None
    fixed = max(0, ctx.predicted - sum(ctx.tokens))
    target = fixed + int(s.target_share * (ctx.window - fixed))
    units = _units(ctx)
    protected = _protected(ctx.view, units)
    candidates = [u for k, u in enumerate(units) if k not in protected]
    need = ctx.predicted - target
    chosen: list[int] = []
    removed = 0
    for k in _order(ctx, candidates):
        if removed >= need:
            break
        chosen.append(k)
        removed += sum(ctx.tokens[i] for i in candidates[k])
    if not chosen:
        return None
    indices = sorted(i for k in chosen for i in candidates[k])
    event = LayerEvent(
        layer=EVICT_LAYER,
        reason=f"request {ctx.predicted:,} > threshold {threshold:,} tokens",
        tokens_before=ctx.predicted,
        tokens_after=ctx.predicted - removed,
        details={
            "evicted_rounds": len(chosen),
            "evicted_messages": len(indices),
            "target_tokens": target,
            "order": s.order,
        },
    )
    return Eviction(indices, event)


def _protected(view: Sequence[Message], units: Sequence[Sequence[int]]) -> set[int]:
    """Units pressure eviction never takes: the first (when a user request opens it), the one
    holding the latest request, and the newest ``KEEP_RECENT_ROUNDS``."""
    keep = set(range(max(0, len(units) - KEEP_RECENT_ROUNDS), len(units)))
    if units and user_request(view[units[0][0]]):
        keep.add(0)
    with_request = [k for k, unit in enumerate(units) if any(user_request(view[i]) for i in unit)]
    if with_request:
        keep.add(with_request[-1])
    return keep
