"""The live sub-agents of a process (``SUBAGENTS``): registration by child id, the nesting depth,
and the sweep that ends orphans (a parent gone, a time-to-live passed). ``subagents.spawn`` adds
and takes entries; a gateway serving many sessions has one registry for all of them."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Generic, TypeVar

import msgspec

from ctxengine.subagents.spec import EndReason

if TYPE_CHECKING:
    from ctxengine.subagents.host import Engine, LiveSubagent

Live = TypeVar("Live", bound="LiveSubagent")


class _Entry(msgspec.Struct, Generic[Live]):
    """One live sub-agent: its context, when it started (epoch seconds), its time-to-live."""

    context: Live
    started: float
    ttl_s: float | None


class SubagentRegistry(Generic[Live]):
    """The live sub-agents of a process, by child id."""

    def __init__(self) -> None:
        self._live: dict[str, _Entry[Live]] = {}
        self._spawned = 0

    def __contains__(self, child_id: object) -> bool:
        return child_id in self._live

    def new_id(self, parent_id: str, name: str) -> str:
        self._spawned += 1
        return f"{parent_id}:subagent:{name}:{self._spawned}"

    def add(self, context: Live, ttl_s: float | None) -> None:
        self._live[context.child_id] = _Entry(context, time.time(), ttl_s)

    def take(self, child_id: str) -> Live | None:
        """Unregister ``child_id``; its context, or None when it is not live."""
        live = self._live.pop(child_id, None)
        return live.context if live is not None else None

    def children(self, parent: Engine) -> list[Live]:
        """The live sub-agents of ``parent``."""
        return [x.context for x in self._live.values() if x.context.parent is parent]

    def depth(self, engine: Engine) -> int:
        """0 for a main agent, else the live sub-agent's depth."""
        return next((x.context.depth for x in self._live.values() if x.context.engine is engine), 0)

    def sweep(self, now: float | None = None) -> list[str]:
        """End the orphans: sub-agents whose parent is gone, or whose time-to-live has passed
        (each disposed and unregistered; reason ``swept``). Returns their ids."""
        now = time.time() if now is None else now
        gone = [
            cid
            for cid, x in self._live.items()
            if x.context.parent is None or (x.ttl_s is not None and now - x.started > x.ttl_s)
        ]
        for cid in gone:
            ctx = self.take(cid)
            if ctx is not None:
                close_subagent(ctx, "swept")
        return gone


def close_subagent(ctx: LiveSubagent, reason: EndReason) -> None:
    """Dispose an unregistered sub-agent's engine (its own sub-agents are released with it)."""
    ctx.engine.store.append(ctx.child_id, "event", {"event": "subagent_end", "reason": reason})
    ctx.engine.dispose()
