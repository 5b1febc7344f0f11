"""The proxy's process setup shared by the server and its worker processes: the log, and the
``ProxyConfig`` made from ``ctxengine proxy``'s options (each worker makes it again from them)."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from ctxengine.cli.common import load_policy
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


def masked(url: str) -> str:
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
        unseen_whole=not options.get("offload_unseen", False),
        prompt_cache_key=options.get("prompt_cache_key"),
    )
