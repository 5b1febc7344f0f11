"""Background jobs of the proxy's sessions on a store (``--store``): session-notes updates computed
by a worker, their outcome recorded in the store and applied at a later request of the session.

The engine side (``QueuedNotes``, the compactor's ``notes_runner``): the engine's cadence starts a
notes update in ``after_turn`` (on the engine thread); instead of a thread of its own, the runner
keeps the job, the proxy labels it with the session's turn and stores its snapshot with the
turn's answer (``NotesInput``; ``job_index``), then submits its key (``JobKey``) to the queue. At
each later request of the session (on any node) the proxy reads the job's row: once a worker has
written its outcome, it resolves the job's future before ``prepare``, the engine applies it in
that turn's ``assemble``, and the turn's record says so (``applied_turn``); a node replaying the
session resolves it before replaying the same turn. Until then requests go on with the notes as
they are (the $0 layers): none waits for a job.

The worker side (``JobWorker``): reads a job's snapshot, computes the update (the $0 updater of
``summary.notes``, as the engine's own: the proxy's engines have no model), writes the outcome
once (``done``, or ``failed`` with the error in its event: the session's notes then stay as they
were and its next cadence tries again); the proxy's worker does that work in a process of its own
(``job_process``), so that no request waits on it for the interpreter's lock. Queues:
``LocalJobs`` (a thread of the node: one node, no Redis, or Redis down) and
``jobs_redis.RedisJobs`` (a Redis stream every node's worker reads).
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import os
import secrets
import socket
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, Protocol

import msgspec

from ctxengine.compaction.notes import NOTES_LAYER, NotesJob, NotesOutcome, run_notes_update
from ctxengine.engine.core import ContextEngine
from ctxengine.layers.base import LayerEvent
from ctxengine.messages.model import Message
from ctxengine.models.registry import Registry
from ctxengine.proxy.job_index import DONE, FAILED, QUEUED, JobIndex
from ctxengine.store.base import StoreError
from ctxengine.summary.notes import DeterministicNotesUpdater, NotesState, NotesUpdater
from ctxengine.tokens import counter_for

log = logging.getLogger("ctxengine.proxy")

NOTES = "notes"  # the kind of a session-notes update
WRITTEN, MISSING = "written already", "missing"  # a run that wrote nothing: another run had, no such job
WARNED_MAX = 1_000  # failed jobs remembered so that each is logged once


def worker_name() -> str:
    """This process's worker name (``ran_by``; a Redis consumer): host, pid and a random part."""
    return f"{socket.gethostname()}-{os.getpid()}-{secrets.token_hex(3)}"


class JobKey(msgspec.Struct, frozen=True):
    """A job: the session, the turn whose upkeep started it, its kind."""

    session: str
    turn: int
    kind: str = NOTES


class NotesInput(msgspec.Struct):
    """A notes update's snapshot (``compaction.NotesJob``) and the model whose tokens it counts."""

    model: str
    why: str
    new: list[Message]
    notes: NotesState
    end: int
    tokens: int | None
    tool_calls: int


class StoredOutcome(msgspec.Struct):
    """A job's outcome as stored: the new notes (None: failed, they stay as they were), its event."""

    state: NotesState | None
    event: LayerEvent


_INPUT = msgspec.msgpack.Decoder(NotesInput)
_OUTCOME = msgspec.msgpack.Decoder(StoredOutcome)


def decode_outcome(data: bytes) -> NotesOutcome:
    """A stored outcome (``StoredOutcome``'s msgpack) as the engine applies it."""
    out = _OUTCOME.decode(data)
    return NotesOutcome(out.state, out.event)


@dataclasses.dataclass
class JobStats:
    """A node's job figures, in the totals of ``GET /ctxengine/sessions``."""

    jobs_queued: int = 0  # submitted by this node's requests
    jobs_run: int = 0  # run by this node's worker (outcome written)
    jobs_failed: int = 0  # run here and failed: no notes made, or the store refused the outcome
    jobs_applied: int = 0  # outcomes applied at this node's requests
    jobs_run_locally: int = 0  # run on this node's thread because the Redis queue failed
    jobs_requeued: int = 0  # submitted again: still queued long after their turn
    job_process_restarts: int = 0  # the node's job process failed and was replaced (``job_process``)


class JobQueue(Protocol):
    """Where a node submits jobs and runs them (``LocalJobs``, ``jobs_redis.RedisJobs``)."""

    stats: JobStats

    async def submit(self, keys: Sequence[JobKey]) -> None:
        """Queue jobs whose rows are stored. Never raises (a failing queue falls back, loudly)."""
        ...

    async def start(self) -> None:
        """Start this node's worker, if it runs one."""
        ...

    async def close(self) -> None:
        """Stop the worker (a job it runs is finished first) and release the connections."""
        ...


