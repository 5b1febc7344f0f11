"""``ctxengine proxy`` as a gateway: nodes and workers on PostgreSQL + Redis, under load.

Run from the repository root, with PostgreSQL and Redis up (``CTXENGINE_TEST_POSTGRES``,
``CTXENGINE_TEST_REDIS``, default the local servers)::

    .venv/bin/python benchmarks/bench_gateway.py      # 100 sessions, 1,000 requests, at 10K and 150K
    .venv/bin/python benchmarks/bench_gateway.py --sessions 20 --requests 200 --history 10000

The loopback upstream and the conversations are ``bench_proxy``'s (each request appends one small
tool round to a history of ``--history`` tokens and sends it whole; the upstream echoes the
request's id). Each history size is run straight to the upstream, then through each layout, each
on a database of its own (created and dropped here) and one Redis:
- ``1 node x 1 worker``, ``1 node x 2 workers`` (``--workers 2``): every request to the node;
- ``2 nodes x 1 worker``: two processes on two ports, each session's requests alternating
  between them (the worst case: every request finds the session moved on by the other node);
- ``2 nodes, one killed``: as above, and halfway through node A is killed with SIGKILL (its
  process group); a request that fails on a node is retried once on the other;
- ``1 node x 2 workers, 1 killed``: halfway through one worker process is killed with SIGKILL
  (the node's router starts it again; a request that failed is retried once).
``--layouts 1x1,1x2`` runs only those (names: ``1x1 1x2 2x1 2x1-kill 1x2-kill``).
``--think-ms T`` paces the sessions as agents are paced by their model: each session starts at a
random moment of the first ``T`` ms (``--ramp-ms R``: of the first ``R`` ms, as users arrive over a
period rather than at once) and waits 0.5-1.5 x ``T`` ms (seeded) before each of its later
requests; the default (0) is a closed loop against an upstream that answers at once, where
latency is mostly queueing on the machine's cores (the direct run's own p99 is then seconds).
Paced, each layout's line is followed by the later requests sent once every session had joined
(its first request answered): the latency the gateway adds when no first request, which ingests
the session's whole history, is being served.
Figures: requests/s, latency p50 / p99 beside the direct run's (the difference is the latency
the gateway adds, queueing included), the sessions' first requests, lost requests (failed on
both nodes), invalid answers (not echoing their id), and from the store: sessions whose recorded
calls or messages fall short of what their client got answered (lost session entries), the CPU
the node's processes spent per request (ms: the node's own process, with workers its router;
then its worker processes, a killed one's CPU not counted; then the job processes that run the
sessions' notes updates), the CPU the load itself spent per
request (ms: the clients, this process; the upstream stand-in; the PostgreSQL and Redis
servers) and the load average at the end of
the run (the cores are shared with the clients, the upstream, the servers and other jobs). It
prints figures and asserts nothing.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Coroutine
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_proxy import REPO, Conversation, _free_port, _wait, pct

PG = os.environ.get("CTXENGINE_TEST_POSTGRES", "postgresql://127.0.0.1:5432/test")
REDIS = os.environ.get("CTXENGINE_TEST_REDIS", "redis://127.0.0.1:6379/0")
LAYOUTS = {
    "1 node x 1 worker": "1x1",
    "1 node x 2 workers": "1x2",
    "2 nodes x 1 worker": "2x1",
    "2 nodes, A killed halfway": "2x1-kill",
    "1 node x 2 workers, 1 killed": "1x2-kill",
}


@dataclass
class Result:
    """One run: latencies (ms) of first and later requests, retried / lost / invalid requests."""

    first: list[float] = field(default_factory=list)
    later: list[float] = field(default_factory=list)
    steady: list[float] = field(default_factory=list)  # the later requests sent once every session had joined
    retried: int = 0
    lost: int = 0
    invalid: int = 0
    wall: float = 0.0
    cpu: dict[str, float] = field(default_factory=dict)  # CPU seconds of the node's processes, by role
    load_cpu: dict[str, float] = field(default_factory=dict)  # CPU seconds of the clients and the upstream


async def clients(
    bases: list[str], work: list[Conversation], per: int, kill: Any = None, think_ms: float = 0.0,
    ramp_ms: float | None = None,
) -> Result:
    """Every session's requests in order, sessions concurrent; request ``k`` of a session goes to
    ``bases[k % len(bases)]`` and, when it fails there, once to the next; ``kill`` runs once
    half of all requests were sent; ``think_ms``, ``ramp_ms``: the pacing (module docstring)."""
    import random

    import httpx

    res, sent, total = Result(), [0], len(work) * per
    joined: list[float] = []  # when each session's first request was answered (s from the start)
    later_at: list[tuple[float, float]] = []  # each later request: when it was sent (s), its latency (ms)
    limits = httpx.Limits(max_connections=len(work) * 2 + 10)
    async with httpx.AsyncClient(timeout=120, limits=limits) as client:

        async def post(base: str, body: bytes, sid: int) -> httpx.Response | None:
            headers = {"x-api-key": f"sk-bench-gw-{sid}", "content-type": "application/json"}
            try:
                r = await client.post(base + "/v1/messages", content=body, headers=headers)
            except httpx.TransportError:
                return None
            return r if r.status_code < 500 else None

        async def session(conv: Conversation) -> None:
            rng = random.Random(conv.sid)
            for k in range(per):
                if k == 0:
                    await asyncio.sleep((think_ms if ramp_ms is None else ramp_ms) * rng.random() / 1000)
                elif think_ms:
                    await asyncio.sleep(think_ms * (0.5 + rng.random()) / 1000)
                body = conv.body(k)
                sent[0] += 1
                if kill is not None and sent[0] == total // 2:
                    kill()
                t0 = time.perf_counter()
                r = await post(bases[k % len(bases)], body, conv.sid)
                if r is None:
                    res.retried += 1
                    await asyncio.sleep(0.2)
                    r = await post(bases[(k + 1) % len(bases)], body, conv.sid)
                if r is None:
                    res.lost += 1
                    continue
                (res.first if k == 0 else res.later).append((time.perf_counter() - t0) * 1000)
                if k == 0:
                    joined.append(time.perf_counter() - start)
                else:
                    later_at.append((t0 - start, res.later[-1]))
                if r.status_code != 200 or r.json()["content"][0]["text"] != f"s{conv.sid}-r{k}":
                    res.invalid += 1

        start = time.perf_counter()
        await asyncio.gather(*(session(c) for c in work))
        res.wall = time.perf_counter() - start
    all_in = max(joined, default=0.0)
    res.steady = [ms for at, ms in later_at if at >= all_in]
    return res


def _node(up: str, store: str, workers: int, log: Path) -> tuple[str, subprocess.Popen[bytes]]:
    port = _free_port()
    cmd = [sys.executable, "-m", "ctxengine.cli.commands", "proxy", "--port", str(port), "--window", "200000",
           "--anthropic-upstream", up, "--store", store, "--redis", REDIS,
           "--workers", str(workers)]  # fmt: skip
    env = os.environ | {"PYTHONPATH": str(REPO / "src")}
    with log.open("ab") as fh:
        proc = subprocess.Popen(cmd, stdout=fh, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    _wait(port)
    return f"http://127.0.0.1:{port}", proc


def _workers_of(pid: int) -> list[int]:
    """The worker processes of the node ``pid`` (its children that ``multiprocessing`` spawned)."""
    out = []
    for d in filter(str.isdigit, os.listdir("/proc")):
        try:
            stat, cmd = Path(f"/proc/{d}/stat").read_text(), Path(f"/proc/{d}/cmdline").read_bytes()
        except OSError:
            continue
        if int(stat.rsplit(")", 1)[1].split()[1]) == pid and b"spawn_main" in cmd:
            out.append(int(d))
    return out


def _cpu_s(pid: int) -> float:
    """User + system CPU seconds of process ``pid`` so far (0 when it is gone)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _cpu(procs: list[subprocess.Popen[bytes]], workers: int) -> dict[str, float]:
    """CPU seconds so far of the nodes (with one worker: the node; with more, its router), of
    their worker processes, and of the job processes that run the sessions' notes updates (the
    node's child with one worker, each worker's child with more)."""
    out = {"node": 0.0, "workers": 0.0, "jobs": 0.0}
    for p in procs:
        out["node"] += _cpu_s(p.pid)
        children = _workers_of(p.pid)
        if workers == 1:
            out["jobs"] += sum(_cpu_s(j) for j in children)
        else:
            out["workers"] += sum(_cpu_s(w) for w in children)
            out["jobs"] += sum(_cpu_s(j) for w in children for j in _workers_of(w))
    return out


