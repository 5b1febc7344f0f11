"""``ctxengine proxy``: the latency it adds and its throughput, beside the parse-and-reserialize
floor of the same request bodies.

Run from the repository root::

    .venv/bin/python benchmarks/bench_proxy.py      # 50 sessions, 2,000 requests, at 10K and 150K
    .venv/bin/python benchmarks/bench_proxy.py --sessions 10 --requests 200 --history 10000

Three processes: a loopback upstream (Starlette + uvicorn, this script with ``--serve-upstream``:
it answers every Anthropic request at once with a short JSON message that echoes the request's
``metadata.user_id``, and reports the body's bytes / 4 as its input tokens, about what a provider
counts: the engine's ledger calibrates on it; a fixed 1,000 made the engine take its context for
1,000 tokens after the first request, so that nothing cleared or compacted after it), the proxy
(``python -m ctxengine.cli.commands proxy --window 200000``, the code of this tree) and the
clients (this process: ``--sessions`` concurrent sessions over httpx, each sending its requests
one after another, ``--requests`` in all). A session starts with
``--history`` tokens of tool rounds (2,500-token results of code-like text) and appends one small
tool round per request (``--round-tokens``, 150; with ``--text-rounds`` the round's tokens are in
the assistant's text, which only a compaction takes out: the latency run then compacts, and the
proxy's own time of each request that did is shown), sending everything so far each time, as an
agent does.

Each history size has two runs, each made straight to the upstream and then through the proxy
with the same bodies:
- the *latency run*: one session, ``--sequential`` requests one after another, so nothing
  queues: end-to-end latency p50/p99 of each, their difference (the latency the proxy adds), and
  the proxy's own time before the upstream call (from its log lines, ``added=``); and, beside
  them, the same requests through a bare pass-through on the proxy's stack (Starlette + uvicorn
  in, httpx out, no engine): what the extra HTTP hop alone adds;
- the *load run*: ``--sessions`` concurrent sessions, ``--requests`` in all: requests/s and
  latencies, which at this concurrency are mostly queueing (a closed loop of 50 clients on two
  cores), and every response must echo its request's id (no request lost or answered out of
  order).
The floor is decoding and re-encoding each body of the load run once, with msgspec (what the
proxy uses) and with the stdlib ``json``, single-threaded in this process. The first request of a
session ingests its whole history into a new engine; it is shown apart. It prints figures and asserts nothing.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import re
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "src"))

WORDS = "def return self value config path load save index token cache window result error test parse".split()  # noqa: SIM905
ROUND_TOKENS = 2_500
NEW_ROUND = {"tokens": 150, "text": False}  # each request's new round (``--round-tokens``, ``--text-rounds``)
CHARS_PER_TOKEN = 4
HEAD = b'{"model": "claude-sonnet-4-6", "max_tokens": 256, "metadata": {"user_id": "s%d-r%d"}, "messages": ['


def serve_upstream(port: int) -> None:
    """The loopback upstream (runs in its own process)."""
    import uvicorn
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import JSONResponse
    from starlette.routing import Route

    async def messages(request: Request) -> JSONResponse:
        raw = await request.body()
        body = json.loads(raw)
        rid = (body.get("metadata") or {}).get("user_id", "")
        # about what a provider counts (the engine's ledger calibrates on it)
        usage = {"input_tokens": len(raw) // CHARS_PER_TOKEN, "output_tokens": 5}
        return JSONResponse(
            {
                "id": "msg",
                "type": "message",
                "role": "assistant",
                "model": body["model"],
                "content": [{"type": "text", "text": rid}],
                "stop_reason": "end_turn",
                "stop_sequence": None,
                "usage": usage,
            }
        )

    app = Starlette(routes=[Route("/v1/messages", messages, methods=["POST"])])
    uvicorn.run(app, host="127.0.0.1", port=port, log_level="warning", access_log=False)


def serve_passthrough(port: int, up_url: str) -> None:
    """A bare pass-through on the proxy's stack (Starlette + uvicorn in, httpx out) that forwards
    each body and the key unchanged, with no engine: what one more HTTP hop costs on this stack
    (runs in its own process)."""
    import httpx
    import uvicorn
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import Response
    from starlette.routing import Route

    client = httpx.AsyncClient(base_url=up_url, timeout=600)

    async def messages(request: Request) -> Response:
        headers = {"content-type": "application/json", "x-api-key": request.headers.get("x-api-key", "")}
        r = await client.post("/v1/messages", content=await request.body(), headers=headers)
        return Response(r.content, status_code=r.status_code, media_type="application/json")

    app = Starlette(routes=[Route("/v1/messages", messages, methods=["POST"])])
    uvicorn.run(app, host="127.0.0.1", port=port, log_level="warning", access_log=False)


def _text(rng: random.Random, tokens: int) -> str:
    lines = []
    for i in range(tokens * CHARS_PER_TOKEN // 60):
        comment = " ".join(rng.sample(WORDS, 4))
        lines.append(
            f"    {rng.choice(WORDS)}_{i} = {rng.choice(WORDS)}({rng.randint(0, 99999)})  # {comment}"
        )
    return "\n".join(lines)


def _round(rng: random.Random, sid: int, n: int, tokens: int) -> list[dict[str, Any]]:
    cid = f"toolu_{sid}_{n}"
    return [
        {
            "role": "assistant",
            "content": [
                {"type": "text", "text": f"Reading part {n}."},
                {"type": "tool_use", "id": cid, "name": "Read", "input": {"file_path": f"src/mod_{n}.py"}},
            ],
        },
        {
            "role": "user",
            "content": [{"type": "tool_result", "tool_use_id": cid, "content": _text(rng, tokens)}],
        },
    ]


class Conversation:
    """One session's request bodies: the history grows by one small round per request. Bodies are
    joined from messages encoded once, so that making them costs the clients next to nothing
    (150K-token bodies for 2,000 requests would not fit in memory made in advance). The same
    ``sid`` gives the same bodies."""

    def __init__(self, sid: int, history: int) -> None:
        self.sid, self.rng = sid, random.Random(sid)
        msgs: list[dict[str, Any]] = [{"role": "user", "content": "Refactor src/app/loader.py."}]
        for n in range(max(1, history // ROUND_TOKENS)):
            msgs += _round(self.rng, sid, n, ROUND_TOKENS)
        self.encoded = [json.dumps(m).encode() for m in msgs]

    def body(self, k: int) -> bytes:
        tokens, text = int(NEW_ROUND["tokens"]), bool(NEW_ROUND["text"])
        new = _round(self.rng, self.sid, 10_000 + k, 20 if text else tokens)
        if text:  # the round's tokens in the assistant's text, which no clearing takes out
            new[0]["content"][0]["text"] = _text(self.rng, tokens)
        self.encoded += [json.dumps(m).encode() for m in new]
        return HEAD % (self.sid, k) + b", ".join(self.encoded) + b"]}"


def floor(history: int, sessions: int, per: int) -> dict[str, list[float]]:
    """Decode + re-encode each body once (ms): msgspec (what the proxy uses) and stdlib json;
    and each body's size (KB)."""
    import msgspec

    out: dict[str, list[float]] = {"msgspec": [], "json": [], "kb": []}
    for sid in range(sessions):
        conv = Conversation(sid, history)
        for k in range(per):
            raw = conv.body(k)
            t0 = time.perf_counter()
            msgspec.json.encode(msgspec.json.decode(raw))
            t1 = time.perf_counter()
            json.dumps(json.loads(raw)).encode()
            t2 = time.perf_counter()
            out["msgspec"].append((t1 - t0) * 1000)
            out["json"].append((t2 - t1) * 1000)
            out["kb"].append(len(raw) / 1000)
    return out


