"""Compaction planned ahead: a rehearsal of the next $0 compaction, off the request path.

When a session nears its compaction threshold (``SOFT_SHARE`` of it: the *soft mark*), a caller
with idle time (the proxy, once a response has gone out) runs ``rehearse``: the compactor's chain
on the context as it is now, forced, its result thrown away. What the rehearsal computes that the
compaction at the threshold needs again is kept by the pure, content-keyed memos the chain
already goes through: token counts of every text (``tokens.memo.TextMemo``: the notes, the
restored files and changes, the transcript skeleton's entries), the identifiers of every text
(``messages.identifiers``: the summary's facts, the identifier index, the audit's quality). The
request that crosses the threshold then runs the same chain on the same inputs, and its
compaction is the one the engine would have made without the rehearsal: a memo returns what the
function returns; only the time differs.

A rehearsal changes nothing else: it runs only where no model is called (no LLM summarizer or
notes updater: the $0 structured summary and notes), the pre-compaction notes flush and the wait
for a background notes update are skipped (the notes are taken as they are), and every field a
compaction sets before its ``commit`` (the pending skeleton, the skipped mark, the reported
events, the restored messages by content, the notes wait, the breaker's count) is put back as
it was. Nothing is
written to the store (the chain writes only through the flush and ``commit``).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import TYPE_CHECKING

from ctxengine.compaction.records import CompactionFailed
from ctxengine.layers.base import LayerContext
from ctxengine.messages.model import Message

if TYPE_CHECKING:
    from ctxengine.compaction.chain import Compactor

SOFT_SHARE = 0.85  # the soft mark: this share of the compaction threshold
AGAIN_SHARE = 0.02  # rehearse again once the context grew this share of the window since the last


def soft_mark(ctx: LayerContext) -> int:
    """The soft mark of ``ctx`` (tokens): ``SOFT_SHARE`` of the compaction threshold
    (``Policy.compact_threshold`` at the window and the model's output room)."""
    threshold = ctx.policy.compact_threshold(ctx.window, ctx.max_output)
    return int(SOFT_SHARE * threshold)


def can_rehearse(compactor: Compactor) -> bool:
    """Whether a rehearsal calls no model: no LLM summarizer and $0 notes (the structured
    summary and notes), and automatic compaction not stopped by the breaker."""
    return compactor.llm is None and not compactor.breaker.open


def rehearse(compactor: Compactor, ctx: LayerContext, history: Sequence[Message]) -> float:
    """Run ``compactor``'s chain on ``ctx`` (forced) and throw its result away, leaving the
    compactor as it was (see the module docstring). Returns the seconds it took (0.0 when the
    compactor calls a model: ``can_rehearse``). A chain that fails (``CompactionFailed``) has
    rehearsed what it reached; its failure is not the session's."""
    if not can_rehearse(compactor):
        return 0.0
    t0 = time.perf_counter()
    saved = (
        compactor._pending_skeleton,
        compactor._skipped_at,
        list(compactor.notes_events),
        dict(compactor._restored),
        compactor._gave_up,
        (compactor.breaker.failures, compactor.breaker.open),
    )
    compactor.rehearsing = True
    try:
        compactor.compact(ctx, history, force=True, reason="rehearsal")
    except CompactionFailed:
        pass  # the real compaction fails on its own (the breaker is put back below)
    finally:
        compactor.rehearsing = False
        (
            compactor._pending_skeleton,
            compactor._skipped_at,
            compactor.notes_events[:],
            compactor._restored,
            compactor._gave_up,
            (compactor.breaker.failures, compactor.breaker.open),
        ) = saved
    return time.perf_counter() - t0
