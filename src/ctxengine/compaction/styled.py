"""The presets' summary step (Claude Code, OpenClaw, pi, Letta): a planned cut summarized in the
harness's format.

A policy with another cut strategy or summary style (``compact_cut``, ``summary_style``) takes
this path: the cut is planned by ``layers.cut_plans`` (summarize-all, pi's cut with split turns,
Letta's sliding window falling back to summarize-all; ``compaction.plan``), OpenClaw's span is
pruned to its history share (the dropped part summarized first), Letta's summarizer input clamped
(``compaction.summary_input``), and the summary written in the harness's format: $0 by
``summarize.render_style``, or by the LLM under the harness's headings (``StyledSummarizer``);
pi's split-turn prefix gets its own summary (``TURN_PREFIX_PROMPT``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from ctxengine.compaction.audit import audit_details
from ctxengine.compaction.records import SummaryCall, add_spend, copy_summary_state, failed, priced_summary
from ctxengine.compaction.summary import FOCUS_CHARS
from ctxengine.compaction.summary_input import (
    CHARS_PER_TOKEN,
    FALLBACK_MIN_CHARS,
    FALLBACK_OVERHEAD_CHARS,
    clamp_summary_input,
)
from ctxengine.layers.base import Cut, LayerContext, LayerEvent
from ctxengine.layers.cut_plans import CutPlan
from ctxengine.messages.model import Message, Text
from ctxengine.models.registry import ModelInfo
from ctxengine.policy.registry import Policy
from ctxengine.summary import structured as summarize
from ctxengine.summary.llm.summarizer import CONTINUATION, LLMSummarizer, Spend, SummaryError

if TYPE_CHECKING:
    from ctxengine.llm import LLMClient

TURN_PREFIX_SECTIONS = ("Original Request", "Early Progress", "Context for Suffix")
TURN_PREFIX_PROMPT = (
    "This is the prefix of a turn that was too large to keep; the suffix (the recent work) is "
    "kept. Summarize the prefix {where} to give context for the kept suffix, under these "
    "headings:\n\n## Original Request\n## Early Progress\n## Context for Suffix\n\nKeep exact file "
    "paths, function names and error messages.{extra}"
)
TURN_CONTEXT = "\n\n---\n\n**Turn Context (split turn):**\n\n"  # pi's split-turn summary follows


class StyledSummarizer(LLMSummarizer):
    """The LLM summarizer with a preset's prompt and headings (``summarize.STYLE_PROMPTS``,
    audited against ``required_sections``): ``LLMSummarizer`` with ``prompt`` given; chunking,
    prompt-too-long retries and the audit are the base class's."""


def make_summarizers(
    policy: Policy,
    llm: LLMClient | None,
    count_message: Callable[[Message], int],
    llm_model: ModelInfo | None,
) -> tuple[LLMSummarizer | None, StyledSummarizer | None]:
    """The summarizers of a session: the LLM summarizer (a preset's ``StyledSummarizer`` for a
    style with a prompt) and pi's split-turn summarizer; (None, None) without an LLM.

    Args:
        policy: the session's policy (``summary_style``, ``summary_llm_max_output``, ...).
        llm: the LLM client (None: the structured summary, $0).
        count_message: tokens of a message.
        llm_model: the summarizer's model (its input window, 200,000 tokens when unknown; its
            maximum output caps every summarizer's output budget).

    Returns:
        The summarizer and the turn-prefix summarizer.
    """
    window = llm_model.input_window if llm_model else 200_000
    most = llm_model.max_output if llm_model and llm_model.max_output > 0 else None  # its own cap

    def cap(tokens: int) -> int:
        return tokens if most is None else min(tokens, most)

    summarizer: LLMSummarizer | None = (
        LLMSummarizer(
            llm,
            count_message,
            window=window,
            max_output=cap(policy.summary_llm_max_output),
            stages=policy.summary_stages,
        )
        if llm
        else None
    )
    style = policy.summary_style
    turn_summarizer: StyledSummarizer | None = None
    if llm and style in summarize.STYLE_PROMPTS:
        words = policy.summary_max_words or 500
        summarizer = StyledSummarizer(
            llm,
            count_message,
            window=window,
            max_output=cap(policy.summary_llm_max_output),
            required_sections=summarize.STYLE_SECTIONS[style],
            prompt=summarize.STYLE_PROMPTS[style].replace("{words}", str(words)),
            stages=policy.summary_stages,
        )
        if style == "pi":  # the prefix of a split turn gets its own summary
            turn_summarizer = StyledSummarizer(
                llm,
                count_message,
                window=window,
                max_output=cap(policy.turn_prefix_max_tokens),
                required_sections=TURN_PREFIX_SECTIONS,
                prompt=TURN_PREFIX_PROMPT,
            )
    return summarizer, turn_summarizer


