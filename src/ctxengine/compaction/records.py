"""The records passed between the compaction's steps: what a summary is made with, the
compaction to commit, the failure, and the spend arithmetic.

A failure never changes the session: every decision is computed first and handed back as a
``Compaction`` (a ``Cut`` and the compactor's new state) for the engine to commit.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import TYPE_CHECKING

import msgspec

from ctxengine.layers.base import Cut, LayerContext, LayerEvent
from ctxengine.messages.model import Message
from ctxengine.models.registry import ModelInfo
from ctxengine.summary import structured as summarize
from ctxengine.summary.llm.summarizer import LLMSummarizer, Spend, SummaryError, SummaryResult

if TYPE_CHECKING:
    from ctxengine.llm import ToolDefinition


@dataclasses.dataclass(frozen=True)
class SummaryCall:
    """What the summary steps are made with: the compactor's summarizers, counter, models and
    the main conversation's system prompt and tools (a summary request that reuses the
    conversation's prefix repeats them so the prompt cache serves it), and its structured-summary
    facts (read and copied, never changed)."""

    summarizer: LLMSummarizer | None
    """The LLM summarizer (None: the structured summary, $0)."""
    turn_summarizer: LLMSummarizer | None
    """pi: the summarizer of a split turn's prefix."""
    count: Callable[[str], int]
    """Tokens of a text."""
    model: ModelInfo
    """The session's model (prices a reused conversation prefix as a cache read)."""
    llm_model: ModelInfo | None
    """The summarizer's model."""
    system: str
    tools: tuple[ToolDefinition, ...]
    state: summarize.SummaryState

    @property
    def same_model(self) -> bool:
        """The summarizer runs on the session's model (its conversation prefix can be reused)."""
        return self.llm_model is not None and self.llm_model.name == self.model.name


class CompactionFailed(Exception):
    """A compaction was attempted and failed; ``event`` records what it spent and why."""

    def __init__(self, message: str, event: LayerEvent) -> None:
        super().__init__(message)
        self.event = event


@dataclasses.dataclass
class Compaction:
    """A compaction ready to commit. The compactor's own state (the structured-summary facts,
    the identifier-index segments, the failure count) changes only in ``Compactor.commit``,
    after the caller has committed ``cut``: a commit that fails leaves both unchanged."""

    cut: Cut
    events: list[LayerEvent]
    """Events made on the way (the pre-compaction notes flush)."""
    state: summarize.SummaryState
    """The structured-summary facts including what this compaction summarized."""
    segments: tuple[Message, ...] | None = None
    """The identifier-index segments after this compaction (None: unchanged)."""
    segment_ids: frozenset[str] = frozenset()
    closes_breaker: bool = False
    """A summary succeeded: the consecutive-failure count restarts."""


def failed(exc: SummaryError, ctx: LayerContext, spent: Spend, **details: object) -> CompactionFailed:
    """The failure of a summary compaction: what it spent (tokens, USD) and why; the context
    is unchanged (``tokens_after == tokens_before``).

    Args:
        exc: the summarizer's error.
        ctx: the context the compaction was attempted on (``predicted`` tokens before and after).
        spent: what the attempt spent (LLM calls, tokens, USD).
        details: further event details.

    Returns:
        The exception to raise, its ``summary_compact`` event filled in.
    """
    return CompactionFailed(
        str(exc),
        LayerEvent(
            layer="summary_compact",
            reason=f"failed: {exc}",
            tokens_before=ctx.predicted,
            tokens_after=ctx.predicted,
            llm_calls=spent.llm_calls,
            llm_input_tokens=spent.input_tokens,
            llm_output_tokens=spent.output_tokens,
            llm_cost_usd=round(spent.cost_usd, 6),
            details={"error": str(exc), **details},
        ),
    )


def copy_summary_state(state: summarize.SummaryState) -> summarize.SummaryState:
    """A deep copy of the structured-summary facts (the compactor's own stay unchanged until
    ``commit``)."""
    return msgspec.msgpack.decode(msgspec.msgpack.encode(state), type=summarize.SummaryState)


def add_spend(total: Spend, more: Spend) -> None:
    """Add ``more`` to ``total`` in place (LLM calls, tokens, USD)."""
    total.llm_calls += more.llm_calls
    total.input_tokens += more.input_tokens
    total.cache_read_tokens += more.cache_read_tokens
    total.output_tokens += more.output_tokens
    total.cost_usd += more.cost_usd


def priced_summary(result: SummaryResult, ctx: LayerContext, model: ModelInfo) -> tuple[float, int]:
    """The summary's cost (USD) and cache-read tokens: when the provider did not report it (or
    cannot), a reused conversation prefix was just sent, so it is priced as a cache read and only
    the appended request as input."""
    s = result.spent
    cost = s.cost_usd
    cache_read = s.cache_read_tokens
    if result.prefix_reused and cache_read == 0:
        cache_read = min(ctx.predicted, s.input_tokens)
        cost = model.cost_usd(
            input_tokens=max(0, s.input_tokens - cache_read),
            cache_read_tokens=cache_read,
            output_tokens=s.output_tokens,
        )
    return cost, cache_read
