"""A node's background jobs run in a process of their own (``JobProcess``), so that no request of
the node waits for a job's work to let go of the interpreter's lock.

A session-notes job folds the session's history into its notes (30-50 ms of CPU for a history
of 150,000 tokens). On a thread of the node it held the GIL while the session's next request was
served: that request's own time was 31 ms instead of ~4 (``benchmarks/bench_proxy.py``, latency
run at 150,000 tokens, 2026-12-05; with the job not run at all, 8 ms). Here the job runs as a
worker on another node would run it: the process opens the node's store itself (the node's
SQLite file, or the PostgreSQL URL), reads the job's snapshot and writes its outcome there
(``jobs.JobWorker.run``); the node finds the outcome as it finds any worker's, in the job's row
at the session's next request. A proxy without a store has no job to record: ``ProcessNotes``
sends its engines' $0 updates to the process (the snapshot as the store's jobs hold it) and the
engine waits for the outcome where it would wait for its own thread's (``notes_in``).

Only for a process that is the proxy's own (``ctxengine proxy`` and each of its workers:
``ProxyConfig.job_process``): a process spawned from an app inside another program would import
that program's main module again. The process is started with ``spawn`` (the node runs threads,
whose locks a fork would copy),
ahead of the first job (``start``), and exits by itself when the node is gone. A process that
died between two jobs is replaced before the next; one that dies with a job (killed, out of
memory) fails it with ``StoreError``: the job stays queued and is submitted again later
(``shared.REQUEUE_S``), as after a store failure, and the session goes on with its notes as they
are meanwhile.
"""

from __future__ import annotations

import logging
import multiprocessing
import os
import threading
from collections.abc import Callable
from concurrent.futures import CancelledError, Future, ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from typing import TYPE_CHECKING, Any, TypeVar

from ctxengine.compaction.notes import NotesJob, NotesOutcome, notes_failed
from ctxengine.engine.core import ContextEngine
from ctxengine.models.registry import Registry
from ctxengine.proxy.job_index import JobIndex
from ctxengine.proxy.jobs import (
    Counters,
    JobKey,
    JobStats,
    JobWorker,
    decode_outcome,
    encode_input,
    encode_outcome,
    fold_input,
)
from ctxengine.proxy.parent_watch import exit_with_parent
from ctxengine.store.base import StoreError
from ctxengine.store.url import is_postgres_url

if TYPE_CHECKING:
    from ctxengine.proxy.config import ProxyConfig

log = logging.getLogger("ctxengine.proxy")
T = TypeVar("T")

_worker: JobWorker | None = None  # in the job process: its worker on its own store connection
_counters: Counters | None = None  # in the job process: the token counters of its updates
_unopened: str = ""  # in the job process: why its store could not be opened (each job says it)


def _open(url: str | None, registry: Registry | None, name: str, parent: int) -> None:
    """The job process's start: its token counters, and with a store (``url``) its worker on a
    connection of its own, writing the node's worker ``name`` in the jobs it runs (``ran_by``).
    A store it cannot open leaves it without a worker, the reason kept for each job's failure
    (a failing initializer would break the pool: a new process, failing again, at every job)."""
    global _worker, _counters, _unopened

    exit_with_parent(parent, 0)
    _counters = Counters(registry)
    if url is None:
        return
    try:
        if is_postgres_url(url):
            from ctxengine.store.postgres import PostgresStore

            store: object = PostgresStore(url, max_size=2, synchronous_commit=False)
        else:
            from ctxengine.proxy.local import LocalStore

            store = LocalStore(url, checkpoint=False)
    except Exception as exc:  # said by each job it is given (``_run``), which stays queued
        _unopened = f"{type(exc).__name__}: {exc}"
        return
    _worker = JobWorker(JobIndex(store), registry, name, JobStats())  # type: ignore[arg-type]


def _ready() -> int:
    return os.getpid()


def _run(key: JobKey, give_up_why: str | None) -> str:
    if _worker is None:
        raise StoreError(f"the job process could not open the store ({_unopened or 'none given'})")
    return _worker.run(key, give_up_why)


