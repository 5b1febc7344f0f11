"""The audit step of a compaction: the summarizer's audit and the quality figures, as event
details.

The checks themselves are ``ctxengine.audit`` (the LLM summary's audit: required sections, exact
identifiers kept, the latest request reflected; the quality figures of seed 002: compression,
identifier retention, the latest request verbatim). Here they are recorded on the compaction's
event, after the restore step, so the figures describe what is sent.
"""

from __future__ import annotations

from collections.abc import Sequence

import msgspec

from ctxengine.audit import Audit, quality
from ctxengine.layers.base import Cut
from ctxengine.messages import Message


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
    its event's ``quality`` detail (tokens and shares, ``ctxengine.audit.quality``)."""
    summary_text = "\n".join(m.text() for m in cut.prefix)
    q = quality(
        tokens_before=cut.event.tokens_before,
        tokens_after=cut.event.tokens_after,
        span=cut.summarized,
        summary=summary_text,
        kept=kept,
    )
    cut.event.details["quality"] = msgspec.to_builtins(q)