def styled_cut(
    ctx: LayerContext, plan: CutPlan, call: SummaryCall, *, previous: str, reason: str, instructions: str
) -> tuple[Cut, summarize.SummaryState]:
    """Summarize a planned cut in the policy's style (LLM or $0 structured).

    Args:
        ctx: the projection as the layers see it.
        plan: the cut (``compaction.plan``: planned, pruned to OpenClaw's history share).
        call: the summarizers and what they are made with.
        previous: the earlier summaries an LLM summary carries forward.
        reason: the event's reason ("" for the default); instructions: the user's focus.

    Returns:
        The cut and the structured-summary facts including what it summarized.

    Raises:
        CompactionFailed: the LLM summary failed (what it spent is on the event).
    """
    p = ctx.policy
    inputs, clamp = _summary_input(ctx, plan)
    state = summarize.update(
        copy_summary_state(call.state), inputs, user_message_chars=p.summary_user_message_chars
    )
    clamped = inputs if clamp else None
    si = _style_input(ctx, plan, clamped, state)
    spent = Spend()
    details: dict[str, object] = {}
    if call.summarizer is not None:
        body = styled_llm(
            ctx,
            plan,
            call,
            clamped,
            previous=previous,
            instructions=instructions,
            spent=spent,
            details=details,
        )
        if p.summary_style == "ctxengine":
            text = CONTINUATION + body
        else:
            text = summarize.style_envelope(p.summary_style, body, state, si)
    else:
        text = _structured_text(ctx, state, si, call.count)
    summary = Message(
        role="user",
        blocks=(Text(text),),
        id=f"summary-{p.summary_style}-{state.messages_summarized}",
        timestamp=ctx.now,
        origin="summary",
    )
    event = _styled_event(ctx, plan, text, spent, {**clamp, **details}, call.count, reason=reason)
    if instructions:
        event.details["instructions"] = instructions[:FOCUS_CHARS]
    return Cut(keep_from=plan.cut, prefix=[summary], event=event, summarized=plan.summarized), state


def _style_input(
    ctx: LayerContext, plan: CutPlan, clamped: list[Message] | None, state: summarize.SummaryState
) -> summarize.StyleInput:
    """What the style's format is written from: the span (the clamped input, when clamped, with
    no split-turn prefix apart), the messages hidden so far and the word budget."""
    p = ctx.policy
    all_mode = plan.mode in ("all", "sliding->all")
    return summarize.StyleInput(
        span=clamped if clamped is not None else plan.span,
        turn_prefix=[] if clamped is not None else plan.turn_prefix,
        hidden_messages=state.messages_summarized,
        all_mode=all_mode,
        max_words=p.summary_all_max_words if all_mode else p.summary_max_words,
        turn_prefix_max_tokens=p.turn_prefix_max_tokens,
        timestamp=ctx.now,
    )


def _summary_input(ctx: LayerContext, plan: CutPlan) -> tuple[list[Message], dict[str, object]]:
    """What the summarizer reads: everything that leaves, clamped by Letta's fallbacks."""
    p = ctx.policy
    return clamp_summary_input(
        plan.summarized,
        tool_return_chars=p.summary_tool_return_chars,
        overflow_chars=ctx.window * CHARS_PER_TOKEN if p.summary_input_share > 0 else 0,
        budget_chars=max(
            FALLBACK_MIN_CHARS,
            int(ctx.window * p.summary_input_share * CHARS_PER_TOKEN) - FALLBACK_OVERHEAD_CHARS,
        ),
        keep_share=p.summary_middle_keep,
    )