def _fold(data: bytes) -> bytes:
    if _counters is None:  # pragma: no cover - ``_open`` runs first in every process of the pool
        raise RuntimeError("the job process was not started")
    return encode_outcome(fold_input(data, _counters))


class JobProcess:
    """The job process of a node whose store is at ``url`` (a PostgreSQL URL or the node's SQLite
    file; not ``:memory:``, which another process cannot open; None: no store, the process only
    folds snapshots it is sent, ``fold``). ``registry``: the models whose tokens the jobs count
    (None: the built-in table); ``name``: the node's worker name, written in the jobs it runs
    (``ran_by``). ``ran``: jobs it ran (``run`` calls it answered); ``restarts``: processes that
    failed and were replaced, counted in ``stats`` (the node's job figures, when given:
    ``job_process_restarts``). Once ``close``d it starts no process again: a later call fails.
    Raises ``ValueError`` for ``:memory:``."""

    def __init__(
        self, url: str | None, registry: Registry | None, name: str = "", stats: JobStats | None = None
    ) -> None:
        if url == ":memory:":
            raise ValueError("an in-memory store cannot be opened by another process")
        self.url, self.registry, self.name = url, registry, name
        self.stats = stats if stats is not None else JobStats()
        self.ran = 0
        self._starting = self._closed = False
        self._pool: ProcessPoolExecutor | None = None
        self._lock = threading.Lock()

    @property
    def restarts(self) -> int:
        return self.stats.job_process_restarts

    def _executor(self) -> ProcessPoolExecutor:
        with self._lock:
            if self._closed:
                raise StoreError("the job process is closed (the proxy is stopping)")
            if self._pool is None:
                self._pool = ProcessPoolExecutor(
                    max_workers=1,
                    mp_context=multiprocessing.get_context("spawn"),
                    initializer=_open,
                    initargs=(self.url, self.registry, self.name, os.getpid()),
                )
            return self._pool

    def start_soon(self) -> None:
        """Start the process on a thread of its own, unless started already: its start (a few
        ms of the interpreter's time) is not spent on the caller's thread (the engine thread,
        which serves the next request)."""
        with self._lock:
            if self._pool is not None or self._starting:
                return
            self._starting = True
        threading.Thread(target=self.start, daemon=True, name="ctxengine-job-process-start").start()

    def start(self) -> Future[int]:
        """Start the process (its imports and store connection) without waiting for it; the
        future gives its pid (or raises, as ``fold``'s). Never raises."""
        return self._submit(_ready)[1]

    def fold(self, data: bytes) -> Future[bytes]:
        """The outcome (``jobs.encode_outcome``) of the notes update whose snapshot is ``data``
        (``jobs.encode_input``), computed in the process. Never raises: the future raises
        ``BrokenProcessPool`` when the process died with it (then replaced), ``StoreError`` when
        no process could take it (``_submit``), ``CancelledError`` when ``close`` cancelled it."""
        pool, future = self._submit(_fold, data)

        def died(done: Future[bytes]) -> None:
            if not done.cancelled() and isinstance(done.exception(), BrokenProcessPool):
                self._replace(pool, "with a notes update")

        future.add_done_callback(died)
        return future

    def run(self, key: JobKey, give_up_why: str | None = None) -> str:
        """``JobWorker.run`` of ``key`` in the process, waited for (the caller's thread blocks,
        holding no lock of the interpreter's). Raises ``StoreError`` when the store fails, or the
        process died with the job (then replaced at the next call), could not take it
        (``_submit``) or was closed before it ran."""
        pool, future = self._submit(_run, key, give_up_why)
        try:
            status = future.result()
        except BrokenProcessPool as exc:
            self._replace(pool, f"with the job of turn {key.turn} of session {key.session}")
            raise StoreError(f"the job process died ({exc})") from exc
        except CancelledError as exc:
            raise StoreError("the job process was closed before the job ran") from exc
        with self._lock:
            self.ran += 1
        return status

    def _submit(self, fn: Callable[..., T], *args: Any) -> tuple[ProcessPoolExecutor | None, Future[T]]:
        """``fn(*args)`` submitted to the process (one found dead first is replaced: the call has
        not started), with the pool it went to. Never raises: a call no process can take (the
        process cannot start: ``OSError``, or dies again at once; the pool shut down by ``close``
        meanwhile, or closed before) gives a future that raises ``StoreError`` saying why, and a
        pool that failed to start its process is replaced."""
        pool: ProcessPoolExecutor | None = None
        for _ in range(2):  # a second try when the first found the process dead
            try:
                pool = self._executor()
                return pool, pool.submit(fn, *args)
            except BrokenProcessPool as exc:  # it died between two calls (attempt 1): replaced
                self._replace(pool, "between two jobs")
                why: BaseException = exc
            except (OSError, RuntimeError, StoreError) as exc:  # cannot start a process; closed
                if pool is not None and not isinstance(exc, StoreError):
                    self._replace(pool, f"as it started ({type(exc).__name__}: {exc})")
                why = exc
                break
        failed: Future[T] = Future()
        failed.set_exception(StoreError(f"no job process can take the call ({type(why).__name__}: {why})"))
        return pool, failed

    def _replace(self, pool: ProcessPoolExecutor | None, when: str) -> None:
        with self._lock:
            if pool is None or self._pool is not pool:
                return  # replaced already (or closed)
            self._pool = None
            self.stats.job_process_restarts += 1
        pool.shutdown(wait=False)
        log.warning("proxy: the job process failed %s: started again at the next call", when)

    def close(self) -> None:
        """Stop the process once the job it runs is finished (the calls queued behind it are
        cancelled); no process is started after."""
        with self._lock:
            pool, self._pool, self._closed = self._pool, None, True
        if pool is not None:
            pool.shutdown(wait=True, cancel_futures=True)


