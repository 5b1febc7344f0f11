"""``ctxengine tool NAME``: run an agent tool from the shell and print exactly what the model would
see (stdout). A refusal (``ToolError``) prints ``Error: MESSAGE`` (what the model would get as an
error tool result) to stderr and exits 2.

    ctxengine tool read --workspace DIR PATH [--offset N] [--limit N]
    ctxengine tool grep --workspace DIR PATTERN [--path P] [--include GLOB] [--context N] [-i] [--offset N]
    ctxengine tool glob --workspace DIR PATTERN [--path P]
    ctxengine tool retrieve --store DB --session ID ARTIFACT [--offset N] [--limit N] [--query Q]

Mounted by the main CLI as ``app.add_typer(tool_app, name="tool")``.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Annotated

import typer

from ctxengine.tools.base import ToolError
from ctxengine.tools.grep import glob, grep
from ctxengine.tools.read import read_file
from ctxengine.tools.retrieve import retrieve
from ctxengine.tools.workspace import Workspace

tool_app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    help="Run an agent tool and print exactly what the model would see (a refusal exits 2).",
)

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
    from ctxengine.store import SQLiteStore

    def run() -> str:
        if not store.is_file():
            raise ToolError(f"no session store at {store}")
        db = SQLiteStore(store)
        try:
            return retrieve(db, session, artifact, offset, limit, query)
        finally:
            db.close()

    _emit(run)
