"""The LLM summarizer: Claude Code's nine-section summary, audited, chunked, retried.

Follows the references (prompt wording is ours):
- Claude Code's nine sections; the model drafts in an ``<analysis>`` block that is stripped
  before the summary enters the context (``formatCompactSummary``).
- OpenClaw's quality guard (``ctxengine.audit``): on a failed audit ask once more with the
  reasons; if that fails too, keep the better of the two and record the audit.
- When the span exceeds the summarizer's own window: chunk it on tool-group boundaries (adaptive
  chunk ratio 0.4 -> min 0.15, safety margin 1.2, 4,096 tokens of overhead), summarize chunks
  rolling (each chunk's summary is the next one's previous summary), each chunk tried 3 times
  0.5-5 s apart (+-20%); a chunk that still fails leaves a partial summary, not a lost one; the
  last chunk's summary is audited against the whole span and asked once more on a failed audit.
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
"""

from __future__ import annotations

import functools
import random
import re
import time
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING

import msgspec

from ctxengine.audit import Audit, audit_summary, latest_user_request
from ctxengine.layers.cut_plans import pending_start
from ctxengine.layers.pairing import find_violations, repair, tool_groups
from ctxengine.messages import Message, Text, ToolCall, ToolResult
from ctxengine.notes import serialize

if TYPE_CHECKING:
    from ctxengine.llm import LLMClient, LLMResponse, ToolDefinition

NINE_SECTIONS = (
    "Primary Request and Intent",
    "Key Technical Concepts",
    "Files and Code Sections",
    "Errors and fixes",
    "Problem Solving",
    "All user messages",
    "Pending Tasks",
    "Current Work",
    "Optional Next Step",
)
BASE_CHUNK_RATIO = 0.4  # OpenClaw computeAdaptiveChunkRatio
MIN_CHUNK_RATIO = 0.15
SAFETY_MARGIN = 1.2
SUMMARIZATION_OVERHEAD_TOKENS = 4_096
PTL_DROP_SHARE = 0.2  # Claude Code: drop 20% of API-round groups when the gap is unknown
MAX_PTL_RETRIES = 3
CHUNK_ATTEMPTS = 3  # OpenClaw summarizeChunks: tries per chunk before the summary is left partial
CHUNK_BACKOFF_S = (0.5, 5.0)  # ... waiting 0.5 s, doubling, at most 5 s between tries ...
CHUNK_JITTER = 0.2  # ... +-20%
MIN_MESSAGES_FOR_SPLIT = 4  # OpenClaw summarizeInStages: fewer messages are summarized in one stage
MERGE_INSTRUCTIONS = (
    "\n\nThe conversation was summarized in parts, oldest first; the partial summaries are below. "
    "Merge them into one cohesive summary. MUST PRESERVE: active tasks with their status (in "
    "progress, blocked, pending), batch progress such as 5/17, the user's last request and what "
    "was being done about it, decisions and their rationale, TODOs, open questions, constraints "
    "and promised follow-ups. Favour recent context: the agent must know what it was doing."
)
CONTINUATION = (
    "This session is being continued from a previous conversation that ran out of context. "
    "The summary below covers the earlier portion of the conversation; continue from where it "
    "left off without asking the user to repeat anything.\n\n"
)

SYSTEM = (
    "You are summarizing a conversation between a user and a coding agent so that the agent can "
    "continue the work. TEXT ONLY: do not call tools, do not continue the conversation, do not "
    "answer questions in it."
)
PROMPT = """Write a detailed summary of the conversation {where}.

First think in an <analysis> block: go through it in order and note the user's explicit requests, \
the approach taken, decisions, file names, code, errors and how they were fixed, and user feedback.

Then write the summary inside <summary></summary> with exactly these numbered sections:
1. Primary Request and Intent
2. Key Technical Concepts
3. Files and Code Sections (with the important snippets)
4. Errors and fixes
5. Problem Solving
6. All user messages (every one that is not a tool result, verbatim where short)
7. Pending Tasks
8. Current Work (precisely what was being done just before this summary)
9. Optional Next Step (only if it follows directly from the latest request; quote it)

Keep every exact identifier verbatim, never shortened or reconstructed: file paths, URLs, UUIDs, \
hashes, ids, hostnames, ports, numbers, error messages.{extra}"""


class SummaryError(Exception):
    """A summary could not be made. ``spent`` holds the LLM calls/tokens/USD already used."""

    def __init__(self, message: str, spent: Spend) -> None:
        super().__init__(message)
        self.spent = spent


