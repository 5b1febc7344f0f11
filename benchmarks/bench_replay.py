"""Replay benchmarks on the shared transcripts: throughput, ``assemble`` overhead, peak memory.

Run from the repository root (the shared transcripts in ``../shared`` beside it)::

    .venv/bin/python benchmarks/bench_replay.py            # everything (about two minutes)
    .venv/bin/python benchmarks/bench_replay.py --skip-memory --repeat 1

It prints figures; it asserts nothing (see benchmarks/README.md for what each figure means).
The checkout's ``src`` is put first on ``sys.path``, so the code measured is the code in this tree.
"""

from __future__ import annotations

import argparse
import gc
import json
import resource
import statistics
import subprocess
import sys
import time
import tracemalloc
from collections import Counter
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "src"))

from ctxengine import CacheClear, CompactionSettings  # noqa: E402
from ctxengine.cli.commands import collect  # noqa: E402
from ctxengine.engine.core import ContextEngine  # noqa: E402
from ctxengine.formats import load  # noqa: E402
from ctxengine.messages.model import Message, Session  # noqa: E402
from ctxengine.models.registry import Registry  # noqa: E402
from ctxengine.policy.registry import Policy, get_policy  # noqa: E402
from ctxengine.replay import replay_session  # noqa: E402
from ctxengine.tokens.counter import counter_for  # noqa: E402

TRANSCRIPTS = REPO.parent / "shared" / "data" / "transcripts"
BIG_FILE = "claude-code-jsonl/cc_mimo-v2.5-pro_vscode_2x-autocompact_4530697c.jsonl"  # 3.6 MB
BIG_FILE_TARGET_S = 3.0  # replay of the 3.6 MB file should take less than this
POLICIES = ("default", "none", "recorded")
WINDOW = 200_000  # tokens, as the acceptance check replays
HISTORY_POINTS = (50_000, 150_000)  # tokens of history at which assemble is timed
SAMPLES = 40  # assemble calls timed per point (few: the history must not drift far)
BENCH_WINDOW = 1_000_000  # tokens: large enough that no threshold of the raised default is reached
RECORDED_ORIGINS = ("compact_summary", "compact_restore")


# ------------------------------------------------------------------ helpers


def _is_call(m: Message) -> bool:
    return m.role == "assistant" and not m.meta.get("synthetic")


def _pct(xs: list[float], q: float) -> float:
    s = sorted(xs)
    return s[min(len(s) - 1, round(q * (len(s) - 1)))]


def _rss_mib() -> float:
    """Peak resident set size of this process so far, MiB (ru_maxrss: KiB on Linux, bytes on macOS)."""
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak / (1024 * 1024) if sys.platform == "darwin" else peak / 1024


