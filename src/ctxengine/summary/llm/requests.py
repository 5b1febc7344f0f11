"""One LLM summary request and its audit: the base of ``LLMSummarizer``.

A request summarizes a span (serialized in the prompt, within the summarizer's window), a reused
prefix (the projection itself with the summary instruction appended: Claude Code's forked agent)
or the partial summaries of a staged summary (the merge). Its answer is audited (OpenClaw's
quality guard, ``ctxengine.summary.audit``): on a failed audit the model is asked once more with the
reasons and the better of the two is kept. A reused prefix is made pairing-valid and must fit the
summarizer's window (``reusable_prefix``). A prompt too long for the provider drops the oldest
20% of API-round groups, or just enough when the error states the gap, and is retried at most 3
times (Claude Code ``truncateHeadForPTLRetry``). Which requests to make (prefix reuse, one
request, rolling chunks, stages) is ``LLMSummarizer``'s.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

import msgspec

from ctxengine.layers.cut_plans import pending_start
from ctxengine.layers.pairing import find_violations, repair, tool_groups
from ctxengine.messages.model import Message, Text, ToolCall, ToolResult
from ctxengine.summary.audit import Audit, audit_summary
from ctxengine.summary.llm.chunks import SAFETY_MARGIN, SUMMARIZATION_OVERHEAD_TOKENS
from ctxengine.summary.llm.prompts import MERGE_INSTRUCTIONS, NINE_SECTIONS, PROMPT, SYSTEM, strip_analysis
from ctxengine.summary.llm.result import Spend, SummaryError, SummaryResult
from ctxengine.summary.notes import serialize

if TYPE_CHECKING:
    from ctxengine.llm import LLMClient, ToolDefinition

PTL_DROP_SHARE = 0.2  # Claude Code: drop 20% of API-round groups when the gap is unknown
MAX_PTL_RETRIES = 3
OUTPUT_MAX_SHARE = 0.25  # the summary's output budget: at most this share of the summarizer's window
OVERHEAD_MAX_SHARE = 0.125  # the prompt's overhead allowance: at most this share of it


def output_budget(window: int, max_output: int) -> int:
    """The summary's output budget (tokens) on a summarizer of ``window`` tokens: ``max_output``
    (already capped at the summarizer model's own maximum output), at most ``OUTPUT_MAX_SHARE`` of
    the window (and at least 256, or ``max_output`` when that is lower). A policy's budget is set for
    a 200,000-token summarizer (Claude Code's 20,000); asked of an 8,192-token model it exceeds
    the whole window, so no input would fit (and input + max_tokens over the window is refused
    by the provider)."""
    return max(min(256, max_output), min(max_output, int(window * OUTPUT_MAX_SHARE)))


def overhead_budget(window: int) -> int:
    """Tokens kept for the summary prompt's own text (``SUMMARIZATION_OVERHEAD_TOKENS``, at most
    ``OVERHEAD_MAX_SHARE`` of a small summarizer's window)."""
    return min(SUMMARIZATION_OVERHEAD_TOKENS, int(window * OVERHEAD_MAX_SHARE))


class SummaryRequests:
    """The requests of an LLM summary to ``client``. ``window``/``max_output``: the
    summarizer's own context window and output budget (tokens); ``count`` the caller's token
    counter; ``required_sections`` the headings the audit requires; ``prompt`` takes
    ``{where}`` and ``{extra}`` (a preset passes its own headings)."""

    def __init__(
        self,
        client: LLMClient,
        count: Callable[[Message], int],
        *,
        window: int,
        max_output: int = 8_192,
        required_sections: Sequence[str] = NINE_SECTIONS,
        prompt: str = PROMPT,
    ) -> None:
        self.client = client
        self.prompt = prompt  # takes {where} and {extra}: a preset passes its own headings
        self.count = count
        self.window = window
        self.max_output = output_budget(window, max_output)
        self.overhead = overhead_budget(window)
        self.required_sections = tuple(required_sections)

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
        head = self.prompt.format(where="below", extra=self._focus(instructions) + extra)
        if previous:  # at most half the request (it quotes requests, which may be long pastes)
            half = self._room() // 2 - self._tokens(head)
            previous = self._cut_to(previous, half, "the previous summary")
            head += f"\n\n<previous-summary>\n{previous}\n</previous-summary>"
        fixed = self._tokens(head)
        while True:
            start = groups[first_group][0] if groups else 0
            body = self._within_window(serialize(span[start:]), fixed)
            if start:
                body = f"[{start} older messages were dropped to fit the summarizer]\n" + body
            prompt = head + f"\n\n<conversation>\n{body}\n</conversation>"
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

    def _within_window(self, body: str, fixed: int = 0) -> str:
        """A serialized span within the summarizer's window (tokens, with the safety margin, the
        output and the prompt: ``fixed`` tokens of instructions and previous summary, at least the
        overhead allowance): a chunk of one message larger than the window (chunks never split a
        tool group) keeps its head and tail, its middle left out behind a marker, so no request
        is sent that the model cannot take (a rolling summary's previous part counts too: 7,711 +
        2,048 tokens were asked of gpt-4's 8,192)."""
        return self._cut_to(body, self._room() - max(fixed, int(self.overhead / SAFETY_MARGIN)), "")

    def _room(self) -> int:
        """Tokens a request's input may take: the window less the output, over the margin."""
        return int((self.window - self.max_output) / SAFETY_MARGIN)

    def _tokens(self, text: str) -> int:
        return self.count(Message(role="user", blocks=(Text(text),), id="summary-size"))

    def _cut_to(self, text: str, room: int, what: str) -> str:
        """``text`` within ``room`` tokens (at least 1): whole when it fits, else its head and tail
        with the middle left out behind a marker naming ``what`` was cut."""
        room = max(1, room)
        size = self._tokens(text)
        if size <= room:
            return text
        keep = int(len(text) * room / size * 0.9)
        head = keep // 2
        of = f" of {what}" if what else ""
        marker = f"\n[... {len(text) - keep:,} chars{of} left out to fit the summarizer's window ...]\n"
        return text[:head] + marker + text[len(text) - (keep - head) :]

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
