"""Anthropic's 1-hour prompt cache for a session whose pauses outlast the 5-minute entry.

A 5-minute cache entry (``{"type": "ephemeral"}``) expires in a pause of more than 5 minutes (a
human reading, a long tool run): the next request writes the whole fixed prefix again at 1.25x
the input price. A 1-hour entry costs 2x once and is read at 0.1x for an hour. ``IdleGaps``
keeps each session's recent pauses (seconds between its requests); once one of them fell
between 5 minutes and an hour, ``hour_prefix`` marks the fixed prefix's breakpoints (the tools'
and system's ``cache_control``) with ``"ttl": "1h"``, all of them: Anthropic wants longer-lived
entries before shorter ones, and the messages' breakpoints, which follow, stay at 5 minutes.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable
from typing import Any

FIVE_MINUTES_S = 300.0
ONE_HOUR_S = 3600.0
GAPS_KEPT = 8  # pauses remembered per session
HOUR = {"type": "ephemeral", "ttl": "1h"}


class IdleGaps:
    """Per session id, the pauses between its requests (seconds, by ``clock``)."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self._last: dict[str, float] = {}
        self._gaps: dict[str, deque[float]] = {}

    def note(self, session_id: str) -> None:
        """A request of ``session_id`` starts now."""
        now = self.clock()
        last = self._last.get(session_id)
        if last is not None:
            self._gaps.setdefault(session_id, deque(maxlen=GAPS_KEPT)).append(now - last)
        self._last[session_id] = now

    def outlast_five_minutes(self, session_id: str) -> bool:
        """Whether a recent pause of the session fell between 5 minutes and an hour."""
        return any(FIVE_MINUTES_S < g <= ONE_HOUR_S for g in self._gaps.get(session_id, ()))

    def forget(self, keep: set[str]) -> None:
        """Drop every session but ``keep`` (those evicted or dropped)."""
        self._last = {k: v for k, v in self._last.items() if k in keep}
        self._gaps = {k: v for k, v in self._gaps.items() if k in keep}


def hour_prefix(body: dict[str, Any]) -> bool:
    """Set every tools / system breakpoint of ``body`` to the 1-hour TTL, its other keys kept (new
    lists: the client's own blocks are not modified); whether there was one."""
    changed = False
    for key in ("tools", "system"):
        blocks = body.get(key)
        if not isinstance(blocks, list):
            continue
        marked = [isinstance(b, dict) and "cache_control" in b for b in blocks]
        if any(marked):
            body[key] = [
                {**b, "cache_control": dict(HOUR)} if m else b for b, m in zip(blocks, marked, strict=True)
            ]
            changed = True
    return changed