def _proc_status_mib(field: str) -> float | None:
    """A ``/proc/self/status`` figure in MiB (Linux only; None elsewhere): ``VmRSS`` is the
    resident set now, ``VmHWM`` its peak since this program started (reset by exec, unlike
    ru_maxrss, which a child inherits from the process that forked it)."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return None


def _load_folder(folder: Path) -> list[Session]:
    sessions, _notes = collect(folder)
    return sessions


# ------------------------------------------------------------------ 1. throughput


def bench_throughput(folder: Path, repeat: int) -> None:
    t0 = time.perf_counter()
    sessions = _load_folder(folder)
    load_s = time.perf_counter() - t0
    messages = sum(len(s.messages) for s in sessions)
    calls = sum(sum(1 for m in s.messages if _is_call(m)) for s in sessions)
    print(
        f"\n## Replay throughput: whole folder ({len(sessions)} sessions, {messages:,} messages, "
        f"{calls:,} calls)"
    )
    print(f"load (read + parse every file): {load_s:.2f} s, {messages / load_s:,.0f} messages/s")
    print(
        f"{'policy':<10} {'wall s':>7} {'cpu s':>6} {'messages/s':>11} {'calls/s':>8}  (rates on wall time)"
    )
    for name in POLICIES:
        pol = get_policy(name)
        t0, c0 = time.perf_counter(), time.process_time()
        for s in sessions:
            replay_session(s, pol, window=WINDOW)
        dt, cpu = time.perf_counter() - t0, time.process_time() - c0
        print(f"{name:<10} {dt:7.2f} {cpu:6.2f} {messages / dt:11,.0f} {calls / dt:8,.1f}")

    path = folder / BIG_FILE
    records = sum(1 for line in path.read_bytes().splitlines() if line.strip())
    size_mb = path.stat().st_size / 1e6
    print(f"\n## Replay throughput: {path.name} ({size_mb:.1f} MB, {records:,} records)")
    print(f"best of {repeat}; load = read + parse, replay = replay_session at {WINDOW:,} tokens")
    print(
        f"{'policy':<10} {'load s':>7} {'replay s':>9} {'total s':>8} {'cpu s':>6} {'records/s':>10}"
        f"  target < {BIG_FILE_TARGET_S:.0f} s"
    )
    for name in POLICIES:
        pol = get_policy(name)
        best: tuple[float, float, float] | None = None  # load, replay, cpu of the fastest run
        for _ in range(repeat):
            t0, c0 = time.perf_counter(), time.process_time()
            session = load(path)[0]
            t1 = time.perf_counter()
            replay_session(session, pol, window=WINDOW)
            t2, c2 = time.perf_counter(), time.process_time()
            if best is None or t2 - t0 < best[0] + best[1]:
                best = (t1 - t0, t2 - t1, c2 - c0)
        assert best is not None
        total = best[0] + best[1]
        verdict = "ok" if total < BIG_FILE_TARGET_S else "OVER TARGET"
        print(
            f"{name:<10} {best[0]:7.2f} {best[1]:9.2f} {total:8.2f} {best[2]:6.2f} "
            f"{records / total:10,.0f}  {verdict}"
        )


# ------------------------------------------------------------------ 2. assemble overhead


def _raised_default() -> Policy:
    """Policy default with every compaction trigger out of reach (and the window at 1M tokens)."""
    p = get_policy("default")
    return p.with_(
        p.settings(CompactionSettings).with_(at_share=1.0),
        p.settings(CacheClear).with_(trigger=1.0),
        name="default-raised",
    )


def _time_assemble(session: Session, policy: Policy, history_tokens: int) -> dict[str, Any]:
    """Ingest ``session`` until ~``history_tokens`` tokens, then SAMPLES times: ingest one more
    message (untimed) and time ``assemble()``; also time ``assemble()`` with nothing new."""
    registry = Registry.default()
    model = registry.get(session.model or "unknown")
    counter = counter_for(model)
    engine = ContextEngine(
        policy, model=session.model, window=BENCH_WINDOW, registry=registry, counter=counter
    )
    engine.bootstrap(system=session.system)
    msgs = iter(session.messages)
    history = 0
    ingested = 0
    for m in msgs:
        engine.ingest(m)
        ingested += 1
        if m.origin not in RECORDED_ORIGINS:  # a recorded compaction's messages are not kept
            history += counter.count_message(m)
        if history >= history_tokens:
            break
    engine.assemble()  # settle: the first assemble after a long ingest does one-off work
    after_new: list[float] = []
    nothing_new: list[float] = []
    added = 0
    events: Counter[str] = Counter()
    gc.collect()
    for m in msgs:
        if len(after_new) >= SAMPLES:
            break
        engine.ingest(m)
        if m.origin not in RECORDED_ORIGINS:
            added += counter.count_message(m)
        t0 = time.perf_counter_ns()
        proj = engine.assemble()
        t1 = time.perf_counter_ns()
        engine.assemble()
        t2 = time.perf_counter_ns()
        after_new.append((t1 - t0) / 1000)
        nothing_new.append((t2 - t1) / 1000)
        events.update(e.layer for e in proj.events)
    engine.dispose()
    return {
        "history_tokens": history,
        "history_messages": ingested,
        "view_messages": len(proj.messages),
        "added_tokens": added,
        "samples": len(after_new),
        "p50": statistics.median(after_new),
        "p95": _pct(after_new, 0.95),
        "idle_p50": statistics.median(nothing_new),
        "events": dict(events),
    }


def bench_assemble(folder: Path) -> None:
    session = load(folder / BIG_FILE)[0]
    print(f"\n## assemble() overhead per call ({Path(BIG_FILE).name}, window {BENCH_WINDOW:,} tokens)")
    print(
        f"{SAMPLES} calls per row: ingest one more recorded message, then time assemble(); "
        "'no new' times a second assemble() right after (nothing changed). Microseconds."
    )
    header = (
        f"{'policy':<15} {'history tok':>11} {'msgs':>5} {'view':>5} {'added tok':>9} "
        f"{'p50 µs':>8} {'p95 µs':>8} {'no new p50':>10}  events during the samples"
    )
    print(header)
    for policy in (get_policy("none"), _raised_default()):
        rows = [_time_assemble(session, policy, h) for h in HISTORY_POINTS]
        for r in rows:
            print(
                f"{policy.name:<15} {r['history_tokens']:>11,} {r['history_messages']:>5} "
                f"{r['view_messages']:>5} "
                f"{r['added_tokens']:>9,} {r['p50']:>8.0f} {r['p95']:>8.0f} {r['idle_p50']:>10.0f}  "
                f"{r['events'] or '-'}"
            )
        lo, hi = rows
        print(
            f"{'':<15} history x{hi['history_tokens'] / lo['history_tokens']:.1f} tokens, "
            f"x{hi['view_messages'] / lo['view_messages']:.1f} messages -> assemble p50 "
            f"x{hi['p50'] / lo['p50']:.2f}, no-new p50 x{hi['idle_p50'] / lo['idle_p50']:.2f} "
            f"({hi['idle_p50'] / hi['view_messages']:.2f} µs per message in view)"
        )


# ------------------------------------------------------------------ 3. memory


def _memory_child(folder: Path, mode: str) -> dict[str, float]:
    """Run in a fresh process: replay the folder under default and measure one kind of peak."""
    if mode == "tracemalloc":
        tracemalloc.start()
    base_rss, base_hwm = _rss_mib(), _proc_status_mib("VmHWM")
    sessions = _load_folder(folder)
    loaded_rss, loaded_hwm = _rss_mib(), _proc_status_mib("VmHWM")
    if mode == "tracemalloc":
        loaded_peak = tracemalloc.get_traced_memory()[1]
    pol = get_policy("default")
    reports = [replay_session(s, pol, window=WINDOW) for s in sessions]
    out: dict[str, float] = {"sessions": len(reports)}
    if mode == "tracemalloc":
        current, peak = tracemalloc.get_traced_memory()
        out |= {"load_peak_mib": loaded_peak / 2**20, "peak_mib": peak / 2**20, "kept_mib": current / 2**20}
    else:
        out |= {
            "base_rss_mib": base_rss,
            "loaded_rss_mib": loaded_rss,
            "peak_rss_mib": _rss_mib(),
            "base_hwm_mib": base_hwm or -1,
            "loaded_hwm_mib": loaded_hwm or -1,
            "end_hwm_mib": _proc_status_mib("VmHWM") or -1,
            "end_now_mib": _proc_status_mib("VmRSS") or -1,
        }
    return out


def bench_memory(folder: Path) -> None:
    print("\n## Peak memory: replay of the whole folder under default (reports kept, as the CLI does)")
    results: dict[str, dict[str, float]] = {}
    for mode in ("rss", "tracemalloc"):
        cmd = [sys.executable, __file__, "--transcripts", str(folder), "--memory-child", mode]
        done = subprocess.run(cmd, capture_output=True, text=True, check=True)
        results[mode] = json.loads(done.stdout.strip().splitlines()[-1])
    rss, tm = results["rss"], results["tracemalloc"]
    print(
        f"ru_maxrss (peak so far, no tracing): after imports {rss['base_rss_mib']:.0f} MiB, after loading "
        f"{rss['loaded_rss_mib']:.0f} MiB, after the replay {rss['peak_rss_mib']:.0f} MiB"
    )
    if rss["end_hwm_mib"] > 0:
        print(
            f"VmHWM (peak RSS since exec): after imports {rss['base_hwm_mib']:.0f} MiB, after loading "
            f"{rss['loaded_hwm_mib']:.0f} MiB, after the replay {rss['end_hwm_mib']:.0f} MiB "
            f"(resident at the end {rss['end_now_mib']:.0f} MiB)"
        )
    print(
        f"tracemalloc (Python allocations): peak while loading {tm['load_peak_mib']:.0f} MiB, peak over "
        f"load + replay {tm['peak_mib']:.0f} MiB, still held at the end (sessions + reports) "
        f"{tm['kept_mib']:.0f} MiB"
    )


# ------------------------------------------------------------------ main


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--transcripts", type=Path, default=TRANSCRIPTS, help="folder of transcripts")
    ap.add_argument("--repeat", type=int, default=3, help="runs of the 3.6 MB file per policy (best kept)")
    ap.add_argument("--skip-memory", action="store_true", help="skip the two memory runs")
    ap.add_argument("--memory-child", choices=("rss", "tracemalloc"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    folder: Path = args.transcripts.resolve()
    if args.memory_child:
        print(json.dumps(_memory_child(folder, args.memory_child)))
        return
    if not folder.is_dir():
        sys.exit(f"transcripts not found at {folder}: ../shared must sit beside the checkout")
    print(f"ctxengine replay benchmarks on {folder}")
    print(f"python {sys.version.split()[0]}, {sys.platform}")
    if not args.skip_memory:
        bench_memory(folder)  # first: a child's ru_maxrss starts at this process's size
    bench_throughput(folder, args.repeat)
    bench_assemble(folder)


if __name__ == "__main__":
    main()
