"""Content recall and the compaction probes per session, per policy (prints; asserts nothing).

    .venv/bin/python benchmarks/bench_fidelity.py [PATH] [--window 64000] [--policies default,claude-code]

One line per session and policy: calls, compactions probed, content recall (hits / grounded
shingles), each probe kind's mean (request, artifact, error, continuation), the probe score, the
share of compactions with the latest request whole, reference recall, cost and cost with
re-fetch; then the pooled figures per policy. Reads the shared transcripts (``../shared``) by
default; nothing is written.
"""

from __future__ import annotations

import argparse
import warnings
from pathlib import Path

from ctxengine import bench
from ctxengine.cli import common
from ctxengine.eval.fidelity import PROBE_KINDS
from ctxengine.models.registry import Registry

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_PATH = ROOT.parent / "shared" / "data" / "transcripts"


def fmt(x: float | None) -> str:
    return "   –  " if x is None else f"{x:6.3f}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("path", nargs="?", default=str(DEFAULT_PATH))
    ap.add_argument("--window", type=int, default=64_000)
    ap.add_argument("--policies", default="default,claude-code,openclaw,pi,letta")
    ap.add_argument("--all-sessions", action="store_true", help="one line per tau-bench trajectory too")
    args = ap.parse_args()
    warnings.filterwarnings("ignore")
    sessions, _ = common.collect_all([Path(args.path)])
    runners = bench.resolve([p.strip() for p in args.policies.split(",") if p.strip()])
    registry, engines = Registry.default(), bench.engine_registry()
    head = "  ".join(f"{k[:6]:>6}" for k in PROBE_KINDS)
    print(f"window {args.window:,} tokens; {len(sessions)} sessions")
    print(f"{'session':44} {'policy':12} calls probed content {head}  probes  req.kept  refs", end="")
    print("   cost$  +refetch$")
    pooled: dict[str, list[bench.SessionRow]] = {}
    for s in sessions:
        for r in runners:
            row = bench.run_one(s, r, window=args.window, registry=registry, engines=engines)
            pooled.setdefault(r.name, []).append(row)
            if "tau-bench" in s.source and not args.all_sessions:
                continue
            name = (Path(s.source).name + (f" {s.name}" if s.name else ""))[:44]
            kept = row.requests_whole / row.requests_probed if row.requests_probed else None
            probes = "  ".join(fmt(row.probes[k].mean) for k in PROBE_KINDS)
            print(
                f"{name:44} {r.name:12} {row.calls:5} {max(v.n for v in row.probes.values()):6} "
                f"{fmt(row.content_recall)} {probes}  {fmt(row.probe_score)}  {fmt(kept)}  "
                f"{fmt(row.reference_recall)} {row.cost_usd:7.2f} {row.cost_with_refetch_usd:9.2f}"
            )
    print("\npooled over every session (tau-bench included):")
    for r in runners:
        p = bench.summarize_rows(r, pooled[r.name], [])
        probes = "  ".join(fmt(p.probes[k].mean) for k in PROBE_KINDS)
        print(
            f"{r.name:12} content {fmt(p.content_recall)}  probes {probes}  score {fmt(p.probe_score)}  "
            f"request kept {fmt(p.latest_request_kept)}  refs {fmt(p.reference_recall)}  "
            f"cost ${p.cost_usd:,.2f}  with re-fetch ${p.cost_with_refetch_usd:,.2f}"
        )


if __name__ == "__main__":
    main()
