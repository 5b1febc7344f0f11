"""``ctxengine wrap``: the command line of ``proxy.wrap`` (mounted by ``ctxengine.cli.commands``)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from ctxengine.cli.common import check_window_option, fail, load_policy
from ctxengine.proxy.command import missing_extra
from ctxengine.proxy.upstream import ANTHROPIC_API, OPENAI_API

DEFAULT_STORE = Path("~/.ctxengine/wrap")


def wrap_command(
    agent: Annotated[str, typer.Argument(help="The agent: claude, codex, aider, or any command.")],
    args: Annotated[list[str] | None, typer.Argument(help="The agent's arguments (after --).")] = None,
    port: Annotated[int, typer.Option(help="Loopback port of the proxy (0: a free one).")] = 0,
    policy: Annotated[
        str, typer.Option(help="Policy name (default, a preset such as claude-code).")
    ] = "default",
    window: Annotated[
        int | None, typer.Option(help="Context window in tokens (default: the model's).")
    ] = None,
    anthropic_upstream: Annotated[str, typer.Option(help="Anthropic API base URL.")] = ANTHROPIC_API,
    openai_upstream: Annotated[str, typer.Option(help="OpenAI API base URL, including /v1.")] = OPENAI_API,
    store: Annotated[Path, typer.Option(help="Folder of the proxy's store and log.")] = DEFAULT_STORE,
) -> None:
    """Run AGENT through a proxy of its own: a free loopback port, a persistent store, the
    agent's base-URL variables set; one table of the run at exit. Example: ctxengine wrap
    claude -- -p "fix the tests"."""
    missing = missing_extra()
    if missing:
        raise fail(missing)
    check_window_option(window)
    from ctxengine.proxy.config import ProxyConfig
    from ctxengine.proxy.wrap import WrapError, run

    config = ProxyConfig(
        anthropic_upstream=anthropic_upstream,
        openai_upstream=openai_upstream,
        policy=load_policy(policy, None),
        policy_name=policy,
        window=window,
        store=store.expanduser(),
    )
    try:
        status = run(config, [agent, *(args or [])], port=port)
    except WrapError as exc:
        raise fail(str(exc)) from None
    raise typer.Exit(status)
