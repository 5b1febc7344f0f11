"""The proxy's job queue in Redis (``--redis``): a stream every node's worker reads (``RedisJobs``).

Each job key (``jobs.JobKey``; its snapshot and outcome are in the session store) is an entry of
the stream ``ctxengine:jobs:<namespace>`` (the namespace a digest of the store's URL: the nodes
of one store share a queue), read through the consumer group ``workers``: a worker claims one
entry (``XREADGROUP``), keeps its claim fresh while it runs (``XCLAIM`` to itself every third of
``CLAIM_TTL_S``), and acknowledges and deletes it once the outcome is stored. A job whose worker
died (its claim idle past ``CLAIM_TTL_S``) is claimed again by the next free worker
(``XAUTOCLAIM``) and run again; the outcome is written once (``job_index``), so a job run twice
changes nothing the second time. A job claimed more than ``MAX_DELIVERIES`` times (it kills its
workers) is written ``failed`` instead of run again, so that its session's notes move on. Redis
unreachable: the node runs its jobs on its own thread (``jobs.LocalJobs``), with one warning per
outage; its worker tries again every second.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from ctxengine.proxy.jobs import JobKey, JobWorker, LocalJobs
from ctxengine.proxy.outage import Outage
from ctxengine.store.base import StoreError

log = logging.getLogger("ctxengine.proxy")

STREAM_PREFIX = "ctxengine:jobs:"
GROUP = "workers"
CLAIM_TTL_S = 30.0  # a claim not renewed for this long is a dead worker's: the job is taken again
MAX_DELIVERIES = 5  # a job whose workers died this many times is written failed, not run again
BLOCK_MS = 1_000  # a worker's wait for a new job, per read
RETRY_S = 1.0  # a worker's pause after Redis or the store failed


def namespace(store_url: str) -> str:
    """The queue's name for the nodes of the store at ``store_url`` (a digest: no credential)."""
    return hashlib.sha256(store_url.encode()).hexdigest()[:16]


