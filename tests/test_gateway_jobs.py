"""The proxy's background jobs (session-notes updates) on the real servers: queued in Redis, run
by any node's worker, their outcome recorded in PostgreSQL and applied at a later request at the
turn the store says, on every node (``proxy.jobs``, ``proxy.jobs_redis``, ``proxy.job_index``).
The nodes are ``create_app`` on loopback ports (``test_gateway``); a test's own worker
(``Drainer``) runs the queued jobs when the test says, so that two runs apply them at the same
turns."""

from __future__ import annotations

import asyncio
import logging
import shutil
import signal
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Coroutine, Iterator
from pathlib import Path
from typing import Any, TypeVar

import anthropic
import httpx
import pytest

from ctxengine.proxy.app import create_app
from ctxengine.proxy.config import ProxyConfig
from ctxengine.proxy.job_index import DONE, JobIndex
from ctxengine.proxy.jobs import WRITTEN, JobKey, JobStats, JobWorker
from ctxengine.proxy.jobs_redis import MAX_DELIVERIES, STREAM_PREFIX, RedisJobs, namespace
from ctxengine.store.postgres import PostgresStore
from gateway_servers import pg_schema_url, redis_url
from proxy_servers import Upstream, serve
from test_gateway import Gateway, Node, _bodies, _gateway
from test_gateway_cli import _node as cli_node
from test_proxy import _turns

pytestmark = pytest.mark.usefixtures("clean_llm_env")
T = TypeVar("T")
TURNS = 60  # 6,000-char tool results: the notes cadence fires, and the window (32,000) is outgrown
DRAIN_AT = {9, 10, 14, 20, 21, 27, 33, 40, 41, 48, 55}  # the turns after which the queued jobs run


def _node(gw: Gateway, **config: Any) -> Node:
    cfg = ProxyConfig(
        anthropic_upstream=gw.up_url,
        openai_upstream=gw.up_url + "/v1",
        window=32_000,
        store=config.pop("store", gw.store),
        background_notes=True,
        **config,
    )
    app = create_app(cfg)
    return Node(gw.upstream, gw.stack.enter_context(serve(app)), app.state.proxy)


class Loop:
    """An event loop on a thread of its own, for the test's own Redis clients."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()

    def call(self, coro: Coroutine[Any, Any, T]) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout=60)

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(timeout=10)


class Drainer:
    """A worker of the gateway's queue that runs jobs only when asked (``drain``)."""

    def __init__(self, loop: Loop, store_url: str, name: str, claim_ttl_s: float = 30.0) -> None:
        self.loop, self.store = loop, PostgresStore(store_url)
        self.worker = JobWorker(JobIndex(self.store), None, name, JobStats())
        self.queue = loop.call(self._make(store_url, claim_ttl_s))

    async def _make(self, store_url: str, claim_ttl_s: float) -> RedisJobs:
        name = namespace(store_url)
        return RedisJobs(redis_url(), name, self.worker, run_worker=False, claim_ttl_s=claim_ttl_s)

    def drain(self) -> int:
        """Run every job queued now; returns how many."""

        async def go() -> int:
            n = 0
            while await self.queue._redis.xlen(self.queue.stream):
                taken = await self.queue.take()
                if taken is not None:
                    await self.queue.run(*taken)
                    n += 1
            return n

        return self.loop.call(go())

    def close(self) -> None:
        self.loop.call(self.queue.close())
        self.store.close()


def _forget_queue(store: str) -> None:
    """Delete the Redis stream of the nodes of ``store`` (its database is dropped after the test)."""
    import redis

    redis.Redis.from_url(redis_url()).delete(STREAM_PREFIX + namespace(store))


@pytest.fixture
def gw() -> Iterator[Gateway]:
    with _gateway() as g:
        yield g
    _forget_queue(g.store)


@pytest.fixture
def loop() -> Iterator[Loop]:
    lp = Loop()
    yield lp
    lp.close()


