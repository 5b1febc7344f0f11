"""The compaction orchestrator: session notes upkeep and the fallback chain of compactions.

One place owns the chain (after Letta's ``compact.py``): session-memory compaction (the notes as
the summary, $0) -> summary compaction (the LLM summarizer when a model is configured, else the
structured summary, $0) ; the overflow guard stays in the engine as the last resort. After a
compaction the working set is restored (``ctxengine.restore``). The circuit breaker follows Claude
Code: after ``breaker_failures`` (3) consecutive failed automatic compactions, automatic compaction
stops for the session and an event says so; a later success (a manual ``compact``) resets it.

A failure never changes the session: every decision is computed first and handed back as a
``Cut`` for the engine to commit.

Presets: a policy with another cut strategy or summary style (``compact_cut``,
``summary_style``: Claude Code, OpenClaw, pi, Letta) takes the styled path (``_styled``): the cut
is planned by ``layers.cut_plans`` (summarize-all, pi's cut with split turns, Letta's sliding
window falling back to summarize-all), OpenClaw's span is pruned to its history share
(``layers.history_share``; the dropped part summarized first), Letta's summarizer input clamped
(``clamp_summary_input``), and the summary written in the harness's format: $0 by
``summarize.render_style``, or by the LLM under the harness's headings (``StyledSummarizer``).
OpenClaw's pre-compaction memory flush is ``maybe_memory_flush``.

Ours (``default``) adds, on the session-memory path: its own kept-message minimum and gain factor
(``sm_keep_min_messages``, ``sm_gain_factor``), the cold-cache threshold (``cold_compact_at_share``:
once the prompt cache has expired the next request is written in full anyway), notes cut to a
window share (``notes_within``) and the identifier index in append-only segments
(``_index_segments``) that the provider's prompt cache keeps serving.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from concurrent.futures import wait as wait_for
from pathlib import Path
from typing import TYPE_CHECKING

import msgspec

from ctxengine import restore, summarize
from ctxengine.audit import quality, span_identifiers, user_request
from ctxengine.layers.base import Cut, LayerContext, LayerEvent
from ctxengine.layers.cut_plans import CutPlan, all_plan, plan_cut
from ctxengine.layers.history_share import prune_history_for_context_share
from ctxengine.layers.session_memory_compact import session_memory_compact
from ctxengine.layers.summary_compact import choose_cut, summary_compact
from ctxengine.llm_summary import CONTINUATION as CONTINUATION
from ctxengine.llm_summary import LLMSummarizer, Spend, SummaryError
from ctxengine.messages import Block, Message, Text, ToolResult
from ctxengine.models import ModelInfo
from ctxengine.notes import (
    SECTIONS,
    Cadence,
    DeterministicNotesUpdater,
    LLMNotesUpdater,
    NotesError,
    NotesState,
    NotesUpdate,
    NotesUpdater,
    _cap,
    _join,
    copy_state,
    parse_sections,
    render_sections,
    sections_of,
)
from ctxengine.policy import Policy
from ctxengine.skeleton import Segment, extend_segments

if TYPE_CHECKING:
    from ctxengine.llm import LLMClient, ToolDefinition

log = logging.getLogger(__name__)

NOTES_LAYER = "session_notes"
MEMORY_FLUSH_LAYER = "memory_flush"


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


def _failed(exc: SummaryError, ctx: LayerContext, spent: Spend, **details: object) -> CompactionFailed:
    """The failure of a summary compaction: what it spent (tokens, USD) and why; the context
    is unchanged (``tokens_after == tokens_before``)."""
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


@dataclasses.dataclass
class NotesJob:
    """One notes update, over a snapshot taken on the caller's thread: the messages new since
    the last update and the notes they are folded into. ``end`` is ``len(history)`` at the
    snapshot (``notes_from`` once applied); ``tokens`` and ``tool_calls`` are the cadence's
    figures then (``tokens`` None: not a cadence update). ``future`` holds the outcome of a
    background update (None in line)."""

    why: str
    new: list[Message]
    notes: NotesState
    end: int
    tokens: int | None = None
    tool_calls: int = 0
    future: Future[NotesOutcome] | None = None


@dataclasses.dataclass
class NotesOutcome:
    """What an update made: the new notes (None: failed or rejected, the notes stay as they
    were) and its event (layer ``session_notes``, with the LLM spend; ``error`` in the details
    on failure)."""

    state: NotesState | None
    event: LayerEvent


def run_notes_update(updater: NotesUpdater, job: NotesJob, count_text: Callable[[str], int]) -> NotesOutcome:
    """Compute a notes update (pure: reads ``job`` and calls the updater, which copies the notes
    it is given; changes nothing else, so it may run on a worker thread). Never raises: a
    rejected reply or an LLM error is an outcome without notes."""
    try:
        nxt, spent = updater.update(job.notes, job.new)
    except NotesError as exc:
        return NotesOutcome(None, _notes_event(f"{job.why}: update rejected", {"error": str(exc)}, exc.cost))
    except Exception as exc:  # an LLM error: the notes stay as they were
        return NotesOutcome(None, _notes_failed(job.why, f"{type(exc).__name__}: {exc}"))
    details: dict[str, object] = {
        "messages": len(job.new),
        "notes_tokens": count_text(nxt.text),
        "updates": nxt.updates,
    }
    return NotesOutcome(nxt, _notes_event(job.why, details, spent))


def _notes_event(reason: str, details: dict[str, object], spent: NotesUpdate | None = None) -> LayerEvent:
    """A ``session_notes`` event (it changes nothing sent: tokens 0 -> 0) with the LLM spend."""
    return LayerEvent(
        layer=NOTES_LAYER,
        reason=reason,
        tokens_before=0,
        tokens_after=0,
        llm_calls=spent.llm_calls if spent else 0,
        llm_input_tokens=spent.input_tokens if spent else 0,
        llm_output_tokens=spent.output_tokens if spent else 0,
        llm_cost_usd=spent.cost_usd if spent else 0.0,
        details=details,
    )


def _notes_failed(why: str, error: str, reason: str = "update failed") -> LayerEvent:
    return _notes_event(f"{why}: {reason}", {"error": error})


def _in_thread(fn: Callable[[], NotesOutcome], name: str) -> Future[NotesOutcome]:
    """Run ``fn`` on a new daemon thread; its outcome in the returned future. A daemon thread,
    not an executor's worker: the interpreter does not wait at exit for an LLM call nobody will
    read (an executor's workers are joined at exit, up to the client's timeout)."""
    future: Future[NotesOutcome] = Future()

    def work() -> None:
        if not future.set_running_or_notify_cancel():
            return
        try:
            future.set_result(fn())
        except BaseException as exc:  # run_notes_update does not raise; kept for the caller
            future.set_exception(exc)

    threading.Thread(target=work, name=name, daemon=True).start()
    return future


class Compactor:
    """Notes, summaries and the breaker for one session.

    Notes in the background (``background_notes``, set by the engine): ``maybe_update_notes``
    starts a cadence update on a worker thread over a snapshot (``NotesJob``) and returns at
    once; the worker only computes (``run_notes_update``) and never touches the compactor. The
    caller's thread applies the outcome in ``settle_notes`` (the engine calls it at every
    lifecycle step; its event lands in ``notes_events``), and waits for it wherever the notes
    are needed (session-memory compaction, the pre-compaction flushes). One update at a time:
    while one runs, a due cadence is skipped (``notes_from`` and the cadence advance only when
    an update is applied, so the next cadence catches up).
    """

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
        # the main conversation's system prompt and tools (``ContextEngine.bootstrap``): a summary
        # request that reuses the conversation's prefix repeats them so the prompt cache serves it
        self.system = ""
        self.tools: tuple[ToolDefinition, ...] = ()
        self.restore_from_transcript = restore_from_transcript
        self.summary_state = summarize.SummaryState()
        self.notes = NotesState()
        self.cadence = Cadence(
            first_tokens=policy.notes_first_tokens,
            every_tokens=policy.notes_every_tokens,
            every_tool_calls=policy.notes_every_tool_calls,
        )
        self.notes_from = 0  # history index of the first message not yet in the notes
        self.background_notes = False  # cadence updates on a worker thread (see the class doc)
        self.notes_job: NotesJob | None = None  # the background update running or not yet applied
        self._gave_up: NotesJob | None = None  # a running update already waited for in vain
        self.notes_events: list[LayerEvent] = []  # events of background updates applied, to report
        self.updater: NotesUpdater = (
            LLMNotesUpdater(self.llm, count_text, window=llm_model.input_window if llm_model else 200_000)
            if self.llm
            else DeterministicNotesUpdater(count_text)
        )
        self.summarizer = (
            LLMSummarizer(
                self.llm,
                count_message,
                window=llm_model.input_window if llm_model else 200_000,
                max_output=policy.summary_llm_max_output,
                stages=policy.summary_stages,
            )
            if self.llm
            else None
        )
        style = policy.summary_style
        self.turn_summarizer: StyledSummarizer | None = None
        if self.llm and style in summarize.STYLE_PROMPTS:
            window = llm_model.input_window if llm_model else 200_000
            words = policy.summary_max_words or 500
            self.summarizer = StyledSummarizer(
                self.llm,
                count_message,
                window=window,
                max_output=policy.summary_llm_max_output,
                required_sections=summarize.STYLE_SECTIONS[style],
                prompt=summarize.STYLE_PROMPTS[style].replace("{words}", str(words)),
                stages=policy.summary_stages,
            )
            if style == "pi":  # the prefix of a split turn gets its own summary
                self.turn_summarizer = StyledSummarizer(
                    self.llm,
                    count_message,
                    window=window,
                    max_output=policy.turn_prefix_max_tokens,
                    required_sections=TURN_PREFIX_SECTIONS,
                    prompt=TURN_PREFIX_PROMPT,
                )
        self.failures = 0
        self.breaker_open = False
        self.compactions = 0  # compactions made (the memory flush runs once per compaction)
        self._flushed_at = -1
        self._rendered: tuple[int, str] = (-1, "")
        self._within: tuple[tuple[int, int], str] = ((-1, -1), "")
        self._derived: dict[tuple[int, bool], tuple[Policy, Policy]] = {}
        self._segments: tuple[Message, ...] = ()  # the identifier index, in append-only segments
        self._segment_ids: set[str] = set()
        self._restored: dict[tuple[str, str], Message] = {}
        # the transcript skeleton's segments (``restore_skeleton_tokens``) and the history index
        # they cover up to; a compaction's new segments wait in ``_pending_skeleton`` for ``commit``
        self._skeleton: tuple[Segment, ...] = ()
        self._skeleton_upto = 0
        self._pending_skeleton: tuple[list[Segment], int] | None = None
        # the newest user-typed request of the whole history and its message id (``on_ingest``):
        # once a compaction has summarized it away the view no longer holds it as a user message,
        # so every later compaction must take it from here
        self.latest_request: tuple[str, str] | None = None

    @staticmethod
    def _history_cut(ctx: LayerContext, cut: Cut, history: Sequence[Message]) -> int:
        """The history index where the kept tail of ``cut`` starts (the whole history when the
        tail holds only messages the engine made)."""
        return next((s for s in ctx.src[cut.keep_from :] if s >= 0), len(history))

    # ------------------------------------------------------------ notes

    def on_ingest(self, msg: Message) -> None:
        self.cadence.tool_calls_since += len(msg.tool_calls)
        if text := user_request(msg):
            self.latest_request = (text, msg.id)

    def maybe_update_notes(self, history: Sequence[Message], conversation_tokens: int) -> LayerEvent | None:
        """Update the notes when the cadence says so (``after_turn``). In line: returns the
        event. In the background (``background_notes``): starts the update on a worker thread
        and returns None (its event comes from ``settle_notes``); skipped while one runs."""
        if not self.policy.session_memory or not self.cadence.due(conversation_tokens):
            return None
        if self.background_notes:
            if self.notes_job is None:
                self._start_notes(history, conversation_tokens)
            return None
        event = self._update_notes(history, "cadence")
        if event is not None and "error" not in event.details:
            self.cadence.mark(conversation_tokens)
        return event

    def flush_notes(self, history: Sequence[Message]) -> LayerEvent | None:
        """The pre-compaction flush: a last update before history leaves the context (in line,
        after the background update running, if any, is applied)."""
        if not self.policy.session_memory or not self.await_notes() or self.notes_from >= len(history):
            return None
        return self._update_notes(history, "pre-compaction flush")

    def _notes_job(self, history: Sequence[Message], why: str) -> NotesJob | None:
        """The snapshot an update works on; None (and the notes marked current) when nothing
        new is for the notes."""
        new = [m for m in history[self.notes_from :] if m.origin in ("message", "attachment")]
        if not new:
            self.notes_from = len(history)
            return None
        return NotesJob(why, new, self.notes, len(history))

    def _update_notes(self, history: Sequence[Message], why: str) -> LayerEvent | None:
        """An update in line: computed and applied now."""
        job = self._notes_job(history, why)
        if job is None:
            return None
        return self._apply_notes(job, run_notes_update(self.updater, job, self.count_text))

    def _apply_notes(self, job: NotesJob, outcome: NotesOutcome) -> LayerEvent:
        """Keep an update's notes (on the caller's thread); a background cadence update also
        marks the cadence, counting the tool calls made while it ran toward the next one."""
        if outcome.state is not None:
            self.notes = outcome.state
            self.notes_from = job.end
            if job.tokens is not None:
                calls = self.cadence.tool_calls_since
                self.cadence.mark(job.tokens)
                self.cadence.tool_calls_since = max(0, calls - job.tool_calls)
        return outcome.event

    def _start_notes(self, history: Sequence[Message], conversation_tokens: int) -> None:
        job = self._notes_job(history, "cadence")
        if job is None:
            return
        # the worker gets its own copies: the message list is new, the notes are copied
        job.notes = copy_state(self.notes)
        job.tokens = conversation_tokens
        job.tool_calls = self.cadence.tool_calls_since
        updater, count = self.updater, self.count_text
        job.future = _in_thread(lambda: run_notes_update(updater, job, count), "ctxengine-notes")
        self.notes_job = job

    @property
    def notes_running(self) -> bool:
        """A background update is started and not yet applied (it may have finished)."""
        return self.notes_job is not None

    def settle_notes(self, *, wait: bool = False) -> bool:
        """Apply the background update if it has finished (``wait``: wait for it first, at most
        ``notes_wait_s``); its event goes to ``notes_events``. Returns True when no update is
        left running. Call on the thread that owns the engine."""
        job = self.notes_job
        if job is None or job.future is None:
            return True
        if not job.future.done():
            if not wait:
                return False
            bound = self.notes_wait_s()
            done, _ = wait_for([job.future], timeout=bound)
            if not done:
                log.warning("the notes update still runs after %.0f s; going on without it", bound)
                return False
        self.notes_job = None
        try:
            outcome = job.future.result()
        except BaseException as exc:  # run_notes_update does not raise; kept as an event anyway
            outcome = NotesOutcome(None, _notes_failed(job.why, f"{type(exc).__name__}: {exc}"))
        self.notes_events.append(self._apply_notes(job, outcome))
        return True

    def await_notes(self) -> bool:
        """Before the notes are used: wait for the background update and apply it (a no-op in
        line). False when it is still running after ``notes_wait_s`` (no second update may
        start then; the notes are used as they are). An update waited for in vain is not waited
        for again (the flushes and the compaction chain each ask)."""
        if self.notes_job is not None and self.notes_job is self._gave_up:
            return self.settle_notes()
        ready = self.settle_notes(wait=True)
        self._gave_up = None if ready else self.notes_job
        return ready

    def notes_wait_s(self) -> float | None:
        """How long to wait for a background update: the LLM client's timeout per attempt, its
        retries and their waits, plus a margin (None, no bound, for the $0 updater or a client
        without a timeout)."""
        timeout = getattr(self.llm, "timeout", None) if self.llm is not None else None
        if not isinstance(timeout, (int, float)) or isinstance(timeout, bool):
            return None
        retries = getattr(self.llm, "max_retries", 0)
        retries = retries if isinstance(retries, int) else 0
        pause = getattr(self.llm, "max_retry_wait_s", 0.0)
        pause = float(pause) if isinstance(pause, (int, float)) else 0.0
        return float(timeout) * (retries + 1) + pause * retries + 5.0

    def stop_notes(self) -> None:
        """At the end of the session: apply the background update if it has finished, else
        abandon it (the worker's outcome is dropped; an event says so)."""
        job = self.notes_job
        if job is None or job.future is None or self.settle_notes():
            return
        job.future.cancel()  # only if it has not started; a running call ends on its own
        self.notes_job = None
        self.notes_events.append(
            _notes_failed(job.why, "the session ended while the update was running", "update abandoned")
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

    def _sm_context(self, ctx: LayerContext, *, cold: bool) -> LayerContext:
        """The context the session-memory compaction sees: its own minimum of kept text messages
        (``sm_keep_min_messages``), and on a cold cache the lower threshold
        (``cold_compact_at_share``): the request is written in full anyway, so compacting now
        costs no extra cache miss."""
        p = ctx.policy
        cold = cold and 0 < p.cold_compact_at_share < p.compact_at_share
        if p.sm_keep_min_messages is None and p.sm_gain_factor == 1.0 and not cold:
            return ctx
        key = (id(p), cold)
        derived = self._derived.get(key)
        if derived is None or derived[0] is not p:
            changes: dict[str, object] = {}
            if p.sm_keep_min_messages is not None:
                changes["keep_recent_min_messages"] = p.sm_keep_min_messages
            gain = p.compact_min_gain * p.sm_gain_factor
            if p.sm_gain_factor != 1.0:
                changes["compact_min_gain"] = gain
            if cold:
                changes["compact_at_share"] = p.cold_compact_at_share
                changes["compact_min_gain"] = min(gain, p.cold_compact_min_gain)
            derived = (p, p.with_(**changes))
            self._derived[key] = derived
        return dataclasses.replace(ctx, policy=derived[1])

    def _index_segments(
        self, state: summarize.SummaryState, span: Sequence[Message], budget: int
    ) -> tuple[tuple[Message, ...], frozenset[str]]:
        """The identifier index as append-only segments (``sm_index_segments``): each compaction
        adds one message listing the identifiers that left the context and are not listed yet
        (newest first), and the earlier segments stay the same objects, so the provider's
        prompt cache keeps serving them; only when the segments would pass ``budget`` are they
        rewritten as one segment of the newest identifiers within ``REWRITE_SHARE`` of it (room
        for the next appends). Returns the segments and the identifiers they list (the
        compactor keeps them at ``commit``)."""
        pos = state.identifiers
        span_ids = span_identifiers(span)
        new = sorted((i for i in span_ids if i not in self._segment_ids), key=lambda k: (-pos.get(k, 0), k))
        if not new:
            return self._segments, frozenset(self._segment_ids)
        count = self.count_text
        used = sum(count(m.text()) for m in self._segments)
        text = _segment_text(new, len(self._segments) + 1)
        if used + count(text) <= budget:
            return (*self._segments, _segment(text, len(self._segments))), frozenset(
                self._segment_ids.union(new)
            )
        ids = sorted(pos, key=lambda k: (-pos[k], k))[: self.policy.summary_identifiers_max * 4]
        room = int(budget * REWRITE_SHARE)
        while ids and count(_segment_text(ids, 1)) > room:
            ids = ids[: len(ids) * 3 // 4]
        return ((_segment(_segment_text(ids, 1), self.compactions),) if ids else ()), frozenset(ids)

    def notes_within(self, max_tokens: int) -> str:
        """The notes cut to ``max_tokens`` (longest sections first, each keeping its valuable
        end, as the notes' own cap does); the notes themselves when they fit."""
        text = self.notes_text()
        if not text or self.count_text(text) <= max_tokens:
            return text
        key = (self.notes.updates, max_tokens)
        if self._within[0] == key:
            return self._within[1]
        bodies = parse_sections(text)
        if bodies is None:
            out = text[: max_tokens * 3]
        else:
            bodies = {name: bodies.get(name, "") for name in SECTIONS}
            out = _join(bodies)
            while self.count_text(out) > max_tokens:
                longest = max(bodies, key=lambda n: len(bodies[n]))
                size = self.count_text(bodies[longest])
                smaller = _cap(longest, bodies[longest], max(20, size * 3 // 4), self.count_text)
                if not bodies[longest] or len(smaller) >= len(bodies[longest]):
                    out = out[: max_tokens * 3]
                    break
                bodies[longest] = smaller
                out = _join(bodies)
        self._within = (key, out)
        return out

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
    ) -> Compaction | None:
        """Run the chain. Returns the compaction to commit (then pass it to ``commit``); None
        when nothing should or could be
        done. Raises ``CompactionFailed`` when a compaction was attempted and failed (the
        breaker is updated; the session is unchanged)."""
        instructions = instructions.strip()  # blank focus: none (the session-memory path stays open)
        events: list[LayerEvent] = []
        try:
            done = self._chain(
                ctx, history, events, force=force, reason=reason, instructions=instructions, system=system
            )
        except CompactionFailed:
            raise  # its event carries the events before it
        if done is None:
            # a pre-compaction flush made an LLM call, then no compaction followed (the cut
            # freed too little): its event is reported all the same
            self.notes_events.extend(events)
        return done

    def commit(self, done: Compaction) -> None:
        """Keep the state of a compaction the caller has committed (the structured-summary facts,
        the identifier-index segments, the breaker)."""
        self.summary_state = done.state
        if done.segments is not None:
            self._segments = done.segments
            self._segment_ids = set(done.segment_ids)
        if self._pending_skeleton is not None:
            segments, self._skeleton_upto = self._pending_skeleton
            self._skeleton = tuple(segments)
            self._pending_skeleton = None
        if done.closes_breaker:
            self.failures = 0
            self.breaker_open = False
        self.compactions += 1

    def _chain(
        self,
        ctx: LayerContext,
        history: Sequence[Message],
        events: list[LayerEvent],
        *,
        force: bool,
        reason: str,
        instructions: str,
        system: str,
    ) -> Compaction | None:
        p = ctx.policy  # resolved for the window (``Policy.for_window``)
        threshold = p.compact_threshold(ctx.window, ctx.max_output)
        # an early session-memory compaction (below what the reserves require) must leave room
        # to grow, or the next call compacts again (see ``_room``); a due or forced one need not
        early = not force and ctx.predicted <= p.reserve_threshold(ctx.window, ctx.max_output)
        sm_ctx = self._sm_context(ctx, cold=not force and cache_cold(ctx))
        sm_threshold = sm_ctx.policy.compact_threshold(ctx.window, ctx.max_output)
        if not force and ctx.predicted <= min(threshold, sm_threshold):
            return None
        if not force and self.breaker_open:
            return None
        if not instructions and p.session_memory:
            self.await_notes()  # a background notes update: the notes are needed now
            ctx, outer = sm_ctx, ctx
            # the pre-compaction flush runs only when a session-memory compaction can follow
            # (else every call over the threshold would pay for a notes update)
            probe_notes = self.notes_text() or ("(notes pending)" if self.policy.session_memory else "")
            probe = session_memory_compact(ctx, probe_notes, self.count_text, force=force)
            roomless = probe is not None and not self._room(probe.event.tokens_after, outer, p.sm_gain_factor)
            if early and roomless:
                # no room under the threshold after it: no flush and no compaction yet (the next
                # call would compact again); wait for the reserve threshold, since a summary,
                # which keeps more, would leave even less room
                return None
            if probe is not None:
                flush = self.flush_notes(history)
                if flush is not None:
                    events.append(flush)
            sm = session_memory_compact(
                ctx, self.notes_within(p.notes_max_tokens), self.count_text, force=force, reason=reason
            )
            if sm is not None:
                state = summarize.update(
                    _copy(self.summary_state), sm.summarized, user_message_chars=p.summary_user_message_chars
                )
                # the notes cover the whole session; the exact identifiers of what left the
                # context are listed after them (newest first), as the structured summary does
                index = (
                    summarize.identifier_index(
                        state,
                        p.index_budget(ctx.window),
                        self.count_text,
                        limit=p.summary_identifiers_max,
                    )
                    if p.sm_identifier_index and not p.sm_index_segments
                    else ""
                )
                done = Compaction(sm, events, state)
                notes_at = 0  # the notes message in the prefix
                if p.sm_identifier_index and p.sm_index_segments:
                    segments, done.segment_ids = self._index_segments(
                        state, sm.summarized, p.index_budget(ctx.window)
                    )
                    done.segments = segments
                    sm.prefix = [*segments, *sm.prefix]
                    notes_at = len(segments)
                    sm.event.tokens_after += sum(self.count_text(m.text()) for m in segments)
                    sm.event.details["index_segments"] = len(segments)
                elif index:
                    head = sm.prefix[0]
                    text = head.text() + "\n\n" + index
                    sm.prefix[0] = msgspec.structs.replace(head, blocks=(Text(text),))
                    sm.event.tokens_after += self.count_text(text) - self.count_text(head.text())
                self._quote_latest_request(sm, ctx, notes_at)
                self._finish(sm, ctx, state, history, force=force)
                return done
            ctx = outer
        if not force and ctx.predicted <= threshold:
            return None  # only the session-memory compaction runs below the threshold (cold cache)
        if p.summary_style != "ctxengine" or p.compact_cut != "tail":
            return self._styled(ctx, events, history, force=force, reason=reason, instructions=instructions)
        if self.summarizer is not None:
            try:
                made = self._llm_summary(
                    ctx, force=force, reason=reason, instructions=instructions, system=system
                )
            except CompactionFailed as exc:
                self._breaker(exc, events, p)
                raise
            if made is None:
                return None
            cut, state = made
            self._quote_latest_request(cut, ctx, 0)  # whichever summarizer ran
            self._finish(cut, ctx, state, history, force=force)
            return Compaction(cut, events, state, closes_breaker=True)
        result = summary_compact(ctx, self.summary_state, self.count_text, force=force, reason=reason)
        if result is None:
            return None
        cut, state = result
        self._quote_latest_request(cut, ctx, 0)
        if instructions:  # the $0 summary cannot be focused: the caller's focus leads it instead
            focus = instructions.strip()[:800]
            head = cut.prefix[0]
            text = f"Focus requested for this compaction: {focus}\n\n{head.text()}"
            cut.prefix[0] = msgspec.structs.replace(head, blocks=(Text(text),))
            cut.event.tokens_after += self.count_text(text) - self.count_text(head.text())
            cut.event.details["instructions"] = focus
        self._finish(cut, ctx, state, history, force=force)
        return Compaction(cut, events, state)

    @staticmethod
    def _room(tokens_after: int, ctx: LayerContext, gain_factor: float = 1.0) -> bool:
        """Whether a compaction leaving ``tokens_after`` tokens leaves room to grow: at most the
        threshold minus the gain the compaction must make (``compact_min_gain`` x
        ``gain_factor`` of the window). An early session-memory compaction that leaves less
        (checked on its probe, before the notes are flushed) is not made: the next call would
        compact again (at a small window the newest round alone can fill the space under a
        share threshold); nothing is made until the reserve threshold (a summary, which keeps
        more, would leave even less room)."""
        p = ctx.policy
        limit = p.compact_threshold(ctx.window, ctx.max_output)
        return tokens_after <= limit - int(p.compact_min_gain * gain_factor * ctx.window)

    def _llm_summary(
        self, ctx: LayerContext, *, force: bool, reason: str, instructions: str, system: str
    ) -> tuple[Cut, summarize.SummaryState] | None:
        assert self.summarizer is not None and self.llm is not None
        p = ctx.policy
        start = 0
        while start < len(ctx.view) and ctx.src[start] < 0:
            start += 1
        cut = choose_cut(ctx, start)
        if cut is None:
            return None
        removed = sum(ctx.tokens[:cut])
        if sum(ctx.tokens[start:cut]) < p.compact_min_gain * ctx.window and not force:
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
                system=system or self.system,
                tools=self.tools,
                extra_audit_text=self.summary_state.todos,
            )
        except SummaryError as exc:
            raise _failed(exc, ctx, exc.spent) from exc
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
        state = summarize.update(
            _copy(self.summary_state),
            span,
            user_message_chars=p.summary_user_message_chars,
        )
        return Cut(keep_from=cut, prefix=[summary], event=event, summarized=span), state

    # ------------------------------------------------------------ presets (styled compaction)

    def maybe_memory_flush(self, ctx: LayerContext, history: Sequence[Message]) -> LayerEvent | None:
        """OpenClaw's pre-compaction memory flush (``memory_flush``): once per compaction, when the
        context passes the threshold minus ``memory_flush_soft_tokens``, the notes (the durable
        memory, kept out of the context as OpenClaw's ``memory/`` files are) are brought up to
        date: $0 with the deterministic updater, an LLM call with a model."""
        p = ctx.policy
        if not p.memory_flush or self._flushed_at == self.compactions:
            return None
        threshold = p.compact_threshold(ctx.window, ctx.max_output)
        if ctx.predicted < threshold - p.memory_flush_soft_tokens:
            return None
        self._flushed_at = self.compactions
        if not self.await_notes():
            return None  # the background update still runs: it brings the notes up to date
        event = self._update_notes(history, "pre-compaction memory flush")
        if event is not None:
            event.layer = MEMORY_FLUSH_LAYER
        return event

    def _breaker(self, exc: CompactionFailed, events: list[LayerEvent], p: Policy) -> None:
        self.failures += 1
        if self.failures >= p.breaker_failures and not self.breaker_open:
            self.breaker_open = True
            exc.event.details["breaker"] = (
                f"{self.failures} consecutive failures: automatic compaction stops for this session"
            )
        exc.event.details["consecutive_failures"] = self.failures
        exc.event.details["events_before"] = [msgspec.to_builtins(e) for e in events]

    def _styled(
        self,
        ctx: LayerContext,
        events: list[LayerEvent],
        history: Sequence[Message],
        *,
        force: bool,
        reason: str,
        instructions: str,
    ) -> Compaction | None:
        """A summary compaction with the policy's cut strategy and summary style (the presets):
        plan the cut, prune the span for OpenClaw's history share, summarize (LLM or $0
        structured, in the style's format), and for Letta redo it as summarize-all when the
        sliding window left the context over the trigger."""
        p = ctx.policy
        plan = plan_cut(ctx)
        if plan is None:
            return None
        if not force and sum(ctx.tokens[plan.start : plan.cut]) < p.compact_min_gain * ctx.window:
            return None  # too little to gain: compacting again right after a compaction loops
        if p.history_max_share > 0:
            self._prune_for_share(ctx, plan)
        try:
            cut, state = self._styled_cut(ctx, plan, reason=reason, instructions=instructions)
            threshold = p.compact_threshold(ctx.window, ctx.max_output)
            if plan.mode == "sliding" and cut.event.tokens_after >= threshold:
                again = all_plan(ctx, plan.start, mode="sliding->all")
                if again is not None:
                    cut, state = self._styled_cut(ctx, again, reason=reason, instructions=instructions)
        except CompactionFailed as exc:
            self._breaker(exc, events, p)
            raise
        self._finish(cut, ctx, state, history, force=force)
        return Compaction(cut, events, state, closes_breaker=True)

    def _prune_for_share(self, ctx: LayerContext, plan: CutPlan) -> None:
        """OpenClaw: when the content that stays exceeds window x share x 1.2, prune the span to
        summarize to window x share tokens; the dropped part is summarized first."""
        p = ctx.policy
        summarized = sum(ctx.tokens[plan.start : plan.cut])
        new_content = ctx.predicted - summarized
        if new_content <= int(ctx.window * p.history_max_share * p.history_share_margin):
            return
        span_tokens = list(ctx.tokens[plan.start : plan.start + len(plan.span)])
        pruned = prune_history_for_context_share(
            plan.span, span_tokens, budget=int(ctx.window * p.history_max_share)
        )
        if pruned.chunks:
            plan.dropped = pruned.dropped
            plan.span = pruned.kept
            plan.details.update(
                dropped_chunks=pruned.chunks,
                dropped_messages=len(pruned.dropped),
                dropped_tokens=pruned.dropped_tokens,
            )

    def _styled_cut(
        self, ctx: LayerContext, plan: CutPlan, *, reason: str, instructions: str
    ) -> tuple[Cut, summarize.SummaryState]:
        p = ctx.policy
        style = p.summary_style
        inputs, clamp = clamp_summary_input(
            plan.summarized,
            tool_return_chars=p.summary_tool_return_chars,
            overflow_chars=ctx.window * CHARS_PER_TOKEN if p.summary_input_share > 0 else 0,
            budget_chars=max(
                FALLBACK_MIN_CHARS,
                int(ctx.window * p.summary_input_share * CHARS_PER_TOKEN) - FALLBACK_OVERHEAD_CHARS,
            ),
            keep_share=p.summary_middle_keep,
        )
        state = summarize.update(
            _copy(self.summary_state), inputs, user_message_chars=p.summary_user_message_chars
        )
        all_mode = plan.mode in ("all", "sliding->all")
        si = summarize.StyleInput(
            span=inputs if clamp else plan.span,
            turn_prefix=[] if clamp else plan.turn_prefix,
            hidden_messages=state.messages_summarized,
            all_mode=all_mode,
            max_words=p.summary_all_max_words if all_mode else p.summary_max_words,
            turn_prefix_max_tokens=p.turn_prefix_max_tokens,
            timestamp=ctx.now,
        )
        spent = Spend()
        details: dict[str, object] = {}
        if self.summarizer is not None:
            body = self._styled_llm(ctx, plan, inputs if clamp else None, instructions, spent, details)
            text = (
                CONTINUATION + body
                if style == "ctxengine"
                else summarize.style_envelope(style, body, state, si)
            )
        elif style == "ctxengine":
            text = summarize.render(
                state,
                max_tokens=p.summary_budget(ctx.window),
                count=self.count_text,
                identifiers_max=p.summary_identifiers_max,
            )
        else:
            text = summarize.render_style(
                style, state, si, max_tokens=p.summary_budget(ctx.window), count=self.count_text
            )
        summary = Message(
            role="user",
            blocks=(Text(text),),
            id=f"summary-{style}-{state.messages_summarized}",
            timestamp=ctx.now,
            origin="summary",
        )
        removed = sum(ctx.tokens[: plan.cut])
        threshold = p.compact_threshold(ctx.window, ctx.max_output)
        event = LayerEvent(
            layer="summary_compact",
            reason=reason or f"context {ctx.predicted:,} > threshold {threshold:,} tokens",
            tokens_before=ctx.predicted,
            tokens_after=ctx.predicted - removed + self.count_text(text),
            llm_calls=spent.llm_calls,
            llm_input_tokens=spent.input_tokens,
            llm_output_tokens=spent.output_tokens,
            llm_cost_usd=round(spent.cost_usd, 6),
            details={
                "strategy": plan.mode,
                "style": style,
                "messages_summarized": len(plan.summarized),
                "turn_prefix_messages": len(plan.turn_prefix),
                "summary_tokens": self.count_text(text),
                "kept_messages": len(ctx.view) - plan.cut,
                **plan.details,
                **clamp,
                **details,
            },
        )
        if instructions:
            event.details["instructions"] = instructions[:800]
        return Cut(keep_from=plan.cut, prefix=[summary], event=event, summarized=plan.summarized), state

    def _styled_llm(
        self,
        ctx: LayerContext,
        plan: CutPlan,
        clamped: list[Message] | None,
        instructions: str,
        spent: Spend,
        details: dict[str, object],
    ) -> str:
        """The LLM summary of a planned cut in the policy's style: OpenClaw's dropped history
        first (its summary becomes the previous summary), then the span, then pi's split-turn
        prefix apart; Claude Code's forked-agent prefix reuse when the summarizer is the session's
        model. Raises ``CompactionFailed`` (nothing changed)."""
        assert self.summarizer is not None
        kept = list(ctx.view[plan.cut :])
        previous = "\n\n".join(m.text() for m in ctx.view[: plan.start] if m.origin == "summary")
        style = ctx.policy.summary_style
        try:
            if clamped is not None:
                main, turn = clamped, []
            else:
                main, turn = plan.span, plan.turn_prefix
                if plan.dropped:
                    r = self.summarizer.summarize(
                        plan.dropped, previous=previous, instructions=instructions, stage_window=ctx.window
                    )
                    _add(spent, r.spent)
                    previous = r.text
            reuse = (
                style in ("ctxengine", "claude-code")
                and self.llm_model is not None
                and self.llm_model.name == self.model.name
                and plan.start == 0
            )
            if main:
                r = self.summarizer.summarize(
                    main,
                    kept=kept,
                    previous=previous,
                    instructions=instructions,
                    prefix=list(ctx.view) if reuse else None,
                    system=self.system,
                    tools=self.tools,
                    extra_audit_text=self.summary_state.todos,
                    stage_window=ctx.window,
                )
                if r.prefix_reused and r.spent.cache_read_tokens == 0:
                    # the conversation prefix was just sent: priced as a cache read
                    cache_read = min(ctx.predicted, r.spent.input_tokens)
                    r.spent.cost_usd = self.model.cost_usd(
                        input_tokens=max(0, r.spent.input_tokens - cache_read),
                        cache_read_tokens=cache_read,
                        output_tokens=r.spent.output_tokens,
                    )
                    r.spent.cache_read_tokens = cache_read
                _add(spent, r.spent)
                text = r.text
                details.update(
                    chunks=r.chunks, stages=r.stages, partial=r.partial, prefix_reused=r.prefix_reused
                )
                if r.audit is not None:
                    details["audit"] = {
                        "passed": r.audit.passed,
                        "missing_sections": r.audit.missing_sections,
                        "missing_identifiers": r.audit.missing_identifiers,
                        "request_reflected": r.audit.request_reflected,
                    }
            else:
                text = previous or "(no earlier history)"
            if turn and self.turn_summarizer is not None:
                t = self.turn_summarizer.summarize(turn, kept=kept, instructions=instructions)
                _add(spent, t.spent)
                text += "\n\n---\n\n**Turn Context (split turn):**\n\n" + t.text
        except SummaryError as exc:
            _add(spent, exc.spent)
            raise _failed(exc, ctx, spent, strategy=plan.mode, style=style) from exc
        return text

    def _quote_latest_request(self, cut: Cut, ctx: LayerContext, at: int) -> None:
        """The user's latest request, verbatim and whole, at the end of the summary message
        (``cut.prefix[at]``) when neither it nor the kept messages hold it: notes paraphrase and
        summaries cut long messages, and the agent must answer what was asked (Claude Code's
        summary quotes the user's messages too). The request is the newest user-typed text of
        the whole history (``latest_request``), not of the view, so a second compaction quotes
        it again. It is quoted whole when it *fits*: at most half of what the window leaves after
        the fixed prefix and the output reserve (tokens); a longer one keeps its head (3/4) and
        tail (1/4) within that room verbatim, the middle retrievable as ``message:<id>``
        (``ContextEngine.retrieve``), and ``details["latest_request_quoted"]`` says
        ``"partial"``."""
        if self.latest_request is None:
            return
        latest, msg_id = self.latest_request
        head = cut.prefix[at]
        if latest in head.text() or any(latest in m.text() for m in ctx.view[cut.keep_from :]):
            return
        p = ctx.policy
        fixed = max(0, ctx.predicted - sum(ctx.tokens))
        room = max(200, (ctx.window - fixed - min(ctx.max_output, p.compact_reserve_output)) // 2)
        size = self.count_text(latest)
        quoted: bool | str = True
        quote = latest
        if size > room:
            keep = max(400, int(len(latest) * room / size * 0.95))
            first, last = latest[: keep * 3 // 4], latest[len(latest) - keep // 4 :]
            omitted = len(latest) - len(first) - len(last)
            quote = (
                f"{first}\n[... {omitted:,} characters of the request omitted here; the whole request is "
                f"message {msg_id} of the transcript, retrievable as 'message:{msg_id}' ...]\n{last}"
            )
            quoted = "partial"
        label = "\n\nThe user's latest request (verbatim):\n"
        text = f"{head.text()}{label}{quote}"
        cut.prefix[at] = msgspec.structs.replace(head, blocks=(Text(text),))
        cut.event.tokens_after += self.count_text(text) - self.count_text(head.text())
        cut.event.details["latest_request_quoted"] = quoted

    def _skeleton_restore(self, ctx: LayerContext, cut: Cut, history: Sequence[Message]) -> list[Segment]:
        """The transcript skeleton of a compaction (``ctxengine.skeleton``) as append-only segments
        to lead the prefix (kept at ``commit``); none when ``restore_skeleton_tokens`` is 0."""
        p = ctx.policy
        if p.restore_skeleton_tokens <= 0:
            return []
        upto = self._history_cut(ctx, cut, history)
        lead = list(
            extend_segments(
                self._skeleton,
                history[self._skeleton_upto : upto],
                self.count_text,
                max_tokens=p.restore_skeleton_tokens,
                block_tokens=p.restore_skeleton_block_tokens,
                part=self.compactions + 1,
            )
        )
        self._pending_skeleton = (lead, max(upto, self._skeleton_upto))
        return lead

    def _finish(
        self,
        cut: Cut,
        ctx: LayerContext,
        state: summarize.SummaryState,
        history: Sequence[Message],
        *,
        force: bool,
    ) -> None:
        """Add the restore messages and the quality figures to a cut (``history``: the whole
        session, for ``restore_from_history``; ``force``: the user asked for this compaction)."""
        p = ctx.policy
        kept = list(ctx.view[cut.keep_from :])
        before_cut = (
            history[: self._history_cut(ctx, cut, history)] if p.restore_from_history else cut.summarized
        )
        lead = self._skeleton_restore(ctx, cut, history)
        shown = "\n".join(m.text() for m, _ in lead)
        restored: list[Message] = []
        if p.restore_changes > 0:
            restored += restore.recent_changes(
                before_cut,
                kept,
                self.count_text,
                max_files=p.restore_changes,
                change_tokens=p.restore_change_tokens,
                total_tokens=p.restore_total_tokens,
                shown=shown,
            )
        used = sum(self.count_text(m.text()) for m in restored)
        if p.restore_error_tokens > 0:
            restored += restore.latest_error(
                before_cut, kept, self.count_text, max_tokens=p.restore_error_tokens
            )
        if p.restore_files > 0:
            restored += restore.recent_files(
                before_cut,
                kept,
                self.count_text,
                workspace=self.workspace,
                from_transcript=self.restore_from_transcript,
                max_files=p.restore_files,
                file_tokens=p.restore_file_tokens,
                total_tokens=max(0, p.restore_total_tokens - used),
                shell_reads=p.restore_shell_reads,
            )
        restored += restore.instruction_files(self.workspace, p.instruction_files)
        if p.restore_todos:
            plan = summarize.current_plan(self.notes.facts) or summarize.current_plan(state)
            restored += restore.todo_message(self.notes.facts.todos or state.todos, plan)
        # a file restored again with the same content is the same message: the prompt cache
        # (compared by identity, as for every unchanged message) keeps serving it
        restored = [self._restored.setdefault((m.id, m.text()), m) for m in restored]
        # an automatic compaction never leaves the context larger than before it: what is
        # restored fits in what it freed (in order; a restore that does not fit is left out and
        # named). A forced one (the user's /compact) restores the working set as asked.
        room = cut.event.tokens_before - 1 - cut.event.tokens_after if not force else 10**12
        while lead and sum(t for _, t in lead) > room:  # the oldest segments give way first
            lead.pop(0)  # (the pending segments are this same list)
        lead_tokens = sum(t for _, t in lead)
        room -= lead_tokens
        fitting: list[Message] = []
        skipped: list[str] = []
        for m in restored:
            t = self.count_text(m.text())
            if t <= room:
                fitting.append(m)
                room -= t
            else:
                skipped.append(m.id)
        restored = fitting
        cut.prefix = [*(m for m, _ in lead), *cut.prefix, *restored]
        summary_text = "\n".join(m.text() for m in cut.prefix)
        restored_tokens = sum(self.count_text(m.text()) for m in restored) + lead_tokens
        cut.event.tokens_after += restored_tokens
        if skipped:
            cut.event.details["restore_skipped"] = skipped
        q = quality(
            tokens_before=cut.event.tokens_before,
            tokens_after=cut.event.tokens_after,
            span=cut.summarized,
            summary=summary_text,
            kept=kept,
        )
        cut.event.details["quality"] = msgspec.to_builtins(q)
        cut.event.details["restored"] = [m.id for m, _ in lead] + [m.id for m in restored]
        cut.event.details["restored_tokens"] = restored_tokens


REWRITE_SHARE = 0.6  # a rewritten identifier index fills this share of its budget


def _segment_text(ids: Sequence[str], part: int) -> str:
    return f"## Exact identifiers that left the context (part {part}, newest first)\n" + " ".join(ids)


def _segment(text: str, n: int) -> Message:
    return Message(role="user", blocks=(Text(text),), id=f"identifier-index-{n}", origin="summary")


def cache_cold(ctx: LayerContext) -> bool:
    """Whether the prompt cache has expired since the last call (gap over ``cache_ttl_s``)."""
    if ctx.now is None or ctx.last_call is None:
        return False
    return ctx.now - ctx.last_call > ctx.policy.cache_ttl_s


def _copy(state: summarize.SummaryState) -> summarize.SummaryState:
    return msgspec.msgpack.decode(msgspec.msgpack.encode(state), type=summarize.SummaryState)


def _add(total: Spend, more: Spend) -> None:
    total.llm_calls += more.llm_calls
    total.input_tokens += more.input_tokens
    total.cache_read_tokens += more.cache_read_tokens
    total.output_tokens += more.output_tokens
    total.cost_usd += more.cost_usd


# ---------------------------------------------------------------- Letta's summarizer-input fallbacks

CHARS_PER_TOKEN = 4  # Letta's byte budget: tokens x 4
FALLBACK_MIN_CHARS = 2_000  # fallback B's floor
FALLBACK_OVERHEAD_CHARS = 2_048  # the summary prompt + acknowledgement + 1,024 of slack


def _chars(msg: Message) -> int:
    from ctxengine.layers.cache_ttl_prune import message_chars

    return message_chars(msg)


def clamp_summary_input(
    messages: Sequence[Message],
    *,
    tool_return_chars: int,
    overflow_chars: int,
    budget_chars: int,
    keep_share: float,
) -> tuple[list[Message], dict[str, object]]:
    """Letta's ``simple_summary`` fallbacks, applied up front: when the transcript exceeds
    ``overflow_chars`` (0: never), (A) cut every tool return to ``tool_return_chars`` keeping the
    head (+ "... [truncated N chars]"); if it still exceeds it, (B) keep ``keep_share`` of
    ``budget_chars`` from the head and as much from the tail (whole messages) and drop the middle
    behind "[TRUNCATED: dropped N middle chars due to context budget]". Returns the messages the
    summarizer reads and what was done (empty when nothing)."""
    out = list(messages)
    size = sum(_chars(m) for m in out)
    if overflow_chars <= 0 or size <= overflow_chars:
        return out, {}
    details: dict[str, object] = {"summary_input_chars": size}
    if tool_return_chars > 0:
        clamped: list[Message] = []
        for m in out:
            if not any(
                isinstance(b, ToolResult)
                and sum(len(x.text) for x in b.content if isinstance(x, Text)) > tool_return_chars
                for b in m.blocks
            ):
                clamped.append(m)
                continue
            blocks: list[Block] = []
            for b in m.blocks:
                if isinstance(b, ToolResult):
                    text = "\n".join(x.text for x in b.content if isinstance(x, Text))
                    if len(text) > tool_return_chars:
                        cut = (
                            f"{text[:tool_return_chars]}... [truncated {len(text) - tool_return_chars} chars]"
                        )
                        b = ToolResult(b.call_id, (Text(cut),), b.is_error, b.name)
                blocks.append(b)
            clamped.append(msgspec.structs.replace(m, blocks=tuple(blocks)))
        out = clamped
        size = sum(_chars(m) for m in out)
        details["tool_returns_clamped_to"] = tool_return_chars
    if size > overflow_chars:
        each = int(budget_chars * keep_share)
        head: list[Message] = []
        used = 0
        for m in out:
            n = _chars(m)
            if used + n > each:
                break
            head.append(m)
            used += n
        tail: list[Message] = []
        used = 0
        for m in reversed(out[len(head) :]):
            n = _chars(m)
            if used + n > each:
                break
            tail.append(m)
            used += n
        tail.reverse()
        middle = out[len(head) : len(out) - len(tail)]
        dropped = sum(_chars(m) for m in middle)
        marker = Message(
            role="user",
            blocks=(Text(f"[TRUNCATED: dropped {dropped} middle chars due to context budget]"),),
            id="summary-input-truncated",
            origin="notice",
        )
        out = [*head, marker, *tail]
        details["middle_dropped_chars"] = dropped
    return out, details


# ---------------------------------------------------------------- the presets' LLM summarizer

TURN_PREFIX_SECTIONS = ("Original Request", "Early Progress", "Context for Suffix")
TURN_PREFIX_PROMPT = (
    "This is the prefix of a turn that was too large to keep; the suffix (the recent work) is "
    "kept. Summarize the prefix {where} to give context for the kept suffix, under these "
    "headings:\n\n## Original Request\n## Early Progress\n## Context for Suffix\n\nKeep exact file "
    "paths, function names and error messages.{extra}"
)


class StyledSummarizer(LLMSummarizer):
    """The LLM summarizer with a preset's prompt and headings (``summarize.STYLE_PROMPTS``,
    audited against ``required_sections``): ``LLMSummarizer`` with ``prompt`` given; chunking,
    prompt-too-long retries and the audit are the base class's."""
