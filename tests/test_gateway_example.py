"""``examples/gateway.py``: many DM, channel and group sessions in one store, each cut back to its
kind's user-turn limit in batches, offline (messages from a file, a stand-in model)."""

from __future__ import annotations

import math
import re
import subprocess
import sys
from pathlib import Path

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "gateway.py"


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(EXAMPLE), *args], capture_output=True, text=True, timeout=120)


def test_the_gateway_applies_each_kinds_limit_in_batches(tmp_path: Path) -> None:
    proc = run("--store", str(tmp_path / "gateway.sqlite"))
    assert proc.returncode == 0, proc.stderr
    rows = re.findall(r"^(agent:\S+)\s+(\d+)\s+(\d+)\s+(\d+)\s+(\d+)\s+(\d+)/(\d+)$", proc.stdout, re.M)
    table = {key: tuple(map(int, rest)) for key, *rest in rows}
    assert len(table) == 6 and {k.split(":")[3] for k in table} == {"dm", "channel", "group"}
    assert table["agent:main:telegram:dm:carol"][0] == 2  # the peer's own limit
    assert table["agent:main:telegram:dm:alice"][0] == 4
    assert table["agent:main:slack:channel:C-support"][0] == 6
    for key, (limit, turns, in_ctx, evictions, kept, calls) in table.items():
        assert in_ctx <= math.ceil(1.5 * limit), key
        assert (evictions > 0) == (turns > math.ceil(1.5 * limit)), key
        assert kept == calls - evictions  # the prefix holds at every call but an eviction's
    assert "6 sessions in one store, 132 messages stored" in proc.stdout


def test_a_bad_line_is_refused_with_its_number(tmp_path: Path) -> None:
    bad = tmp_path / "msgs.jsonl"
    good = '{"key": "agent:main:slack:dm:x", "from": "x", "text": "hi", "ts": 1}'
    bad.write_text(good + '\n{"key": "room:1"}\n')
    proc = run(str(bad))
    assert proc.returncode == 2 and f"{bad}:2:" in proc.stderr
