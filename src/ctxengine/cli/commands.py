"""The ``ctxengine`` command line: the typer application, ``replay`` (its options; what it runs is
``cli.replay_command.run_replay``) and the other commands, mounted from their modules.

Errors a user can fix (a missing path, an unknown format, a bad policy file) print one line and
exit 2; a malformed record is a warning naming file and line, and the rest still loads.
"""

from __future__ import annotations

import sys
import warnings
from pathlib import Path
from typing import Annotated

import typer

from ctxengine.cli.common import (
    collect as collect,  # re-exported: ``from ctxengine.cli import collect`` keeps working
)
from ctxengine.cli.common import load_transcripts as load_transcripts  # re-exported (tests patch it)
from ctxengine.cli.errors import OneLineErrors
from ctxengine.cli.options import LlmBaseUrlOption, LlmOption, LlmTimeoutOption, ModelOption, ModelsOption
from ctxengine.cli.policies import POLICY_HELP
from ctxengine.cli.replay_command import USER_SESSION_DIRS as USER_SESSION_DIRS  # re-exported
from ctxengine.cli.replay_command import _command_asked, run_replay, show_warning
from ctxengine.cli.replay_command import newest_user_session as newest_user_session  # re-exported
from ctxengine.dashboard.cli_html import HTML_HELP

app = typer.Typer(
    cls=OneLineErrors, add_completion=False, help="Context-window management for LLM agents."
)


def _version() -> str:
    from ctxengine.cli.version import installed_version

    return installed_version()


@app.callback(invoke_without_command=True)
def _root(
    ctx: typer.Context,
    show_version: Annotated[
        bool, typer.Option("--version", is_eager=True, help="Print the version and exit.")
    ] = False,
) -> None:
    """Context-window management for LLM agents."""
    if show_version:
        typer.echo(f"ctxengine {_version()}")
        raise typer.Exit()
    if ctx.invoked_subcommand is None:  # bare ``ctxengine``: the help, and success
        typer.echo(ctx.get_help())
        raise typer.Exit()


def _mount_commands(only: str | None) -> None:
    """Mount the commands that live in other modules: all of them, or with ``only`` just that
    one (each imports its own modules, and a command that does not run should not cost its
    imports at startup: ~0.2 s for the tools, the MCP server and bench together)."""
    if only in (None, "tool"):
        from ctxengine.tools.cli import tool_app

        app.add_typer(
            tool_app, name="tool", help="Run an agent tool and print exactly what the model would see."
        )
    if only in (None, "mcp"):
        from ctxengine.tools.mcp_server import mcp_command

        app.command("mcp", help="Serve the context-aware tools over MCP (stdio).")(mcp_command)
    if only in (None, "bench"):
        from ctxengine.bench import bench_command

        app.command("bench", help="Replay sessions under several policies and compare them in one table.")(
            bench_command
        )
    if only in (None, "eval"):
        from ctxengine.eval.command import eval_command

        app.command("eval", help="Grade each compaction with an LLM judge (Factory's four probes).")(
            eval_command
        )


_mount_commands(_command_asked())


def _mount_proxy() -> None:
    from ctxengine.proxy.command import proxy_command
    from ctxengine.proxy.wrap_command import wrap_command

    app.command("proxy", help="Serve the Anthropic and OpenAI APIs, the engine applied to every request.")(
        proxy_command
    )
    app.command("wrap", help="Run an agent (claude, codex, aider, any command) through a proxy of its own.")(
        wrap_command
    )


if _command_asked() is None:  # ``replay``, ``tool``, ``mcp``, ``bench`` and ``eval`` do not need them
    _mount_proxy()


@app.command()
def replay(
    path: Annotated[
        Path | None, typer.Argument(help="Transcript file or folder (default: your newest session).")
    ] = None,
    policy: Annotated[str, typer.Option(help=POLICY_HELP)] = "default",
    policy_file: Annotated[Path | None, typer.Option(help="Load the policy from a TOML file.")] = None,
    window: Annotated[
        int | None, typer.Option(help="Context window in tokens (default: the model's).")
    ] = None,
    json_out: Annotated[Path | None, typer.Option("--json", help="Write the full report as JSON.")] = None,
    plot_out: Annotated[
        Path | None, typer.Option("--plot", help="Write a PNG of tokens sent per call.")
    ] = None,
    html_out: Annotated[Path | None, typer.Option("--html", help=HTML_HELP)] = None,
    models: ModelsOption = None,
    model: ModelOption = None,
    engine: Annotated[
        str, typer.Option(help="Engine id (core: ctxengine; plugins by entry point).")
    ] = "ctxengine",
    llm: LlmOption = None,
    llm_base_url: LlmBaseUrlOption = None,
    llm_timeout: LlmTimeoutOption = 120.0,
    quiet: Annotated[bool, typer.Option(help="No table (with --json or --plot).")] = False,
    jobs: Annotated[
        int | None,
        typer.Option(help="Processes for a folder's sessions (default: one per core; 1 with --llm)."),
    ] = None,
    demo: Annotated[
        bool,
        typer.Option(
            "--demo",
            help="Replay the two real sessions shipped with ctxengine (a Claude Code session and a "
            "SWE-agent run; sources and licences in ctxengine/data/demo/SOURCES.md).",
        ),
    ] = False,
) -> None:
    """Replay recorded agent sessions through the engine and report tokens, cost and recall."""
    run_replay(
        path,
        policy=policy,
        policy_file=policy_file,
        window=window,
        json_out=json_out,
        plot_out=plot_out,
        html_out=html_out,
        models=models,
        model=model,
        engine=engine,
        llm=llm,
        llm_base_url=llm_base_url,
        llm_timeout=llm_timeout,
        quiet=quiet,
        jobs=jobs,
        demo=demo,
    )


def main() -> None:
    """Console-script entry point."""
    warnings.showwarning = show_warning
    try:
        app()
    except KeyboardInterrupt:  # pragma: no cover
        sys.exit(130)


if __name__ == "__main__":  # pragma: no cover
    main()
