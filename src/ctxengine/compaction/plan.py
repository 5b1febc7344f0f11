"""The plan of a compaction: every decision that needs no summary, computed before anything is
spent.

``plan_compaction`` is pure and synchronous: from the projection as the layers see it
(``LayerContext``) and the compactor's few facts (the breaker, whether an LLM summarizer is
configured, the user's latest request) it says whether a compaction is tried, which path of the
chain runs (session-memory compaction first, then the LLM, structured or a preset's styled
summary), where each path cuts (always a safe cut point: no tool call is parted from its result),
what the summary must carry (the earlier summaries, the latest request to quote and the room for
it) and how much room an early compaction must leave. It reads its inputs and changes nothing; the
executor (``ctxengine.compaction.chain``) consumes the plan, runs the chain and hands back the
``Compaction`` that ``Compactor.commit`` applies.
"""

from __future__ import annotations

import dataclasses

from ctxengine.layers.base import LayerContext
from ctxengine.layers.cut_plans import CutPlan, all_plan, history_start, plan_cut
from ctxengine.layers.history_share import prune_history_for_context_share
from ctxengine.layers.request_fit import request_room
from ctxengine.layers.session_memory_compact import session_memory_cut
from ctxengine.layers.summary_compact import summary_cut
from ctxengine.policy.compaction_settings import SessionMemory

SKIP_UNDER_THRESHOLD = "under the threshold"
SKIP_BREAKER_OPEN = "breaker open"


@dataclasses.dataclass(frozen=True)
class CompactionPlan:
    """What a compaction will do, decided before it is made (see the module doc). View indices
    are indices of ``LayerContext.view``; tokens are the calibrated estimates of the context."""

    force: bool
    """The user asked for this compaction (``/compact``): no threshold, gain or breaker gate."""
    threshold: int
    """Tokens above which summary compaction runs (``Policy.compact_threshold``)."""
    sm_threshold: int
    """Tokens above which session-memory compaction runs (lower on a cold cache)."""
    early: bool
    """Under the reserve threshold: an early session-memory compaction must leave room to grow."""
    skip: str
    """Why nothing is tried ("" when the chain runs): under the threshold, or the breaker open."""
    session_memory: bool
    """The session-memory path is tried first (notes on, no focus instructions)."""
    sm_cut: int | None
    """View index where a session-memory compaction's kept tail starts (None: it passes)."""
    sm_room_limit: int
    """Tokens an early session-memory compaction may leave (the threshold minus its gain)."""
    summary_due: bool
    """A summary may follow (over the threshold, or forced)."""
    route: str
    """The summary path: "styled" (a preset's cut or style), "llm" or "structured" ($0)."""
    start: int
    """The first view index that is history (before it: the engine's prefix, earlier summaries)."""
    cut: int | None
    """View index where the summary's kept tail starts (None: the summary path passes)."""
    cut_plan: CutPlan | None = None
    """The styled path's cut, pruned to OpenClaw's history share (None: it passes)."""
    fallback: CutPlan | None = None
    """Letta: summarize-all, when the sliding window leaves the context over the threshold."""
    previous: str = ""
    """The earlier summaries an LLM summary carries forward."""
    request: tuple[str, str] | None = None
    """The user's latest request (text, message id) the summary must quote when it lacks it."""
    request_room: int = 0
    """Tokens the quoted request may take (more: head and tail kept, the middle retrievable)."""

    def leaves_room(self, tokens_after: int) -> bool:
        """Whether a compaction leaving ``tokens_after`` tokens leaves room to grow: at most the
        threshold minus the gain the compaction must make (``compact_min_gain`` x
        ``sm_gain_factor`` of the window). An early session-memory compaction that leaves less
        (checked on its probe, before the notes are flushed) is not made: the next call would
        compact again (at a small window the newest round alone can fill the space under a
        share threshold); nothing is made until the reserve threshold (a summary, which keeps
        more, would leave even less room)."""
        return tokens_after <= self.sm_room_limit


def cache_cold(ctx: LayerContext) -> bool:
    """Whether the prompt cache has expired since the last call (gap over ``cache_ttl_s``)."""
    if ctx.now is None or ctx.last_call is None:
        return False
    return ctx.now - ctx.last_call > ctx.policy.cache_ttl_s


def history_cut(ctx: LayerContext, keep_from: int, history_len: int) -> int:
    """The history index where a kept tail starting at view index ``keep_from`` starts (the
    whole history, ``history_len``, when the tail holds only messages the engine made)."""
    return next((s for s in ctx.src[keep_from:] if s >= 0), history_len)