def _structured_text(
    ctx: LayerContext, state: summarize.SummaryState, si: summarize.StyleInput, count: Callable[[str], int]
) -> str:
    """The $0 summary: ours structured, or the harness's format (``summarize.render_style``)."""
    p = ctx.policy
    if p.summary_style == "ctxengine":
        return summarize.render(
            state,
            max_tokens=p.summary_budget(ctx.window),
            count=count,
            identifiers_max=p.summary_identifiers_max,
        )
    return summarize.render_style(
        p.summary_style, state, si, max_tokens=p.summary_budget(ctx.window), count=count
    )


def _styled_event(
    ctx: LayerContext,
    plan: CutPlan,
    text: str,
    spent: Spend,
    extra: dict[str, object],
    count: Callable[[str], int],
    *,
    reason: str,
) -> LayerEvent:
    """The ``summary_compact`` event of a styled summary ``text`` (``extra``: the clamp's and the
    LLM's details)."""
    p = ctx.policy
    removed = sum(ctx.tokens[: plan.cut])
    threshold = p.compact_threshold(ctx.window, ctx.max_output)
    return LayerEvent(
        layer="summary_compact",
        reason=reason or f"context {ctx.predicted:,} > threshold {threshold:,} tokens",
        tokens_before=ctx.predicted,
        tokens_after=ctx.predicted - removed + count(text),
        llm_calls=spent.llm_calls,
        llm_input_tokens=spent.input_tokens,
        llm_output_tokens=spent.output_tokens,
        llm_cost_usd=round(spent.cost_usd, 6),
        details={
            "strategy": plan.mode,
            "style": p.summary_style,
            "messages_summarized": len(plan.summarized),
            "turn_prefix_messages": len(plan.turn_prefix),
            "summary_tokens": count(text),
            "kept_messages": len(ctx.view) - plan.cut,
            **plan.details,
            **extra,
        },
    )


def styled_llm(
    ctx: LayerContext,
    plan: CutPlan,
    call: SummaryCall,
    clamped: list[Message] | None,
    *,
    previous: str,
    instructions: str,
    spent: Spend,
    details: dict[str, object],
) -> str:
    """The LLM summary of a planned cut in the policy's style: OpenClaw's dropped history
    first (its summary becomes the previous summary), then the span, then pi's split-turn
    prefix apart; Claude Code's forked-agent prefix reuse when the summarizer is the session's
    model. Adds to ``spent`` and ``details``. Raises ``CompactionFailed`` (nothing changed)."""
    assert call.summarizer is not None
    kept = list(ctx.view[plan.cut :])
    style = ctx.policy.summary_style
    try:
        if clamped is not None:
            main, turn = clamped, []
        else:
            main, turn = plan.span, plan.turn_prefix
            if plan.dropped:
                r = call.summarizer.summarize(
                    plan.dropped, previous=previous, instructions=instructions, stage_window=ctx.window
                )
                add_spend(spent, r.spent)
                previous = r.text
        reuse = style in ("ctxengine", "claude-code") and call.same_model and plan.start == 0
        if main:
            text = _summarize_main(ctx, call, main, kept, previous, instructions, reuse, spent, details)
        else:
            text = previous or "(no earlier history)"
        if turn and call.turn_summarizer is not None:
            t = call.turn_summarizer.summarize(turn, kept=kept, instructions=instructions)
            add_spend(spent, t.spent)
            text += TURN_CONTEXT + t.text
    except SummaryError as exc:
        add_spend(spent, exc.spent)
        raise failed(exc, ctx, spent, strategy=plan.mode, style=style) from exc
    return text


def _summarize_main(
    ctx: LayerContext,
    call: SummaryCall,
    main: list[Message],
    kept: list[Message],
    previous: str,
    instructions: str,
    reuse: bool,
    spent: Spend,
    details: dict[str, object],
) -> str:
    """The summary of the span itself (the conversation's prefix reused when ``reuse``)."""
    assert call.summarizer is not None
    r = call.summarizer.summarize(
        main,
        kept=kept,
        previous=previous,
        instructions=instructions,
        prefix=list(ctx.view) if reuse else None,
        system=call.system,
        tools=call.tools,
        extra_audit_text=call.state.todos,
        stage_window=ctx.window,
    )
    r.spent.cost_usd, r.spent.cache_read_tokens = priced_summary(r, ctx, call.model)
    add_spend(spent, r.spent)
    details.update(chunks=r.chunks, stages=r.stages, partial=r.partial, prefix_reused=r.prefix_reused)
    if r.audit is not None:
        details["audit"] = audit_details(r.audit)
    return r.text