async def run_clients(
    base: str, work: list[Conversation], per: int
) -> tuple[list[float], list[float], int, float]:
    """Send every session's bodies (sessions concurrent, each in order). Returns latencies (ms) of
    first and later requests, the number of responses that did not echo their id, and wall s."""
    import httpx

    first: list[float] = []
    later: list[float] = []
    wrong = 0
    limits = httpx.Limits(max_connections=len(work) + 10)
    async with httpx.AsyncClient(base_url=base, timeout=600, limits=limits) as client:

        async def session(conv: Conversation) -> None:
            nonlocal wrong
            sid = conv.sid
            for k in range(per):
                body = conv.body(k)
                t0 = time.perf_counter()
                try:
                    r = await client.post(
                        "/v1/messages",
                        content=body,
                        headers={"x-api-key": f"sk-bench-{sid}", "content-type": "application/json"},
                    )
                except httpx.TransportError as exc:  # a lost request: counted, not retried
                    print(f"session {sid} request {k}: {type(exc).__name__}: {exc}", file=sys.stderr)
                    wrong += 1
                    continue
                (first if k == 0 else later).append((time.perf_counter() - t0) * 1000)
                if r.status_code != 200 or r.json()["content"][0]["text"] != f"s{sid}-r{k}":
                    wrong += 1

        t0 = time.perf_counter()
        await asyncio.gather(*(session(conv) for conv in work))
        return first, later, wrong, time.perf_counter() - t0


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _wait(port: int) -> None:
    for _ in range(300):
        try:
            socket.create_connection(("127.0.0.1", port), 0.2).close()
            return
        except OSError:
            time.sleep(0.1)
    raise RuntimeError(f"nothing listens on port {port}")


