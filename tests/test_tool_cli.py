"""``ctxengine tool ...`` through typer's CliRunner, mounted as the main CLI mounts it; the first
test replays the acceptance check (../shared/acceptance/tools) step by step."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from ctxengine.layers.base import artifact_id
from ctxengine.store import SQLiteStore
from ctxengine.tools.cli import tool_app

app = typer.Typer()
app.add_typer(tool_app, name="tool")
runner = CliRunner()


def run(*args: str) -> tuple[int, str, str]:
    result = runner.invoke(app, ["tool", *args])
    return result.exit_code, result.stdout, result.stderr


@pytest.fixture
def acceptance(tmp_path: Path) -> tuple[Path, Path]:
    """The workspace the acceptance check builds."""
    top = tmp_path
    ws = top / "ws"
    (ws / "sub").mkdir(parents=True)
    with open(ws / "big.txt", "w") as f:
        for i in range(1, 5001):
            f.write(f"line {i} xxxxxxxx\n")
    with open(ws / "long.txt", "w") as f:
        f.write("a" * 5000 + "\nshort\n")
    (ws / "bin.dat").write_bytes(bytes(range(256)) * 100)
    (ws / "sub" / "n.py").write_text("needle_alpha here\n")
    (top / "outside.txt").write_text("secret-outside\n")
    os.symlink(top / "outside.txt", ws / "link.txt")
    return top, ws


def test_acceptance_check(acceptance: tuple[Path, Path]) -> None:
    top, ws = acceptance
    w = str(ws)
    code, out, _ = run("read", "--workspace", w, "big.txt")
    assert code == 0
    assert "[Showing lines 1-2000 of 5000. Use offset=2001 to continue.]" in out
    code, out, _ = run("read", "--workspace", w, "big.txt", "--offset", "4990", "--limit", "20")
    assert code == 0 and "line 5000 " in out and "line 4989 " not in out
    code, out, _ = run("read", "--workspace", w, "long.txt")
    assert code == 0 and len(out) < 4500 and "short" in out
    for outside in ("../outside.txt", str(top / "outside.txt")):
        assert run("read", "--workspace", w, outside)[0] == 2
    code, out, err = run("read", "--workspace", w, "link.txt")
    assert code == 2 and "secret-outside" not in out + err
    code, out, err = run("read", "--workspace", w, "bin.dat")
    assert "binary" in (out + err).lower()
    code, out, _ = run("grep", "--workspace", w, "needle_alpha")
    assert code == 0 and "n.py" in out
    code, out, err = run("grep", "--workspace", w, "secret-outside")
    assert "link.txt" not in out + err


def test_read_prints_exactly_what_the_model_sees(acceptance: tuple[Path, Path]) -> None:
    _, ws = acceptance
    from ctxengine.tools.read import read_file
    from ctxengine.tools.workspace import Workspace

    code, out, err = run("read", "-w", str(ws), "big.txt", "--offset", "10", "--limit", "3")
    assert code == 0 and err == ""
    assert out == read_file(Workspace(ws), "big.txt", 10, 3) + "\n"


def test_refusal_goes_to_stderr_with_exit_2(acceptance: tuple[Path, Path]) -> None:
    _, ws = acceptance
    code, out, err = run("read", "--workspace", str(ws), "../outside.txt")
    assert code == 2 and out == ""
    assert err.startswith("Error: path '../outside.txt' is outside the workspace root")
    code, _, err = run("read", "--workspace", str(ws / "nope"), "x")
    assert code == 2 and "not a directory" in err
    code, _, err = run("grep", "--workspace", str(ws), "(")
    assert code == 2 and "invalid regular expression" in err


def test_grep_options_and_glob(tmp_path: Path) -> None:
    (tmp_path / "a.py").write_text("".join(f"Hit {i}\n" for i in range(150)))
    (tmp_path / "b.md").write_text("hit md\nafter\n")
    w = str(tmp_path)
    code, out, _ = run("grep", "-w", w, "hit", "-i", "--include", "*.py")
    assert code == 0
    assert out.rstrip("\n").endswith(
        '[100 of 150 matches shown. Next page: grep(pattern="hit", include="*.py", '
        "case_insensitive=true, offset=100)]"
    )
    code, out, _ = run("grep", "-w", w, "hit", "-i", "--include", "*.py", "--offset", "100")
    assert code == 0 and out.startswith("a.py:101: Hit 100")
    code, out, _ = run("grep", "-w", w, "hit md", "--context", "1")
    assert out == "b.md:1: hit md\nb.md-2- after\n"
    os.utime(tmp_path / "a.py", (1, 1))
    code, out, _ = run("glob", "-w", w, "*")
    assert code == 0 and out == "b.md\na.py\n"


def test_retrieve_command(tmp_path: Path) -> None:
    db_path = tmp_path / "store.db"
    db = SQLiteStore(db_path)
    db.put_artifact("s", artifact_id("c1"), json.dumps({"rows": [{"n": 1}, {"n": 2}]}), {})
    db.close()
    code, out, _ = run("retrieve", "--store", str(db_path), "--session", "s", "c1", "--query", "rows[*].n")
    assert code == 0 and json.loads(out) == [1, 2]
    code, _, err = run("retrieve", "--store", str(tmp_path / "none.db"), "--session", "s", "c1")
    assert code == 2 and "no session store" in err
