"""Opening a node's sessions on a store (``SharedSessions``): on PostgreSQL shared by every node
(``open_shared``, locks and jobs in Redis when given), or on the node's own SQLite file
(``open_local``), each with its queue of background jobs (``jobs``)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from ctxengine.models.registry import Registry
from ctxengine.proxy.job_index import JobIndex
from ctxengine.proxy.jobs import JobQueue, JobStats, JobWorker, LocalJobs, worker_name
from ctxengine.proxy.sessions import SessionTable
from ctxengine.proxy.shared import MakeEngine, Run, SharedSessions
from ctxengine.store.url import is_postgres_url

if TYPE_CHECKING:
    from ctxengine.proxy.config import ProxyConfig
    from ctxengine.proxy.index import IndexStore


@dataclass
class JobOptions:
    """The node's job queue: the registry its worker counts tokens with (the engines' own),
    whether this node takes jobs from a Redis queue (False: other nodes' workers run them), and
    whether its worker runs them in a process of its own (``job_process``; False: on its thread:
    ``ProxyConfig.job_process``)."""

    registry: Registry | None = None
    run_worker: bool = True
    process: bool = False


def job_queue(store: IndexStore, redis: str | None, options: JobOptions) -> JobQueue:
    """The queue of a node on ``store``: in the Redis at ``redis`` (shared by the store's nodes),
    else on a thread of the node; the jobs' work in the node's job process (``options.process``,
    a store another process can open: not ``:memory:``)."""
    name, stats = worker_name(), JobStats()
    elsewhere = None
    if options.process and store.url != ":memory:":
        from ctxengine.proxy.job_process import JobProcess

        elsewhere = JobProcess(store.url, options.registry, name, stats)
    worker = JobWorker(JobIndex(store), options.registry, name, stats, elsewhere)
    if redis is None:
        return LocalJobs(worker)
    from ctxengine.proxy.jobs_redis import RedisJobs, namespace

    return RedisJobs(redis, namespace(store.url), worker, run_worker=options.run_worker)


def open_shared(
    url: str, redis: str | None, table: SessionTable, run: Run, make_engine: MakeEngine,
    jobs: JobOptions | None = None,
) -> SharedSessions:  # fmt: skip
    """The shared sessions of a node on the PostgreSQL store at ``url``, locked across nodes in
    the Redis at ``redis`` (None: this node's locks only), their background notes updates queued
    there too (``jobs``: None, no queue: updates in line or on the engine's own thread).
    Connects lazily (nothing raises while a server is down). Raises ``ImportError`` without the
    ``gateway`` extra."""
    from ctxengine.proxy.locks import LocalLocks, RedisLocks, SessionLocks
    from ctxengine.store.postgres import PostgresStore

    locks: SessionLocks = RedisLocks(redis) if redis else LocalLocks()
    # as the SQLite store's synchronous=NORMAL: a crash of the server may lose the last commits,
    # which the client's next request (the whole conversation) brings back
    store = PostgresStore(url, synchronous_commit=False)
    queue = job_queue(store, redis, jobs) if jobs is not None else None
    return SharedSessions(store, locks, table, run, make_engine, jobs=queue)


def open_local(
    path: Path, table: SessionTable, run: Run, make_engine: MakeEngine, jobs: JobOptions | None = None
) -> SharedSessions:
    """The sessions of a node on its own SQLite file at ``path`` (``--store DIR``): found,
    continued after a restart and reported as a shared store's, with the process's own locks
    and a job queue on a thread of the node (``jobs``; None: none). Raises ``StoreError`` when
    the file cannot be opened."""
    from ctxengine.proxy.local import LocalStore, SQLiteConversationIndex
    from ctxengine.proxy.locks import LocalLocks

    store = LocalStore(path)
    index = SQLiteConversationIndex(store)
    queue = job_queue(store, None, jobs) if jobs is not None else None
    return SharedSessions(store, LocalLocks(), table, run, make_engine, index, queue)


def open_sessions(
    config: ProxyConfig, file: str, table: SessionTable, run: Run, make_engine: MakeEngine
) -> SharedSessions | None:
    """The sessions of a proxy with ``config``: on its PostgreSQL store, on its folder's SQLite
    ``file`` (made if missing), or None without a store (the in-memory table alone). With a
    store, background notes updates are jobs whose outcomes the store records."""
    if config.store is None:
        return None
    jobs = None
    if config.background_notes:
        jobs = JobOptions(config.registry, config.job_worker, config.job_process)
    if is_postgres_url(config.store):
        return open_shared(str(config.store), config.redis, table, run, make_engine, jobs)
    Path(config.store).mkdir(parents=True, exist_ok=True)  # the node's own file: survives a restart
    return open_local(Path(config.store) / file, table, run, make_engine, jobs)
