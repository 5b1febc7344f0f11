"""The summary step of ours (``default``): the LLM summary of the span before the kept tail, the
focus of a $0 structured summary, and the user's latest request quoted at the summary's end.

The LLM summarizer is ``ctxengine.summary.llm.summarizer`` (chunking, prompt-too-long retries, the audit);
the structured summary ``layers.summary_compact`` (``ctxengine.summary.structured``, $0). A summary request
made on the session's own model reuses the conversation's prefix (Claude Code's forked agent), so
the prompt cache serves it: when the provider does not report the cache read, the prefix is priced
as one.
"""

from __future__ import annotations

from collections.abc import Callable

import msgspec

from ctxengine.compaction.audit import audit_details
from ctxengine.compaction.plan import CompactionPlan
from ctxengine.compaction.records import SummaryCall, copy_summary_state, failed, priced_summary
from ctxengine.layers.base import Cut, LayerContext, LayerEvent
from ctxengine.layers.request_fit import partial_request, retrieval_handle
from ctxengine.messages.model import Message, Text
from ctxengine.summary import structured as summarize
from ctxengine.summary.audit import REQUEST_QUOTE_LABEL, request_kept
from ctxengine.summary.llm.summarizer import CONTINUATION, SummaryError, SummaryResult

FOCUS_CHARS = 800  # the caller's focus kept in the summary and the event


def llm_tail_summary(
    ctx: LayerContext,
    plan: CompactionPlan,
    call: SummaryCall,
    *,
    reason: str,
    instructions: str,
    system: str,
) -> tuple[Cut, summarize.SummaryState] | None:
    """Summarize ``view[plan.start:plan.cut]`` by the LLM and keep the tail after it.

    Args:
        ctx: the projection as the layers see it.
        plan: the compaction's plan (its cut, the earlier summaries carried forward).
        call: the summarizer and what it is made with (``call.summarizer`` set).
        reason: the event's reason ("" for the default).
        instructions: the user's focus for the summary.
        system: the system prompt of the summary request ("" for the conversation's).

    Returns:
        The cut and the structured-summary facts kept current (the restore uses the todo list);
        None when the plan has no cut.

    Raises:
        CompactionFailed: the summary failed (what it spent is on the event; nothing changed).
    """
    assert call.summarizer is not None
    p = ctx.policy
    if plan.cut is None:
        return None
    start, cut = plan.start, plan.cut
    removed = sum(ctx.tokens[:cut])
    span = list(ctx.view[start:cut])
    kept = list(ctx.view[cut:])
    result = _summarize(ctx, plan, call, span, kept, instructions=instructions, system=system)
    text = CONTINUATION + result.text
    summary = Message(
        role="user", blocks=(Text(text),), id=f"summary-llm-{cut}", timestamp=ctx.now, origin="summary"
    )
    event = _tail_event(
        ctx,
        result,
        call,
        text,
        span=span,
        kept=kept,
        removed=removed,
        reason=reason,
        instructions=instructions,
    )
    # keep the structured facts current too (restore uses the todo list)
    state = summarize.update(
        copy_summary_state(call.state),
        span,
        user_message_chars=p.summary_user_message_chars,
    )
    return Cut(keep_from=cut, prefix=[summary], event=event, summarized=span), state


def _summarize(
    ctx: LayerContext,
    plan: CompactionPlan,
    call: SummaryCall,
    span: list[Message],
    kept: list[Message],
    *,
    instructions: str,
    system: str,
) -> SummaryResult:
    """The LLM summary of ``span`` (the conversation's prefix reused when the summarizer is the
    session's model and nothing was summarized before). Raises ``CompactionFailed``."""
    assert call.summarizer is not None
    reuse = call.same_model and plan.start == 0
    prefix = list(ctx.view) if reuse else None
    try:
        return call.summarizer.summarize(
            span,
            kept=kept,
            previous=plan.previous,
            instructions=instructions,
            prefix=prefix,
            system=system or call.system,
            tools=call.tools,
            extra_audit_text=call.state.todos,
        )
    except SummaryError as exc:
        raise failed(exc, ctx, exc.spent) from exc