def pct(xs: list[float], q: float) -> float:
    if not xs:
        return float("nan")
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))]


@dataclass
class Run:
    """One client run (ms): latencies of first and later requests, the proxy's own times from
    its log (empty when direct), wrong or lost responses, fail-open lines, wall seconds."""

    first: list[float]
    later: list[float]
    own: list[float]
    wrong: int
    fail_open: int
    wall: float
    compacting: list[float] = field(default_factory=list)  # own times of the requests that compacted


def through_proxy(up_url: str, work: list[Conversation], per: int) -> Run:
    """The clients through a fresh proxy process (``ctxengine proxy --window 200000 --store``)."""
    with tempfile.TemporaryDirectory() as tmp:
        port = _free_port()
        logf = Path(tmp) / "proxy.log"
        cmd = [
            sys.executable,
            "-m",
            "ctxengine.cli.commands",
            "proxy",
            "--port",
            str(port),
            "--window",
            "200000",
            "--anthropic-upstream",
            up_url,
            "--store",
            str(Path(tmp) / "store"),
        ]
        with logf.open("w") as fh:
            env = os.environ | {"PYTHONPATH": str(REPO / "src")}
            proxy = subprocess.Popen(cmd, stdout=fh, stderr=subprocess.STDOUT, env=env)
            try:
                _wait(port)
                first, later, wrong, wall = asyncio.run(run_clients(f"http://127.0.0.1:{port}", work, per))
            finally:
                proxy.terminate()
                proxy.wait(timeout=30)
        log_text = logf.read_text()
    errors = [line for line in log_text.splitlines() if "ERROR" in line or "Traceback" in line]
    if errors:
        print(f"the proxy logged {len(errors)} error line(s), e.g. {errors[0][:200]}")
    own = [float(x) for x in re.findall(r"added=([\d.]+)ms", log_text)]
    compacting = [
        float(a)
        for layers, a in re.findall(r"layers=\[([^\]]*)\] added=([\d.]+)ms", log_text)
        if "compact" in layers
    ]
    return Run(first, later, own, wrong, log_text.count("fail open"), wall, compacting)


def through_passthrough(up_url: str, work: list[Conversation], per: int) -> Run:
    """The clients through a bare pass-through process (``serve_passthrough``)."""
    port = _free_port()
    cmd = [sys.executable, __file__, "--serve-passthrough", str(port), "--upstream", up_url]
    server = subprocess.Popen(cmd)
    try:
        _wait(port)
        first, later, wrong, wall = asyncio.run(run_clients(f"http://127.0.0.1:{port}", work, per))
    finally:
        server.terminate()
        server.wait(timeout=30)
    return Run(first, later, [], wrong, 0, wall)


def direct(up_url: str, work: list[Conversation], per: int) -> Run:
    first, later, wrong, wall = asyncio.run(run_clients(up_url, work, per))
    return Run(first, later, [], wrong, 0, wall)


def row(label: str, xs: list[float]) -> None:
    print(f"{label:52} {pct(xs, 0.5):9.1f} {pct(xs, 0.99):9.1f}")


