"""The audit step of a compaction: the summarizer's audit and the quality figures, as event
details.

The checks themselves are ``ctxengine.summary.audit`` (the LLM summary's audit: required sections, exact
identifiers kept, the latest request reflected; the quality figures of seed 002: compression,
identifier retention, the latest request verbatim). Here they are recorded on the compaction's
event, after the restore step, so the figures describe what is sent.
"""

from __future__ import annotations

from collections.abc import Sequence

import msgspec

from ctxengine.layers.base import Cut, LayerEvent
from ctxengine.messages.model import Message
from ctxengine.summary.audit import Audit, quality

SKIPPED_LAYER = "compaction_skipped"  # the event of a compaction not made: it would grow the context
SKIP_RETRY_SHARE = 0.02  # a skipped compaction is tried again once the context grew by this share
SKIP_RETRY_MIN_TOKENS = 1_000  # ... of the window, and at least this many tokens


def retry(skipped_at: int | None, tokens: int, window: int) -> bool:
    """Whether an automatic compaction may be tried at a context of ``tokens``, the last one
    having been skipped at ``skipped_at`` tokens (``grows``; None: none was): only once the
    context has grown by ``SKIP_RETRY_SHARE`` of the ``window`` (at least
    ``SKIP_RETRY_MIN_TOKENS``) since, so that a summary (an LLM call) is not paid at every call
    for one that would grow the context again."""
    if skipped_at is None:
        return True
    return tokens >= skipped_at + max(SKIP_RETRY_MIN_TOKENS, int(SKIP_RETRY_SHARE * window))


def grows(cut: Cut, force: bool, events: list[LayerEvent]) -> bool:
    """Whether an automatic compaction would leave the context no smaller than before it (a span
    that is mostly the latest request, summarized and quoted back whole, under a kept tail that
    holds the rest), or a forced one (``force``: the user's /compact) larger than before it (pi
    at 32,000 quoted a one-line 8,557-token request back whole: 23,979 -> 28,489 tokens): then it
    is not made, and a ``compaction_skipped`` event (appended to ``events``) says so; the overflow
    guard keeps the request within the window."""
    e = cut.event
    if e.tokens_after < e.tokens_before or (force and e.tokens_after == e.tokens_before):
        return False
    events.append(
        LayerEvent(
            layer=SKIPPED_LAYER,
            reason=f"{e.layer} would leave {e.tokens_after:,} tokens of {e.tokens_before:,}: not made",
            tokens_before=e.tokens_before,
            tokens_after=e.tokens_before,
            details={"layer": e.layer, "messages_summarized": e.details.get("messages_summarized")},
        )
    )
    return True


def audit_details(audit: Audit) -> dict[str, object]:
    """The summarizer's audit as the event's ``audit`` detail."""
    return {
        "passed": audit.passed,
        "missing_sections": audit.missing_sections,
        "missing_identifiers": audit.missing_identifiers,
        "request_reflected": audit.request_reflected,
    }


def record_quality(cut: Cut, kept: Sequence[Message]) -> None:
    """Add the quality figures of ``cut`` (its prefix as the summary, ``kept`` the kept tail) to
    its event's ``quality`` detail (tokens and shares, ``ctxengine.summary.audit.quality``)."""
    summary_text = "\n".join(m.text() for m in cut.prefix)
    q = quality(
        tokens_before=cut.event.tokens_before,
        tokens_after=cut.event.tokens_after,
        span=cut.summarized,
        summary=summary_text,
        kept=kept,
    )
    cut.event.details["quality"] = msgspec.to_builtins(q)
