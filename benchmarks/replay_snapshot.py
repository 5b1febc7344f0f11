"""Snapshot the replay JSON of every shared transcript, and compare two snapshots.

The test of a behaviour-preserving refactor: the ``ctxengine replay --json`` report of every shared
transcript under ``default``, ``claude-code``, ``openclaw``, ``pi`` and ``letta`` at 64,000 and
200,000 tokens is identical before and after (timing fields left out, see
``compare_reports.py``)::

    git stash; .venv/bin/python benchmarks/replay_snapshot.py snapshot /tmp/before; git stash pop
    .venv/bin/python benchmarks/replay_snapshot.py snapshot /tmp/after
    .venv/bin/python benchmarks/replay_snapshot.py compare /tmp/before /tmp/after

``snapshot`` runs one ``ctxengine replay`` per policy and window (two at a time) over
``../shared/data/transcripts`` (or ``--transcripts DIR``) and writes ``POLICY-WINDOW.json``.
``--policies A,B`` (both commands) takes other policies (the baselines, ``none``, the peers).
``compare`` prints ``identical`` or the differing paths per file; exits 0 when every file is
identical, 1 otherwise; ``--new-field NAME`` (repeatable) leaves out a field the second snapshot
added (e.g. ``shell_fallbacks``, added to the tool-limit report with bashlex).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from compare_reports import SHOWN, differences  # type: ignore[import-not-found]

POLICIES = ("default", "claude-code", "openclaw", "pi", "letta")
WINDOWS = (64_000, 200_000)
# The console script, run by this interpreter (so PYTHONPATH picks the tree to snapshot).
LAUNCH = "import sys; sys.argv[0] = 'ctxengine'; from ctxengine.cli.launch import main; main()"
TRANSCRIPTS = Path(__file__).resolve().parents[2] / "shared" / "data" / "transcripts"


def _replay(transcripts: Path, out: Path, policy: str, window: int) -> tuple[str, int, str]:
    target = out / f"{policy}-{window}.json"
    cmd = [
        sys.executable,
        "-c",
        LAUNCH,
        "replay",
        str(transcripts),
        "--policy",
        policy,
        "--window",
        str(window),
        "--json",
        str(target),
        "--quiet",
    ]
    done = subprocess.run(cmd, capture_output=True, text=True, check=False)
    return target.name, done.returncode, done.stderr[-2000:]


def snapshot(transcripts: Path, out: Path, jobs: int, policies: Sequence[str] = POLICIES) -> int:
    """Write one replay report per policy and window into ``out``; 1 when any replay failed."""
    out.mkdir(parents=True, exist_ok=True)
    runs = [(p, w) for p in policies for w in WINDOWS]
    failed = 0
    with ThreadPoolExecutor(max_workers=jobs) as pool:
        for name, rc, err in pool.map(lambda pw: _replay(transcripts, out, *pw), runs):
            print(f"{name}: exit {rc}")
            if rc:
                failed += 1
                print(err, file=sys.stderr)
    return 1 if failed else 0


def _without(report: object, new: frozenset[str]) -> object:
    """``report`` without the fields named in ``new`` (at any depth)."""
    if isinstance(report, dict):
        return {k: _without(v, new) for k, v in report.items() if k not in new}
    if isinstance(report, list):
        return [_without(v, new) for v in report]
    return report


def compare(
    before: Path, after: Path, new: frozenset[str] = frozenset(), policies: Sequence[str] = POLICIES
) -> int:
    """Compare every ``POLICY-WINDOW.json`` of two snapshots; 1 when any differs or is missing.
    ``new``: fields added since ``before`` (left out of ``after``; every other figure must match)."""
    bad = 0
    for policy in policies:
        for window in WINDOWS:
            name = f"{policy}-{window}.json"
            a, b = before / name, after / name
            if not (a.exists() and b.exists()):
                print(f"{name}: missing in {'before' if not a.exists() else 'after'}")
                bad += 1
                continue

            diffs = differences(json.loads(a.read_text()), _without(json.loads(b.read_text()), new))
            print(f"{name}: {'identical' if not diffs else f'{len(diffs)} difference(s)'}")
            for d in diffs[:SHOWN]:
                print("  " + d)
            bad += bool(diffs)
    return 1 if bad else 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.strip().splitlines()[0])
    sub = parser.add_subparsers(dest="cmd", required=True)
    snap = sub.add_parser("snapshot")
    snap.add_argument("out", type=Path)
    snap.add_argument("--transcripts", type=Path, default=TRANSCRIPTS)
    snap.add_argument("--jobs", type=int, default=2)
    for p in (snap, cmp := sub.add_parser("compare")):
        p.add_argument(
            "--policies", default=",".join(POLICIES), help="comma-separated policies (default: %(default)s)"
        )
    cmp.add_argument("before", type=Path)
    cmp.add_argument("after", type=Path)
    cmp.add_argument("--new-field", action="append", default=[], help="a field added since BEFORE")
    args = parser.parse_args()
    if args.cmd == "snapshot":
        return snapshot(args.transcripts, args.out, args.jobs, args.policies.split(","))
    return compare(args.before, args.after, frozenset(args.new_field), args.policies.split(","))


if __name__ == "__main__":
    raise SystemExit(main())