def one_size(history: int, sessions: int, requests: int, sequential: int, up_url: str) -> None:
    """The load run (``sessions`` concurrent) and the latency run (one session, ``sequential``
    requests), each direct and through the proxy, and the floor of the load run's bodies."""
    per = max(1, requests // sessions)
    load_d = direct(up_url, [Conversation(s, history) for s in range(sessions)], per)
    load_p = through_proxy(up_url, [Conversation(s, history) for s in range(sessions)], per)
    seq_d = direct(up_url, [Conversation(1_000, history)], sequential)
    seq_p = through_proxy(up_url, [Conversation(1_000, history)], sequential)
    seq_b = through_passthrough(up_url, [Conversation(1_000, history)], sequential)
    measured = floor(history, sessions, per)
    n = sessions * per
    print(f"\n## history {history:,} tokens (mean body {statistics.mean(measured['kb']):,.0f} KB)")
    print(f"{'figure (ms)':52} {'p50':>9} {'p99':>9}")
    print(f"latency run: one session, {sequential} requests one after another (first request left out)")
    row("  direct to upstream, end to end", seq_d.later)
    row("  through the proxy, end to end", seq_p.later)
    added = [pct(seq_p.later, q) - pct(seq_d.later, q) for q in (0.5, 0.99)]
    print(f"{'  added latency (proxy - direct)':52} {added[0]:9.1f} {added[1]:9.1f}")
    row("  proxy's own time before the upstream call", seq_p.own[1:])
    row("  through a bare pass-through (no engine), end to end", seq_b.later)
    bare = [pct(seq_b.later, q) - pct(seq_d.later, q) for q in (0.5, 0.99)]
    print(f"{'  added by the bare pass-through (its - direct)':52} {bare[0]:9.1f} {bare[1]:9.1f}")
    print(f"  first request (new session, whole history ingested): {seq_p.first[0]:,.1f} ms")
    if seq_p.compacting:
        shown = ", ".join(f"{x:.1f}" for x in seq_p.compacting)
        print(f"  own time of the {len(seq_p.compacting)} request(s) that compacted: {shown} ms")
    print(f"load run: {sessions} concurrent sessions x {per} requests = {n:,}")
    row("  direct, end to end (first requests left out)", load_d.later)
    row("  proxied, end to end (first requests left out)", load_p.later)
    row("  proxied, the sessions' first requests", load_p.first)
    row("  proxy's own time before the upstream call (all)", load_p.own)
    print(f"  requests/s: direct {n / load_d.wall:,.1f}, through the proxy {n / load_p.wall:,.1f}")
    lost = load_p.wrong + seq_p.wrong
    print(
        f"  wrong or lost responses: {lost} (direct: {load_d.wrong + seq_d.wrong}); "
        f"fail-open requests: {load_p.fail_open + seq_p.fail_open}"
    )
    print("floor, the load run's bodies, one at a time")
    row("  msgspec decode + encode (what the proxy uses)", measured["msgspec"])
    row("  stdlib json loads + dumps", measured["json"])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sessions", type=int, default=50)
    ap.add_argument("--requests", type=int, default=2_000)
    ap.add_argument("--history", type=int, action="append", help="tokens of history (repeatable)")
    ap.add_argument("--sequential", type=int, default=40, help="requests of the latency run")
    ap.add_argument("--round-tokens", type=int, default=150, help="tokens of each request's new round")
    ap.add_argument(
        "--text-rounds",
        action="store_true",
        help="each new round's tokens in the assistant's text (compaction, not clearing, must take them)",
    )
    ap.add_argument("--serve-upstream", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--serve-passthrough", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--upstream", help=argparse.SUPPRESS)
    args = ap.parse_args()
    NEW_ROUND.update(tokens=args.round_tokens, text=args.text_rounds)
    if args.serve_passthrough:
        serve_passthrough(args.serve_passthrough, args.upstream)
        return
    if args.serve_upstream:
        serve_upstream(args.serve_upstream)
        return
    port = _free_port()
    up = subprocess.Popen([sys.executable, __file__, "--serve-upstream", str(port)])
    try:
        _wait(port)
        print(f"machine: {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f}")
        for history in args.history or [10_000, 150_000]:
            one_size(history, args.sessions, args.requests, args.sequential, f"http://127.0.0.1:{port}")
    finally:
        up.terminate()
        up.wait(timeout=30)


if __name__ == "__main__":
    main()
