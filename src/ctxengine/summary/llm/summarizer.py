"""The LLM summarizer: Claude Code's nine-section summary, audited, chunked, retried.

Follows the references (prompt wording is ours):
- Claude Code's nine sections; the model drafts in an ``<analysis>`` block that is stripped
  before the summary enters the context (``formatCompactSummary``).
- OpenClaw's quality guard (``ctxengine.summary.audit``): on a failed audit ask once more with the
  reasons; if that fails too, keep the better of the two and record the audit.
- When the span exceeds the summarizer's own window: chunk it on tool-group boundaries (adaptive
  chunk ratio 0.4 -> min 0.15, safety margin 1.2, 4,096 tokens of overhead), summarize chunks
  rolling (each chunk's summary is the next one's previous summary), each chunk tried 3 times
  0.5-5 s apart (+-20%; ``tenacity``); a chunk that still fails leaves a partial summary, not a
  lost one; the last chunk's summary is audited against the whole span and asked once more on a
  failed audit.
- Staged summary with merge (OpenClaw ``summarizeInStages``, ``stages`` > 1): a span of at least
  4 messages larger than the chunk budget (window x adaptive ratio - 4,096 tokens) is split into
  ``stages`` parts by token share on tool-group boundaries; each part is summarized on its own
  (rolling within the part when it is larger than the summarizer's window), then one merge call
  turns the labelled partial summaries (oldest first, with their UTC time ranges) into the
  summary, audited as any other. A part that fails after retries leaves the parts done so far
  merged and the summary marked partial; a first part or a merge that fails is an error.
- Prompt too long from the provider: drop the oldest 20% of API-round groups, or just enough when
  the error states the gap, and retry, at most 3 times (Claude Code ``truncateHeadForPTLRetry``).
- Prefix reuse: when the summarizer is the session's own model on a provider that caches
  prefixes, the request is the projection itself with the summary instruction appended (Claude
  Code's forked agent), so the conversation is read from the prompt cache.

Any failure raises ``SummaryError`` carrying what was spent; the caller leaves the session as it
was. No placeholder summary is ever returned.

The parts, one job each: ``llm_summary_requests`` (one request and its audit; the base class),
``llm_summary_chunks`` (chunks, stages and their labels), ``llm_summary_retry`` (a chunk's tries
and backoff), ``llm_summary_prompts`` (the prompts, the nine sections, ``strip_analysis``) and
``llm_summary_result`` (``SummaryResult``, ``Spend``, ``SummaryError``). This module is the
summarizer's strategy (``LLMSummarizer``) and re-exports the parts' names.
"""

from __future__ import annotations

import dataclasses
import functools
import random
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from ctxengine.messages.model import Message
from ctxengine.summary.audit import latest_user_request
from ctxengine.summary.llm.chunks import (
    BASE_CHUNK_RATIO,
    MIN_CHUNK_RATIO,
    MIN_MESSAGES_FOR_SPLIT,
    SAFETY_MARGIN,
    SUMMARIZATION_OVERHEAD_TOKENS,
    adaptive_chunk_ratio,
    chunk_groups,
    chunk_label,
    split_by_token_share,
)
from ctxengine.summary.llm.prompts import (
    CONTINUATION,
    MERGE_INSTRUCTIONS,
    NINE_SECTIONS,
    PROMPT,
    SYSTEM,
    strip_analysis,
)
from ctxengine.summary.llm.requests import MAX_PTL_RETRIES, PTL_DROP_SHARE, SummaryRequests
from ctxengine.summary.llm.result import Spend, SummaryError, SummaryResult
from ctxengine.summary.llm.retry import CHUNK_ATTEMPTS, CHUNK_BACKOFF_S, CHUNK_JITTER, chunk_retrying

if TYPE_CHECKING:
    from ctxengine.llm import LLMClient, ToolDefinition

__all__ = [
    "BASE_CHUNK_RATIO",
    "CHUNK_ATTEMPTS",
    "CHUNK_BACKOFF_S",
    "CHUNK_JITTER",
    "CONTINUATION",
    "MAX_PTL_RETRIES",
    "MERGE_INSTRUCTIONS",
    "MIN_CHUNK_RATIO",
    "MIN_MESSAGES_FOR_SPLIT",
    "NINE_SECTIONS",
    "PROMPT",
    "PTL_DROP_SHARE",
    "SAFETY_MARGIN",
    "SUMMARIZATION_OVERHEAD_TOKENS",
    "SYSTEM",
    "LLMSummarizer",
    "Spend",
    "SummaryError",
    "SummaryRequests",
    "SummaryResult",
    "adaptive_chunk_ratio",
    "chunk_groups",
    "chunk_label",
    "split_by_token_share",
    "strip_analysis",
]


