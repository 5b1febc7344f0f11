"""``ctxengine proxy``: the command line of the proxy (mounted by ``ctxengine.cli.commands``)."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Annotated

import typer

from ctxengine.cli.common import check_window_option, fail
from ctxengine.proxy.upstream import ANTHROPIC_API, OPENAI_API

NEEDS = ("starlette", "uvicorn", "httpx")
GATEWAY_NEEDS = ("psycopg", "psycopg_pool")


def missing_extra() -> str | None:
    """What to install when the ``proxy`` extra's packages are missing, else None."""
    missing = [m for m in NEEDS if importlib.util.find_spec(m) is None]
    return f"the proxy needs {', '.join(missing)}: pip install 'ctxengine[proxy]'" if missing else None


def proxy_command(
    host: Annotated[str, typer.Option(help="Address to bind (loopback by default).")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="Port to listen on.")] = 8787,
    policy: Annotated[
        str, typer.Option(help="Policy name (default, a preset such as claude-code).")
    ] = "default",
    policy_file: Annotated[Path | None, typer.Option(help="Load the policy from a TOML file.")] = None,
    window: Annotated[
        int | None, typer.Option(help="Context window in tokens (default: the model's).")
    ] = None,
    anthropic_upstream: Annotated[str, typer.Option(help="Anthropic API base URL.")] = ANTHROPIC_API,
    openai_upstream: Annotated[str, typer.Option(help="OpenAI API base URL, including /v1.")] = OPENAI_API,
    store: Annotated[
        str | None,
        typer.Option(
            help="Session store: a folder (SQLite proxy.sqlite in it; sessions survive a restart) or "
            "postgresql://HOST/DB (sessions shared by every proxy on that database); default: memory only."
        ),
    ] = None,
    prompt_cache_key: Annotated[
        bool | None,
        typer.Option(
            "--prompt-cache-key/--no-prompt-cache-key",
            help="Send the session's id as OpenAI's prompt_cache_key when the client sets none "
            "(default: only to api.openai.com).",
        ),
    ] = None,
    redis: Annotated[
        str | None,
        typer.Option(help="redis://HOST:PORT/N: per-session locks across proxies (with a PostgreSQL store)."),
    ] = None,
    workers: Annotated[
        int,
        typer.Option(
            min=1,
            help="Worker processes, each session kept on one (more than 1 needs a PostgreSQL store "
            "and --redis).",
        ),
    ] = 1,
    admin_token: Annotated[
        str | None,
        typer.Option(help="Who sends x-ctxengine-admin: TOKEN lists every session; others only their key's."),
    ] = None,
    unauthenticated: Annotated[
        bool,
        typer.Option("--unauthenticated", help="Allow binding beyond loopback without --admin-token."),
    ] = False,
    retrieve_tool: Annotated[
        bool,
        typer.Option("--retrieve-tool", help="Offer the model ctxengine's retrieve tool; the proxy runs it."),
    ] = False,
    offload_unseen: Annotated[
        bool,
        typer.Option(
            "--offload-unseen",
            help="Offload a tool result over the budget's cap on arrival, before the model has seen it "
            "(default: it reaches the model whole once, unless the window cannot take it).",
        ),
    ] = False,
) -> None:
    """Serve the Anthropic Messages and OpenAI Chat Completions APIs, with the engine applied to
    every request. Point an agent at it with ANTHROPIC_BASE_URL=http://HOST:PORT or an OpenAI
    base URL of http://HOST:PORT/v1."""
    options = {k: v for k, v in locals().items() if k not in ("host", "port", "workers", "unauthenticated")}
    missing = missing_extra()
    if missing:
        raise fail(missing)
    check_window_option(window)
    check_gateway_options(host, store, redis, workers, admin_token, unauthenticated)
    from ctxengine.proxy.options import config_from_options
    from ctxengine.proxy.server import serve

    config = config_from_options(options)

    serve(config, host=host, port=port, workers=workers, options=options)


def check_gateway_options(
    host: str,
    store: str | None,
    redis: str | None,
    workers: int,
    admin_token: str | None,
    unauthenticated: bool,
) -> None:
    """Refuse (``typer.Exit``, one line on stderr) what the options cannot do safely."""
    from ctxengine.proxy.admin import is_loopback
    from ctxengine.store.url import is_postgres_url

    postgres = store is not None and is_postgres_url(store)
    if not is_loopback(host) and admin_token is None and not unauthenticated:
        raise fail(
            f"--host {host}: beyond loopback every client could list every session; "
            "give --admin-token TOKEN (or --unauthenticated to serve without one)"
        )
    if postgres or redis:
        missing = [m for m in GATEWAY_NEEDS if importlib.util.find_spec(m) is None]
        if redis and importlib.util.find_spec("redis") is None:
            missing.append("redis")
        if missing:
            raise fail(f"a shared store needs {', '.join(missing)}: pip install 'ctxengine[gateway]'")
    if redis and not postgres:
        raise fail("--redis locks sessions shared in a store: give --store postgresql://HOST/DB too")
    if workers > 1 and not (postgres and redis):
        raise fail(
            f"--workers {workers}: processes can share sessions only through --store postgresql://... "
            "and --redis redis://... (with another store two workers would write one session at once)"
        )
    if store is not None and not postgres and Path(store).exists() and not Path(store).is_dir():
        raise fail(f"--store {store}: is not a folder (the proxy keeps proxy.sqlite in it)")
