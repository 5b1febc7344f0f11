"""``ctxengine wrap AGENT [-- ARGS]``: run an agent through a proxy of its own.

The proxy (``create_app``) is served on a loopback port (a free one unless ``port`` is given)
in a thread of this process, with a persistent store; its log goes to ``proxy.log`` in the
store, not over the agent's screen. The agent runs in the foreground with the variables its
kind reads for a base URL set to the proxy: ``ANTHROPIC_BASE_URL`` (Claude Code, the Anthropic
SDKs), ``OPENAI_BASE_URL`` (the OpenAI SDKs) and ``OPENAI_API_BASE`` (aider, LiteLLM); any other
command gets the same three. Codex CLI reads its base URL from its config, not the environment:
``codex`` also gets ``-c openai_base_url="<proxy>/v1"`` before its arguments (it then tries the
Responses API's WebSocket, which the proxy does not serve, and falls back to HTTP within
seconds). Ctrl-C is the agent's to handle. When the agent exits the proxy stops and ``summary``
prints one table of the run: calls, tokens the agent sent and tokens sent upstream,
compactions, the prompt cache's hit ratio and the money saved.

Errors (``WrapError``, one line each): the agent is not installed, the port is taken, the proxy
did not start.
"""

from __future__ import annotations

import asyncio
import logging
import os
import shutil
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import uvicorn
from rich.console import Console
from rich.table import Table

from ctxengine.proxy.app import create_app
from ctxengine.proxy.config import ProxyConfig
from ctxengine.proxy.options import KEEP_ALIVE_S, LOG_FORMAT

HOST = "127.0.0.1"
LOG_FILE = "proxy.log"  # in the store
START_TIMEOUT_S = 30.0
WIDE = 120  # columns of the summary when stderr is not a terminal


class WrapError(Exception):
    """Why the agent could not be run through the proxy (one line)."""


def agent_env(base: str, environ: dict[str, str] | None = None) -> dict[str, str]:
    """The agent's environment: ``environ`` (default: this process's) with the base-URL
    variables set to the proxy at ``base`` (``http://HOST:PORT``)."""
    env = dict(os.environ if environ is None else environ)
    env.update(ANTHROPIC_BASE_URL=base, OPENAI_BASE_URL=base + "/v1", OPENAI_API_BASE=base + "/v1")
    return env


def agent_argv(argv: Sequence[str], base: str) -> list[str]:
    """The agent's command line: ``argv``, for Codex CLI with its base URL set (``-c``)."""
    if Path(argv[0]).name == "codex":
        return [argv[0], "-c", f'openai_base_url="{base}/v1"', *argv[1:]]
    return list(argv)


def bind(port: int) -> socket.socket:
    """A listening-ready socket on the loopback ``port`` (0: a free one). Raises ``WrapError``
    when the port is taken."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((HOST, port))
    except OSError as exc:
        sock.close()
        raise WrapError(f"port {port} on {HOST} is already taken ({exc.strerror})") from None
    return sock


class ProxyThread:
    """The proxy served by uvicorn on ``sock`` in a daemon thread."""

    def __init__(self, config: ProxyConfig, sock: socket.socket) -> None:
        self.app = create_app(config)
        cfg = uvicorn.Config(
            self.app, log_config=None, access_log=False, timeout_keep_alive=KEEP_ALIVE_S, lifespan="on"
        )
        self.server = uvicorn.Server(cfg)
        self.sock = sock
        self.thread = threading.Thread(target=self.server.run, kwargs={"sockets": [sock]}, daemon=True)

    def start(self) -> None:
        """Serve; returns once the proxy accepts requests. Raises ``WrapError`` otherwise."""
        self.thread.start()
        deadline = time.monotonic() + START_TIMEOUT_S
        while not self.server.started:
            if not self.thread.is_alive() or time.monotonic() > deadline:
                raise WrapError("the proxy did not start (see its log)")
            time.sleep(0.01)

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=30)
        self.sock.close()

    def report(self) -> dict[str, Any]:
        """``GET /ctxengine/sessions``'s report (wrap's store is a folder: the report reads the
        proxy's own table, no shared store, so it is made here, off the server's loop)."""
        report: dict[str, Any] = asyncio.run(self.app.state.proxy.sessions_report())
        return report


def _log_to(path: Path) -> logging.Handler:
    """The proxy's log lines go to ``path`` (the agent owns the terminal)."""
    handler = logging.FileHandler(path, encoding="utf-8")
    handler.setFormatter(logging.Formatter(LOG_FORMAT))
    for name in ("ctxengine.proxy", "uvicorn", "uvicorn.error"):
        logger = logging.getLogger(name)
        logger.addHandler(handler)
        logger.setLevel(logging.INFO)
        logger.propagate = False
    return handler


def run(config: ProxyConfig, argv: Sequence[str], *, port: int = 0, err: Console | None = None) -> int:
    """Run ``argv`` (the agent and its arguments) through a proxy of ``config`` (``store`` set);
    returns the agent's exit status (128 + N when signal N ended it) after printing the summary.
    Raises ``WrapError``."""
    exe = shutil.which(argv[0]) if argv else None
    if exe is None:
        raise WrapError(f"{argv[0] if argv else 'the agent'}: not installed (not found on PATH)")
    if not isinstance(config.store, Path):  # wrap keeps a folder store of its own
        raise WrapError(f"wrap needs a folder for its store, not {config.store!r}")
    store = config.store
    store.mkdir(parents=True, exist_ok=True)
    err = err or Console(stderr=True)
    if not err.is_terminal:
        err.width = max(err.width, WIDE)  # a log file: no need to wrap the table
    proxy = ProxyThread(config, bind(port))
    handler = _log_to(store / LOG_FILE)
    try:
        proxy.start()
        base = f"http://{HOST}:{proxy.sock.getsockname()[1]}"
        err.print(f"ctxengine wrap: {argv[0]} through the proxy on {base} (log {store / LOG_FILE})")
        child = subprocess.Popen(agent_argv([exe, *argv[1:]], base), env=agent_env(base))
        previous = signal.signal(signal.SIGINT, lambda *_: None)  # Ctrl-C is the agent's
        try:
            status = child.wait()
        finally:
            signal.signal(signal.SIGINT, previous)
        report = proxy.report()
    finally:
        proxy.stop()
        logging.getLogger("ctxengine.proxy").removeHandler(handler)
        handler.close()
    err.print(summary(report))
    return status if status >= 0 else 128 - status  # killed by a signal: the shell's convention


def summary(report: dict[str, Any]) -> Table:
    """One table of a run from the proxy's sessions report (tokens; USD)."""
    sessions = report["sessions"]
    total = {k: sum(s[k] for s in sessions) for k in _SUMMED}
    ratio = (
        total["cache_read_tokens"] / total["reported_input_tokens"] if total["reported_input_tokens"] else 0.0
    )
    table = Table(title="ctxengine wrap: the run (tokens)", title_justify="left")
    for name in ("sessions", "calls", "agent sent", "sent upstream", "compactions", "cache hits", "saved"):
        table.add_column(name, justify="right")
    table.add_row(
        f"{len(sessions):,}",
        f"{total['calls']:,}",
        f"{total['client_tokens']:,}",
        f"{total['upstream_tokens']:,}",
        f"{total['compactions']:,}",
        f"{ratio:.0%}",
        f"${total['cost_saved_usd']:.2f}",
    )
    return table


_SUMMED = (
    "calls",
    "client_tokens",
    "upstream_tokens",
    "compactions",
    "cache_read_tokens",
    "reported_input_tokens",
    "cost_saved_usd",
)