def _load_cpu(up_pid: int) -> dict[str, float]:
    """CPU seconds so far of this process (the clients), of the upstream stand-in ``up_pid`` and of
    the PostgreSQL and Redis servers' processes: what else the cores the nodes share are doing
    (a PostgreSQL backend that exited during the run is not counted)."""
    import resource

    own = resource.getrusage(resource.RUSAGE_SELF)
    servers = 0.0
    for d in filter(str.isdigit, os.listdir("/proc")):
        try:
            comm = Path(f"/proc/{d}/comm").read_text().strip()
        except OSError:
            continue
        if comm.startswith(("postgres", "redis-server")):
            servers += _cpu_s(int(d))
    return {"clients": own.ru_utime + own.ru_stime, "upstream": _cpu_s(up_pid), "servers": servers}


def _measured(up_pid: int, run: Coroutine[Any, Any, Result]) -> Result:
    """The result of the clients' run ``run``, with the CPU the load spent during it."""
    before = _load_cpu(up_pid)
    res = asyncio.run(run)
    res.load_cpu = {k: v - before[k] for k, v in _load_cpu(up_pid).items()}
    return res


def _database() -> tuple[str, str]:
    import psycopg

    name = f"ctxbench_{os.getpid()}_{time.time_ns() % 10**8}"
    with psycopg.connect(PG, autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {name}".encode())
    return name, PG.rsplit("/", 1)[0] + "/" + name


def _drop(name: str) -> None:
    """Drop the database ``name`` and its nodes' job queue in Redis."""
    import psycopg
    import redis

    from ctxengine.proxy.jobs_redis import STREAM_PREFIX, namespace

    with psycopg.connect(PG, autocommit=True) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)".encode())
    redis.Redis.from_url(REDIS).delete(STREAM_PREFIX + namespace(PG.rsplit("/", 1)[0] + "/" + name))