class ProcessNotes:
    """An engine's $0 session-notes updates computed in ``process`` (the compactor's
    ``notes_runner``, ``waited``: an engine without a model, whose updater is the $0 one the
    process runs) instead of on a thread of the proxy's: the engine waits for their outcome where
    it would wait for the thread's, so that it makes the same notes at the same calls. The
    snapshot and the outcome cross as the store's jobs store them (msgpack). ``model``: the
    session's, whose tokens the update counts. An update whose process died is an update that
    failed (its event says so): the notes stay as they were and the next cadence tries again."""

    waited = True  # the compactor waits for its outcome as for its thread's

    def __init__(self, process: JobProcess, model: str) -> None:
        self.process, self.model = process, model

    def __call__(self, job: NotesJob, updater: object = None) -> Future[NotesOutcome]:
        out: Future[NotesOutcome] = Future()
        out.set_running_or_notify_cancel()

        def done(inner: Future[bytes]) -> None:
            try:
                outcome = decode_outcome(inner.result())
            except BaseException as exc:  # the process died: a failed update, said in its event
                outcome = NotesOutcome(None, notes_failed(job.why, f"{type(exc).__name__}: {exc}"))
            out.set_result(outcome)

        self.process.fold(encode_input(job, self.model)).add_done_callback(done)
        return out


def notes_process(config: ProxyConfig) -> JobProcess | None:
    """The job process of a proxy without a store that computes its engines' notes updates
    (``ProcessNotes``): None unless ``config.background_notes`` and ``config.job_process``."""
    if config.background_notes and config.job_process:
        return JobProcess(None, config.registry)
    return None


def notes_in(process: JobProcess | None, engine: ContextEngine, model: str) -> ContextEngine:
    """``engine`` with its $0 background notes updates computed in ``process`` (``ProcessNotes``;
    None, or an engine with a model or without background notes: as it was)."""
    if process is not None and engine.llm is None and engine.compactor.background_notes:
        engine.compactor.notes_runner = ProcessNotes(process, model)
        process.start_soon()
    return engine