class RedisJobs:
    """The queue in the Redis at ``url`` (see the module docstring).

    Args:
        url: ``redis://HOST:PORT/N``.
        name: the stream's namespace (``namespace(store_url)``).
        worker: runs the jobs this node takes (and those it runs itself while Redis is down).
        run_worker: whether this node takes jobs from the stream (False: other nodes' workers do).
        claim_ttl_s: how long a claim lasts without renewal (seconds).
    """

    def __init__(
        self, url: str, name: str, worker: JobWorker, run_worker: bool = True,
        claim_ttl_s: float = CLAIM_TTL_S,
    ) -> None:  # fmt: skip
        import redis.asyncio as aredis

        self.url, self.stream, self.worker = url, STREAM_PREFIX + name, worker
        self.stats = worker.stats
        self.run_worker, self.claim_ttl_s = run_worker, claim_ttl_s
        self.local = LocalJobs(worker)  # while Redis is down
        self.outage = Outage(
            f"the job queue (Redis at {url.split('@')[-1]})",
            "this node runs its sessions' jobs on its own thread until it is back",
        )
        self._redis = aredis.Redis.from_url(url, socket_connect_timeout=2, socket_timeout=5)
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="ctxengine-job-worker")
        self._task: asyncio.Task[None] | None = None
        self._stop = asyncio.Event()
        self._grouped = False

    async def submit(self, keys: Sequence[JobKey]) -> None:
        from redis.exceptions import RedisError

        for i, key in enumerate(keys):
            try:
                await self._redis.xadd(self.stream, {"s": key.session, "t": key.turn, "k": key.kind})
            except RedisError as exc:
                self.outage.failed(exc)
                self.stats.jobs_run_locally += len(keys) - i
                await self.local.submit(keys[i:])
                return
        self.outage.ok()

    async def start(self) -> None:
        if self.run_worker and self._task is None:
            self.worker.start()
            self._task = asyncio.ensure_future(self._work())

    async def close(self) -> None:
        self._stop.set()
        if self._task is not None:
            with contextlib.suppress(asyncio.CancelledError, TimeoutError):
                await asyncio.wait_for(self._task, timeout=BLOCK_MS / 1000 + 10)
        with contextlib.suppress(Exception):  # forgotten once it holds no claim (a claim goes with it)
            name = self.worker.name
            if not await self._redis.xpending_range(self.stream, GROUP, "-", "+", 1, consumername=name):
                await self._redis.xgroup_delconsumer(self.stream, GROUP, name)
        await self.local.close()
        await asyncio.to_thread(self._pool.shutdown, True)
        await self._redis.aclose()

    async def _work(self) -> None:
        """Take and run jobs until ``close``."""
        from redis.exceptions import RedisError

        while not self._stop.is_set():
            try:
                taken = await self.take()
                if taken is not None:
                    await self.run(*taken)
                self.outage.ok()
            except Exception as exc:  # Redis or the store failed (said once), or a bug (said each time)
                if isinstance(exc, RedisError):
                    self._grouped = False
                    self.outage.failed(exc)
                elif not isinstance(exc, StoreError):  # the worker logged a store failure once
                    log.exception("proxy: the job worker failed; it goes on")
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._stop.wait(), timeout=RETRY_S)

    async def take(self) -> tuple[str, JobKey, str | None] | None:
        """Claim one job: a dead worker's first (its claim expired), else a new one (waiting
        ``BLOCK_MS`` at most). Returns its entry id, key, and why to give it up (None: run it;
        claimed more than ``MAX_DELIVERIES`` times), None when there is none. Raises
        ``RedisError``."""
        if not self._grouped:
            await self._group()
        ms = int(self.claim_ttl_s * 1000)
        claimed: Any = await self._redis.xautoclaim(self.stream, GROUP, self.worker.name, ms, "0-0", count=1)
        entries = [e for e in claimed[1] if e[1]]  # an entry deleted meanwhile comes back empty
        if entries:
            entry: Any = entries[0]
            pending: Any = await self._redis.xpending_range(self.stream, GROUP, entry[0], entry[0], 1)
            times = int(pending[0]["times_delivered"]) if pending else 0
            why = f"its workers died {times - 1} times while it ran" if times > MAX_DELIVERIES else None
            return _text(entry[0]), _key(entry[1]), why
        read: Any = await self._redis.xreadgroup(
            GROUP, self.worker.name, {self.stream: ">"}, count=1, block=BLOCK_MS
        )
        entries = [e for _, got in read or [] for e in got if e[1]]
        if not entries:
            return None
        entry = entries[0]
        return _text(entry[0]), _key(entry[1]), None

    async def run(self, entry: str, key: JobKey, give_up_why: str | None = None) -> None:
        """Run a claimed job (its claim renewed meanwhile; ``give_up_why``: write it failed
        instead), then acknowledge and delete it. Raises ``StoreError`` (the job stays claimed:
        taken again once the claim expires) or ``RedisError``."""
        stop = asyncio.Event()
        keep = asyncio.ensure_future(self._keep(entry, stop))
        loop = asyncio.get_running_loop()
        try:
            await loop.run_in_executor(self._pool, self.worker.execute, key, give_up_why)
        finally:
            stop.set()
            await keep
        await self._redis.xack(self.stream, GROUP, entry)
        await self._redis.xdel(self.stream, entry)

    async def _keep(self, entry: str, stop: asyncio.Event) -> None:
        """Renew the claim of ``entry`` every third of ``claim_ttl_s`` until ``stop``."""
        from redis.exceptions import RedisError

        while True:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), timeout=self.claim_ttl_s / 3)
            if stop.is_set():
                return
            try:
                await self._redis.xclaim(self.stream, GROUP, self.worker.name, 0, [entry], justid=True)
            except RedisError as exc:  # the job may be taken again: its outcome is written once
                log.warning("proxy: could not renew the claim of job %s: %s", entry, exc)

    async def _group(self) -> None:
        from redis.exceptions import ResponseError

        try:
            await self._redis.xgroup_create(self.stream, GROUP, id="0", mkstream=True)
        except ResponseError as exc:
            if "BUSYGROUP" not in str(exc):
                raise
        self._grouped = True


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _key(fields: dict[Any, Any]) -> JobKey:
    got = {_text(k): _text(v) for k, v in fields.items()}
    return JobKey(got["s"], int(got["t"]), got["k"])