class Spend(msgspec.Struct, kw_only=True):
    """LLM work done for one summary. Tokens; USD."""

    llm_calls: int = 0
    input_tokens: int = 0
    cache_read_tokens: int = 0
    output_tokens: int = 0
    cost_usd: float = 0.0

    def add(self, r: LLMResponse) -> None:
        self.llm_calls += 1
        self.input_tokens += r.usage.total_input
        self.cache_read_tokens += r.usage.cache_read_tokens
        self.output_tokens += r.usage.output_tokens
        self.cost_usd += r.cost_usd


class SummaryResult(msgspec.Struct, kw_only=True):
    """A finished summary (analysis stripped) with its audit and what it cost."""

    text: str
    audit: Audit | None
    spent: Spend
    chunks: int = 1
    stages: int = 1  # parts summarized apart and merged (OpenClaw summarizeInStages)
    partial: bool = False
    ptl_retries: int = 0
    prefix_reused: bool = False


def strip_analysis(text: str) -> str:
    """The summary without its ``<analysis>`` scratchpad; the ``<summary>`` body when tagged."""
    text = re.sub(r"(?s)<analysis>.*?</analysis>", "", text)
    m = re.search(r"(?s)<summary>(.*?)(?:</summary>|$)", text)
    return (m.group(1) if m else text).strip()


def adaptive_chunk_ratio(tokens: Sequence[int], window: int) -> float:
    """OpenClaw's ratio: 0.4, lowered toward 0.15 when messages are large for the window."""
    if not tokens or window <= 0:
        return BASE_CHUNK_RATIO
    avg = sum(tokens) / len(tokens) * SAFETY_MARGIN / window
    if avg > 0.1:
        return max(MIN_CHUNK_RATIO, BASE_CHUNK_RATIO - min(2 * avg, 0.25))
    return BASE_CHUNK_RATIO


def chunk_groups(messages: Sequence[Message], tokens: Sequence[int], max_tokens: int) -> list[list[Message]]:
    """Split ``messages`` into chunks of at most ``max_tokens / 1.2`` on tool-group boundaries (a
    group larger than that is a chunk of its own)."""
    cap = int(max_tokens / SAFETY_MARGIN)
    chunks: list[list[Message]] = []
    current: list[Message] = []
    size = 0
    for start, end in tool_groups(messages):
        g = list(messages[start:end])
        gt = sum(tokens[start:end])
        if current and size + gt > cap:
            chunks.append(current)
            current, size = [], 0
        current.extend(g)
        size += gt
    if current:
        chunks.append(current)
    return chunks


def split_by_token_share(
    messages: Sequence[Message], tokens: Sequence[int], parts: int
) -> list[list[Message]]:
    """OpenClaw ``splitMessagesByTokenShare`` on tool-group boundaries: at most ``parts`` chunks
    of about total / parts tokens each, in order; a new chunk starts when the next tool group
    would pass the target (the last chunk takes the rest). A call and its result stay together."""
    parts = max(1, min(parts, len(messages)))
    target = sum(tokens) / parts
    chunks: list[list[Message]] = []
    current: list[Message] = []
    size = 0
    for start, end in tool_groups(messages):
        gt = sum(tokens[start:end])
        if current and size + gt > target and len(chunks) < parts - 1:
            chunks.append(current)
            current, size = [], 0
        current.extend(messages[start:end])
        size += gt
    if current:
        chunks.append(current)
    return chunks


def _time_range(messages: Sequence[Message]) -> str:
    stamps = [m.timestamp for m in messages if m.timestamp is not None]
    if not stamps:
        return ""
    fmt = "%Y-%m-%d %H:%M UTC"
    first, last = (datetime.fromtimestamp(t, tz=UTC).strftime(fmt) for t in (min(stamps), max(stamps)))
    return f" {first}" if first == last else f" {first} to {last}"


def chunk_label(i: int, n: int, messages: Sequence[Message]) -> str:
    """OpenClaw's label of a partial summary: ``[Chunk 1/N - oldest messages <UTC range>]``."""
    where = "oldest messages" if i == 1 else "most recent messages" if i == n else "messages"
    return f"[Chunk {i}/{n} - {where}{_time_range(messages)}]"


