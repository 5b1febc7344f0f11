"""Benchmark ``search`` over a generated 50,000-file tree: index build time, incremental update
time (nothing changed; 100 files touched, 100 modified, 100 deleted, 100 added) and query latency.

    .venv/bin/python benchmarks/bench_search.py [--files 50000] [--queries 20] [--keep-index]

The tree (~30-line source files with words drawn from a 2,000-word vocabulary, in 100-file
directories, plus an ignored ``build/`` and a hidden directory) is generated under a fresh
temporary directory (``$TMPDIR`` or /tmp) and removed at the end, index included. The index file
lives beside the tree (``<tmp>/index.sqlite``), as it would in ``<root>/.ctxengine/``. Timings
are wall-clock; query latency is the median and p95 over ``--queries`` queries of 1-3 words.
"""

from __future__ import annotations

import argparse
import itertools
import os
import random
import shutil
import statistics
import tempfile
import time
from pathlib import Path

from ctxengine.tools.search import SearchIndex
from ctxengine.tools.workspace import Workspace

SYLLABLES = [c + v for c in "kmnrstvbdfg" for v in "aeiou"]


def vocabulary(n: int, rng: random.Random) -> list[str]:
    words: set[str] = set()
    while len(words) < n:
        words.add("".join(rng.choices(SYLLABLES, k=rng.randint(2, 4))))
    return sorted(words)


def file_text(rng: random.Random, vocab: list[str], cum: list[float]) -> str:
    lines = []
    for j in range(30):
        words = rng.choices(vocab, cum_weights=cum, k=9)
        name, comment = words[0], " ".join(words[1:])
        lines.append(f"def {name}_{j}(value):  # {comment}")
    return "\n".join(lines) + "\n"


def make_tree(root: Path, files: int, seed: int = 7) -> tuple[list[Path], list[str]]:
    rng = random.Random(seed)
    vocab = vocabulary(2_000, rng)
    cum = list(itertools.accumulate(1.0 / (i + 1) for i in range(len(vocab))))  # Zipf-like frequencies
    (root / ".gitignore").write_text("build/\n")
    paths: list[Path] = []
    for i in range(files):
        d = root / f"pkg{i // 1000:03d}" / f"mod{(i // 100) % 10:02d}"
        if i % 100 == 0:
            d.mkdir(parents=True, exist_ok=True)
        p = d / f"f{i:05d}.py"
        p.write_text(file_text(rng, vocab, cum))
        paths.append(p)
    for sub in ("build", ".cache"):
        (root / sub).mkdir()
        for j in range(200):
            (root / sub / f"g{j}.py").write_text("generated\n")
    return paths, vocab


def bump(p: Path) -> None:
    st = p.stat()
    os.utime(p, ns=(st.st_atime_ns, st.st_mtime_ns + 2_000_000_000))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--files", type=int, default=50_000)
    ap.add_argument("--queries", type=int, default=20)
    ap.add_argument("--keep-index", action="store_true", help="print the index size before cleanup")
    args = ap.parse_args()

    tmp = Path(tempfile.mkdtemp(prefix="ctxengine-bench-search-"))
    try:
        root = tmp / "tree"
        root.mkdir()
        t0 = time.perf_counter()
        paths, vocab = make_tree(root, args.files)
        print(f"generated {args.files:,} files in {time.perf_counter() - t0:.1f} s under {tmp}")

        rng = random.Random(11)
        db = tmp / "index.sqlite"
        ws = Workspace(root)
        with SearchIndex(ws, db) as ix:
            st = ix.update()
            size_mb = st.index_bytes / 2**20
            print(
                f"index build:            {st.seconds:8.2f} s  ({st.indexed:,} files, {st.chunks:,} chunks, "
                f"{size_mb:.0f} MB: {st.index_bytes / max(st.text_bytes, 1):.0%} of the "
                f"{st.text_bytes / 2**20:.0f} MB of text indexed)"
            )

            st = ix.update()
            print(f"update, nothing changed:{st.seconds:8.2f} s  ({st.unchanged:,} unchanged)")

            for p in rng.sample(paths, 100):
                bump(p)
            st = ix.update()
            print(f"update, 100 touched:    {st.seconds:8.2f} s  ({st.indexed} re-indexed)")

            for p in rng.sample(paths, 100):
                p.write_text(p.read_text() + "# edited zyzzyva\n")
                bump(p)
            st = ix.update()
            print(f"update, 100 modified:   {st.seconds:8.2f} s  ({st.indexed} re-indexed)")

            gone = rng.sample(paths, 100)
            for p in gone:
                p.unlink()
            for i in range(100):
                (root / "pkg000" / "mod00" / f"new{i}.py").write_text(f"def fresh_{i}(): pass  # quokka\n")
            st = ix.update()
            print(f"update, 100 del+100 new:{st.seconds:8.2f} s  ({st.removed} removed, {st.indexed} added)")

            queries = ["zyzzyva", "quokka fresh"]
            common, rare = vocab[:50], vocab[-500:]
            while len(queries) < args.queries:
                n = rng.randint(1, 3)
                queries.append(" ".join(rng.sample(common, 1) + rng.sample(rare, n - 1)))
            times: list[float] = []
            for q in queries:
                t = time.perf_counter()
                hits = ix.search(q, k=10)
                times.append((time.perf_counter() - t) * 1000)
                assert hits, q
            times.sort()
            p95 = times[min(len(times) - 1, int(len(times) * 0.95))]
            print(
                f"query (k=10):           median {statistics.median(times):.1f} ms, p95 {p95:.1f} ms, "
                f"max {times[-1]:.1f} ms over {len(times)} queries"
            )
            t = time.perf_counter()
            out = ix.run("zyzzyva edited")
            print(f"search tool call (update + query + render): {(time.perf_counter() - t) * 1000:.0f} ms")
            assert "edited zyzzyva" in out
        if args.keep_index:
            print(f"index file: {db.stat().st_size / 2**20:.1f} MB")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
