"""``assemble()`` per policy at 150,000 tokens of history, next to LangChain's ``trim_messages`` on
the same messages, in the same run.

Run from the repository root (the shared transcripts in ``../shared`` beside it)::

    .venv/bin/python benchmarks/bench_assemble.py
    .venv/bin/python benchmarks/bench_assemble.py --history 150000 --window 200000 --samples 40

For each policy an engine is fed the 3.6 MB Claude Code session as a live agent would (``assemble``
at every recorded model call, the response ingested after it) until its history holds the given
tokens; then ``--samples`` times: one more recorded message is ingested (not timed) and
``assemble()`` is timed. ``trim_messages`` is timed on the same history, converted to LangChain
messages once (not timed), called as a LangChain user calls it: ``strategy="last"``,
``token_counter=count_tokens_approximately``, ``max_tokens`` = window - fixed prefix -
min(max output, 20,000). The ratio column is each row's median over ``trim_messages``'s median.
It prints figures and asserts nothing. LangChain (extra ``peers``) is needed for the
``trim_messages`` and peer rows; without it those rows are skipped.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "src"))

from ctxengine import peers  # noqa: E402
from ctxengine.formats import load  # noqa: E402
from ctxengine.messages import Message, Session, Usage  # noqa: E402
from ctxengine.plugins import EngineRegistry  # noqa: E402
from ctxengine.policy import get_policy  # noqa: E402
from ctxengine.replay import infer_fixed_prefix  # noqa: E402
from ctxengine.tokens.counter import counter_for  # noqa: E402

TRANSCRIPTS = REPO.parent / "shared" / "data" / "transcripts"
BIG_FILE = "claude-code-jsonl/cc_mimo-v2.5-pro_vscode_2x-autocompact_4530697c.jsonl"
POLICIES = ("default", "claude-code", "openclaw", "pi", "letta", "none")
RECORDED_ORIGINS = ("compact_summary", "compact_restore")


def _pct(xs: list[float], q: float) -> float:
    s = sorted(xs)
    return s[min(len(s) - 1, round(q * (len(s) - 1)))]


def _history(session: Session) -> list[Message]:
    return [m for m in session.messages if m.origin not in RECORDED_ORIGINS]


def time_engine(
    session: Session, engine_id: str, policy_name: str, history: int, window: int, samples: int
) -> dict[str, Any]:
    """Feed ``session`` until ``history`` tokens, then time ``samples`` assemble() calls."""
    engines = EngineRegistry()
    peers.register(engines)
    policy = peers.policy_for(policy_name) if policy_name in peers.PEERS else get_policy(policy_name)
    from ctxengine.models import Registry

    registry = Registry.default()
    model = registry.get(session.model or "unknown")
    counter = counter_for(model)
    engine = engines.create(
        engine_id, policy=policy, model=session.model, window=window, registry=registry, counter=counter
    )
    fixed = infer_fixed_prefix(session, _Count(counter))
    engine.bootstrap(system=session.system, fixed_prefix_tokens=fixed)
    msgs = _history(session)
    tokens = 0
    i = 0
    while i < len(msgs) and tokens < history:
        m = msgs[i]
        if m.role == "assistant":
            proj = engine.assemble(now=m.timestamp)
            engine.ingest(m)
            engine.after_turn(Usage(input_tokens=proj.tokens))
        else:
            engine.ingest(m)
        tokens += counter.count_message(m)
        i += 1
    times: list[float] = []
    view = 0
    events: dict[str, int] = {}
    for m in msgs[i : i + samples]:
        engine.ingest(m)
        t0 = time.perf_counter()
        proj = engine.assemble(now=m.timestamp)
        times.append((time.perf_counter() - t0) * 1e6)
        view = len(proj.messages)
        for e in proj.events:
            events[e.layer] = events.get(e.layer, 0) + 1
    engine.dispose()
    return {"history": tokens, "view": view, "times": times, "events": events, "fixed": fixed, "n": i}


class _Count:
    def __init__(self, counter: Any) -> None:
        self.counter = counter

    def __call__(self, msg: Message) -> int:
        return int(self.counter.count_message(msg))


def time_trim(
    session: Session, upto: int, window: int, fixed: int, max_output: int, samples: int
) -> list[float]:
    """``trim_messages`` on the first ``upto`` history messages (+ each sample's new message)."""
    from langchain_core.messages import trim_messages
    from langchain_core.messages.utils import count_tokens_approximately

    from ctxengine.peers.langchain import _to_langchain

    msgs = _history(session)
    lc = [x for k, m in enumerate(msgs[:upto]) for x, _ in _to_langchain(m, k)]
    budget = max(1, window - fixed - min(max_output, 20_000))
    times: list[float] = []
    for k, m in enumerate(msgs[upto : upto + samples], start=upto):
        lc.extend(x for x, _ in _to_langchain(m, k))
        t0 = time.perf_counter()
        trim_messages(lc, max_tokens=budget, token_counter=count_tokens_approximately, strategy="last")
        times.append((time.perf_counter() - t0) * 1e6)
    return times


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--transcripts", type=Path, default=TRANSCRIPTS)
    ap.add_argument("--history", type=int, default=150_000, help="tokens of history before timing")
    ap.add_argument("--window", type=int, default=200_000, help="context window in tokens")
    ap.add_argument("--samples", type=int, default=40, help="assemble() calls timed per policy")
    args = ap.parse_args()
    (session,) = load(args.transcripts / BIG_FILE)
    from ctxengine.models import Registry

    model = Registry.default().get(session.model or "unknown")
    have_langchain = peers.available() is None
    rows: list[tuple[str, dict[str, Any]]] = []
    for name in POLICIES:
        rows.append((name, time_engine(session, "ctxengine", name, args.history, args.window, args.samples)))
    if have_langchain:
        for name in peers.PEERS:
            rows.append((name, time_engine(session, name, name, args.history, args.window, args.samples)))
    print(
        f"## assemble() at {args.history:,} tokens of history ({Path(BIG_FILE).name}, window "
        f"{args.window:,} tokens, {args.samples} calls per row; microseconds)"
    )
    trim_p50: float | None = None
    if have_langchain:
        first = rows[0][1]
        trim = time_trim(session, first["n"], args.window, first["fixed"], model.max_output, args.samples)
        trim_p50 = statistics.median(trim)
    head = f"{'policy':<16} {'history tok':>11} {'view msgs':>9} {'p50 µs':>9} {'p95 µs':>9} {'x trim':>7}"
    print(head + "  events")
    for name, r in rows:
        p50 = statistics.median(r["times"])
        ratio = f"{p50 / trim_p50:7.2f}" if trim_p50 else "      –"
        events = ", ".join(f"{k} {v}" for k, v in sorted(r["events"].items())) or "-"
        print(
            f"{name:<16} {r['history']:>11,} {r['view']:>9} {p50:>9.0f} {_pct(r['times'], 0.95):>9.0f} "
            f"{ratio}  {events}"
        )
    if trim_p50 is not None:
        print(
            f"{'trim_messages':<16} {rows[0][1]['history']:>11,} {'':>9} {trim_p50:>9.0f} "
            f"{_pct(trim, 0.95):>9.0f} {1.0:7.2f}  (LangChain, count_tokens_approximately)"
        )
    else:
        print(f"trim_messages: skipped, {peers.available()}")


if __name__ == "__main__":
    main()
