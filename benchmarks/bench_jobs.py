"""The proxy's background jobs (session-notes updates) under load: how long they wait in the
queue, how many turns a session goes on without their outcome, and what they weigh.

Run from the repository root, with PostgreSQL and Redis up (``CTXENGINE_TEST_POSTGRES``,
``CTXENGINE_TEST_REDIS``, default the local servers)::

    .venv/bin/python benchmarks/bench_jobs.py                      # 20 sessions x 10 requests
    .venv/bin/python benchmarks/bench_jobs.py --sessions 50 --requests 500 --history 150000

Two ``ctxengine proxy`` nodes (``--store postgresql://... --redis ...``, each with its job
worker) on a database of their own, each session's requests alternating between them, the
conversations and loopback upstream of ``bench_gateway`` / ``bench_proxy`` (each request appends
one small tool round to a history of ``--history`` tokens). After the run, from the store's
``ctx_proxy_jobs``: jobs queued, done, failed, still queued; queue latency (from the turn's
answer stored to the outcome written, ms: p50 / p99 / max); turns a job's session went on
without it (the turn that applied it less the turn that started it: 1 is the next request);
the size of its stored snapshot (KB: p50 / max); the share the nodes' workers ran. Beside them
the requests/s and latency p50 / p99 of the requests after a session's first (ms). It prints
figures and asserts nothing.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import signal
import subprocess
import sys
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_gateway import _database, _drop, _node, clients
from bench_proxy import REPO, Conversation, _free_port, _wait, pct


def _jobs(store: str) -> list[tuple[int, int | None, str, float, float | None, int, str | None]]:
    """Every job: turn, applied turn, status, created, finished (Unix s), snapshot bytes, worker."""
    import psycopg

    with psycopg.connect(store) as conn:
        return [
            tuple(r)  # type: ignore[misc]
            for r in conn.execute(
                "SELECT turn, applied_turn, status, created, finished, input_bytes, ran_by "
                "FROM ctx_proxy_jobs"
            ).fetchall()
        ]


def run(up: str, history: int, sessions: int, per: int) -> None:
    name, store = _database()
    logs = Path(f"/tmp/{name}")
    logs.mkdir()
    procs: list[subprocess.Popen[bytes]] = []
    try:
        bases = []
        for i in range(2):
            base, proc = _node(up, store, 1, logs / f"node{i}.log")
            bases.append(base)
            procs.append(proc)
        work = [Conversation(s, history) for s in range(sessions)]
        res = asyncio.run(clients(bases, work, per))
        asyncio.run(asyncio.sleep(2))  # the last jobs run
        jobs = _jobs(store)
    finally:
        for p in procs:
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGTERM)
                p.wait(timeout=60)
        _drop(name)
        shutil.rmtree(logs, ignore_errors=True)
    n = sessions * per
    status = Counter(j[2] for j in jobs)
    waits = [1000 * (j[4] - j[3]) for j in jobs if j[4] is not None]
    pending = [float(j[1] - j[0]) for j in jobs if j[1] is not None]
    sizes = [j[5] / 1024 for j in jobs]
    workers = Counter(j[6] for j in jobs if j[6] is not None)
    share = " / ".join(f"{100 * c / max(1, sum(workers.values())):.0f}%" for _, c in workers.most_common())
    print(f"requests: {n:,}, {n / res.wall:.1f}/s, latency after the first p50 {pct(res.later, 0.5):.1f} ms, "
          f"p99 {pct(res.later, 0.99):.1f} ms, lost {res.lost}, invalid {res.invalid}")  # fmt: skip
    print(f"jobs: {len(jobs)} queued, {status['done']} done, {status['failed']} failed, "
          f"{status['queued']} still queued; {len(pending)} applied")  # fmt: skip
    print(
        f"queue latency ms: p50 {pct(waits, 0.5):.1f}, p99 {pct(waits, 0.99):.1f}, max {pct(waits, 1.0):.1f}"
    )
    print(f"turns without the outcome: p50 {pct(pending, 0.5):.0f}, max {pct(pending, 1.0):.0f}")
    print(f"snapshot KB: p50 {pct(sizes, 0.5):.1f}, max {pct(sizes, 1.0):.1f}; run by the workers: {share}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sessions", type=int, default=20)
    ap.add_argument("--requests", type=int, default=200)
    ap.add_argument("--history", type=int, action="append", help="tokens of history (repeatable)")
    args = ap.parse_args()
    per = max(2, args.requests // args.sessions)
    port = _free_port()
    up = subprocess.Popen(
        [sys.executable, str(REPO / "benchmarks" / "bench_proxy.py"), "--serve-upstream", str(port)]
    )
    try:
        _wait(port)
        print(f"machine: {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f}")
        for history in args.history or [10_000, 150_000]:
            what = f"{args.sessions} sessions x {per} requests"
            print(f"\n## 2 nodes x 1 worker, history {history:,} tokens: {what}")
            run(f"http://127.0.0.1:{port}", history, args.sessions, per)
    finally:
        up.terminate()
        up.wait(timeout=30)


if __name__ == "__main__":
    main()