def _jobs(store: str) -> list[tuple[str, int, str, int | None, str | None]]:
    """Every job row: session, turn, status, applied turn, worker."""
    import psycopg

    with psycopg.connect(store) as conn:
        try:
            rows = conn.execute(
                "SELECT session, turn, status, applied_turn, ran_by FROM ctx_proxy_jobs ORDER BY turn"
            ).fetchall()
        except psycopg.errors.UndefinedTable:  # no node has used the store yet
            return []
    return [tuple(r) for r in rows]


def _run(nodes: list[Node], drainer: Drainer, turns: int = TURNS) -> None:
    for t in range(1, turns + 1):
        node = nodes[t % len(nodes)]
        assert node.ask(_turns(t, 6_000)).startswith("ok")
        node.settle()  # the turn's answer and its job are stored, the job submitted
        if t in DRAIN_AT:
            drainer.drain()


def test_jobs_apply_at_the_turns_the_store_says_on_every_node(gw: Gateway, loop: Loop) -> None:
    """One node alone, then two nodes alternating every request, the queued notes updates run by
    another worker after the same turns: every body sent upstream is the same, though the
    outcomes were applied by the node serving the turn after the drain and replayed by the other;
    jobs outstanding over several turns held no request back."""
    with _gateway() as alone:
        single = _node(alone, redis=redis_url(), job_worker=False)
        ref_worker = Drainer(loop, alone.store, "reference-worker")
        try:
            _run([single], ref_worker)
        finally:
            ref_worker.close()
        reference = _bodies(alone.upstream)
        ref_jobs = _jobs(alone.store)
    _forget_queue(alone.store)
    a = _node(gw, redis=redis_url(), job_worker=False)
    b = _node(gw, redis=redis_url(), job_worker=False)
    drainer = Drainer(loop, gw.store, "test-worker")
    try:
        _run([a, b], drainer)
    finally:
        drainer.close()
    sent = _bodies(gw.upstream)
    assert [s.problems for s in gw.upstream.seen] == [[]] * TURNS
    assert len(sent[-1]["messages"]) < len(_turns(TURNS)) // 2  # compacted
    assert sent == reference
    jobs = _jobs(gw.store)
    assert [j[1:4] for j in jobs] == [j[1:4] for j in ref_jobs]  # the same jobs, applied at the same turns
    assert len(jobs) >= 3 and {j[2] for j in jobs[:-1]} == {DONE}  # the last one may wait for a drain
    assert {j[4] for j in jobs if j[2] == DONE} == {"test-worker"}  # run by neither node
    applied = [j for j in jobs if j[3] is not None]
    assert all(j[3] > j[1] for j in applied)  # a job applies at a later turn than its own
    assert any(j[3] > j[1] + 2 for j in applied)  # queued over turns that went on without it
    # turn numbers are 0-based, the drains after 1-based turns: a job is applied at the first turn after one
    assert {j[3] for j in applied} <= {t for t in DRAIN_AT}
    totals = [n.sessions().json()["totals"] for n in (a, b)]
    assert sum(t["jobs_applied"] for t in totals) == len(applied)
    assert sum(t["jobs_queued"] for t in totals) == len(jobs)
    assert sum(t["jobs_failed"] for t in totals) == 0


def test_a_job_queued_on_one_node_is_run_by_the_other_and_applied_at_the_next_request(gw: Gateway) -> None:
    a = _node(gw, redis=redis_url(), job_worker=False)
    b = _node(gw, redis=redis_url())  # its worker takes the jobs
    t = 0
    while not _jobs(gw.store):
        t += 1
        assert t < 20, "no notes update was queued"
        a.ask(_turns(t, 6_000))
        a.settle()
    ((sid, *_),) = _jobs(gw.store)
    for _ in range(500):
        if _jobs(gw.store)[0][2] == DONE:
            break
        time.sleep(0.02)
    assert b.proxy.shared is not None and b.proxy.shared.jobs is not None
    assert _jobs(gw.store)[0][2:] == (DONE, None, b.proxy.shared.jobs.worker.name)  # type: ignore[attr-defined]
    a.ask(_turns(t + 1, 6_000))
    a.settle()
    assert _jobs(gw.store)[0][3] == t  # applied at the next request (turn numbers from 0)
    totals_a, totals_b = (n.sessions().json()["totals"] for n in (a, b))
    assert (totals_a["jobs_applied"], totals_a["jobs_run"]) == (1, 0) and totals_a["jobs_queued"] >= 1
    assert totals_b["jobs_run"] >= 1 and totals_b["jobs_failed"] == 0
    assert a.proxy.table.sessions[sid].engine.compactor.notes.updates == 1


