"""Run the proxy with uvicorn (what ``ctxengine proxy`` calls)."""

from __future__ import annotations

import logging
from typing import Any

import uvicorn

from ctxengine.proxy.app import ProxyConfig, create_app

LOG_FORMAT = "%(asctime)s %(levelname)s %(message)s"
# an agent pauses between calls; with uvicorn's 5 s default a client races connections it closes
KEEP_ALIVE_S = 120


def _logging() -> None:
    logging.basicConfig(level=logging.INFO, format=LOG_FORMAT)
    logging.getLogger("httpx").setLevel(logging.WARNING)  # its request lines would repeat ours


def _masked(url: str) -> str:
    """``url`` without its user and password (for the log)."""
    return url.split("://", 1)[0] + "://" + url.rsplit("@", 1)[1] if "@" in url else url


def serve(
    config: ProxyConfig,
    *,
    host: str = "127.0.0.1",
    port: int = 8787,
) -> None:
    """Serve until interrupted. One log line per request on stderr (uvicorn's access log is off:
    the proxy writes its own line, which names no key)."""
    _logging()
    window = f"{config.window:,} tokens" if config.window else "each model's"
    store = _masked(str(config.store)) if config.store else "in memory"
    logging.getLogger("ctxengine.proxy").info(
        "ctxengine proxy on http://%s:%d: Anthropic -> %s, OpenAI -> %s; policy %s, window %s, store %s%s%s",
        host, port, config.anthropic_upstream, config.openai_upstream, config.policy_name, window,
        store,
        f", locks in {_masked(config.redis)}" if config.redis else "",
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
    uvicorn.run(create_app(config), **common)
