"""The proxy's own work per request, stage by stage, in one process (no HTTP hop).

Run from the repository root::

    .venv/bin/python benchmarks/profile_proxy.py                       # 150,000 tokens, 60 requests
    .venv/bin/python benchmarks/profile_proxy.py --history 150000 --requests 120 --round 600

Drives ``Proxy`` the way ``Proxy.managed`` does, with ``bench_proxy.py``'s conversation (a
``--history``-token Anthropic history of tool rounds, one small tool round more per request),
minus the upstream: decode the body, parse it, find the session (hash chain), ``apply.prepare``
on the engine thread (ingest, assemble, hints, write, validate), encode; then the rehearsal of the
next compaction when due (``engine.ahead``, as ``Turn.mark_sent`` starts it while the upstream
answers) and ``apply.finish`` with the usage the engine predicted and a fixed reply, as
``Turn.complete`` does once the response has gone out (neither counted in the own time). Prints
per stage the p50 and max in ms over the requests after the first, the first request's stages,
and the requests on which a compaction ran (or that took 5x the median). ``--round`` sets the
tokens of each request's new round: its tool result, or with ``--text`` the assistant's text,
which only a compaction takes out (``--text --round 2000 --requests 200`` compacts four times);
the proxy runs with ``--store DIR`` as ``bench_proxy.py``'s does (``--memory``: without).
Prints figures; asserts nothing.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "src"))
sys.path.insert(0, str(REPO / "benchmarks"))

import bench_proxy  # noqa: E402


class Timer:
    """Stage name -> ms, for one request."""

    def __init__(self) -> None:
        self.t = time.perf_counter()
        self.ms: dict[str, float] = {}

    def lap(self, name: str) -> None:
        now = time.perf_counter()
        self.ms[name] = self.ms.get(name, 0.0) + (now - self.t) * 1000
        self.t = now


CURRENT: list[Timer] = []  # the request being timed (``_prepare_timed`` laps on it)


async def drive(
    history: int, requests: int, round_tokens: int, window: int, store: str | None, text: bool
) -> list[tuple[Timer, bool]]:
    import msgspec

    import ctxengine.proxy.apply as apply
    import ctxengine.proxy.shared as shared
    from ctxengine.messages.model import Usage
    from ctxengine.proxy.app import Proxy
    from ctxengine.proxy.config import ProxyConfig
    from ctxengine.proxy.wire import read_request
    from ctxengine.tokens.encoders import encoder

    shared.prepare = _prepare_timed  # type: ignore[assignment]  # the same calls, with laps
    proxy = Proxy(ProxyConfig(window=window, anthropic_upstream="http://127.0.0.1:9", store=store))
    if proxy.shared is not None:
        await proxy.shared.start()
    await proxy.run(encoder)  # the warm start of the app's lifespan
    wire = proxy.anthropic
    conv = bench_proxy.Conversation(1_000, history)
    rounds = bench_proxy.ROUND_TOKENS

    def body(k: int) -> bytes:
        old = bench_proxy.ROUND_TOKENS
        bench_proxy.ROUND_TOKENS = round_tokens
        try:
            new = bench_proxy._round(conv.rng, conv.sid, 10_000 + k, 20 if text else round_tokens)
            if text:  # the round's tokens in the assistant's text, which no clearing takes out
                new[0]["content"][0]["text"] = bench_proxy._text(conv.rng, round_tokens)
            conv.encoded += [bench_proxy.json.dumps(m).encode() for m in new]
        finally:
            bench_proxy.ROUND_TOKENS = old
        return bench_proxy.HEAD % (conv.sid, k) + b", ".join(conv.encoded) + b"]}"

    del rounds
    headers = {"x-api-key": "k", "user-agent": "profile"}
    out: list[tuple[Timer, bool]] = []
    reply: dict[str, Any] = {"role": "assistant", "content": [{"type": "text", "text": "ok"}]}
    for k in range(requests):
        raw = body(k)
        tm = Timer()
        CURRENT[:] = [tm]
        parsed = read_request(wire, raw)  # as Proxy.managed reads it
        tm.lap("decode+parse")
        session = await proxy.session(wire, parsed, headers)
        tm.lap("session (chain)")
        if proxy.shared is not None:
            prepared = await proxy.shared.prepare(session, wire, parsed)
            tm.lap("record the turn (store)")
        else:
            prepared = await proxy.run(_prepare_timed, session, wire, parsed)
        msgspec.json.encode(prepared.body)
        tm.lap("encode")
        compacted = bool(prepared.projection.events)
        tm.layers = sorted({e.layer for e in prepared.projection.events})  # type: ignore[attr-defined]
        tm.tokens = prepared.projection.tokens  # type: ignore[attr-defined]
        # the upstream reports what the engine predicted (a fixed figure would calibrate the ledger
        # far down, and the session would never reach the compaction threshold)
        usage = Usage(input_tokens=prepared.projection.tokens, output_tokens=5)
        t0 = time.perf_counter()  # while the upstream would answer: the rehearsal (``Turn.mark_sent``)
        await proxy.run(session.ahead.after_call, session.engine, prepared.projection.window)
        tm.ms["(rehearsal, during the upstream call)"] = (time.perf_counter() - t0) * 1000
        t0 = time.perf_counter()
        if proxy.shared is not None:
            await proxy.run(proxy.shared.finish, session, wire, prepared, 200, usage, reply)
            await proxy.shared.release(session)
        else:
            await proxy.run(apply.finish, session, wire, prepared, 200, usage, reply)
        tm.ms["(finish, after the response)"] = (time.perf_counter() - t0) * 1000
        session.lock.release()
        out.append((tm, compacted))
    await proxy.close()
    return out


def _prepare_timed(session: Any, wire: Any, request: Any) -> Any:
    """``apply.prepare`` with a lap after each stage (the same calls, in the same order)."""
    import ctxengine.proxy.apply as apply
    from ctxengine.proxy.body_memo import BodyMemo

    tm = CURRENT[0]
    tm.lap("(to the engine thread)")
    engine = session.engine
    moved = apply._take_out_moved(session, wire, request)
    realigned = session.ingested if moved else None
    new = apply._ingest(session, request, len(request.conversation), check_reply=wire)
    tm.lap("ingest")
    budget, at = apply.response_budget(engine, request.body, session.output_max), time.time()
    projection = engine.assemble(budget, now=at)
    tm.lap("assemble")
    memo = session.body_memo
    if memo is None:
        memo = session.body_memo = BodyMemo("anthropic" if wire.provider == "anthropic" else "openai")
    hinted = memo.hints.apply(engine, projection.messages)
    tm.lap("hints")
    body = wire.build(request, hinted, memo)
    apply.cap_output(body, engine.window - projection.tokens)
    tm.lap("build")
    problems = wire.validate(body, memo)
    tm.lap("validate")
    if problems:
        raise apply.InvalidProjection(problems[0])
    apply._count_events(session, projection)
    session.turns += 1
    return apply.Prepared(body, projection, new, budget=budget, at=at, realigned=realigned, moved=moved)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--history", type=int, default=150_000, help="tokens of history")
    ap.add_argument("--requests", type=int, default=60)
    ap.add_argument("--round", type=int, default=150, help="tokens of each request's new tool result")
    ap.add_argument("--window", type=int, default=200_000)
    ap.add_argument("--memory", action="store_true", help="no --store (sessions in memory only)")
    ap.add_argument(
        "--text",
        action="store_true",
        help="each new round's tokens in assistant text (compaction, not clearing, must take them)",
    )
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        store = None if args.memory else tmp  # bench_proxy.py runs the proxy with --store DIR
        runs = asyncio.run(drive(args.history, args.requests, args.round, args.window, store, args.text))
    first, later = runs[0][0], runs[1:]
    stages = list(first.ms)
    where = "in memory" if args.memory else "--store DIR"
    kind = "assistant text" if args.text else "tool results"
    print(
        f"history {args.history:,} tokens, {args.requests} requests,"
        f" rounds of {args.round} tokens of {kind}, {where}"
    )
    print(f"{'stage (ms)':34} {'first':>8} {'p50':>8} {'max':>8}")
    for s in stages:
        xs = [t.ms.get(s, 0.0) for t, _ in later]
        print(f"{s:34} {first.ms[s]:8.2f} {statistics.median(xs):8.2f} {max(xs):8.2f}")
    own = [sum(v for k, v in t.ms.items() if not k.startswith(("(finish", "(rehearsal"))) for t, _ in later]
    own_first = sum(v for k, v in first.ms.items() if not k.startswith(("(finish", "(rehearsal")))
    label = "own time (before the upstream)"
    print(f"{label:34} {own_first:8.2f} {statistics.median(own):8.2f} {max(own):8.2f}")
    own_sorted = sorted(own)
    p99 = own_sorted[min(len(own_sorted) - 1, round(0.99 * (len(own_sorted) - 1)))]
    print(f"own time p99: {p99:.2f} ms")
    slow = 5 * statistics.median(own)
    for i, (t, c) in enumerate(later, 1):
        if c or own[i - 1] > slow:
            parts = ", ".join(f"{k} {v:.1f}" for k, v in t.ms.items())
            print(f"  request {i} {t.layers} {t.tokens:,} tokens: {parts}")  # type: ignore[attr-defined]


if __name__ == "__main__":
    main()