def _short(store: str, per: int, retried: int) -> int:
    """Sessions whose recorded calls or messages fall short of what their client was answered."""
    import psycopg

    with psycopg.connect(store) as conn:
        rows = conn.execute("SELECT calls, messages FROM ctx_proxy_sessions WHERE NOT dropped").fetchall()
    return sum(1 for calls, _ in rows if calls < per - retried)


def layout(
    up: str, up_pid: int, history: int, sessions: int, per: int, nodes: int, workers: int, kill: bool,
    think_ms: float = 0.0, ramp_ms: float | None = None,
) -> Result:  # fmt: skip
    name, store = _database()
    logs, hung = Path(f"/tmp/{name}"), False
    logs.mkdir()
    procs: list[subprocess.Popen[bytes]] = []
    try:
        bases = []
        for i in range(nodes):
            base, proc = _node(up, store, workers, logs / f"node{i}.log")
            bases.append(base)
            procs.append(proc)
        killer = None
        if kill and workers > 1:  # one worker process of the node, not the node

            def killer() -> None:
                os.kill(_workers_of(procs[0].pid)[0], signal.SIGKILL)

        elif kill:
            killer = lambda: os.killpg(procs[0].pid, signal.SIGKILL)  # noqa: E731
        work = [Conversation(s, history) for s in range(sessions)]
        before = _cpu(procs, workers)
        res = _measured(up_pid, clients(bases, work, per, killer, think_ms, ramp_ms))
        res.cpu = {k: v - before[k] for k, v in _cpu(procs, workers).items()}
        res.invalid += _short(store, per, res.retried)
        return res
    finally:
        for p in procs:
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGTERM)
                try:
                    p.wait(timeout=60)
                except subprocess.TimeoutExpired:  # a request that never ends: said, then killed
                    print(f"a node did not stop in 60 s (its log is kept: {logs}); killed", file=sys.stderr)
                    hung = True
                    os.killpg(p.pid, signal.SIGKILL)
                    p.wait(timeout=30)
        _drop(name)
        if not hung:
            shutil.rmtree(logs, ignore_errors=True)


def steady(r: Result, direct: Result) -> None:
    """The later requests sent once every session had joined (its first request answered), beside
    the direct run's: what the gateway adds when no session's first request is being served."""
    if not r.steady or not direct.steady:
        print(f"{'  once every session joined':30} no request was sent after the last session joined")
        return
    p50, p99 = (pct(r.steady, q) - pct(direct.steady, q) for q in (0.5, 0.99))
    print(
        f"{'  once every session joined':30} {len(r.steady):8} {pct(r.steady, 0.5):8.1f} "
        f"{pct(r.steady, 0.99):8.1f} {p50:8.1f} {p99:8.1f}   (requests, p50, p99, added p50/p99)"
    )


def line(label: str, r: Result, n: int, direct: Result | None) -> None:
    added = ""
    if direct is not None:
        p50, p99 = (pct(r.later, q) - pct(direct.later, q) for q in (0.5, 0.99))
        added = f"{p50:8.1f} {p99:8.1f}"
    cpu = " ".join(
        f"{1000 * r.cpu[k] / n:6.1f}" if r.cpu.get(k) else f"{'-':>6}" for k in ("node", "workers", "jobs")
    )
    load = " ".join(f"{1000 * r.load_cpu.get(k, 0.0) / n:6.1f}" for k in ("clients", "upstream", "servers"))
    print(
        f"{label:30} {n / r.wall:8.1f} {pct(r.later, 0.5):8.1f} {pct(r.later, 0.99):8.1f} {added:17} "
        f"{pct(r.first, 0.5):8.0f} {pct(r.first, 1.0):8.0f} {r.retried:7} {r.lost:5} {r.invalid:7} "
        f"{cpu:20} {load:20} {os.getloadavg()[0]:5.1f}"
    )


