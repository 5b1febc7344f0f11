"""Real agents through ``ctxengine proxy``: the figures of the "Real agents" table in docs/proxy.md.

Runs Claude Code CLI, Codex CLI and aider (found like the tests find them: ``CTXENGINE_AGENT_BIN``
or ``PATH``) on the reading task of ``tests/agent_task.py`` through the proxy, in front of the
tests' loopback upstream (``tests/proxy_servers.Upstream``, which checks every request against
the provider's rules). Per agent: requests the upstream got, tokens the agent sent vs tokens
sent upstream (the proxy's figures, summed over the agent's sessions), compactions, invalid
upstream requests, and the proxy's own time before each upstream call (``added=`` of its log
lines), p50 / p99 in milliseconds. aider runs three times: its task (three edits that do not
apply, then one that does); ``aider (edits)``, where every edit applies to the file in the chat and
a failing lint command makes it go on (its files message rewritten on every request); and
``aider (repo map)``, the same where each answer also names another module, which aider adds to
the chat (its repo map, the first message, rewritten too).

    python benchmarks/bench_agents.py [--rounds 30] [--agent aider] [--json OUT]
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import httpx

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "src"))
sys.path.insert(0, str(REPO / "tests"))

from agent_task import AgentTask, client, workspace  # noqa: E402
from ctxengine.proxy import ProxyConfig, create_app  # noqa: E402
from proxy_servers import Upstream, serve  # noqa: E402

QUIET = {
    "DISABLE_TELEMETRY": "1",
    "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
    "DISABLE_AUTOUPDATER": "1",
}
PROMPT = "Read every module in src/ one at a time and summarise each."


class Lines(logging.Handler):
    """The proxy's log lines."""

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


def _command(agent: str, exe: str, base: str, home: Path, edits: bool) -> tuple[list[str], dict[str, str]]:
    env = {"PATH": os.environ["PATH"], "HOME": str(home), "TERM": "dumb", **QUIET}
    if agent == "claude":
        env |= {"ANTHROPIC_BASE_URL": base, "ANTHROPIC_API_KEY": "sk-ant-bench"}
        return [exe, "-p", PROMPT, "--output-format", "json", "--allowedTools", "Bash Read"], env
    if agent == "codex":
        (home / ".codex").mkdir(parents=True, exist_ok=True)
        (home / ".codex" / "config.toml").write_text(
            f'model = "gpt-4o"\nmodel_provider = "p"\n[model_providers.p]\nname = "p"\n'
            f'base_url = "{base}/v1"\nenv_key = "BENCH_KEY"\nwire_api = "responses"\n'
        )
        return [exe, "exec", "--skip-git-repo-check", PROMPT], env | {"BENCH_KEY": "sk-bench"}
    cmd = [
        exe, "--openai-api-base", base + "/v1", "--model", "openai/gpt-4o", "--yes", "--no-check-update",
        "--no-show-model-warnings", "--no-analytics", "--no-auto-commits", "--no-pretty", "--no-stream",
        "--message", "Add hello.py that prints hello.", "src/mod_1.py",
    ]  # fmt: skip
    if edits:  # every edit applies; the lint command fails: aider answers it (3 reflections)
        cmd[-2:-1] = ["Comment the functions of src/mod_1.py."]
        cmd[-3:-3] = ["--lint-cmd", "python: false", "--auto-lint"]
    return cmd, env | {"OPENAI_API_KEY": "sk-bench"}


def measure(
    agent: str, window: int, rounds: int, edits: bool = False, mentions: bool = False
) -> dict[str, Any]:
    """One agent's run (see the module docstring; ``edits``: aider's edits all apply;
    ``mentions``: each answer names another module, which aider adds: its repo map changes)."""
    exe = client(agent)
    if exe is None:
        return {"agent": agent, "skipped": "not installed"}
    tmp = Path(tempfile.mkdtemp(prefix=f"bench-{agent}-"))
    ws = workspace(tmp / "ws")
    up = Upstream(plan=AgentTask(ws, rounds=rounds, edits=edits, mentions=mentions))
    lines = Lines()
    logger = logging.getLogger("ctxengine.proxy")
    logger.addHandler(lines)
    logger.setLevel(logging.INFO)
    try:
        with serve(up.app()) as up_url:
            cfg = ProxyConfig(
                anthropic_upstream=up_url, openai_upstream=up_url + "/v1", store=tmp / "st", window=window
            )
            app = create_app(cfg)
            with serve(app) as base:
                cmd, env = _command(agent, exe, base, tmp / "home", edits)
                done = subprocess.run(cmd, cwd=ws, env=env, capture_output=True, text=True, timeout=900)
                report = httpx.get(base + "/ctxengine/sessions", timeout=60).json()
    finally:
        logger.removeHandler(lines)
    added = [float(x.split("added=")[1].split("ms")[0]) for x in lines.lines if "added=" in x]
    sessions = report["sessions"]
    return {
        "agent": agent + (" (repo map)" if mentions else " (edits)" if edits else ""),
        "window": window,
        "exit": done.returncode,
        "requests": len(up.seen),
        "sessions": len(sessions),
        "client_tokens": sum(s["client_tokens"] for s in sessions),
        "upstream_tokens": sum(s["upstream_tokens"] for s in sessions),
        "compactions": sum(s["compactions"] for s in sessions),
        "invalid": sum(1 for s in up.seen if s.problems),
        "fail_open": report["totals"]["fail_open"],
        "added_ms_p50": statistics.median(added) if added else None,
        "added_ms_p99": statistics.quantiles(added, n=100)[98] if len(added) > 1 else None,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=30)
    ap.add_argument("--agent", choices=("claude", "codex", "aider"), help="only this agent's rows")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    runs = [
        ("claude", 64_000, args.rounds, False),
        ("claude", 32_000, args.rounds, False),
        ("codex", 16_000, args.rounds, False),
        ("aider", 16_000, 0, False),
        ("aider", 16_000, 0, True),
        ("aider", 16_000, 0, True, True),
    ]
    rows = [measure(*run) for run in runs if args.agent in (None, run[0])]
    for row in rows:
        print(json.dumps(row))
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
