"""Where a summary compaction cuts: one plan per strategy (``Policy.compact_cut``).

A plan names the view index where the kept tail starts (always a safe cut point, so no tool call is
parted from its result), the span that leaves the context (to be summarized) and, for pi's split
turns, the prefix of the turn the cut lands in. Pure functions of a ``LayerContext``.

- ``tail`` (ours): keep the newest ``keep_recent_tokens`` and ``keep_recent_min_messages`` text
  messages (``summary_compact.choose_cut``).
- ``all`` (Claude Code's full compaction, Letta's summarize-all): everything is summarized, nothing
  kept.
- ``pi`` (pi ``findCutPoint``, used by OpenClaw): walk back from the newest message adding tokens
  until ``keep_recent_tokens`` is reached, then cut at the first user or assistant message at or
  after that message (never at a tool result), so about that many tokens are kept: a little more
  when the message that reached it is itself a valid cut, less when the cut moves forward. A cut
  on an assistant message splits a turn: the messages from the turn's user message up to the cut
  are the turn prefix, summarized apart.
- ``sliding-window`` (Letta ``summarize_via_sliding_window``): with N the in-context messages (the
  system prompt counted as message 0), evict round(share x N), the share starting at
  ``sliding_start_share`` and growing by ``sliding_step_share`` *before* each try (so 30% -> a
  first cut of 40%); from that index search back to an assistant message (one starting a tool
  group, so pairs stay whole); done when the system prompt + the rest fit
  ``sliding_goal_share`` of the window. When no cut works, summarize all.

Settings: ``CompactionSettings`` and ``SlidingWindow`` (``ctxengine.policy.compaction_settings``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from ctxengine.layers.base import LayerContext
from ctxengine.layers.pairing import safe_cut_points
from ctxengine.layers.summary_compact import choose_cut
from ctxengine.messages.model import Message

SHARE_EPSILON = 1e-9  # float slack when the sliding share reaches 1.0


@dataclass
class CutPlan:
    """A compaction's cut. ``cut``: view index where the kept tail starts (``len(view)``: nothing
    kept); ``start``: the first view index that is history (before it: the engine's prefix, an
    earlier summary); ``span``: history summarized (``view[start:...]``), ``turn_prefix``: the
    split turn's prefix (``view[...:cut]``, pi), ``dropped``: the oldest part of the span pruned
    from the summarizer's input (OpenClaw maxHistoryShare; summarized first); ``mode``: which
    strategy made it ("tail", "all", "pi", "sliding", "sliding->all")."""

    cut: int
    start: int
    span: list[Message]
    turn_prefix: list[Message] = field(default_factory=list)
    dropped: list[Message] = field(default_factory=list)
    mode: str = "tail"
    details: dict[str, Any] = field(default_factory=dict)

    @property
    def summarized(self) -> list[Message]:
        """Everything that leaves the context, oldest first."""
        return [*self.dropped, *self.span, *self.turn_prefix]


def history_start(ctx: LayerContext) -> int:
    """The first view index that is history (not an engine-made prefix message)."""
    start = 0
    while start < len(ctx.view) and ctx.src[start] < 0:
        start += 1
    return start


def plan_cut(ctx: LayerContext) -> CutPlan | None:
    """The plan of ``ctx.policy.compact_cut``; None when nothing can be cut."""
    strategy = ctx.policy.compact_cut
    start = history_start(ctx)
    if strategy == "all":
        return all_plan(ctx, start)
    if strategy == "pi":
        return pi_plan(ctx, start)
    if strategy == "sliding-window":
        return sliding_plan(ctx, start)
    cut = choose_cut(ctx, start)
    if cut is None:
        return None
    return CutPlan(cut=cut, start=start, span=list(ctx.view[start:cut]), mode="tail")


def pending_start(view: Sequence[Message]) -> int:
    """View index where the newest assistant turn starts when one of its tool calls has no
    result yet (a call in flight), else ``len(view)``. A compaction keeps that turn and what
    follows: summarized while pending, its result would arrive as an orphan that repair drops,
    and the model would never see it (google/adk-python #4740)."""
    i = len(view) - 1
    while i >= 0 and view[i].role != "assistant":
        i -= 1
    if i < 0:
        return len(view)
    first = i
    while first > 0 and view[first - 1].role == "assistant":
        first -= 1
    calls = {c.id for m in view[first : i + 1] for c in m.tool_calls}
    answered = {r.call_id for m in view[i + 1 :] for r in m.tool_results}
    return first if calls - answered else len(view)


def open_round_start(view: Sequence[Message]) -> int:
    """View index where the newest assistant turn starts when the model has not yet seen what
    it asked for: a call still in flight (``pending_start``), or tool results after it that no
    later assistant message answered; else ``len(view)``. Summarized away, a result that just
    arrived would never reach the model (letta at 16,000 folded a fresh ``cat export.log`` into
    the summary: its first line was in no request)."""
    pending = pending_start(view)
    if pending < len(view):
        return pending
    i = len(view) - 1
    while i >= 0 and view[i].role != "assistant":
        i -= 1
    if i < 0 or not any(m.tool_results for m in view[i + 1 :]):
        return len(view)
    while i > 0 and view[i - 1].role == "assistant":
        i -= 1
    return i


def all_plan(ctx: LayerContext, start: int, mode: str = "all") -> CutPlan | None:
    """Summarize every history message; none kept but the newest turn when the model has not
    seen its results yet, or one of its calls is in flight (``open_round_start``)."""
    cut = max(start, open_round_start(ctx.view))
    if start >= cut:
        return None
    return CutPlan(cut=cut, start=start, span=list(ctx.view[start:cut]), mode=mode)


def _starts_turn(msg: Message) -> bool:
    return (
        msg.role == "user" and msg.origin == "message" and not msg.tool_results and bool(msg.text().strip())
    )


def pi_plan(ctx: LayerContext, start: int) -> CutPlan | None:
    """pi's ``findCutPoint`` with split turns (see the module docstring)."""
    keep = ctx.policy.keep_recent_tokens
    acc = 0
    reach: int | None = None
    for i in range(len(ctx.view) - 1, start - 1, -1):
        acc += ctx.tokens[i]
        if acc >= keep:
            reach = i
            break
    if reach is None:
        return None  # everything fits in the kept budget
    safe = [c for c in safe_cut_points(ctx.view) if c > start]
    cut = next((c for c in safe if c >= reach), None)
    if cut is None and safe:
        # the newest round alone is over the kept budget (at a small window one tool result
        # can be): keep that round, else nothing could ever be compacted and the overflow guard
        # would drop rounds on every call
        cut = safe[-1]
    if cut is None:
        return None
    turn_start = cut
    if ctx.view[cut].role == "assistant":
        j = cut - 1
        while j >= start and not _starts_turn(ctx.view[j]):
            j -= 1
        if j >= start:
            turn_start = j
    return CutPlan(
        cut=cut,
        start=start,
        span=list(ctx.view[start:turn_start]),
        turn_prefix=list(ctx.view[turn_start:cut]),
        mode="pi",
        details={"split_turn": turn_start < cut, "kept_tokens": sum(ctx.tokens[cut:])},
    )


def sliding_plan(ctx: LayerContext, start: int) -> CutPlan | None:
    """Letta's sliding window, falling back to summarize-all (see the module docstring)."""
    p = ctx.policy
    view = ctx.view
    if start >= len(view):
        return None
    n = len(view) + 1  # Letta counts the system prompt as in-context message 0
    fixed = ctx.predicted - sum(ctx.tokens)  # system prompt + tool definitions
    goal = int(ctx.window * p.sliding_goal_share)
    safe = set(safe_cut_points(view))
    share = p.sliding_start_share
    tries = 0
    while True:
        share += p.sliding_step_share
        tries += 1
        if share >= 1.0 - SHARE_EPSILON or p.sliding_step_share <= 0:
            break
        index = round(share * n) - 1  # in view coordinates
        c = min(index, len(view) - 1)
        while c > start and not (view[c].role == "assistant" and c in safe):
            c -= 1
        if c <= start:
            continue
        if fixed + sum(ctx.tokens[c:]) <= goal:
            return CutPlan(
                cut=c,
                start=start,
                span=list(view[start:c]),
                mode="sliding",
                details={"evicted_share": round(share, 2), "tries": tries},
            )
    plan = all_plan(ctx, start, mode="sliding->all")
    if plan is not None:
        plan.details = {"evicted_share": 1.0, "tries": tries}
    return plan
