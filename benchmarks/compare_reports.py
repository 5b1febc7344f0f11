"""Compare two ``ctxengine replay --json`` or ``ctxengine bench --json`` files, ignoring timings.

Used to show that a speed change leaves every figure of a report as it was::

    .venv/bin/python benchmarks/compare_reports.py /tmp/before.json /tmp/after.json

Timing fields (``wall_time_s``, ``wall_time_s_per_session``: seconds of wall clock, which differ
between any two runs) are left out; everything else must be equal, value for value. Prints
``identical`` or up to 20 differing paths with both values; exits 0 when identical, 1 otherwise.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

TIMING_FIELDS = frozenset({"wall_time_s", "wall_time_s_per_session"})
SHOWN = 20


def differences(a: Any, b: Any, path: str = "") -> list[str]:
    """Paths where ``a`` and ``b`` differ (timing fields left out), with both values."""
    if isinstance(a, dict) and isinstance(b, dict):
        out: list[str] = []
        for k in sorted(set(a) | set(b)):
            if k in TIMING_FIELDS:
                continue
            if k not in a or k not in b:
                out.append(f"{path}/{k}: only in {'second' if k not in a else 'first'}")
            else:
                out.extend(differences(a[k], b[k], f"{path}/{k}"))
        return out
    if isinstance(a, list) and isinstance(b, list):
        if len(a) != len(b):
            return [f"{path}: {len(a)} items vs {len(b)}"]
        return [
            d for i, (x, y) in enumerate(zip(a, b, strict=True)) for d in differences(x, y, f"{path}[{i}]")
        ]
    if type(a) is not type(b) or a != b:
        return [f"{path}: {a!r} vs {b!r}"]
    return []


def main() -> int:
    if len(sys.argv) != 3:
        print(__doc__.strip().splitlines()[0])
        print("usage: compare_reports.py BEFORE.json AFTER.json")
        return 2
    a, b = (json.loads(Path(p).read_text()) for p in sys.argv[1:])
    diffs = differences(a, b)
    if not diffs:
        print("identical (timing fields left out)")
        return 0
    print(f"{len(diffs)} difference(s):")
    for d in diffs[:SHOWN]:
        print("  " + d)
    return 1


if __name__ == "__main__":
    sys.exit(main())