class QueuedNotes:
    """The ``notes_runner`` of an engine on a job queue (see the module docstring). ``fresh``: the
    job the last ``after_turn`` started; ``pending``: the turn that started the job the engine
    waits for, and the job's future."""

    def __init__(self, model: str) -> None:
        self.model = model
        self.fresh: tuple[NotesJob, Future[NotesOutcome]] | None = None
        self.pending: tuple[int, Future[NotesOutcome]] | None = None

    def __call__(self, job: NotesJob, updater: NotesUpdater) -> Future[NotesOutcome]:
        future: Future[NotesOutcome] = Future()
        self.fresh = (job, future)
        return future

    def take_fresh(self, turn: int) -> NotesJob | None:
        """The job started by turn ``turn``'s upkeep, if any; it is pending from now on."""
        if self.fresh is None:
            return None
        job, future = self.fresh
        self.fresh, self.pending = None, (turn, future)
        return job

    @property
    def waiting(self) -> int | None:
        """The turn of the job whose outcome the engine waits for (None: none)."""
        if self.pending is None or self.pending[1].done():
            return None
        return self.pending[0]

    def resolve(self, turn: int, outcome: NotesOutcome) -> None:
        """Hand the outcome of turn ``turn``'s job to the engine (applied at its next step).
        Raises ``RuntimeError`` when the engine waits for another job (its state is not the
        store's)."""
        if self.waiting != turn or self.pending is None:
            raise RuntimeError(f"the engine waits for the job of turn {self.waiting}, not of turn {turn}")
        future, self.pending = self.pending[1], None
        future.set_result(outcome)


def attach(engine: ContextEngine, model: str) -> QueuedNotes | None:
    """Make ``engine``'s background notes updates go through a job queue (None: an engine with a
    model keeps its thread: the queue's workers run the $0 updater only)."""
    if engine.llm is not None:
        return None
    runner = QueuedNotes(model)
    engine.compactor.notes_runner = runner
    return runner


def runner_of(engine: ContextEngine) -> QueuedNotes | None:
    """The engine's ``QueuedNotes``, if it has one."""
    runner = engine.compactor.notes_runner
    return runner if isinstance(runner, QueuedNotes) else None


def encode_input(job: NotesJob, model: str) -> bytes:
    """A notes job's snapshot as stored."""
    return msgspec.msgpack.encode(
        NotesInput(model, job.why, list(job.new), job.notes, job.end, job.tokens, job.tool_calls)
    )


def run_job(index: JobIndex, key: JobKey, count_for: Callable[[str], Callable[[str], int]], name: str) -> str:
    """Run ``key``'s job and write its outcome (as ``name``): returns the status this run wrote
    (``done``, ``failed``), ``WRITTEN`` when another run had written it, ``MISSING`` when there is
    no such job. A job whose snapshot cannot be computed is written ``failed`` with the error.
    Raises ``StoreError`` when the store fails (the job stays queued)."""
    row = index.load(key.session, key.turn, key.kind)
    if row is None:
        return MISSING
    status, data = row
    if status != QUEUED:
        return WRITTEN
    try:
        outcome = fold_input(data, count_for)
    except Exception as exc:  # a snapshot this worker cannot read: the session must not wait for ever
        outcome = NotesOutcome(None, failed_event(key, f"{type(exc).__name__}: {exc}"))
    return _write(index, key, outcome, name)


def fold_input(data: bytes, count_for: Callable[[str], Callable[[str], int]]) -> NotesOutcome:
    """The outcome of the notes update whose snapshot is ``data`` (``encode_input``): the $0
    updater of ``summary.notes``, counting with ``count_for(model)``. Raises what decoding a
    snapshot that is not one raises (``msgspec.DecodeError``, ``msgspec.ValidationError``)."""
    inp = _INPUT.decode(data)
    count = count_for(inp.model)
    job = NotesJob(inp.why, inp.new, inp.notes, inp.end, inp.tokens, inp.tool_calls)
    return run_notes_update(DeterministicNotesUpdater(count), job, count)


def encode_outcome(outcome: NotesOutcome) -> bytes:
    """An outcome as stored (``StoredOutcome``'s msgpack; ``decode_outcome`` reads it)."""
    return msgspec.msgpack.encode(StoredOutcome(outcome.state, outcome.event))


def give_up(index: JobIndex, key: JobKey, why: str, name: str) -> str:
    """Write ``key``'s job ``failed`` without running it (``why``: the error in its event), unless
    its outcome is written already (then ``WRITTEN``). Raises ``StoreError``."""
    return _write(index, key, NotesOutcome(None, failed_event(key, why)), name)


def failed_event(key: JobKey, error: str) -> LayerEvent:
    """The event of a job that made no notes (the engine reports it as an update's)."""
    return LayerEvent(
        layer=NOTES_LAYER, reason=f"{key.kind}: update failed", tokens_before=0, tokens_after=0,
        details={"error": error},
    )  # fmt: skip


