"""Session-notes upkeep for the compactor: cadence updates (in line or on a worker thread), the
pre-compaction flushes, and the notes cut to a share of the window.

Notes in the background (``background_notes``, set by the engine): ``maybe_update_notes`` starts a
cadence update on a worker thread over a snapshot (``NotesJob``) and returns at once; the worker
only computes (``run_notes_update``) and never touches the compactor. The caller's thread applies
the outcome in ``settle_notes`` (the engine calls it at every lifecycle step; its event lands in
``notes_events``), and waits for it wherever the notes are needed (session-memory compaction, the
pre-compaction flushes). One update at a time: while one runs, a due cadence is skipped
(``notes_from`` and the cadence advance only when an update is applied, so the next cadence
catches up). The notes themselves (Claude Code's session memory) are ``ctxengine.summary.notes``.

A ``notes_runner`` replaces the worker thread: it gets the job and the updater, and returns the
future of its outcome. The proxy on a shared store sets one (``proxy.jobs``) whose future its
owner resolves between two calls of the engine (from a queue's outcome recorded in the store): the
engine never waits for such a future; where it would wait, it goes on with the notes as they are.
A runner whose ``waited`` attribute is true (``proxy.job_process.ProcessNotes``: the $0 update in
another process) is waited for as the thread is.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from concurrent.futures import wait as wait_for
from typing import TYPE_CHECKING

from ctxengine.layers.base import LayerContext, LayerEvent
from ctxengine.messages.model import Message
from ctxengine.models.registry import ModelInfo
from ctxengine.policy.compaction_settings import SessionMemory
from ctxengine.policy.registry import Policy
from ctxengine.summary.notes import (
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
    fold,
    parse_sections,
    render_sections,
    sections_of,
)
from ctxengine.tokens.counter import fits

if TYPE_CHECKING:
    from ctxengine.llm import LLMClient

log = logging.getLogger("ctxengine.compaction")

NOTES_LAYER = "session_notes"
MEMORY_FLUSH_LAYER = "memory_flush"


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


# a runner is waited for as the thread only when its ``waited`` attribute is true (module docstring)
NotesRunner = Callable[["NotesJob", NotesUpdater], "Future[NotesOutcome]"]


class _FactsOnlyUpdater:
    """The $0 notes update standing in for a model that declines to send: the facts folded, the
    model's last document dropped so the notes render from the (current) facts."""

    def update(self, state: NotesState, new: Sequence[Message]) -> tuple[NotesState, NotesUpdate]:
        nxt = fold(copy_state(state), new)
        nxt.text = ""
        nxt.updates += 1
        return nxt, NotesUpdate()


_FACTS_ONLY = _FactsOnlyUpdater()


def run_notes_update(updater: NotesUpdater, job: NotesJob, count_text: Callable[[str], int]) -> NotesOutcome:
    """Compute a notes update (pure: reads ``job`` and calls the updater, which copies the notes
    it is given; changes nothing else, so it may run on a worker thread). Never raises: a
    rejected reply or an LLM error is an outcome without notes."""
    try:
        nxt, spent = updater.update(job.notes, job.new)
    except NotesError as exc:
        return NotesOutcome(None, _notes_event(f"{job.why}: update rejected", {"error": str(exc)}, exc.cost))
    except Exception as exc:  # an LLM error: the notes stay as they were
        return NotesOutcome(None, notes_failed(job.why, f"{type(exc).__name__}: {exc}"))
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


def notes_failed(why: str, error: str, reason: str = "update failed") -> LayerEvent:
    """The event of an update of ``why`` that made no notes (``error`` in its details)."""
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