def ceiling(one: Result, two: Result, n: int) -> str:
    """What the machine's cores allow ``1 node x 2 workers`` beside ``1 node x 1 worker``, from
    the CPU each spent per request, and what the runs reached.

    One worker runs on one core at most: at most ``1000 / w1`` requests/s (``w1``: its CPU ms per
    request; its job process ``j1`` runs beside it). Two workers, their router, their job
    processes and the load (clients, upstream, servers) share the machine's ``c`` cores: at most
    ``1000 c / (w2 + r + j2 + o)``. The ratio of the two is the most that adding a worker can give
    here; it falls as the proxy gets cheaper beside the load."""
    cores = os.cpu_count() or 1
    w1 = 1000 * one.cpu["node"] / n
    o1 = 1000 * (sum(one.load_cpu.values()) + one.cpu["jobs"]) / n
    total = 1000 * (sum(two.cpu.values()) + sum(two.load_cpu.values())) / n
    cap1 = min(1000 / w1, 1000 * cores / (w1 + o1))
    cap2 = 1000 * cores / total
    return (
        f"ceiling on {cores} cores from the CPU per request: 1x1 <= {cap1:.1f} req/s (reached "
        f"{n / one.wall / cap1:.0%}), 1x2 <= {cap2:.1f} req/s (reached {n / two.wall / cap2:.0%}); "
        f"1x2 / 1x1 <= {cap2 / cap1:.2f}, measured {one.wall / two.wall:.2f}"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sessions", type=int, default=100)
    ap.add_argument("--requests", type=int, default=1_000)
    ap.add_argument("--history", type=int, action="append", help="tokens of history (repeatable)")
    ap.add_argument("--layouts", help=f"only these layouts, comma-separated: {', '.join(LAYOUTS.values())}")
    ap.add_argument("--think-ms", type=float, default=0.0, help="pace the sessions (module docstring)")
    ap.add_argument("--ramp-ms", type=float, help="sessions start within this many ms (default: --think-ms)")
    args = ap.parse_args()
    per = max(2, args.requests // args.sessions)
    n = per * args.sessions
    port = _free_port()
    up = subprocess.Popen(
        [sys.executable, str(REPO / "benchmarks" / "bench_proxy.py"), "--serve-upstream", str(port)]
    )
    try:
        _wait(port)
        up_url = f"http://127.0.0.1:{port}"
        print(f"machine: {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f}")
        for history in args.history or [10_000, 150_000]:
            what = f"{args.sessions} concurrent sessions x {per} requests = {n:,}"
            if args.think_ms:
                what += f", paced: {args.think_ms:g} ms between a session's requests"
            if args.ramp_ms is not None:
                what += f", sessions starting within {args.ramp_ms:g} ms"
            print(f"\n## history {history:,} tokens: {what}")
            print(f"{'layout':30} {'req/s':>8} {'p50':>8} {'p99':>8} {'added p50/p99':>17} "
                  f"{'1st p50':>8} {'1st max':>8} {'retried':>7} {'lost':>5} {'invalid':>7} "
                  f"{'cpu node/workers/jobs ms':>20} "
                  f"{'clients/upstream/servers ms':>20} {'load':>5}")  # fmt: skip
            work = [Conversation(s, history) for s in range(args.sessions)]
            pace = {"think_ms": args.think_ms, "ramp_ms": args.ramp_ms}
            direct = _measured(up.pid, clients([up_url], work, per, **pace))
            line("direct to the upstream", direct, n, None)
            runs: dict[str, Result] = {}
            for label, nodes, workers, kill in (
                ("1 node x 1 worker", 1, 1, False),
                ("1 node x 2 workers", 1, 2, False),
                ("2 nodes x 1 worker", 2, 1, False),
                ("2 nodes, A killed halfway", 2, 1, True),
                ("1 node x 2 workers, 1 killed", 1, 2, True),
            ):
                if args.layouts and LAYOUTS[label] not in args.layouts.split(","):
                    continue
                res = layout(up_url, up.pid, history, args.sessions, per, nodes, workers, kill,
                             args.think_ms, args.ramp_ms)  # fmt: skip
                line(label, res, n, direct)
                runs[LAYOUTS[label]] = res
                if args.think_ms:
                    steady(res, direct)
            if not args.think_ms and "1x1" in runs and "1x2" in runs:
                print(ceiling(runs["1x1"], runs["1x2"], n))
    finally:
        up.terminate()
        up.wait(timeout=30)


if __name__ == "__main__":
    main()
