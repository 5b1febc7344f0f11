"""Run the proxy with uvicorn (what ``ctxengine proxy`` calls)."""

from __future__ import annotations

import logging

import uvicorn

from ctxengine.proxy.app import ProxyConfig, create_app

LOG_FORMAT = "%(asctime)s %(levelname)s %(message)s"
# an agent pauses between calls; with uvicorn's 5 s default a client races connections it closes
KEEP_ALIVE_S = 120


def serve(config: ProxyConfig, *, host: str = "127.0.0.1", port: int = 8787) -> None:
    """Serve until interrupted. One log line per request on stderr (uvicorn's access log is off:
    the proxy writes its own line, which names no key)."""
    logging.basicConfig(level=logging.INFO, format=LOG_FORMAT)
    logging.getLogger("httpx").setLevel(logging.WARNING)  # its request lines would repeat ours
    window = f"{config.window:,} tokens" if config.window else "each model's"
    logging.getLogger("ctxengine.proxy").info(
        "ctxengine proxy on http://%s:%d: Anthropic -> %s, OpenAI -> %s; policy %s, window %s, store %s%s",
        host, port, config.anthropic_upstream, config.openai_upstream, config.policy_name, window,
        config.store or "in memory", ", retrieve tool on" if config.retrieve_tool else "",
    )  # fmt: skip
    uvicorn.run(
        create_app(config),
        host=host,
        port=port,
        access_log=False,
        log_level="info",
        timeout_keep_alive=KEEP_ALIVE_S,
        # the upstream's Date and Server headers go back as sent: uvicorn's own would double them
        server_header=False,
        date_header=False,
    )
