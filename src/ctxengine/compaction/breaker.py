"""The circuit breaker on repeated compaction failures (Claude Code's).

After ``breaker_failures`` (3) consecutive failed automatic compactions, automatic compaction stops
for the session and the failing event says so; a later success (a manual ``compact``) closes it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import msgspec

from ctxengine.compaction.records import CompactionFailed
from ctxengine.layers.base import LayerEvent


@dataclasses.dataclass
class Breaker:
    """The consecutive-failure count of one session's compactions and whether automatic
    compaction has stopped (``open``)."""

    failures: int = 0
    open: bool = False

    def record_failure(self, exc: CompactionFailed, events: Sequence[LayerEvent], limit: int) -> None:
        """Count a failed compaction; at ``limit`` consecutive failures open the breaker. The
        failure's event gets the count, the breaker's message when it opens, and the events
        made before the failure (``events``).

        Args:
            exc: the failure (its event is annotated in place).
            events: the events made on the way (the pre-compaction notes flush).
            limit: ``Policy.breaker_failures``.
        """
        self.failures += 1
        if self.failures >= limit and not self.open:
            self.open = True
            exc.event.details["breaker"] = (
                f"{self.failures} consecutive failures: automatic compaction stops for this session"
            )
        exc.event.details["consecutive_failures"] = self.failures
        exc.event.details["events_before"] = [msgspec.to_builtins(e) for e in events]

    def close(self) -> None:
        """A summary succeeded: the count restarts and automatic compaction resumes."""
        self.failures = 0
        self.open = False
