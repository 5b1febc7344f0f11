"""Run the proxy with uvicorn (what ``ctxengine proxy`` calls): one process, or a router and
``workers`` worker processes, each session kept on one of them (``workers``), each worker making
its app from the command's options."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import uvicorn

from ctxengine.cli.common import load_policy
from ctxengine.proxy.app import create_app
from ctxengine.proxy.config import ProxyConfig
from ctxengine.store.url import is_postgres_url

LOG_FORMAT = "%(asctime)s %(levelname)s %(message)s"
# an agent pauses between calls; with uvicorn's 5 s default a client races connections it closes
KEEP_ALIVE_S = 120


def logging_setup() -> None:
    """The proxy's log: one line per request on stderr, no key in it."""
    logging.basicConfig(level=logging.INFO, format=LOG_FORMAT)
    logging.getLogger("httpx").setLevel(logging.WARNING)  # its request lines would repeat ours
    # a connection attempt per retry while the database is down: the proxy says it once itself
    logging.getLogger("psycopg.pool").setLevel(logging.ERROR)


def _masked(url: str) -> str:
    """``url`` without its user and password (for the log)."""
    return url.split("://", 1)[0] + "://" + url.rsplit("@", 1)[1] if "@" in url else url


def config_from_options(options: dict[str, Any]) -> ProxyConfig:
    """The ``ProxyConfig`` of ``ctxengine proxy``'s options (a worker process makes it again from
    them). Raises ``typer.Exit`` for an unknown policy or a policy file it cannot read."""
    store = options["store"]
    return ProxyConfig(
        anthropic_upstream=options["anthropic_upstream"],
        openai_upstream=options["openai_upstream"],
        policy=load_policy(options["policy"], options["policy_file"]),
        policy_name=str(options["policy_file"]) if options["policy_file"] else options["policy"],
        window=options["window"],
        store=store if store is None or is_postgres_url(store) else Path(store),
        redis=options["redis"],
        admin_token=options["admin_token"],
        retrieve_tool=options["retrieve_tool"],
        prompt_cache_key=options.get("prompt_cache_key"),
    )


def serve(
    config: ProxyConfig,
    *,
    host: str = "127.0.0.1",
    port: int = 8787,
    workers: int = 1,
    options: dict[str, Any] | None = None,
) -> None:
    """Serve until interrupted. One log line per request on stderr (uvicorn's access log is off:
    the proxy writes its own line, which names no key). ``workers`` > 1: that many worker
    processes behind a router, each session on one of them, each worker's app made from
    ``options`` (the command's; required then)."""
    logging_setup()
    window = f"{config.window:,} tokens" if config.window else "each model's"
    store = _masked(str(config.store)) if config.store else "in memory"
    logging.getLogger("ctxengine.proxy").info(
        "ctxengine proxy on http://%s:%d: Anthropic -> %s, OpenAI -> %s; policy %s, window %s, store %s%s%s"
        "%s", host, port, config.anthropic_upstream, config.openai_upstream, config.policy_name, window,
        store,
        f", locks in {_masked(config.redis)}" if config.redis else "",
        f", {workers} workers (each session on one)" if workers > 1 else "",
        ", retrieve tool on" if config.retrieve_tool else "",
    )  # fmt: skip
    common: dict[str, Any] = {
        "host": host,
        "port": port,
        "access_log": False,
        "log_level": "info",
        "timeout_keep_alive": KEEP_ALIVE_S,
        # the upstream's Date and Server headers go back as sent: uvicorn's own would double them
        "server_header": False,
        "date_header": False,
    }
    if workers > 1:
        if options is None:
            raise ValueError("serve: workers > 1 needs the command's options")
        from ctxengine.proxy.workers import serve_workers

        picklable = {k: str(v) if k == "policy_file" and v else v for k, v in options.items()}
        serve_workers(picklable, workers, common)
    else:
        uvicorn.run(create_app(config), **common)
