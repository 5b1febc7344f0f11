"""``ctxengine tool NAME``: run an agent tool from the shell and print exactly what the model would
see (stdout). A refusal (``ToolError``) prints ``Error: MESSAGE`` (what the model would get as an
error tool result) to stderr and exits 2.

    ctxengine tool read --workspace DIR PATH [--offset N] [--limit N]
    ctxengine tool grep --workspace DIR PATTERN [--path P] [--include GLOB] [--context N] [-i] [--offset N]
    ctxengine tool glob --workspace DIR PATTERN [--path P]
    ctxengine tool retrieve --store DB --session ID ARTIFACT [--offset N] [--limit N] [--query Q]
    ctxengine tool search --workspace DIR QUERY [--limit N] [--path P] [--scope S] [--semantic]
                          [--store DB --session ID] [--index FILE]
    ctxengine tool open_files --workspace DIR PATH... [--offset N] [--length N] [--window N]
    ctxengine tool instructions --workspace DIR [FILE...]

``search``, ``open_files`` and ``instructions`` run through the same ``ToolExecutor`` and ``call_tool`` as
``ctxengine mcp``, so they print byte for byte what an MCP client gets: search's ranked windows
(its index is the server's, ``DIR/.ctxengine/search.sqlite``, updated by mtime on every run;
``--index :memory:`` leaves the workspace untouched), and open_files' result followed by the
``<open_files>`` block. ``close_files`` has no command: a one-shot process starts with no file
open, so it could only ever answer "not open".

Mounted by the main CLI as ``app.add_typer(tool_app, name="tool")``.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from ctxengine.tools.base import ToolError
from ctxengine.tools.grep import glob, grep
from ctxengine.tools.mcp_server import call_tool, semantic_or_exit
from ctxengine.tools.read import read_file
from ctxengine.tools.registry import Toolbox, build_tools
from ctxengine.tools.retrieve import retrieve
from ctxengine.tools.search import DEFAULT_K, MAX_K
from ctxengine.tools.workspace import Workspace

if TYPE_CHECKING:
    from ctxengine.store.base import SessionStore

tool_app = typer.Typer(
    add_completion=False,
    help="Run an agent tool and print exactly what the model would see (a refusal exits 2).",
)


@tool_app.callback(invoke_without_command=True)
def _tools(ctx: typer.Context) -> None:
    """Run an agent tool and print exactly what the model would see (a refusal exits 2)."""
    if ctx.invoked_subcommand is None:  # bare ``ctxengine tool``: the help, and success
        typer.echo(ctx.get_help())
        raise typer.Exit()

WorkspaceOption = Annotated[
    Path, typer.Option("--workspace", "-w", help="Workspace root the tool is confined to.")
]


def _emit(run: Callable[[], str]) -> None:
    try:
        text = run()
    except ToolError as exc:
        typer.echo(f"Error: {exc}", err=True)
        raise typer.Exit(2) from None
    typer.echo(text)


@tool_app.command("read")
def read_command(
    path: Annotated[str, typer.Argument(help="File path, relative to the workspace root.")],
    workspace: WorkspaceOption = Path("."),
    offset: Annotated[int | None, typer.Option(help="1-based line to start from.")] = None,
    limit: Annotated[int | None, typer.Option(help="Number of lines (default 2000).")] = None,
) -> None:
    """Read a file as numbered lines, paged (Claude Code's rules, pi's hints)."""
    _emit(lambda: read_file(Workspace(workspace), path, offset, limit))


@tool_app.command("grep")
def grep_command(
    pattern: Annotated[str, typer.Argument(help="Regular expression (Python re syntax).")],
    workspace: WorkspaceOption = Path("."),
    path: Annotated[str, typer.Option(help="File or directory to search, relative to the root.")] = ".",
    include: Annotated[str | None, typer.Option(help="Only files matching this glob.")] = None,
    context: Annotated[int, typer.Option(help="Context lines before and after each match.")] = 0,
    case_insensitive: Annotated[
        bool, typer.Option("--case-insensitive", "--ignore-case", "-i", help="Ignore case.")
    ] = False,
    offset: Annotated[int, typer.Option(help="Matches to skip (the next page).")] = 0,
) -> None:
    """Search files for a pattern, 100 matches per page."""
    _emit(lambda: grep(Workspace(workspace), pattern, path, include, context, case_insensitive, offset))


@tool_app.command("glob")
def glob_command(
    pattern: Annotated[str, typer.Argument(help="Glob, e.g. '**/*.py' or '*.{ts,tsx}'.")],
    workspace: WorkspaceOption = Path("."),
    path: Annotated[str, typer.Option(help="Directory to search, relative to the root.")] = ".",
) -> None:
    """List matching files, newest first (at most 1,000)."""
    _emit(lambda: glob(Workspace(workspace), pattern, path))


@tool_app.command("retrieve")
def retrieve_command(
    artifact: Annotated[str, typer.Argument(help="Artifact id, e.g. tool-result/<call id>.")],
    store: Annotated[Path, typer.Option(help="SQLite session store file.")],
    session: Annotated[str, typer.Option(help="Session id.")],
    offset: Annotated[int | None, typer.Option(help="1-based line to start from.")] = None,
    limit: Annotated[int | None, typer.Option(help="Number of lines (default 2000).")] = None,
    query: Annotated[str | None, typer.Option(help="JMESPath expression (JSON artifacts).")] = None,
) -> None:
    """Page through an offloaded tool result of a stored session."""

    def run() -> str:
        db = _read_store(store)
        try:
            return retrieve(db, session, artifact, offset, limit, query)
        finally:
            db.close()

    _emit(run)


def _read_store(store: Path) -> SessionStore:
    """The session store file ``store``, opened to read only; ``ToolError`` when there is none or
    it is not one (a reader must not create or change it)."""
    from ctxengine.store import SQLiteStore, StoreError

    if not store.is_file():
        raise ToolError(f"no session store at {store}")
    try:
        return SQLiteStore(store, read_only=True)
    except StoreError as exc:
        raise ToolError(str(exc)) from None


def _emit_call(build: Callable[[], Toolbox], name: str, arguments: dict[str, Any]) -> None:
    """Run tool ``name`` on the toolbox ``build()`` makes, exactly as ``ctxengine mcp`` answers a
    ``tools/call`` (``call_tool``): print the text, or the ``Error: ...`` line to stderr and exit 2."""
    try:
        box = build()
    except ToolError as exc:
        typer.echo(f"Error: {exc}", err=True)
        raise typer.Exit(2) from None
    try:
        text, error = call_tool(box, name, arguments)
    finally:
        box.close()
    if error:
        typer.echo(text, err=True)
        raise typer.Exit(2)
    typer.echo(text)


@tool_app.command("search")
def search_command(
    query: Annotated[str, typer.Argument(help='Words or "a quoted phrase".')],
    workspace: WorkspaceOption = Path("."),
    limit: Annotated[
        int | None,
        typer.Option("--limit", "-k", help=f"Number of results (default {DEFAULT_K}, at most {MAX_K})."),
    ] = None,
    path: Annotated[
        str | None, typer.Option(help="Restrict files to a directory or glob, e.g. 'src/'.")
    ] = None,
    scope: Annotated[str | None, typer.Option(help="all, files or artifacts (default all).")] = None,
    semantic: Annotated[
        bool,
        typer.Option(
            "--semantic",
            help="Fuse offline embedding similarity into the BM25 ranking (needs the 'semantic' "
            "extra; the model ships in the package, nothing is downloaded).",
        ),
    ] = False,
    store: Annotated[
        Path | None, typer.Option(help="SQLite session store whose artifacts are searched too.")
    ] = None,
    session: Annotated[str | None, typer.Option(help="Session id in the store.")] = None,
    index: Annotated[
        str | None,
        typer.Option(
            help="Search index file. Default: WORKSPACE/.ctxengine/search.sqlite, the one "
            "'ctxengine mcp' uses (kept and updated by mtime, git-ignored); ':memory:' writes nothing."
        ),
    ] = None,
) -> None:
    """Ranked search (SQLite FTS5, BM25) over the workspace files and a session's artifacts; the
    index is WORKSPACE/.ctxengine/search.sqlite, as for 'ctxengine mcp'."""
    embedder = semantic_or_exit() if semantic else None
    db: list[SessionStore] = []

    def build() -> Toolbox:
        if store is not None:
            db.append(_read_store(store))
        return build_tools(workspace, db[0] if db else None, session, index_path=index, embedder=embedder)

    arguments: dict[str, Any] = {"query": query}
    for key, value in (("k", limit), ("scope", scope), ("path", path)):
        if value is not None:
            arguments[key] = value
    try:
        _emit_call(build, "search", arguments)
    finally:
        for d in db:
            d.close()


@tool_app.command("open_files")
def open_files_command(
    paths: Annotated[list[str], typer.Argument(help="Files to open, relative to the workspace root.")],
    workspace: WorkspaceOption = Path("."),
    offset: Annotated[int | None, typer.Option(help="1-based first line to show (default 1).")] = None,
    length: Annotated[
        int | None, typer.Option(help="Number of lines to show (default: to the end, within the char limit).")
    ] = None,
    window: Annotated[
        int,
        typer.Option(
            help="Model context window in tokens; sets the open-files limits (200000: 10 files, "
            "40,000 chars each; 8192: 3 files, 5,000 chars)."
        ),
    ] = 200_000,
) -> None:
    """Open files in a fresh working set: the tool's result, then the <open_files> block."""
    arguments: dict[str, Any] = {"paths": list(paths)}
    if offset is not None:
        arguments["offset"] = offset
    if length is not None:
        arguments["length"] = length
    _emit_call(lambda: build_tools(workspace, window=window), "open_files", arguments)


@tool_app.command("instructions")
def instructions_command(
    files: Annotated[
        list[str] | None,
        typer.Argument(help="Instruction files relative to the root (default: AGENTS.md, CLAUDE.md)."),
    ] = None,
    workspace: WorkspaceOption = Path("."),
) -> None:
    """Load the instruction files (20,000 chars each, 60,000 in all; a missing FILE is marked)."""
    arguments: dict[str, Any] = {"files": list(files)} if files else {}
    _emit_call(lambda: build_tools(workspace), "instructions", arguments)