_CLAIMER = """
import asyncio, sys, time
from ctxengine.proxy.job_index import JobIndex
from ctxengine.proxy.jobs import WRITTEN, JobKey, JobStats, JobWorker
from ctxengine.proxy.jobs_redis import RedisJobs
from ctxengine.store.postgres import PostgresStore

async def main():
    store_url, redis, name = sys.argv[1:4]
    worker = JobWorker(JobIndex(PostgresStore(store_url)), None, "doomed-worker", JobStats())
    queue = RedisJobs(redis, name, worker, run_worker=False, claim_ttl_s=1.0)
    deadline = time.monotonic() + 60
    while await queue.take() is None:
        if time.monotonic() > deadline:
            print("nothing to claim", flush=True)
            return
    print("claimed", flush=True)
    time.sleep(600)  # killed here, the job claimed and not run

asyncio.run(main())
"""


def test_a_job_claimed_by_a_worker_killed_is_run_again(gw: Gateway, loop: Loop) -> None:
    """A worker process claims the job and is killed with SIGKILL before running it: once its
    claim has expired (1 s here) another worker claims it and runs it; it runs once."""
    a = _node(gw, redis=redis_url(), job_worker=False)
    claimer = subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(_CLAIMER), gw.store, redis_url(), namespace(gw.store)],
        stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        t = 0
        while not _jobs(gw.store):
            t += 1
            assert t < 20, "no notes update was queued"
            a.ask(_turns(t, 6_000))
            a.settle()
        assert claimer.stdout is not None and claimer.stdout.readline().strip() == "claimed"
    finally:
        claimer.send_signal(signal.SIGKILL)
        claimer.wait(10)
    rescuer = Drainer(loop, gw.store, "rescuer", claim_ttl_s=1.0)
    try:
        deadline, ran = time.monotonic() + 15, 0
        while not ran and time.monotonic() < deadline:
            taken = loop.call(rescuer.queue.take())
            if taken is not None:
                loop.call(rescuer.queue.run(*taken))
                ran += 1
    finally:
        rescuer.close()
    ((_, _, status, _, ran_by),) = _jobs(gw.store)
    assert (ran, status, ran_by) == (1, DONE, "rescuer")
    a.ask(_turns(t + 1, 6_000))
    a.settle()
    assert _jobs(gw.store)[0][3] == t


def test_a_job_that_keeps_killing_its_workers_is_written_failed(gw: Gateway, loop: Loop) -> None:
    """Claimed and abandoned more than ``MAX_DELIVERIES`` times: the next worker writes it failed
    instead of running it; the session applies the failure (its notes unchanged, counted) and
    its next cadence queues a new update."""
    a = _node(gw, redis=redis_url(), job_worker=False)
    t = 0
    while not _jobs(gw.store):
        t += 1
        assert t < 20, "no notes update was queued"
        a.ask(_turns(t, 6_000))
        a.settle()
    worker = Drainer(loop, gw.store, "unlucky", claim_ttl_s=0.1)
    try:
        taken = loop.call(worker.queue.take())
        for _ in range(MAX_DELIVERIES):  # each claim abandoned: a worker that died with it
            assert taken is not None and taken[2] is None
            time.sleep(0.15)
            taken = loop.call(worker.queue.take())
        assert taken is not None and "died 5 times" in str(taken[2])
        loop.call(worker.queue.run(*taken))
    finally:
        worker.close()
    assert _jobs(gw.store)[0][2:] == ("failed", None, "unlucky")
    assert worker.worker.stats.jobs_failed == 1
    for u in range(t + 1, t + 6):
        a.ask(_turns(u, 6_000))
        a.settle()
    rows = _jobs(gw.store)
    assert rows[0][3] == t and len(rows) == 2 and rows[1][2] == "queued"  # applied; a new one queued
    engine = a.proxy.table.sessions[rows[0][0]].engine
    assert engine.compactor.notes.updates == 0


