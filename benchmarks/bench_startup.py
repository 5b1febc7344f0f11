"""How fast the command line starts: import times of the package, the CLI and the commands, and the
wall time of ``ctxengine --version`` and ``ctxengine replay --help``.

Run from the repository root, with the project's interpreter::

    .venv/bin/python benchmarks/bench_startup.py
    .venv/bin/python benchmarks/bench_startup.py --repeat 9

Each figure is measured in a fresh process, ``--repeat`` times; the line gives the median and the
best (a busy machine moves the median a lot, the best much less). Import figures are the cumulative
import time ``python -X importtime -c "import MODULE"`` reports for MODULE (its own imports
included, the interpreter's start-up not). Targets:

- ``ctxengine``: the package and its public names, imported on first use;
- ``ctxengine.cli``: the command-line package (what the console script starts from);
- ``ctxengine.cli.commands``: the typer application with every command mounted (imported as a
  library it mounts them all; the console script mounts only the one it runs);
- ``ctxengine.engine.core``: the engine, for scale.

Wall times are the console script run as a user runs it (start-up, imports, the command):
``ctxengine --version`` (answered before the command-line framework loads) and ``ctxengine replay
--help`` (typer, the replay command's options).

Prints one line per figure, ``NAME: median M ms, best B ms``, and asserts nothing. The issue's goals
are ``import ctxengine`` and ``ctxengine --version`` at most 100 ms, ``import ctxengine.cli`` at most
120 ms (the acceptance check ``architecture`` measures the last).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

MODULES = ("ctxengine", "ctxengine.cli", "ctxengine.cli.commands", "ctxengine.engine.core")
COMMANDS = (("--version",), ("replay", "--help"))


def import_ms(module: str) -> float:
    """Cumulative import time of ``module`` in a fresh interpreter, milliseconds."""
    done = subprocess.run(
        [sys.executable, "-X", "importtime", "-c", f"import {module}"],
        capture_output=True,
        text=True,
        check=True,
    )
    for line in done.stderr.splitlines():
        fields = line.split("|")
        if len(fields) == 3 and fields[2].strip() == module:
            return int(fields[1]) / 1000
    raise RuntimeError(f"no import time for {module} in the -X importtime output")


def command_ms(script: Path, args: tuple[str, ...]) -> float:
    """Wall time of ``ctxengine ARGS`` in a fresh process, milliseconds."""
    env = dict(os.environ, COLUMNS="100")
    t0 = time.perf_counter()
    subprocess.run([str(script), *args], capture_output=True, check=True, env=env)
    return (time.perf_counter() - t0) * 1000


def line(name: str, samples: list[float]) -> str:
    return f"{name}: median {statistics.median(samples):.0f} ms, best {min(samples):.0f} ms"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeat", type=int, default=5, help="fresh processes per figure (default 5)")
    args = ap.parse_args()
    for module in MODULES:
        print(line(f"import {module}", [import_ms(module) for _ in range(args.repeat)]))
    script = Path(sys.executable).with_name("ctxengine")
    if not script.exists():
        print(f"no console script beside {sys.executable}: the wall times are left out")
        return
    for cmd in COMMANDS:
        print(line(f"ctxengine {' '.join(cmd)}", [command_ms(script, cmd) for _ in range(args.repeat)]))


if __name__ == "__main__":
    main()
