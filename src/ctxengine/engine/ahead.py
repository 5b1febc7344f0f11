"""The next compaction planned ahead, for a caller with idle time between two calls (the proxy).

``CompactionAhead.after_call`` is called once the call's response has gone out (after
``after_turn``). When the session's context has crossed the soft mark below the compaction
threshold (``compaction.rehearse.soft_mark``), it rehearses the next compaction there
(``compaction.rehearse``: the chain run on the context as it is, its result thrown away, the
compactor left as it was), so that the call that crosses the threshold finds the chain's token
counts and identifiers already computed and only applies its compaction, which is the same as
without the rehearsal. It rehearses again when the context has grown ``AGAIN_SHARE`` of the
window since, and not while the context is over the threshold (the next call compacts anyway).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from ctxengine.compaction.rehearse import AGAIN_SHARE, can_rehearse, rehearse, soft_mark

if TYPE_CHECKING:
    from ctxengine.engine.core import ContextEngine


@dataclass
class CompactionAhead:
    """One session's rehearsals (see the module docstring).

    Attributes:
        rehearsals: rehearsals run.
        seconds: their time in all (s).
        at: the context (tokens) at the last rehearsal since the last compaction (0: none).
        last: the seconds of the rehearsal of the last ``after_call`` (0.0: none ran).
    """

    rehearsals: int = 0
    seconds: float = 0.0
    at: int = 0
    last: float = 0.0
    _compactions: int = 0

    def after_call(self, engine: ContextEngine, window: int | None = None) -> bool:
        """Rehearse ``engine``'s next compaction if due; whether it did. ``window``: the last
        call's window (tokens; the prompt's budget when the client's output ask shrank it), else
        the engine's. Runs on the engine's thread, between two calls."""
        compactor, self.last = engine.compactor, 0.0
        if engine.policy.compaction != "summary" or not can_rehearse(compactor):
            return False
        if compactor.compactions != self._compactions:  # compacted since: the marks start over
            self._compactions, self.at = compactor.compactions, 0
        ctx = engine.view.context(min(engine.window, window or engine.window), engine.last_call)
        threshold = ctx.policy.compact_threshold(ctx.window, ctx.max_output)
        if not soft_mark(ctx) <= ctx.predicted <= threshold:
            return False
        if self.at and ctx.predicted - self.at < AGAIN_SHARE * ctx.window:
            return False
        self.last = rehearse(compactor, ctx, engine.history)
        self.seconds += self.last
        self.rehearsals += 1
        self.at = ctx.predicted
        return True
