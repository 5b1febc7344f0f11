"""A node's background jobs in a child process of its own (``ProcessJobs``): the queue of a node
without Redis (``--store DIR``, or PostgreSQL alone).

A notes update is pure Python (the $0 updater folds the whole new history: ~20 ms for the first
update of a 150,000-token session). Run on a thread of the node (``jobs.LocalJobs``) it holds the
interpreter's lock while the session's next request is served: a request that arrives meanwhile
waits for it at each of its hand-offs between threads (the proxy's own time of such a request went
from ~5 ms to 15-40 ms). In a child process it runs beside the node, on another core, at a lower
priority (``NICE``: on a machine whose cores are busy it takes their idle time, not a request's).

The child reads the job's snapshot from the store and writes its outcome there (``jobs.run_job``,
as every worker does: the store is the only channel), under the node's worker name (``ran_by``);
the node counts and logs what it reports (``JobWorker.account``). Jobs run one at a time, in the
order submitted. The child is started by ``start`` (the proxy's start-up, which waits for it: starting it
takes the node's event loop ~30 ms and its imports ~0.3 s, not a request's time),
from a fresh interpreter (``spawn``: the node's threads are not forked). When it cannot be started
or dies (``BrokenProcessPool``), the node says so once and runs that job and the later ones on its
own thread (``LocalJobs``), as before.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import multiprocessing
import os
from collections.abc import Sequence
from concurrent.futures import Future, ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from typing import Any

from ctxengine.models.registry import Registry
from ctxengine.proxy.job_index import JobIndex
from ctxengine.proxy.jobs import JOB_WAIT_S, JobKey, JobStats, JobWorker, LocalJobs
from ctxengine.store.base import StoreError
from ctxengine.tokens.encoders import encoder

log = logging.getLogger("ctxengine.proxy")

SQLITE, POSTGRES = "sqlite", "postgres"
NICE = 10  # the child's niceness above the node's (a CPU share ~1/10 of the node's when both run)
START_WAIT_S = 10.0  # how long the proxy's start-up waits for the child to be ready
_CHILD: list[JobWorker] = []  # the child's worker (set by ``_start_child``)


def _start_child(kind: str, where: str, registry: Registry | None, name: str) -> None:
    """The child's initializer: below the node's requests in the scheduler's eyes (``NICE``: on
    a busy machine a job takes the cores' idle time, not a request's), its own connection to the
    node's store, and a worker."""
    os.nice(NICE)
    if kind == SQLITE:
        from ctxengine.proxy.local import LocalStore

        store: Any = LocalStore(where)
    else:
        from ctxengine.store.postgres import PostgresStore

        store = PostgresStore(where, max_size=1, synchronous_commit=False)
    _CHILD.append(JobWorker(JobIndex(store), registry, name, JobStats()))
    encoder()  # the tokenizer (0.07-0.15 s) built now, not by the first job (as ``warm.warm_start``)


def _ready() -> None:
    """Nothing: submitted by ``ProcessJobs.start`` so that the child starts then."""


def _run_in_child(key: JobKey) -> tuple[str | None, str | None]:
    """Run ``key``'s job in the child: (the status written, None), or (None, the store's error)."""
    from ctxengine.proxy.jobs import run_job

    worker = _CHILD[0]
    try:
        return run_job(worker.index, key, worker.count_for, worker.name), None
    except StoreError as exc:
        return None, str(exc)


class ProcessJobs:
    """Jobs run in a child process (see the module docstring).

    Args:
        worker: the node's worker: its name is written in the jobs the child runs, its stats
            count them; it runs them on the node's thread after a fallback.
        kind: ``SQLITE`` or ``POSTGRES``; where: the store's file or URL (the child opens it).
    """

    def __init__(self, worker: JobWorker, kind: str, where: str) -> None:
        self.worker, self.stats = worker, worker.stats
        self.local = LocalJobs(worker)  # once the child cannot run
        self._args = (kind, where, worker.registry, worker.name)
        self._pool: ProcessPoolExecutor | None = None
        self._broken: str | None = None
        self._running: dict[JobKey, asyncio.Future[None]] = {}

    async def submit(self, keys: Sequence[JobKey]) -> None:
        for key in keys:
            if self._broken is not None:
                await self.local.submit([key])
                continue
            try:
                future = self._executor().submit(_run_in_child, key)
            except (BrokenProcessPool, OSError, RuntimeError) as exc:
                self._fall_back(exc)
                await self.local.submit([key])
                continue
            done = asyncio.ensure_future(self._outcome(key, future))
            self._running[key] = done
            done.add_done_callback(functools.partial(self._forget, key))

    def _forget(self, key: JobKey, done: asyncio.Future[None]) -> None:
        if self._running.get(key) is done:
            del self._running[key]

    async def settled(self, key: JobKey, timeout: float = JOB_WAIT_S) -> bool:
        done = self._running.get(key)
        if done is None:
            return await self.local.settled(key, timeout)
        finished, _ = await asyncio.wait({done}, timeout=timeout)
        return bool(finished) and await self.local.settled(key, timeout)  # run again there: the child died

    def _executor(self) -> ProcessPoolExecutor:
        if self._pool is None:
            self._pool = ProcessPoolExecutor(
                max_workers=1,
                mp_context=multiprocessing.get_context("spawn"),
                initializer=_start_child,
                initargs=self._args,
            )
        return self._pool

    async def _outcome(self, key: JobKey, future: Future[tuple[str | None, str | None]]) -> None:
        """Count what the child reports of ``key``'s job; run it on the node's thread when the
        child died."""
        try:
            status, error = await asyncio.wrap_future(future)
        except BrokenProcessPool as exc:
            self._fall_back(exc)
            await self.local.submit([key])  # written once: a run the child finished changes nothing
            return
        self.worker.account(key, status, error)

    def _fall_back(self, exc: BaseException) -> None:
        if self._broken is None:
            self._broken = f"{type(exc).__name__}: {exc}"
            log.warning(
                "proxy: the job process failed (%s); this node runs its jobs on its own thread", self._broken
            )

    async def drain(self) -> None:
        """Wait until every job submitted so far has run (and been counted)."""
        while self._running:
            await asyncio.gather(*list(self._running.values()))
        await self.local.drain()

    async def start(self) -> None:
        """Start the child now and wait until it is ready (its imports, while the node warms up
        its engine thread), ``START_WAIT_S`` at most (then it goes on starting)."""
        try:
            ready = asyncio.wrap_future(self._executor().submit(_ready))
            await asyncio.wait({ready}, timeout=START_WAIT_S)
        except (BrokenProcessPool, OSError, RuntimeError) as exc:
            self._fall_back(exc)

    async def close(self) -> None:
        pool, self._pool = self._pool, None
        if pool is not None:
            await asyncio.to_thread(pool.shutdown, True)
        await self.local.close()