class SessionNotes:
    """The compactor's session notes (a mixin of ``Compactor``; see the module doc): the notes,
    their cadence, the background update, and the flushes before a compaction."""

    policy: Policy
    count_text: Callable[[str], int]
    llm: LLMClient | None
    compactions: int

    def _init_notes(self, policy: Policy, llm_model: ModelInfo | None) -> None:
        """The notes state of a new session (``self.llm`` and ``self.count_text`` already set)."""
        count_text = self.count_text
        self.notes = NotesState()
        self.cadence = Cadence(
            first_tokens=policy.notes_first_tokens,
            every_tokens=policy.notes_every_tokens,
            every_tool_calls=policy.notes_every_tool_calls,
        )
        self.notes_from = 0  # history index of the first message not yet in the notes
        self.background_notes = False  # cadence updates on a worker thread (see the class doc)
        self.notes_job: NotesJob | None = None  # the background update running or not yet applied
        self.notes_runner: NotesRunner | None = None  # runs background updates instead of a thread
        self._gave_up: NotesJob | None = None  # a running update already waited for in vain
        self.notes_events: list[LayerEvent] = []  # events of background updates applied, to report
        # a rehearsal of the next compaction runs (``compaction.rehearse``): no flush, no wait
        self.rehearsing = False
        self.updater: NotesUpdater = (
            LLMNotesUpdater(
                self.llm,
                count_text,
                window=llm_model.input_window if llm_model else 200_000,
                max_tokens=min(4_096, llm_model.max_output)
                if llm_model and llm_model.max_output > 0
                else 4_096,
            )
            if self.llm
            else DeterministicNotesUpdater(count_text)
        )
        self._flushed_at = -1
        self._rendered: tuple[int, str] = (-1, "")
        self._within: tuple[tuple[int, int], str] = ((-1, -1), "")

    def maybe_update_notes(self, history: Sequence[Message], conversation_tokens: int) -> LayerEvent | None:
        """Update the notes when the cadence says so (``after_turn``). In line: returns the
        event. In the background (``background_notes``): starts the update on a worker thread
        and returns None (its event comes from ``settle_notes``); skipped while one runs."""
        if not SessionMemory.of(self.policy).enabled or not self.cadence.due(conversation_tokens):
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
        if (
            self.rehearsing
            or not SessionMemory.of(self.policy).enabled
            or not self.await_notes()
            or self.notes_from >= len(history)
        ):
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

    @property
    def llm_declines(self) -> bool:
        """The model client declines to send (its run-wide breaker is open: ``GuardedClient``
        after consecutive connection, timeout, auth, server or rate-limit failures): it is as
        if there were no model, and the notes and summaries are the $0 ones until it reopens."""
        return self.llm is not None and bool(getattr(self.llm, "open", False))

    def _current_updater(self) -> NotesUpdater:
        """The notes updater for an update now: the $0 one while the model declines to send
        (``DeterministicNotesUpdater``; the LLM updater folds the facts at every update, so they
        are current, and the notes are rendered from them), else ``self.updater``."""
        if self.llm_declines:
            return _FACTS_ONLY
        return self.updater

    def _update_notes(self, history: Sequence[Message], why: str) -> LayerEvent | None:
        """An update in line: computed and applied now."""
        job = self._notes_job(history, why)
        if job is None:
            return None
        return self._apply_notes(job, run_notes_update(self._current_updater(), job, self.count_text))

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
        updater, count = self._current_updater(), self.count_text
        if self.notes_runner is not None:
            job.future = self.notes_runner(job, updater)
        else:
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
            runner = self.notes_runner
            if not wait or (runner is not None and not getattr(runner, "waited", False)):
                return False  # a queue's outcome is never waited for (module docstring)
            bound = self.notes_wait_s()
            done, _ = wait_for([job.future], timeout=bound)
            if not done:
                log.warning("the notes update still runs after %.0f s; going on without it", bound)
                return False
        self.notes_job = None
        try:
            outcome = job.future.result()
        except BaseException as exc:  # run_notes_update does not raise; kept as an event anyway
            outcome = NotesOutcome(None, notes_failed(job.why, f"{type(exc).__name__}: {exc}"))
        self.notes_events.append(self._apply_notes(job, outcome))
        return True

    def await_notes(self) -> bool:
        """Before the notes are used: wait for the background update and apply it (a no-op in
        line). False when it is still running after ``notes_wait_s`` (no second update may
        start then; the notes are used as they are). An update waited for in vain is not waited
        for again (the flushes and the compaction chain each ask). A rehearsal (``rehearsing``)
        neither waits nor applies: False."""
        if self.rehearsing:
            return False
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
            notes_failed(job.why, "the session ended while the update was running", "update abandoned")
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

    def notes_within(self, max_tokens: int) -> str:
        """The notes cut to ``max_tokens`` (longest sections first, each keeping its valuable
        end, as the notes' own cap does); the notes themselves when they fit."""
        text = self.notes_text()
        if not text or fits(self.count_text, text, max_tokens):
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
            while not fits(self.count_text, out, max_tokens):
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