@dataclasses.dataclass(frozen=True)
class _Job:
    """One ``summarize`` call as its steps share it: the span and the kept messages, the summary
    to extend, the caller's focus, the latest user request (audited), the audit's extra text and
    the LLM work spent so far."""

    span: Sequence[Message]
    kept: Sequence[Message]
    previous: str
    instructions: str
    latest: str
    extra_audit_text: str
    spent: Spend


class LLMSummarizer(SummaryRequests):
    """Summaries by the configured model. ``window``/``max_output``: the summarizer's own context
    window and output budget (tokens); ``count`` the caller's token counter; ``stages``: parts of
    a staged summary with merge (1: off; OpenClaw: 2)."""

    def __init__(
        self,
        client: LLMClient,
        count: Callable[[Message], int],
        *,
        window: int,
        max_output: int = 8_192,
        required_sections: Sequence[str] = NINE_SECTIONS,
        prompt: str = PROMPT,
        stages: int = 1,
    ) -> None:
        super().__init__(
            client,
            count,
            window=window,
            max_output=max_output,
            required_sections=required_sections,
            prompt=prompt,
        )
        self.stages = stages
        self.sleep: Callable[[float], None] = time.sleep  # between chunk tries (tests: no wait)
        self._jitter = random.Random(0)  # the +-20% of the waits between a chunk's tries

    # ------------------------------------------------------------------ public

    def summarize(
        self,
        span: Sequence[Message],
        *,
        kept: Sequence[Message] = (),
        previous: str = "",
        instructions: str = "",
        prefix: Sequence[Message] | None = None,
        system: str = "",
        extra_audit_text: str = "",
        stage_window: int | None = None,
        tools: Sequence[ToolDefinition] = (),
    ) -> SummaryResult:
        """Summarize ``span`` (the messages leaving the context; ``kept`` stay). ``previous`` is an
        earlier summary to extend; ``instructions`` the caller's focus (``/compact [text]``).
        With ``prefix`` (the projection as last sent, whose head is ``span``) the request reuses
        it so the provider's prompt cache serves the conversation; ``system`` and ``tools`` are then
        the main conversation's (Claude Code's forked agent: same system, same tools, the
        summary request appended), as the cached prefix starts with them. ``stage_window``: the session's
        context window (tokens) that sets the chunk budget of a staged summary (default: the
        summarizer's). Raises ``SummaryError``."""
        spent = Spend()
        job = _Job(
            span, kept, previous, instructions, latest_user_request([*span, *kept]), extra_audit_text, spent
        )
        if prefix is not None:
            reused = self._summarize_prefix(job, prefix, system, tools)
            if reused is not None:
                return reused
        tokens = [self.count(m) for m in span]
        if self.stages > 1 and len(span) >= MIN_MESSAGES_FOR_SPLIT:
            staged = self._summarize_staged(job, tokens, stage_window)
            if staged is not None:
                return staged
        budget = self.window - self.max_output - self.overhead
        if sum(tokens) * SAFETY_MARGIN <= budget:
            return self._with_audit(
                lambda extra: self._request_span(span, previous, instructions, extra, spent),
                span,
                kept,
                job.latest,
                extra_audit_text,
                spent,
            )
        return self._summarize_rolling(job, tokens)

    # ------------------------------------------------------------------ the strategy

    def _summarize_prefix(
        self, job: _Job, prefix: Sequence[Message], system: str, tools: Sequence[ToolDefinition]
    ) -> SummaryResult | None:
        """Claude Code's forked agent: the projection as last sent (``prefix``) with the summary
        request appended, audited against the span. None when the prefix cannot be reused
        (``reusable_prefix``) or the request fails: the caller summarizes the span alone."""
        reusable = self.reusable_prefix(prefix, system, tools)
        if reusable is None:
            return None
        try:
            return self._with_audit(
                lambda extra: self._request_prefix(
                    reusable, system, tools, job.instructions, extra, job.spent
                ),
                job.span,
                job.kept,
                job.latest,
                job.extra_audit_text,
                job.spent,
                prefix_reused=True,
            )
        except SummaryError:
            return None  # e.g. prompt too long with the whole projection: fall back to the span alone

    def _summarize_staged(
        self, job: _Job, tokens: list[int], stage_window: int | None
    ) -> SummaryResult | None:
        """OpenClaw ``summarizeInStages``: a span over the chunk budget (``stage_window`` x the
        adaptive ratio - overhead tokens) split into ``stages`` parts by token share, each part
        summarized on its own, then one merge request, audited. None when the span is not split
        (within the budget, or one part): the caller summarizes it in one request or rolling."""
        w = stage_window or self.window
        max_chunk = int(w * adaptive_chunk_ratio(tokens, w)) - self.overhead
        if sum(tokens) <= max_chunk:
            return None
        parts = split_by_token_share(job.span, tokens, self.stages)
        if len(parts) <= 1:
            return None
        labelled, covered, n_chunks, done, lost = self._stage_parts(parts, job.instructions, job.spent)
        result = self._with_audit(
            lambda extra: self._request_merge(labelled, job.previous, job.instructions, extra, job.spent),
            covered,
            job.kept,
            job.latest,
            job.extra_audit_text,
            job.spent,
        )
        result.chunks, result.stages = n_chunks, len(parts)
        if done < len(parts):
            result.partial = True
            result.text += f"\n\n[Partial summary: parts 1-{done} of {len(parts)} were summarized]"
        elif lost:
            result.partial = True
            result.text += f"\n\n[Partial summary: {lost} of {n_chunks} chunks were not summarized]"
        return result

    def _summarize_rolling(self, job: _Job, tokens: list[int]) -> SummaryResult:
        """Rolling over the chunks of a span larger than the summarizer's window; the last one is
        audited against the whole span (and asked once more with the reasons when the audit
        fails), as a one-request summary is. A chunk that still fails after its tries leaves the
        summary partial. Raises ``SummaryError`` when the first chunk fails."""
        chunks = self._chunks(job.span, tokens)
        total = len(chunks)
        rolling, done = self._roll(chunks[:-1], job.previous, job.instructions, job.spent)
        if done == total - 1:
            last = chunks[-1]
            try:
                result = self._with_audit(
                    lambda extra: self._attempts(
                        lambda: self._request_span(last, rolling, job.instructions, extra, job.spent)
                    ),
                    job.span,
                    job.kept,
                    job.latest,
                    job.extra_audit_text,
                    job.spent,
                )
                result.chunks = total
                return result
            except SummaryError:
                if done == 0:
                    raise
        note = f"\n\n[Partial summary: chunks 1-{done} of {total} were summarized]"
        return SummaryResult(text=rolling + note, audit=None, spent=job.spent, chunks=total, partial=True)

    def _chunks(self, span: Sequence[Message], tokens: list[int]) -> list[list[Message]]:
        """``span`` whole when it fits the summarizer, else in chunks on tool-group boundaries
        (window x adaptive ratio - overhead tokens each)."""
        budget = self.window - self.max_output - self.overhead
        if sum(tokens) * SAFETY_MARGIN <= budget:
            return [list(span)]
        ratio = adaptive_chunk_ratio(tokens, self.window)
        max_chunk = max(1_000, int(self.window * ratio) - self.overhead)
        return chunk_groups(span, tokens, max_chunk)

    def _attempts(self, ask: Callable[[], tuple[str, int]]) -> tuple[str, int]:
        """``ask`` tried ``CHUNK_ATTEMPTS`` times, waiting 0.5 s, 1 s, ... (at most 5 s, +-20%)
        between tries through ``self.sleep`` (``llm_summary_retry``, tenacity). Raises the last
        ``SummaryError``."""
        return chunk_retrying(self.sleep, self._jitter)(ask)

    def _roll(
        self, chunks: Sequence[Sequence[Message]], previous: str, instructions: str, spent: Spend
    ) -> tuple[str, int]:
        """Summarize ``chunks`` rolling (each chunk's summary is the next one's previous
        summary), each tried ``CHUNK_ATTEMPTS`` times. Returns the summary and the chunks done
        (fewer than all: the next one failed). Raises ``SummaryError`` when the first fails."""
        rolling = previous
        for done, chunk in enumerate(chunks):
            try:
                rolling, _ = self._attempts(
                    functools.partial(self._request_span, chunk, rolling, instructions, "", spent)
                )
            except SummaryError:
                if done == 0:
                    raise
                return rolling, done
        return rolling, len(chunks)

    def _stage_parts(
        self, parts: list[list[Message]], instructions: str, spent: Spend
    ) -> tuple[str, list[Message], int, int, int]:
        """OpenClaw ``summarizeInStages``, first stage: each part summarized on its own (no
        previous summary). Returns the partial summaries labelled for the merge, the messages
        they cover, the chunks in them, the parts done (a later part that fails stops here) and
        the chunks of the parts done that failed (their messages are not in the summary).
        Raises ``SummaryError`` when the first part fails."""
        partials: list[str] = []
        chunks = 0
        lost = 0
        for part in parts:
            chunks_of_part = self._chunks(part, [self.count(m) for m in part])
            total = len(chunks_of_part)
            try:
                text, done = self._roll(chunks_of_part, "", instructions, spent)
            except SummaryError:
                if not partials:
                    raise
                break
            if done < total:
                text += f"\n\n[Partial summary: chunks 1-{done} of {total} of this part were summarized]"
                lost += total - done
            partials.append(text)
            chunks += total
        labelled = "\n\n".join(
            f"{chunk_label(i, len(parts), part)}\n{text}"
            for i, (part, text) in enumerate(zip(parts, partials, strict=False), 1)
        )
        covered = [m for part in parts[: len(partials)] for m in part]
        return labelled, covered, chunks, len(partials), lost