def test_a_failed_job_is_counted_in_the_totals_and_logged_once(
    gw: Gateway, loop: Loop, caplog: pytest.LogCaptureFixture
) -> None:
    """A job whose snapshot cannot be read: the worker writes it failed (the error in its event),
    its node counts it in ``jobs_failed`` and says so once (a second run writes nothing); the
    session applies the failure (notes unchanged) and goes on."""
    import psycopg

    a = _node(gw, redis=redis_url(), job_worker=False)
    t = 0
    while not _jobs(gw.store):
        t += 1
        assert t < 20, "no notes update was queued"
        a.ask(_turns(t, 6_000))
        a.settle()
    with psycopg.connect(gw.store) as conn:
        conn.execute("UPDATE ctx_proxy_jobs SET input = %s", (b"not msgpack",))
    b = _node(gw, redis=redis_url())  # its worker takes the job
    assert b.proxy.shared is not None and b.proxy.shared.jobs is not None
    worker: Any = b.proxy.shared.jobs
    with caplog.at_level(logging.WARNING, logger="ctxengine.proxy"):
        for _ in range(500):
            if _jobs(gw.store)[0][2] != "queued":
                break
            time.sleep(0.02)
        again = worker.worker.execute(JobKey(_jobs(gw.store)[0][0], t - 1))  # as after a claim expired
    assert again == WRITTEN
    assert _jobs(gw.store)[0][2] == "failed"
    said = [r.getMessage() for r in caplog.records if "job of session" in r.getMessage()]
    assert len(said) == 1 and "made no notes" in said[0]
    assert b.sessions().json()["totals"]["jobs_failed"] == 1
    a.ask(_turns(t + 1, 6_000))
    a.settle()
    assert _jobs(gw.store)[0][3] == t
    assert a.proxy.table.sessions[_jobs(gw.store)[0][0]].engine.compactor.notes.updates == 0


