"""``ctxengine proxy``: the command line of the proxy (mounted by ``ctxengine.cli``)."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Annotated

import typer

from ctxengine.cli_common import check_window_option, fail, load_policy
from ctxengine.proxy.upstream import ANTHROPIC_API, OPENAI_API

NEEDS = ("starlette", "uvicorn", "httpx")


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
        Path | None, typer.Option(help="Folder for the session store (proxy.sqlite); default: memory only.")
    ] = None,
    prompt_cache_key: Annotated[
        bool | None,
        typer.Option(
            "--prompt-cache-key/--no-prompt-cache-key",
            help="Send the session's id as OpenAI's prompt_cache_key when the client sets none "
            "(default: only to api.openai.com).",
        ),
    ] = None,
    retrieve_tool: Annotated[
        bool,
        typer.Option("--retrieve-tool", help="Offer the model ctxengine's retrieve tool; the proxy runs it."),
    ] = False,
) -> None:
    """Serve the Anthropic Messages and OpenAI Chat Completions APIs, with the engine applied to
    every request. Point an agent at it with ANTHROPIC_BASE_URL=http://HOST:PORT or an OpenAI
    base URL of http://HOST:PORT/v1."""
    missing = missing_extra()
    if missing:
        raise fail(missing)
    check_window_option(window)
    if store is not None and store.exists() and not store.is_dir():
        raise fail(f"--store {store}: is not a folder (the proxy keeps proxy.sqlite in it)")
    pol = load_policy(policy, policy_file)
    from ctxengine.proxy.app import ProxyConfig
    from ctxengine.proxy.server import serve

    config = ProxyConfig(
        anthropic_upstream=anthropic_upstream,
        openai_upstream=openai_upstream,
        policy=pol,
        policy_name=str(policy_file) if policy_file else policy,
        window=window,
        store=store,
        retrieve_tool=retrieve_tool,
        prompt_cache_key=prompt_cache_key,
    )
    serve(config, host=host, port=port)
