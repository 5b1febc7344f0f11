"""The compaction orchestrator: session notes upkeep and the fallback chain of compactions.

One place owns the chain (after Letta's ``compact.py``): session-memory compaction (the notes as
the summary, $0) -> summary compaction (the LLM summarizer when a model is configured, else the
structured summary, $0) ; the overflow guard stays in the engine as the last resort. After a
compaction the working set is restored (``ctxengine.restore``). The circuit breaker follows Claude
Code: after ``breaker_failures`` (3) consecutive failed automatic compactions, automatic compaction
stops for the session and an event says so; a later success (a manual ``compact``) resets it.

A failure never changes the session: every decision is computed first and handed back as a
``Cut`` for the engine to commit.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import msgspec

from ctxengine import restore, summarize
from ctxengine.audit import quality
from ctxengine.layers.base import Cut, LayerContext, LayerEvent
from ctxengine.layers.session_memory_compact import session_memory_compact
from ctxengine.layers.summary_compact import choose_cut, summary_compact
from ctxengine.llm_summary import CONTINUATION, LLMSummarizer, SummaryError
from ctxengine.messages import Message, Text
from ctxengine.models import ModelInfo
from ctxengine.notes import (
    Cadence,
    DeterministicNotesUpdater,
    LLMNotesUpdater,
    NotesError,
    NotesState,
    NotesUpdater,
    render_sections,
    sections_of,
)
from ctxengine.policy import Policy

if TYPE_CHECKING:
    from ctxengine.llm import LLMClient

log = logging.getLogger(__name__)

NOTES_LAYER = "session_notes"


class CompactionFailed(Exception):
    """A compaction was attempted and failed; ``event`` records what it spent and why."""

    def __init__(self, message: str, event: LayerEvent) -> None:
        super().__init__(message)
        self.event = event


class Compactor:
    """Notes, summaries and the breaker for one session."""

    def __init__(
        self,
        policy: Policy,
        *,
        count_text: Callable[[str], int],
        count_message: Callable[[Message], int],
        model: ModelInfo,
        llm: LLMClient | None = None,
        llm_model: ModelInfo | None = None,
        workspace: Path | None = None,
        restore_from_transcript: bool = False,
    ) -> None:
        self.policy = policy
        self.count_text = count_text
        self.count_message = count_message
        self.model = model
        self.llm = llm if policy.summarizer != "structured" else None
        self.llm_model = llm_model
        self.workspace = workspace
        self.restore_from_transcript = restore_from_transcript
        self.summary_state = summarize.SummaryState()
        self.notes = NotesState()
        self.cadence = Cadence(
            first_tokens=policy.notes_first_tokens,
            every_tokens=policy.notes_every_tokens,
            every_tool_calls=policy.notes_every_tool_calls,
        )
        self.notes_from = 0  # history index of the first message not yet in the notes
        self.updater: NotesUpdater = (
            LLMNotesUpdater(self.llm, count_text) if self.llm else DeterministicNotesUpdater(count_text)
        )
        self.summarizer = (
            LLMSummarizer(
                self.llm,
                count_message,
                window=llm_model.input_window if llm_model else 200_000,
                max_output=policy.summary_llm_max_output,
            )
            if self.llm
            else None
        )
        self.failures = 0
        self.breaker_open = False
        self._rendered: tuple[int, str] = (-1, "")

    # ------------------------------------------------------------ notes

    def on_ingest(self, msg: Message) -> None:
        self.cadence.tool_calls_since += len(msg.tool_calls)

    def maybe_update_notes(self, history: Sequence[Message], conversation_tokens: int) -> LayerEvent | None:
        """Update the notes in the background when the cadence says so (``after_turn``)."""
        if not self.policy.session_memory or not self.cadence.due(conversation_tokens):
            return None
        event = self._update_notes(history, "cadence")
        if event is not None and "error" not in event.details:
            self.cadence.mark(conversation_tokens)
        return event

    def flush_notes(self, history: Sequence[Message]) -> LayerEvent | None:
        """The pre-compaction flush: a last update before history leaves the context."""
        if not self.policy.session_memory or self.notes_from >= len(history):
            return None
        return self._update_notes(history, "pre-compaction flush")

    def _update_notes(self, history: Sequence[Message], why: str) -> LayerEvent | None:
        new = [m for m in history[self.notes_from :] if m.origin in ("message", "attachment")]
        if not new:
            self.notes_from = len(history)
            return None
        try:
            nxt, spent = self.updater.update(self.notes, new)
        except NotesError as exc:
            c = exc.cost
            return LayerEvent(
                layer=NOTES_LAYER,
                reason=f"{why}: update rejected",
                tokens_before=0,
                tokens_after=0,
                llm_calls=c.llm_calls,
                llm_input_tokens=c.input_tokens,
                llm_output_tokens=c.output_tokens,
                llm_cost_usd=c.cost_usd,
                details={"error": str(exc)},
            )
        except Exception as exc:  # an LLM error: the notes stay as they were
            return LayerEvent(
                layer=NOTES_LAYER,
                reason=f"{why}: update failed",
                tokens_before=0,
                tokens_after=0,
                details={"error": f"{type(exc).__name__}: {exc}"},
            )
        self.notes = nxt
        self.notes_from = len(history)
        return LayerEvent(
            layer=NOTES_LAYER,
            reason=why,
            tokens_before=0,
            tokens_after=0,
            llm_calls=spent.llm_calls,
            llm_input_tokens=spent.input_tokens,
            llm_output_tokens=spent.output_tokens,
            llm_cost_usd=spent.cost_usd,
            details={
                "messages": len(new),
                "notes_tokens": self.count_text(self.notes.text),
                "updates": nxt.updates,
            },
        )

    def notes_text(self) -> str:
        """The notes document: as the LLM wrote it, else rendered from the facts (cached until
        the next update)."""
        if self.notes.text:
            return self.notes.text
        if not self.notes.updates:
            return ""
        if self._rendered[0] != self.notes.updates:
            self._rendered = (self.notes.updates, render_sections(sections_of(self.notes), self.count_text))
        return self._rendered[1]

    # ------------------------------------------------------------ the chain

    def compact(
        self,
        ctx: LayerContext,
        history: Sequence[Message],
        *,
        force: bool = False,
        reason: str = "",
        instructions: str = "",
        system: str = "",
    ) -> tuple[Cut, list[LayerEvent], summarize.SummaryState] | None:
        """Run the chain. Returns the cut to commit, the events made on the way (notes flush,
        failures) and the new structured-summary state; None when nothing should or could be
        done. Raises ``CompactionFailed`` when a compaction was attempted and failed (the
        breaker is updated; the session is unchanged)."""
        p = self.policy
        threshold = p.compact_threshold(ctx.window, ctx.max_output)
        if not force and ctx.predicted <= threshold:
            return None
        if not force and self.breaker_open:
            return None
        events: list[LayerEvent] = []
        if not instructions:
            flush = self.flush_notes(history)
            if flush is not None:
                events.append(flush)
            sm = session_memory_compact(ctx, self.notes_text(), self.count_text, force=force, reason=reason)
            if sm is not None:
                self.summary_state = summarize.update(
                    _copy(self.summary_state), sm.summarized, user_message_chars=p.summary_user_message_chars
                )
                # the notes cover the whole session; the exact identifiers of what left the
                # context are listed after them (newest first), as the structured summary does
                index = summarize.identifier_index(
                    self.summary_state,
                    p.summary_budget(ctx.window),
                    self.count_text,
                    limit=p.summary_identifiers_max,
                )
                if index:
                    head = sm.prefix[0]
                    text = head.text() + "\n\n" + index
                    sm.prefix[0] = msgspec.structs.replace(head, blocks=(Text(text),))
                    sm.event.tokens_after += self.count_text(text) - self.count_text(head.text())
                self._finish(sm, ctx)
                return sm, events, self.summary_state
        if self.summarizer is not None:
            try:
                cut = self._llm_summary(
                    ctx, force=force, reason=reason, instructions=instructions, system=system
                )
            except CompactionFailed as exc:
                self.failures += 1
                if self.failures >= p.breaker_failures and not self.breaker_open:
                    self.breaker_open = True
                    exc.event.details["breaker"] = (
                        f"{self.failures} consecutive failures: automatic compaction stops for this session"
                    )
                exc.event.details["consecutive_failures"] = self.failures
                exc.event.details["events_before"] = [msgspec.to_builtins(e) for e in events]
                raise
            if cut is None:
                return None
            self.failures = 0
            self.breaker_open = False
            self._finish(cut, ctx)
            return cut, events, self.summary_state
        result = summary_compact(ctx, self.summary_state, self.count_text, force=force, reason=reason)
        if result is None:
            return None
        cut, self.summary_state = result
        self._finish(cut, ctx)
        return cut, events, self.summary_state

    def _llm_summary(
        self, ctx: LayerContext, *, force: bool, reason: str, instructions: str, system: str
    ) -> Cut | None:
        assert self.summarizer is not None and self.llm is not None
        p = self.policy
        start = 0
        while start < len(ctx.view) and ctx.src[start] < 0:
            start += 1
        cut = choose_cut(ctx, start)
        if cut is None:
            return None
        removed = sum(ctx.tokens[:cut])
        if removed < p.compact_min_gain * ctx.window and not force:
            return None
        span = list(ctx.view[start:cut])
        kept = list(ctx.view[cut:])
        previous = "\n\n".join(m.text() for m in ctx.view[:start] if m.origin == "summary")
        reuse = self.llm_model is not None and self.llm_model.name == self.model.name and start == 0
        prefix = list(ctx.view) if reuse else None
        try:
            result = self.summarizer.summarize(
                span,
                kept=kept,
                previous=previous,
                instructions=instructions,
                prefix=prefix,
                system=system,
                extra_audit_text=self.summary_state.todos,
            )
        except SummaryError as exc:
            s = exc.spent
            raise CompactionFailed(
                str(exc),
                LayerEvent(
                    layer="summary_compact",
                    reason=f"failed: {exc}",
                    tokens_before=ctx.predicted,
                    tokens_after=ctx.predicted,
                    llm_calls=s.llm_calls,
                    llm_input_tokens=s.input_tokens,
                    llm_output_tokens=s.output_tokens,
                    llm_cost_usd=s.cost_usd,
                    details={"error": str(exc)},
                ),
            ) from exc
        text = CONTINUATION + result.text
        summary = Message(
            role="user", blocks=(Text(text),), id=f"summary-llm-{cut}", timestamp=ctx.now, origin="summary"
        )
        s = result.spent
        cost = s.cost_usd
        cache_read = s.cache_read_tokens
        if result.prefix_reused and cache_read == 0:
            # the provider did not report it (or cannot): the conversation prefix was just sent,
            # so it is priced as a cache read and only the appended request as input
            cache_read = min(ctx.predicted, s.input_tokens)
            cost = self.model.cost_usd(
                input_tokens=max(0, s.input_tokens - cache_read),
                cache_read_tokens=cache_read,
                output_tokens=s.output_tokens,
            )
        details: dict[str, object] = {
            "messages_summarized": len(span),
            "summary_tokens": self.count_text(text),
            "kept_messages": len(kept),
            "chunks": result.chunks,
            "partial": result.partial,
            "ptl_retries": result.ptl_retries,
            "prefix_reused": result.prefix_reused,
            "llm_cache_read_tokens": cache_read,
        }
        if result.audit is not None:
            details["audit"] = {
                "passed": result.audit.passed,
                "missing_sections": result.audit.missing_sections,
                "missing_identifiers": result.audit.missing_identifiers,
                "request_reflected": result.audit.request_reflected,
            }
        if instructions:
            details["instructions"] = instructions[:800]
        event = LayerEvent(
            layer="summary_compact",
            reason=reason or "context over the compaction threshold",
            tokens_before=ctx.predicted,
            tokens_after=ctx.predicted - removed + self.count_text(text),
            llm_calls=s.llm_calls,
            llm_input_tokens=s.input_tokens,
            llm_output_tokens=s.output_tokens,
            llm_cost_usd=round(cost, 6),
            details=details,
        )
        # keep the structured facts current too (restore uses the todo list)
        self.summary_state = summarize.update(
            _copy(self.summary_state),
            span,
            user_message_chars=p.summary_user_message_chars,
        )
        return Cut(keep_from=cut, prefix=[summary], event=event, summarized=span)

    def _finish(self, cut: Cut, ctx: LayerContext) -> None:
        """Add the restore messages and the quality figures to a cut."""
        p = self.policy
        kept = list(ctx.view[cut.keep_from :])
        restored: list[Message] = []
        if p.restore_files > 0:
            restored += restore.recent_files(
                cut.summarized,
                kept,
                self.count_text,
                workspace=self.workspace,
                from_transcript=self.restore_from_transcript,
                max_files=p.restore_files,
                file_tokens=p.restore_file_tokens,
                total_tokens=p.restore_total_tokens,
            )
        restored += restore.instruction_files(self.workspace, p.instruction_files)
        if p.restore_todos:
            restored += restore.todo_message(self.notes.facts.todos or self.summary_state.todos)
        cut.prefix = [*cut.prefix, *restored]
        summary_text = "\n".join(m.text() for m in cut.prefix)
        restored_tokens = sum(self.count_text(m.text()) for m in restored)
        cut.event.tokens_after += restored_tokens
        q = quality(
            tokens_before=cut.event.tokens_before,
            tokens_after=cut.event.tokens_after,
            span=cut.summarized,
            summary=summary_text,
            kept=kept,
        )
        cut.event.details["quality"] = msgspec.to_builtins(q)
        cut.event.details["restored"] = [m.id for m in restored]
        cut.event.details["restored_tokens"] = restored_tokens


def _copy(state: summarize.SummaryState) -> summarize.SummaryState:
    return msgspec.msgpack.decode(msgspec.msgpack.encode(state), type=summarize.SummaryState)
