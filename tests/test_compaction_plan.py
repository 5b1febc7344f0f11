"""``plan_compaction``: pure (the same input gives equal plans and the context is left as it was),
and its cuts are the ones the compaction then makes, on real shared transcripts under ours and the
presets (each path of the chain: session memory, the structured summary, the styled cuts)."""

from __future__ import annotations

from typing import Any

import pytest

from conftest import CLAUDE_CODE
from ctxengine.compaction import Compaction, CompactionPlan, Compactor, plan_compaction
from ctxengine.formats import load
from ctxengine.layers.base import LayerContext
from ctxengine.layers.pairing import find_violations
from ctxengine.messages.model import Message, Text
from ctxengine.policy.registry import Policy, SessionMemory, get_policy
from ctxengine.replay import replay_session
from policies import off

MIMO = CLAUDE_CODE / "cc_mimo-v2.5-pro_2x-autocompact_db3f6604.jsonl"
WINDOW = 64_000


def _snapshot(ctx: LayerContext) -> tuple[list[int], list[int], list[int], int]:
    """What planning must leave unchanged: the view (by identity), tokens, history indices."""
    return [id(m) for m in ctx.view], list(ctx.tokens), list(ctx.src), ctx.predicted


def _expected_cut(plan: CompactionPlan, done: Compaction) -> int | None:
    """The plan's cut for the path that made ``done``."""
    if done.cut.event.layer == "session_memory_compact":
        return plan.sm_cut
    if plan.fallback is not None and done.cut.event.details.get("strategy") == "sliding->all":
        return plan.fallback.cut
    return plan.cut


def _replay_with_plans(
    policy: Policy, monkeypatch: pytest.MonkeyPatch
) -> list[tuple[CompactionPlan, Compaction, list[Message]]]:
    """Replay ``MIMO`` under ``policy``; before every compaction, plan it twice and check the
    plans are equal and the context unchanged."""
    made: list[tuple[CompactionPlan, Compaction, list[Message]]] = []
    real = Compactor.compact

    def spy(self: Compactor, ctx: LayerContext, history: Any, **kw: Any) -> Compaction | None:
        before = _snapshot(ctx)
        force, instructions = kw.get("force", False), kw.get("instructions", "").strip()
        plan = self.plan(ctx, force=force, instructions=instructions)
        assert self.plan(ctx, force=force, instructions=instructions) == plan
        assert _snapshot(ctx) == before
        done = real(self, ctx, history, **kw)
        if done is not None:
            made.append((plan, done, list(ctx.view)))
        return done

    monkeypatch.setattr(Compactor, "compact", spy)
    replay_session(load(MIMO)[0], policy, window=WINDOW)
    return made


@pytest.mark.parametrize(
    "policy",
    [
        get_policy("default"),
        off(get_policy("default"), SessionMemory),
        get_policy("claude-code"),
        get_policy("openclaw"),
        get_policy("letta"),
    ],
    ids=["default", "structured", "claude-code", "openclaw", "letta"],
)
def test_the_plan_is_pure_and_its_cut_is_the_compactions(
    policy: Policy, monkeypatch: pytest.MonkeyPatch
) -> None:
    made = _replay_with_plans(policy, monkeypatch)
    assert made, "no compaction in the replay"
    for plan, done, view in made:
        assert not plan.skip
        # the cut is at a safe point: what it leaves (its prefix, then the kept tail) breaks no
        # tool call's pairing that the view did not break already
        after = [*done.cut.prefix, *view[done.cut.keep_from :]]
        assert len(find_violations(after)) <= len(find_violations(view))
        # the kept tail is view[keep_from:]: the one the plan named
        assert done.cut.keep_from == _expected_cut(plan, done)
        if plan.route == "styled" and done.cut.event.layer == "summary_compact":
            assert plan.cut_plan is not None
            chosen = plan.fallback if _expected_cut(plan, done) != plan.cut else plan.cut_plan
            assert chosen is not None and done.cut.summarized == chosen.summarized
        elif done.cut.event.layer == "summary_compact":
            assert plan.cut is not None and done.cut.summarized == view[plan.start : plan.cut]


def test_a_plan_under_the_threshold_tries_nothing() -> None:
    p = get_policy("default").for_window(WINDOW)
    view = [Message(role="user", blocks=(Text("hello"),), id="m0")]
    ctx = LayerContext(view=view, tokens=[5], src=[0], predicted=5, window=WINDOW, max_output=8_000, policy=p)
    plan = plan_compaction(ctx)
    assert plan.skip and plan.cut is None and plan.sm_cut is None
    assert plan_compaction(ctx) == plan and ctx.view == view