def _write(index: JobIndex, key: JobKey, outcome: NotesOutcome, name: str) -> str:
    status = DONE if outcome.state is not None else FAILED
    stored = encode_outcome(outcome)
    if not index.complete(key.session, key.turn, key.kind, status, stored, name, time.time()):
        return WRITTEN
    return status


class Counters:
    """Token counters by model name, as the engines of ``registry`` count (None: the built-in
    table): ``counters(model)`` is the ``count_text`` of ``counter_for`` its entry."""

    def __init__(self, registry: Registry | None) -> None:
        self._registry = registry or Registry.default()
        self._counters: dict[str, Callable[[str], int]] = {}

    def __call__(self, model: str) -> Callable[[str], int]:
        if model not in self._counters:
            self._counters[model] = counter_for(self._registry.get(model)).count_text
        return self._counters[model]


class RunElsewhere(Protocol):
    """Where a worker's jobs run when not on its own thread (``job_process.JobProcess``)."""

    def start(self) -> object: ...

    def run(self, key: JobKey, give_up_why: str | None = None) -> str: ...

    def close(self) -> None: ...


class JobWorker:
    """Runs jobs for one node (``run_job``), counting them in ``stats`` and logging each failed
    job once. ``name``: written in the jobs it runs (``ran_by``); ``elsewhere``: where the jobs'
    work runs (``job_process.JobProcess``; None: on the caller's thread)."""

    def __init__(
        self, index: JobIndex, registry: Registry | None, name: str, stats: JobStats,
        elsewhere: RunElsewhere | None = None,
    ) -> None:  # fmt: skip
        self.index, self.name, self.stats = index, name, stats
        self.elsewhere = elsewhere
        self.count_for = Counters(registry)
        self._warned: set[JobKey] = set()

    def run(self, key: JobKey, give_up_why: str | None = None) -> str:
        """Run one job on this thread (see ``run_job``; ``give_up_why``: write it failed instead,
        ``give_up``), uncounted. Raises ``StoreError``."""
        if give_up_why is not None:
            return give_up(self.index, key, give_up_why, self.name)
        return run_job(self.index, key, self.count_for, self.name)

    def execute(self, key: JobKey, give_up_why: str | None = None) -> str:
        """Run one job (``run``, ``elsewhere`` when given), counted when this run wrote it.
        Raises ``StoreError``."""
        try:
            if self.elsewhere is not None:
                status = self.elsewhere.run(key, give_up_why)
            else:
                status = self.run(key, give_up_why)
        except StoreError as exc:
            self._failed(key, f"its outcome could not be stored: {exc}")
            raise
        if status == FAILED:
            self._failed(key, "the update made no notes (the session's notes stay as they were)")
        elif status == DONE:
            self.stats.jobs_run += 1
        return status

    def start(self) -> None:
        """Start where the jobs run (``elsewhere``) ahead of the first job, without waiting."""
        if self.elsewhere is not None:
            self.elsewhere.start()

    def close(self) -> None:
        """Stop where the jobs run (``elsewhere``), once the job it runs is finished."""
        if self.elsewhere is not None:
            self.elsewhere.close()

    def _failed(self, key: JobKey, why: str) -> None:
        self.stats.jobs_failed += 1
        if key in self._warned:
            return
        if len(self._warned) >= WARNED_MAX:
            self._warned.clear()
        self._warned.add(key)
        log.warning(
            "proxy: the %s job of session %s (turn %d) failed: %s", key.kind, key.session, key.turn, why
        )


class LocalJobs:
    """Jobs run on a thread of this node, one at a time, in the order submitted."""

    def __init__(self, worker: JobWorker) -> None:
        self.worker = worker
        self.stats = worker.stats
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="ctxengine-jobs")
        self._running: set[Future[Any]] = set()

    async def submit(self, keys: Sequence[JobKey]) -> None:
        for key in keys:
            future = self._pool.submit(self._execute, key)
            self._running.add(future)
            future.add_done_callback(self._running.discard)

    def _execute(self, key: JobKey) -> None:
        try:
            self.worker.execute(key)
        except StoreError:  # counted and logged by the worker; the job stays queued
            pass
        except Exception:  # a bug: counted, said each time with its traceback; the job stays queued
            self.stats.jobs_failed += 1
            log.exception("proxy: the %s job of session %s (turn %d) failed", key.kind, key.session, key.turn)

    @property
    def pending(self) -> int:
        """Jobs submitted and not yet run (or running)."""
        return len(self._running)

    async def drain(self) -> None:
        """Wait until every job submitted so far has run."""
        while self._running:
            for future in list(self._running):
                await asyncio.wrap_future(future)

    async def start(self) -> None:
        self.worker.start()

    async def close(self) -> None:
        await asyncio.to_thread(self._pool.shutdown, True)
        await asyncio.to_thread(self.worker.close)
