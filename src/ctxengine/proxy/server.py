"""Run the proxy with uvicorn (what ``ctxengine proxy`` calls): one process, or a router and
``workers`` worker processes, each session kept on one of them (``workers``), each worker making
its app from the command's options."""

from __future__ import annotations

import dataclasses
import logging
from typing import Any

import uvicorn

from ctxengine.proxy.app import create_app
from ctxengine.proxy.config import ProxyConfig
from ctxengine.proxy.options import KEEP_ALIVE_S, logging_setup, masked


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
    store = masked(str(config.store)) if config.store else "in memory"
    logging.getLogger("ctxengine.proxy").info(
        "ctxengine proxy on http://%s:%d: Anthropic -> %s, OpenAI -> %s; policy %s, window %s, store %s%s%s"
        "%s", host, port, config.anthropic_upstream, config.openai_upstream, config.policy_name, window,
        store,
        f", locks in {masked(config.redis)}" if config.redis else "",
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
        uvicorn.run(create_app(dataclasses.replace(config, freeze_heap=True, job_process=True)), **common)