def test_a_job_the_queue_lost_is_submitted_again(
    gw: Gateway, loop: Loop, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Redis loses the queue (restarted empty): the session's next request finds its job still
    queued past ``REQUEUE_S`` and submits it again; a worker runs it, the request after applies it."""
    import ctxengine.proxy.shared as shared_module

    a = _node(gw, redis=redis_url(), job_worker=False)
    t = 0
    while not _jobs(gw.store):
        t += 1
        assert t < 20, "no notes update was queued"
        a.ask(_turns(t, 6_000))
        a.settle()
    worker = Drainer(loop, gw.store, "after-the-loss")
    try:
        loop.call(worker.queue._redis.delete(worker.queue.stream))  # the queue lost
        monkeypatch.setattr(shared_module, "REQUEUE_S", 0.0)
        a.ask(_turns(t + 1, 6_000))
        a.settle()
        assert a.sessions().json()["totals"]["jobs_requeued"] == 1
        assert worker.drain() == 1
    finally:
        worker.close()
    a.ask(_turns(t + 2, 6_000))
    a.settle()
    assert _jobs(gw.store)[0][2:] == (DONE, t + 1, "after-the-loss")


def test_redis_down_runs_the_jobs_on_the_node_with_one_warning(
    gw: Gateway, caplog: pytest.LogCaptureFixture
) -> None:
    """The queue's Redis is unreachable (the locks' is not): the node runs its jobs on its own
    thread, says so once (its worker failing to read the queue too), and applies them."""
    import redis.asyncio as aredis

    a = _node(gw, redis=redis_url())
    assert a.proxy.shared is not None and a.proxy.shared.jobs is not None
    jobs: Any = a.proxy.shared.jobs
    with caplog.at_level(logging.WARNING, logger="ctxengine.proxy"):
        jobs._redis = aredis.Redis.from_url("redis://127.0.0.1:1/0", socket_connect_timeout=0.5)
        time.sleep(1.5)  # the worker's read in flight on the real Redis ends; its next one fails
        for t in range(1, 13):
            assert a.ask(_turns(t, 6_000)).startswith("ok")
            a.settle()
            time.sleep(0.05)  # the local thread runs the job meanwhile
    rows = _jobs(gw.store)
    assert len(rows) >= 2 and {r[2] for r in rows} == {DONE}
    assert all(r[3] is not None for r in rows[:-1])  # applied (the last one at the next request)
    totals = a.sessions().json()["totals"]
    assert totals["jobs_run_locally"] == totals["jobs_queued"] == len(rows)
    assert totals["jobs_run"] == len(rows) and totals["store_failures"] == 0
    said = [r.getMessage() for r in caplog.records if "job queue" in r.getMessage()]
    assert len(said) == 1 and "own thread" in said[0]


def test_a_restarted_sqlite_node_applies_its_jobs_at_the_same_turns(gw: Gateway, tmp_path: Path) -> None:
    """``--store DIR`` without Redis: the jobs run on the node's thread, their outcomes recorded
    in the file. The folder is copied before each request; when a request is the first the
    session-memory compaction cuts (the notes become its summary), a new node on the copy made
    before it rebuilds the session and sends the same body."""
    first = _node(gw, store=tmp_path / "st")
    shared = first.proxy.shared
    assert shared is not None
    copy = tmp_path / "copy"
    for t in range(1, TURNS + 1):
        for _ in range(500):  # the jobs done, so that the copy holds their outcomes
            if not shared.job_index.counts().get("queued"):
                break
            time.sleep(0.02)
        with shared.store.connection() as conn:  # type: ignore[attr-defined]
            conn.execute("PRAGMA wal_checkpoint(FULL)")
        shutil.rmtree(copy, ignore_errors=True)
        shutil.copytree(tmp_path / "st", copy)
        assert first.ask(_turns(t, 6_000)).startswith("ok")
        first.settle()
        if len(_bodies(gw.upstream)[-1]["messages"]) < 2 * t + 1:
            break
    else:
        raise AssertionError("the conversation was never compacted")
    assert shared.job_index.counts().get(DONE, 0) >= 3
    second = _node(gw, store=copy)
    second.ask(_turns(t, 6_000))
    sent = _bodies(gw.upstream)
    assert sent[-1] == sent[-2]
    (s,) = second.sessions().json()["sessions"]
    assert s["calls"] == t and second.proxy.shared is not None and second.proxy.shared.rebuilt == 1


def test_worker_processes_run_and_apply_jobs_and_the_router_sums_their_figures(tmp_path: Path) -> None:
    """``ctxengine proxy --workers 2`` (the command, on the real servers): each worker process
    has a job worker; four conversations' jobs are run by them, applied at later requests, and
    the router's totals are the sums of what the store records."""
    up = Upstream()
    keys = [f"sk-test-jobs-{i}" for i in range(4)]
    with (
        pg_schema_url() as store,
        serve(up.app()) as up_url,
        cli_node(up_url, store, "--workers", "2", log=tmp_path / "w.log") as (base, _),
    ):
        for t in range(1, 13):
            for k in keys:
                c = anthropic.Anthropic(api_key=k, base_url=base, max_retries=0, timeout=60)
                c.messages.create(model="claude-sonnet-4-5", max_tokens=8, messages=_turns(t, 6_000))
        time.sleep(0.5)  # the last answers stored
        report = httpx.get(base + "/ctxengine/sessions", timeout=10).json()
        jobs = _jobs(store)
    _forget_queue(store)
    totals = report["totals"]
    assert len(jobs) >= 8 and totals["jobs_queued"] == len(jobs)
    done = [j for j in jobs if j[2] == DONE]
    assert totals["jobs_run"] == len(done) >= len(jobs) - 4 and totals["jobs_failed"] == 0
    assert totals["jobs_applied"] == len([j for j in jobs if j[3] is not None]) >= len(jobs) - 4
    pids = {int(j[4].split("-")[-2]) for j in done}
    assert pids <= set(totals["worker_pids"]), (pids, totals["worker_pids"])
