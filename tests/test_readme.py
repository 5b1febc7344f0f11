"""The README teaches what runs: its first ``python`` block runs as written (offline, from an
empty folder), its quick start starts with the demo that needs nothing beside the package, and
its test command is the one CI runs (the last line of ``.ci/run``)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
README = (REPO / "README.md").read_text(encoding="utf-8")


def _blocks(kind: str) -> list[str]:
    return re.findall(rf"^```{kind}\n(.*?)^```", README, re.S | re.M)


def test_the_test_command_is_the_one_ci_runs() -> None:
    ci = (REPO / ".ci" / "run").read_text(encoding="utf-8").strip().splitlines()[-1]
    development = README[README.index("## Development") :]
    block = re.findall(r"^```bash\n(.*?)^```", development, re.S | re.M)[0]
    assert block.strip().splitlines()[-1] == ci, (ci, block)


def test_the_quick_start_starts_with_the_demo() -> None:
    quick = README[README.index("## Quick start") : README.index("## A library loop")]
    [block] = re.findall(r"^```bash\n(.*?)^```", quick, re.S | re.M)
    lines = block.strip().splitlines()
    ci = (REPO / ".ci" / "run").read_text(encoding="utf-8").strip().splitlines()[-1]
    # two commands: one sets up and runs the main job, one sets up and runs the tests CI runs
    assert len(lines) == 2 and lines[0].endswith("ctxengine replay --demo") and lines[1].endswith(ci)


def test_the_library_loop_runs_as_written(tmp_path: Path) -> None:
    """The README's first python block, within its first 100 lines, run from an empty folder:
    it replays the shipped Claude Code session through the engine at 32,000 tokens."""
    first = _blocks("python")[0]
    assert README.index(first) < len("\n".join(README.splitlines()[:100]))
    assert len(first.strip().splitlines()) <= 30
    script = tmp_path / "loop.py"
    script.write_text(first, encoding="utf-8")
    res = subprocess.run(
        [sys.executable, str(script)], cwd=tmp_path, capture_output=True, text=True, timeout=300, check=False
    )
    assert res.returncode == 0, res.stderr
    m = re.fullmatch(r"(\d+) messages; the last request ([\d,]+) of 32,000 tokens\n", res.stdout)
    assert m, res.stdout
    assert int(m.group(1)) > 50 and 0 < int(m.group(2).replace(",", "")) <= 32_000
