"""Summary compaction: the compactor's chain (``ctxengine.compaction``) with the policy's cut and
summary style, OpenClaw's memory flush first; a failed compaction leaves the session unchanged."""

from __future__ import annotations

import logging

from ctxengine.compaction import CompactionFailed
from ctxengine.engine.state import take_notes_events
from ctxengine.engine.steps.base import EngineParts
from ctxengine.layers.base import LayerContext, LayerEvent

log = logging.getLogger(__name__)  # a child of the engine package's logger


class SummaryCompaction:
    """Runs the compactor when the policy compacts by summary, and commits its cut."""

    name = "compaction"

    def __init__(self, parts: EngineParts) -> None:
        self.state, self.commits = parts.state, parts.commits

    def apply(self, context: LayerContext) -> LayerEvent | None:
        """The compaction's event (a failed one's too: the overflow guard still runs after it)."""
        state = self.state
        if state.policy.compaction != "summary":
            return None
        flush = state.compactor.maybe_memory_flush(context, state.history)
        take_notes_events(state)  # a background update the flush waited for comes first
        if flush is not None:
            state.pending_events.append(flush)
            if "error" not in flush.details:
                state.store.append(
                    state.session_id, "notes", {"memory_flush": True, "notes": state.compactor.notes_text()}
                )
        try:
            result = state.compactor.compact(context, state.history, system=state.system)
        except CompactionFailed as exc:
            log.warning("compaction failed: %s", exc)
            return exc.event  # the session is unchanged; the overflow guard still runs
        finally:
            take_notes_events(state)  # a background update the compaction waited for
        if result is None:
            return None
        state.pending_events.extend(result.events)
        event = self.commits.commit_cut(result.cut)
        state.compactor.commit(result)
        return event
