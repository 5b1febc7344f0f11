"""``ctxengine replay`` against the parse floor: the time to read and ``json.loads`` every record.

Run from the repository root, with the project's interpreter (its ``ctxengine`` script is used)::

    .venv/bin/python benchmarks/bench_parse_floor.py
    .venv/bin/python benchmarks/bench_parse_floor.py --repeat 5

Two targets: the largest Claude Code file of ``../shared/data/transcripts`` and the whole folder.
For each, the replay is the command a user runs (``ctxengine replay TARGET --quiet --json OUT``, a
fresh process: start-up, loading, the replay under ``default`` and writing the JSON), and the floor
is reading every file and parsing every record with ``json.loads`` in this process (a ``.json`` /
``.traj`` file whole, a ``.jsonl`` file line by line), as any reader must. Both are the best of
``--repeat`` runs, wall clock, measured in the same run. Also printed: the replay's CPU time
(this child's user + system), which a busy machine disturbs less than wall time.

Prints one line per target, ``replay TARGET: R s (cpu C s), parse floor F s: X.Xx floor``, and
asserts nothing. The issue's goal is at most 15x on both.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
TRANSCRIPTS = REPO.parent / "shared" / "data" / "transcripts"
SUFFIXES = (".jsonl", ".json", ".traj")


def parse_floor(paths: list[Path]) -> float:
    """Seconds to read and parse every record of ``paths``."""
    t0 = time.perf_counter()
    for p in paths:
        if p.suffix in (".json", ".traj"):
            json.loads(p.read_bytes())
            continue
        with p.open("rb") as f:
            for line in f:
                try:  # noqa: SIM105 - try/except, as the acceptance check's floor (suppress is slower)
                    json.loads(line)
                except ValueError:
                    pass
    return time.perf_counter() - t0


def replay_once(ctx: str, target: Path, out: Path) -> tuple[float, float]:
    """Wall and CPU seconds of one ``ctxengine replay`` of ``target``."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    cmd = [ctx, "replay", str(target), "--quiet", "--json", str(out)]
    subprocess.run(cmd, check=True, capture_output=True)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def main() -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--transcripts", type=Path, default=TRANSCRIPTS)
    ap.add_argument("--repeat", type=int, default=3, help="runs of each; the best counts")
    args = ap.parse_args()
    ctx = str(Path(sys.executable).with_name("ctxengine"))
    if not os.path.exists(ctx):
        sys.exit(f"no ctxengine script beside {sys.executable}: install the project in this environment")
    tr: Path = args.transcripts
    files = sorted(p for p in tr.rglob("*") if p.is_file() and p.suffix in SUFFIXES)
    big = max(tr.glob("claude-code-jsonl/*.jsonl"), key=lambda p: p.stat().st_size)
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "r.json"
        for label, target, paths in ((f"largest file ({big.name})", big, [big]), ("corpus", tr, files)):
            runs = [replay_once(ctx, target, out) for _ in range(args.repeat)]
            wall = min(w for w, _ in runs)
            cpu = min(c for _, c in runs)
            floor = min(parse_floor(paths) for _ in range(args.repeat))
            print(
                f"replay {label}: {wall:.2f} s (cpu {cpu:.2f} s), parse floor {floor:.3f} s: "
                f"{wall / floor:.1f}x floor",
                flush=True,
            )


if __name__ == "__main__":
    main()