def plan_compaction(
    ctx: LayerContext,
    *,
    sm_ctx: LayerContext | None = None,
    force: bool = False,
    instructions: str = "",
    breaker_open: bool = False,
    llm_summarizer: bool = False,
    latest_request: tuple[str, str] | None = None,
) -> CompactionPlan:
    """Plan a compaction (pure: reads its arguments, changes nothing).

    Args:
        ctx: the projection as the layers see it; ``ctx.policy`` resolved for the window.
        sm_ctx: the context the session-memory compaction sees (its own kept-message minimum,
            gain factor and cold-cache threshold; ``Compactor._sm_context``); None: ``ctx``.
        force: the user asked for this compaction.
        instructions: the user's focus for the summary (stripped; any closes the session-memory
            path, which cannot be focused).
        breaker_open: automatic compaction has stopped for the session (``Breaker``).
        llm_summarizer: an LLM summarizer is configured (else the structured summary, $0).
        latest_request: the newest user-typed request of the whole history (text, message id).

    Returns:
        The plan; ``skip`` says why nothing is tried, else the cuts of each path.
    """
    sm_ctx = ctx if sm_ctx is None else sm_ctx
    p = ctx.policy  # resolved for the window (``Policy.for_window``)
    threshold = p.compact_threshold(ctx.window, ctx.max_output)
    # an early session-memory compaction (below what the reserves require) must leave room
    # to grow, or the next call compacts again; a due or forced one need not
    early = not force and ctx.predicted <= p.reserve_threshold(ctx.window, ctx.max_output)
    sm_threshold = sm_ctx.policy.compact_threshold(ctx.window, ctx.max_output)
    skip = ""
    if not force and ctx.predicted <= min(threshold, sm_threshold):
        skip = SKIP_UNDER_THRESHOLD
    elif not force and breaker_open:
        skip = SKIP_BREAKER_OPEN
    session_memory = not instructions and SessionMemory.of(p).enabled
    styled = p.summary_style != "ctxengine" or p.compact_cut != "tail"
    plan = CompactionPlan(
        force=force,
        threshold=threshold,
        sm_threshold=sm_threshold,
        early=early,
        skip=skip,
        session_memory=bool(session_memory),
        sm_cut=None,
        sm_room_limit=threshold - int(p.compact_min_gain * SessionMemory.of(p).gain_factor * ctx.window),
        summary_due=force or ctx.predicted > threshold,
        route="styled" if styled else "llm" if llm_summarizer else "structured",
        start=history_start(ctx),
        cut=None,
    )
    if skip:
        return plan
    return _plan_cuts(plan, ctx, sm_ctx, llm_summarizer=llm_summarizer, latest_request=latest_request)


def _plan_cuts(
    plan: CompactionPlan,
    ctx: LayerContext,
    sm_ctx: LayerContext,
    *,
    llm_summarizer: bool,
    latest_request: tuple[str, str] | None,
) -> CompactionPlan:
    """The cuts of the paths that can run, and what the summary must carry."""
    sm_cut: int | None = None
    if plan.session_memory and (found := session_memory_cut(sm_ctx, force=plan.force)) is not None:
        sm_cut = found[1]
    cut: int | None = None
    cut_plan: CutPlan | None = None
    fallback: CutPlan | None = None
    if plan.summary_due and plan.route == "styled":
        cut_plan = styled_cut_plan(ctx, force=plan.force)
        if cut_plan is not None:
            cut = cut_plan.cut
            if cut_plan.mode == "sliding":
                fallback = all_plan(ctx, cut_plan.start, mode="sliding->all")
    elif plan.summary_due and (found := summary_cut(ctx, force=plan.force)) is not None:
        cut = found[1]
    previous = ""
    if llm_summarizer:
        previous = "\n\n".join(m.text() for m in ctx.view[: plan.start] if m.origin == "summary")
    return dataclasses.replace(
        plan,
        sm_cut=sm_cut,
        cut=cut,
        cut_plan=cut_plan,
        fallback=fallback,
        previous=previous,
        request=latest_request,
        request_room=request_room(ctx) if latest_request is not None else 0,
    )


def styled_cut_plan(ctx: LayerContext, *, force: bool) -> CutPlan | None:
    """The cut of a preset's strategy (``layers.cut_plans.plan_cut``), pruned to OpenClaw's
    history share; None when nothing can be cut or the span frees less than
    ``compact_min_gain`` of the window (unless ``force``)."""
    p = ctx.policy
    plan = plan_cut(ctx)
    if plan is None:
        return None
    if not force and sum(ctx.tokens[plan.start : plan.cut]) < p.compact_min_gain * ctx.window:
        return None  # too little to gain: compacting again right after a compaction loops
    if p.history_max_share > 0:
        prune_for_share(ctx, plan)
    return plan


def prune_for_share(ctx: LayerContext, plan: CutPlan) -> None:
    """OpenClaw: when the content that stays exceeds window x share x 1.2, prune the span to
    summarize to window x share tokens; the dropped part is summarized first. Changes ``plan``
    (a plan just made) in place."""
    p = ctx.policy
    summarized = sum(ctx.tokens[plan.start : plan.cut])
    new_content = ctx.predicted - summarized
    if new_content <= int(ctx.window * p.history_max_share * p.history_share_margin):
        return
    span_tokens = list(ctx.tokens[plan.start : plan.start + len(plan.span)])
    pruned = prune_history_for_context_share(
        plan.span, span_tokens, budget=int(ctx.window * p.history_max_share)
    )
    if pruned.chunks:
        plan.dropped = pruned.dropped
        plan.span = pruned.kept
        plan.details.update(
            dropped_chunks=pruned.chunks,
            dropped_messages=len(pruned.dropped),
            dropped_tokens=pruned.dropped_tokens,
        )
