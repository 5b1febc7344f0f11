"""Benchmark the workspace tools: grep and glob over a generated 50,000-file tree, and reads of
page 1 and the last page of a generated 1 GB file (milliseconds).

    .venv/bin/python benchmarks/bench_tools.py [--files 50000] [--gb 1.0] [--repeat 3]

Everything is generated under a fresh temporary directory (``$TMPDIR`` or /tmp) and removed at the
end. Timings are wall-clock, best of ``--repeat``, with the files in the OS page cache after
generation. "cold" read = a fresh ``ReadState`` (the line index of the big file is built: one
streaming pass over the whole file); "warm" = the index is cached.
"""

from __future__ import annotations

import argparse
import random
import shutil
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from ctxengine.tools.grep import glob, grep
from ctxengine.tools.read import ReadState, read_file
from ctxengine.tools.workspace import Workspace

PAGE = 1_000  # lines per read: 2,000 of these 60-byte lines would exceed the 25,000-token cap
WORDS = [
    "alpha",
    "beta",
    "gamma",
    "delta",
    "value",
    "result",
    "config",
    "handler",
    "request",
    "cache",
    "index",
]


def make_tree(root: Path, files: int, seed: int = 1) -> int:
    """``files`` small source files (~30 lines each) in 100-file directories, plus an ignored
    ``build/`` directory and a hidden one; returns the number of planted needles."""
    rng = random.Random(seed)
    (root / ".gitignore").write_text("build/\n*.tmp\n")
    needles = 0
    for i in range(files):
        d = root / f"pkg{i // 1000:03d}" / f"mod{(i // 100) % 10:02d}"
        if i % 100 == 0:
            d.mkdir(parents=True, exist_ok=True)
        lines = [f"def {rng.choice(WORDS)}_{j}(x):  # {' '.join(rng.choices(WORDS, k=6))}" for j in range(30)]
        if i % 997 == 0:
            lines[rng.randrange(30)] = "NEEDLE_XYZZY = True"
            needles += 1
        (d / f"f{i:05d}.py").write_text("\n".join(lines) + "\n")
    for sub in ("build", ".cache"):
        (root / sub).mkdir()
        for j in range(200):
            (root / sub / f"g{j}.py").write_text("NEEDLE_XYZZY = 'ignored'\n")
    return needles


def make_big(path: Path, size: int) -> int:
    """A text file of at least ``size`` bytes of ~60-byte lines; returns its line count."""
    block = "".join(
        f"{i:09d} the quick brown fox jumps over the lazy dog {i % 7}\n" for i in range(100_000)
    ).encode()
    lines = 0
    with open(path, "wb") as f:
        written = 0
        while written < size:
            f.write(block)
            written += len(block)
            lines += 100_000
    return lines


def best(fn: Callable[[], object], repeat: int) -> tuple[float, object]:
    times = []
    result: object = None
    for _ in range(repeat):
        t = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - t)
    return min(times) * 1000, result


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--files", type=int, default=50_000)
    ap.add_argument("--gb", type=float, default=1.0)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    top = Path(tempfile.mkdtemp(prefix="ctxengine-bench-tools-"))
    try:
        tree = top / "tree"
        tree.mkdir()
        t = time.perf_counter()
        needles = make_tree(tree, args.files)
        print(f"generated {args.files:,} files in {time.perf_counter() - t:.1f} s ({needles} needles)")
        ws = Workspace(tree)
        rows: list[tuple[str, float, str]] = []

        ms, out = best(lambda: grep(ws, "NEEDLE_XYZZY"), args.repeat)
        found = str(out).count("NEEDLE_XYZZY = True")
        assert found == needles, (found, needles)
        rows.append((f"grep rare literal ({args.files:,} files)", ms, f"{found} matches"))
        ms, out = best(lambda: grep(ws, r"def (cache|index)_\d+\(", include="*.py"), args.repeat)
        rows.append(("grep regex, many matches, page 1", ms, str(out).rsplit("\n", 1)[-1][:60]))
        ms, out = best(lambda: grep(ws, "needle_xyzzy", case_insensitive=True, context=2), args.repeat)
        rows.append(("grep -i with context 2", ms, f"{len(str(out).splitlines())} output lines"))
        ms, out = best(lambda: glob(ws, "**/*.py"), args.repeat)
        rows.append(("glob **/*.py (newest first, 1,000 cap)", ms, str(out).rsplit("\n", 1)[-1][:60]))

        big_dir = top / "big"
        big_dir.mkdir()
        size = int(args.gb * 1024**3)
        t = time.perf_counter()
        total = make_big(big_dir / "big.txt", size)
        actual = (big_dir / "big.txt").stat().st_size
        print(
            f"generated {actual / 1024**3:.2f} GB file ({total:,} lines) in {time.perf_counter() - t:.1f} s"
        )
        bws = Workspace(big_dir)

        def cold(offset: int) -> Callable[[], str]:
            return lambda: read_file(bws, "big.txt", offset=offset, limit=PAGE, state=ReadState())

        warm_state = ReadState()
        read_file(bws, "big.txt", offset=1, limit=1, state=warm_state)

        def warm(offset: int) -> Callable[[], str]:
            def go() -> str:
                warm_state.reset()
                return read_file(bws, "big.txt", offset=offset, limit=PAGE, state=warm_state)

            return go

        last = total - PAGE + 1
        for label, fn in (
            ("read page 1, cold (builds line index)", cold(1)),
            ("read last page, cold (builds line index)", cold(last)),
            ("read page 1, warm", warm(1)),
            ("read last page, warm", warm(last)),
        ):
            ms, out = best(fn, args.repeat)
            rows.append((f"{label} ({actual / 1024**3:.2f} GB)", ms, str(out).rsplit("\n", 1)[-1][:60]))

        width = max(len(r[0]) for r in rows)
        print(f"\n{'operation':<{width}}  {'ms':>9}  result")
        for name, ms, note in rows:
            print(f"{name:<{width}}  {ms:>9.1f}  {note}")
    finally:
        shutil.rmtree(top, ignore_errors=True)


if __name__ == "__main__":
    main()