class LLMSummarizer:
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
        self.client = client
        self.stages = stages
        self.sleep: Callable[[float], None] = time.sleep  # between chunk tries (tests: no wait)
        self._jitter = random.Random(0)
        self.prompt = prompt  # takes {where} and {extra}: a preset passes its own headings
        self.count = count
        self.window = window
        self.max_output = max_output
        self.required_sections = tuple(required_sections)

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
        latest = latest_user_request([*span, *kept])
        if prefix is not None:
            prefix = self.reusable_prefix(prefix, system, tools)
        if prefix is not None:
            try:
                return self._with_audit(
                    lambda extra: self._request_prefix(prefix, system, tools, instructions, extra, spent),
                    span,
                    kept,
                    latest,
                    extra_audit_text,
                    spent,
                    prefix_reused=True,
                )
            except SummaryError:
                pass  # e.g. prompt too long with the whole projection: fall back to the span alone
        tokens = [self.count(m) for m in span]
        if self.stages > 1 and len(span) >= MIN_MESSAGES_FOR_SPLIT:
            w = stage_window or self.window
            max_chunk = int(w * adaptive_chunk_ratio(tokens, w)) - SUMMARIZATION_OVERHEAD_TOKENS
            if sum(tokens) > max_chunk:
                parts = split_by_token_share(span, tokens, self.stages)
                if len(parts) > 1:
                    labelled, covered, n_chunks, done, lost = self._stage_parts(parts, instructions, spent)
                    result = self._with_audit(
                        lambda extra: self._request_merge(labelled, previous, instructions, extra, spent),
                        covered,
                        kept,
                        latest,
                        extra_audit_text,
                        spent,
                    )
                    result.chunks, result.stages = n_chunks, len(parts)
                    if done < len(parts):
                        result.partial = True
                        result.text += (
                            f"\n\n[Partial summary: parts 1-{done} of {len(parts)} were summarized]"
                        )
                    elif lost:
                        result.partial = True
                        result.text += (
                            f"\n\n[Partial summary: {lost} of {n_chunks} chunks were not summarized]"
                        )
                    return result
        budget = self.window - self.max_output - SUMMARIZATION_OVERHEAD_TOKENS
        if sum(tokens) * SAFETY_MARGIN <= budget:
            return self._with_audit(
                lambda extra: self._request_span(span, previous, instructions, extra, spent),
                span,
                kept,
                latest,
                extra_audit_text,
                spent,
            )
        # rolling over the chunks; the last one is audited against the whole span (and asked once
        # more with the reasons when the audit fails), as a one-request summary is
        chunks = self._chunks(span, tokens)
        total = len(chunks)
        rolling, done = self._roll(chunks[:-1], previous, instructions, spent)
        if done == total - 1:
            last = chunks[-1]
            try:
                result = self._with_audit(
                    lambda extra: self._attempts(
                        lambda: self._request_span(last, rolling, instructions, extra, spent)
                    ),
                    span,
                    kept,
                    latest,
                    extra_audit_text,
                    spent,
                )
                result.chunks = total
                return result
            except SummaryError:
                if done == 0:
                    raise
        note = f"\n\n[Partial summary: chunks 1-{done} of {total} were summarized]"
        return SummaryResult(text=rolling + note, audit=None, spent=spent, chunks=total, partial=True)

    def reusable_prefix(
        self, prefix: Sequence[Message], system: str, tools: Sequence[ToolDefinition]
    ) -> list[Message] | None:
        """The conversation as a summary request may reuse it, or None when it cannot.

        Pairing-valid, as a strict provider requires of any request (claude-code #5594, #2796):
        a tool call interrupted mid-history gets the synthetic error result (``pairing.repair``);
        the calls still in flight at the end (no result yet) are left out of the request, with
        a line saying so, since no result exists to send and an invented one would be read as
        the outcome. Bounded by the summarizer's window (pi #6425: 274,000 tokens sent to a
        200,000-token model): when the conversation, the prompt and the summary's output do not
        fit ``window`` tokens, None: the caller summarizes the span alone, chunked to fit."""
        messages = list(prefix)
        pending = pending_start(messages)
        if pending < len(messages):
            in_flight = [c for m in messages[pending:] for c in m.tool_calls]
            head: list[Message] = []
            for m in messages[pending:]:
                blocks = tuple(b for b in m.blocks if not isinstance(b, ToolCall | ToolResult))
                if blocks:
                    head.append(msgspec.structs.replace(m, blocks=blocks))
            names = ", ".join(f"{c.name} ({c.id})" for c in in_flight)
            note = Text(f"[tool call(s) in flight, no result yet: {names}]")
            if head and head[-1].role == "assistant":
                last = head[-1]
                head[-1] = msgspec.structs.replace(last, blocks=(*last.blocks, note))
            else:
                head.append(Message(role="assistant", blocks=(note,), id="summary-in-flight"))
            messages = [*messages[:pending], *head]
        if find_violations(messages):
            messages, _ = repair(messages)
        size = sum(self.count(m) for m in messages) + self.count(
            Message(role="user", blocks=(Text(system + self.prompt),), id="summary-size")
        )
        size += sum(self.count(Message(role="user", blocks=(Text(repr(t)),), id="t")) for t in tools)
        if size * SAFETY_MARGIN + self.max_output > self.window:
            return None
        return messages

    # ------------------------------------------------------------------ internals

    def _audit(
        self, text: str, span: Sequence[Message], kept: Sequence[Message], latest: str, extra: str
    ) -> Audit:
        return audit_summary(
            text,
            required_sections=self.required_sections,
            span=span,
            kept=kept,
            latest_request=latest,
            extra_text=extra,
        )

    def _with_audit(
        self,
        ask: Callable[[str], tuple[str, int]],
        span: Sequence[Message],
        kept: Sequence[Message],
        latest: str,
        extra_audit_text: str,
        spent: Spend,
        *,
        prefix_reused: bool = False,
    ) -> SummaryResult:
        text, ptl = ask("")
        first = self._audit(text, span, kept, latest, extra_audit_text)
        if first.passed:
            return SummaryResult(
                text=text, audit=first, spent=spent, ptl_retries=ptl, prefix_reused=prefix_reused
            )
        try:
            text2, ptl2 = ask("\n\nA previous attempt was rejected: " + first.reasons())
        except SummaryError:
            return SummaryResult(
                text=text, audit=first, spent=spent, ptl_retries=ptl, prefix_reused=prefix_reused
            )
        second = self._audit(text2, span, kept, latest, extra_audit_text)
        best_text, best = (text2, second) if second.failures <= first.failures else (text, first)
        return SummaryResult(
            text=best_text, audit=best, spent=spent, ptl_retries=ptl + ptl2, prefix_reused=prefix_reused
        )

    def _call(
        self,
        system: str,
        messages: list[Message],
        spent: Spend,
        *,
        cache_prefix: bool,
        tools: Sequence[ToolDefinition] = (),
    ) -> str:
        from ctxengine.llm import LLMError, LLMRequest

        try:
            r = self.client.complete(
                LLMRequest(
                    system=system,
                    messages=messages,
                    max_tokens=self.max_output,
                    purpose="summary",
                    cache_prefix=cache_prefix,
                    tools=tuple(tools),
                )
            )
        except LLMError:
            raise
        spent.add(r)
        text = strip_analysis(r.text)
        if not text:
            raise SummaryError("the model returned an empty summary", spent)
        return text

    def _request_prefix(
        self,
        prefix: Sequence[Message],
        system: str,
        tools: Sequence[ToolDefinition],
        instructions: str,
        extra: str,
        spent: Spend,
    ) -> tuple[str, int]:
        from ctxengine.llm import LLMError

        prompt = self.prompt.format(where="so far", extra=self._focus(instructions) + extra)
        messages = [*prefix, Message(role="user", blocks=(Text(prompt),), id="summary-request")]
        try:
            return self._call(system or SYSTEM, messages, spent, cache_prefix=True, tools=tools), 0
        except LLMError as exc:
            raise SummaryError(f"summary request failed: {exc}", spent) from exc

    def _request_span(
        self, span: Sequence[Message], previous: str, instructions: str, extra: str, spent: Spend
    ) -> tuple[str, int]:
        from ctxengine.llm import LLMError, PromptTooLongError

        groups = tool_groups(span)
        first_group = 0
        retries = 0
        while True:
            start = groups[first_group][0] if groups else 0
            body = self._within_window(serialize(span[start:]))
            if start:
                body = f"[{start} older messages were dropped to fit the summarizer]\n" + body
            prev = f"\n\n<previous-summary>\n{previous}\n</previous-summary>" if previous else ""
            prompt = (
                self.prompt.format(where="below", extra=self._focus(instructions) + extra)
                + prev
                + f"\n\n<conversation>\n{body}\n</conversation>"
            )
            try:
                msg = Message(role="user", blocks=(Text(prompt),), id="summary-request")
                return self._call(SYSTEM, [msg], spent, cache_prefix=False), retries
            except PromptTooLongError as exc:
                retries += 1
                if retries > MAX_PTL_RETRIES or len(groups) - first_group <= 1:
                    raise SummaryError(f"prompt too long after {retries - 1} retries: {exc}", spent) from exc
                first_group += self._groups_to_drop(span, groups, first_group, exc.gap_tokens)
            except LLMError as exc:
                raise SummaryError(f"summary request failed: {exc}", spent) from exc

    def _within_window(self, body: str) -> str:
        """A serialized span within the summarizer's window (tokens, with the safety margin, the
        output and the prompt's overhead): a chunk of one message larger than the window (chunks
        never split a tool group) keeps its head and tail, its middle left out behind a marker,
        so no request is sent that the model cannot take."""
        room = int((self.window - self.max_output - SUMMARIZATION_OVERHEAD_TOKENS) / SAFETY_MARGIN)
        size = self.count(Message(role="user", blocks=(Text(body),), id="summary-size"))
        if size <= room:
            return body
        keep = int(len(body) * room / size * 0.9)
        head = keep // 2
        marker = f"\n[... {len(body) - keep:,} chars left out to fit the summarizer's window ...]\n"
        return body[:head] + marker + body[len(body) - (keep - head) :]

    def _groups_to_drop(
        self, span: Sequence[Message], groups: list[tuple[int, int]], first: int, gap: int | None
    ) -> int:
        remaining = len(groups) - first
        if gap is None:
            return max(1, min(remaining - 1, int(remaining * PTL_DROP_SHARE)))
        need = gap * SAFETY_MARGIN
        dropped = 0
        freed = 0
        for s, e in groups[first:-1]:
            freed += sum(self.count(m) for m in span[s:e])
            dropped += 1
            if freed >= need:
                break
        return max(1, dropped)

    def _chunks(self, span: Sequence[Message], tokens: list[int]) -> list[list[Message]]:
        """``span`` whole when it fits the summarizer, else in chunks on tool-group boundaries
        (window x adaptive ratio - overhead tokens each)."""
        budget = self.window - self.max_output - SUMMARIZATION_OVERHEAD_TOKENS
        if sum(tokens) * SAFETY_MARGIN <= budget:
            return [list(span)]
        ratio = adaptive_chunk_ratio(tokens, self.window)
        max_chunk = max(1_000, int(self.window * ratio) - SUMMARIZATION_OVERHEAD_TOKENS)
        return chunk_groups(span, tokens, max_chunk)

    def _attempts(self, ask: Callable[[], tuple[str, int]]) -> tuple[str, int]:
        """``ask`` tried ``CHUNK_ATTEMPTS`` times, waiting 0.5 s, 1 s, ... (at most 5 s, +-20%)
        between tries. Raises the last ``SummaryError``."""
        for attempt in range(CHUNK_ATTEMPTS):
            try:
                return ask()
            except SummaryError:
                if attempt == CHUNK_ATTEMPTS - 1:
                    raise
                low, high = CHUNK_BACKOFF_S
                delay = min(high, low * 2**attempt)
                self.sleep(delay * self._jitter.uniform(1 - CHUNK_JITTER, 1 + CHUNK_JITTER))
        raise AssertionError("unreachable")  # pragma: no cover

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

    def _request_merge(
        self, labelled: str, previous: str, instructions: str, extra: str, spent: Spend
    ) -> tuple[str, int]:
        from ctxengine.llm import LLMError

        prev = f"\n\n<previous-summary>\n{previous}\n</previous-summary>" if previous else ""
        prompt = (
            self.prompt.format(where="from its partial summaries", extra=self._focus(instructions) + extra)
            + MERGE_INSTRUCTIONS
            + prev
            + f"\n\n<partial-summaries>\n{labelled}\n</partial-summaries>"
        )
        msg = Message(role="user", blocks=(Text(prompt),), id="summary-merge-request")
        try:
            return self._call(SYSTEM, [msg], spent, cache_prefix=False), 0
        except LLMError as exc:
            raise SummaryError(f"summary merge request failed: {exc}", spent) from exc

    @staticmethod
    def _focus(instructions: str) -> str:
        return f"\n\nAdditional focus: {instructions.strip()[:800]}" if instructions.strip() else ""