def _tail_event(
    ctx: LayerContext,
    result: SummaryResult,
    call: SummaryCall,
    text: str,
    *,
    span: list[Message],
    kept: list[Message],
    removed: int,
    reason: str,
    instructions: str,
) -> LayerEvent:
    """The ``summary_compact`` event of an LLM summary ``text`` that replaces ``removed`` tokens."""
    s = result.spent
    cost, cache_read = priced_summary(result, ctx, call.model)
    details: dict[str, object] = {
        "messages_summarized": len(span),
        "summary_tokens": call.count(text),
        "kept_messages": len(kept),
        "chunks": result.chunks,
        "partial": result.partial,
        "ptl_retries": result.ptl_retries,
        "prefix_reused": result.prefix_reused,
        "llm_cache_read_tokens": cache_read,
    }
    if result.audit is not None:
        details["audit"] = audit_details(result.audit)
    if instructions:
        details["instructions"] = instructions[:FOCUS_CHARS]
    return LayerEvent(
        layer="summary_compact",
        reason=reason or "context over the compaction threshold",
        tokens_before=ctx.predicted,
        tokens_after=ctx.predicted - removed + call.count(text),
        llm_calls=s.llm_calls,
        llm_input_tokens=s.input_tokens,
        llm_output_tokens=s.output_tokens,
        llm_cost_usd=round(cost, 6),
        details=details,
    )


def prepend_focus(cut: Cut, instructions: str, count: Callable[[str], int]) -> None:
    """The $0 summary cannot be focused: the caller's focus leads it instead (in place)."""
    focus = instructions.strip()[:FOCUS_CHARS]
    head = cut.prefix[0]
    text = f"Focus requested for this compaction: {focus}\n\n{head.text()}"
    cut.prefix[0] = msgspec.structs.replace(head, blocks=(Text(text),))
    cut.event.tokens_after += count(text) - count(head.text())
    cut.event.details["instructions"] = focus


def quote_latest_request(
    cut: Cut, ctx: LayerContext, at: int, plan: CompactionPlan, count: Callable[[str], int]
) -> None:
    """The user's latest request, verbatim and whole, at the end of the summary message
    (``cut.prefix[at]``) when neither it nor the kept messages hold it: notes paraphrase and
    summaries cut long messages, and the agent must answer what was asked (Claude Code's
    summary quotes the user's messages too). The request is the newest user-typed text of
    the whole history (``plan.request``), not of the view, so a second compaction quotes
    it again. It is quoted whole when it *fits*: at most ``plan.request_room`` tokens (half of
    what the window leaves after the fixed prefix and the output reserve); a longer one keeps its
    head (3/4) and tail (1/4) within that room verbatim, the middle retrievable as
    ``message:<id>`` (``ContextEngine.retrieve``), and ``details["latest_request_quoted"]`` says
    ``"partial"``."""
    if plan.request is None:
        return
    latest, msg_id = plan.request
    head = cut.prefix[at]
    kept_messages = ctx.view[cut.keep_from :]
    if request_kept(latest, [head, *kept_messages]):
        return
    kept = [m.text() for m in kept_messages if m.role == "user"]
    if any(retrieval_handle(msg_id) in t for t in kept):
        cut.event.details["latest_request_quoted"] = "partial"  # the guard cut it in place already
        return
    room = plan.request_room
    size = count(latest)
    quoted: bool | str = True
    quote = latest
    if size > room:
        quote = partial_request(latest, msg_id, room, size)
        quoted = "partial"
    text = f"{head.text()}{REQUEST_QUOTE_LABEL}{quote}"
    cut.prefix[at] = msgspec.structs.replace(head, blocks=(Text(text),))
    cut.event.tokens_after += count(text) - count(head.text())
    cut.event.details["latest_request_quoted"] = quoted
