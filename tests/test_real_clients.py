"""Real agents through ``ctxengine proxy``: Claude Code CLI, Codex CLI (the Responses wire) and
aider (Chat Completions), each running a reading task (``agent_task``) against the loopback
upstream, which checks every request it gets against the provider's rules. Each run is long
enough for the engine to compact at the window used.

The clients are installed by ``.ci/run`` (pinned versions; ``CTXENGINE_AGENT_BIN`` names their
folder). Outside CI a test whose client is not installed is skipped with the reason; under CI
(``CI=true``) it fails instead.
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from agent_task import AgentTask, client, workspace
from ctxengine.proxy import Proxy, ProxyConfig, create_app
from proxy_servers import Upstream, serve

pytestmark = [
    pytest.mark.usefixtures("clean_llm_env"),
    # windows under 32,000 tokens on purpose (compaction within a few requests)
    pytest.mark.filterwarnings("ignore::ctxengine.models.registry.WindowWarning"),
]

INSTALL = {
    "claude": "npm install -g @anthropic-ai/claude-code@2.1.197",
    "codex": "npm install -g @openai/codex@0.171.0",
    "aider": "pip install aider-chat==0.86.2 (in a venv of its own)",
}
TIMEOUT_S = 600
QUIET = {  # no telemetry, update checks or error reports: the loopback upstream is all they reach
    "DISABLE_TELEMETRY": "1",
    "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
    "DISABLE_AUTOUPDATER": "1",
    "DISABLE_ERROR_REPORTING": "1",
}


def need(name: str) -> str:
    """The installed client ``name``; skipped (failed under CI) when it is not installed."""
    path = client(name)
    if path is None:
        why = f"{name} is not installed ({INSTALL[name]}; or set CTXENGINE_AGENT_BIN)"
        if os.environ.get("CI") == "true":
            pytest.fail(why)
        pytest.skip(why)
    return path


class Recorder:
    """ASGI middleware: the bodies the client sent to each path, in order (what the proxy got)."""

    def __init__(self, app: Any) -> None:
        self.app = app
        self.bodies: dict[str, list[Any]] = {}

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http" or scope["method"] != "POST":
            return await self.app(scope, receive, send)
        chunks: list[bytes] = []

        async def recorded() -> Any:
            message = await receive()
            if message["type"] != "http.request":
                return message
            chunks.append(message.get("body", b""))
            if not message.get("more_body"):
                self.bodies.setdefault(scope["path"], []).append(json.loads(b"".join(chunks) or b"null"))
            return message

        await self.app(scope, recorded, send)


@dataclass
class Run:
    upstream: Upstream
    task: AgentTask
    proxy: Proxy
    base: str
    env: dict[str, str]
    sent: Recorder

    def report(self) -> dict[str, Any]:
        return httpx.get(self.base + "/ctxengine/sessions").json()  # type: ignore[no-any-return]

    def check(self, caplog: pytest.LogCaptureFixture, key: str) -> dict[str, Any]:
        """Every upstream request valid, none failed open, the key in no log line; the report."""
        assert [(s.path, s.problems) for s in self.upstream.seen if s.problems] == []
        report = self.report()
        assert report["totals"]["fail_open"] == 0, report["totals"]
        assert not any(key in r.getMessage() for r in caplog.records)
        return report


@contextmanager
def run(tmp_path: Path, window: int, **task: Any) -> Iterator[Run]:
    ws = workspace(tmp_path / "ws")
    plan = AgentTask(ws, **task)
    up = Upstream(plan=plan)
    with serve(up.app()) as up_url:
        cfg = ProxyConfig(
            anthropic_upstream=up_url, openai_upstream=up_url + "/v1", store=tmp_path / "store", window=window
        )
        app = create_app(cfg)
        recorder = Recorder(app)
        with serve(recorder) as base:
            home = tmp_path / "home"
            (home / ".codex").mkdir(parents=True)
            env = {"PATH": os.environ["PATH"], "HOME": str(home), "TERM": "dumb", **QUIET}
            yield Run(up, plan, app.state.proxy, base, env, recorder)


def _session(report: dict[str, Any], provider: str) -> dict[str, Any]:
    """The client's one session of tool calls (side calls are sessions of their own)."""
    sessions = [s for s in report["sessions"] if s["provider"] == provider]
    return max(sessions, key=lambda s: s["calls"])


def test_claude_code(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    exe = need("claude")
    key = "sk-ant-test-real-claude-code"
    with caplog.at_level(logging.INFO), run(tmp_path, 32_000, rounds=16) as r:
        env = r.env | {"ANTHROPIC_BASE_URL": r.base, "ANTHROPIC_API_KEY": key}
        prompt = "Read every module in src/ one at a time and summarise each."
        cmd = [exe, "-p", prompt, "--output-format", "json", "--allowedTools", "Bash Read"]
        out = subprocess.run(cmd, cwd=r.task.root, env=env, capture_output=True, text=True, timeout=TIMEOUT_S)
        assert out.returncode == 0, out.stderr[-2000:]
        result = json.loads(out.stdout)
        assert not result["is_error"] and result["num_turns"] >= 16, out.stdout[:500]
        session = _session(r.check(caplog, key), "anthropic")
    assert session["calls"] >= 17 and session["compactions"] >= 1, session
    bodies = [s.body for s in r.upstream.seen if s.path == "/v1/messages" and s.body.get("tools")]
    assert any(m["role"] == "system" for m in bodies[-1]["messages"])  # its agent list, carried


def test_codex_cli_on_the_responses_wire(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    exe = need("codex")
    key = "sk-test-real-codex"
    with caplog.at_level(logging.INFO), run(tmp_path, 16_000, rounds=12) as r:
        (Path(r.env["HOME"]) / ".codex" / "config.toml").write_text(
            'model = "gpt-4o"\nmodel_provider = "ctxproxy"\n[model_providers.ctxproxy]\n'
            f'name = "ctxengine proxy"\nbase_url = "{r.base}/v1"\nenv_key = "CTXPROXY_KEY"\n'
            'wire_api = "responses"\n'
        )
        env = r.env | {"CTXPROXY_KEY": key}
        prompt = "Read every module in src/ one at a time with cat and summarise each."
        cmd = [exe, "exec", "--skip-git-repo-check", prompt]
        out = subprocess.run(
            cmd,
            cwd=r.task.root,
            env=env,
            capture_output=True,
            text=True,
            timeout=TIMEOUT_S,
            stdin=subprocess.DEVNULL,
        )
        assert out.returncode == 0, (out.stdout + out.stderr)[-2000:]
        session = _session(r.check(caplog, key), "openai")
    assert session["calls"] >= 13 and session["compactions"] >= 1, session
    secrets = {item["id"]: item["encrypted_content"] for item in r.task.reasoning_sent}
    requests = [s.body for s in r.upstream.seen if s.path == "/v1/responses"]
    assert len(requests) == len(r.sent.bodies["/v1/responses"])
    kept = 0
    for client_body, upstream_body in zip(r.sent.bodies["/v1/responses"], requests, strict=True):
        reasoning = [i for i in upstream_body["input"] if i.get("type") == "reasoning"]
        for item in reasoning:  # store: false: each as Codex sent it, its secret whole
            assert item in client_body["input"] and item["encrypted_content"] == secrets[item["id"]]
        kept += len(reasoning)
    assert kept >= 12
    assert not any("/v1/responses passed through" in rec.getMessage() for rec in caplog.records)


def test_aider_on_chat_completions(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    exe = need("aider")
    key = "sk-test-real-aider"
    with caplog.at_level(logging.INFO), run(tmp_path, 16_000, misses=3) as r:
        env = r.env | {"OPENAI_API_KEY": key}
        cmd = [
            exe, "--openai-api-base", r.base + "/v1", "--model", "openai/gpt-4o", "--yes",
            "--no-check-update", "--no-show-model-warnings", "--no-analytics", "--no-auto-commits",
            "--no-pretty", "--no-stream", "--message", "Add hello.py that prints hello.", "src/mod_1.py",
        ]  # fmt: skip
        out = subprocess.run(cmd, cwd=r.task.root, env=env, capture_output=True, text=True, timeout=TIMEOUT_S)
        assert out.returncode == 0, (out.stdout + out.stderr)[-2000:]
        assert (r.task.root / "hello.py").exists(), out.stdout[-2000:]
        report = r.check(caplog, key)
    # aider moves its files message (and its reply) to just before the newest prompt and keeps
    # its SEARCH/REPLACE reminder last on every request: the proxy realigns its session (the
    # moved messages leave the engine's view and come back where they now stand), so the
    # conversation is one session; aider's summarizer (another system prompt, gpt-4o-mini) is a
    # session of its own per call
    main = [s for s in report["sessions"] if s["model"] == "gpt-4o"]
    assert len(main) == 1, report["sessions"]
    assert main[0]["branch_of"] is None and main[0]["calls"] >= 3, main  # 3 misses, the edit
    assert sum(s["compactions"] for s in report["sessions"]) >= 1, report["sessions"]
    assert any("realigned:" in rec.getMessage() for rec in caplog.records)


def test_aider_edits_applied_rewrite_its_files_message(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Every edit applies to the file in the chat and a failing lint command makes aider go on
    (it answers the lint errors, up to its 3 reflections): each request after an edit carries the
    files message rewritten with the file's new text under the same reply. One session."""
    exe = need("aider")
    key = "sk-test-real-aider-edits"
    with caplog.at_level(logging.INFO), run(tmp_path, 16_000, edits=True) as r:
        env = r.env | {"OPENAI_API_KEY": key}
        cmd = [
            exe, "--openai-api-base", r.base + "/v1", "--model", "openai/gpt-4o", "--yes",
            "--no-check-update", "--no-show-model-warnings", "--no-analytics", "--no-auto-commits",
            "--no-pretty", "--no-stream", "--lint-cmd", "python: false", "--auto-lint",
            "--message", "Comment the functions of src/mod_1.py.", "src/mod_1.py",
        ]  # fmt: skip
        out = subprocess.run(cmd, cwd=r.task.root, env=env, capture_output=True, text=True, timeout=TIMEOUT_S)
        assert out.returncode == 0, (out.stdout + out.stderr)[-2000:]
        report = r.check(caplog, key)
        bodies = [b for b in r.sent.bodies["/v1/chat/completions"] if b["model"] == "gpt-4o"]
    source = (r.task.root / "src" / "mod_1.py").read_text()
    assert [f"# edited {k}" in source for k in range(4)] == [True] * 4  # the first answer, 3 reflections
    files = {m["content"] for b in bodies for m in b["messages"] if "added these files" in str(m["content"])}
    assert len(bodies) == 4 and len(files) == 4  # each request with the file's text of its time
    main = [s for s in report["sessions"] if s["model"] == "gpt-4o"]
    assert len(main) == 1, report["sessions"]
    assert main[0]["branch_of"] is None and main[0]["calls"] == 4, main
    assert sum(s["compactions"] for s in report["sessions"]) >= 1, report["sessions"]
    realigned = [rec.getMessage() for rec in caplog.records if "realigned:" in rec.getMessage()]
    assert len(realigned) == 3, realigned  # each request after an edit


def test_aider_repo_map_rewritten_realigns_its_session(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Each answer names another module, which aider adds to the chat: its repo map (the first
    message, under the same "Ok, I won't try and edit those files") and its files message are
    rewritten. The request shares no leading message with its session, which the newest session
    of its chain root (same key and system prompt) realigns: one session, not a branch per request."""
    exe = need("aider")
    key = "sk-test-real-aider-repo-map"
    with caplog.at_level(logging.INFO), run(tmp_path, 16_000, edits=True, mentions=True) as r:
        env = r.env | {"OPENAI_API_KEY": key}
        cmd = [
            exe, "--openai-api-base", r.base + "/v1", "--model", "openai/gpt-4o", "--yes",
            "--no-check-update", "--no-show-model-warnings", "--no-analytics", "--no-auto-commits",
            "--no-pretty", "--no-stream", "--message", "Comment the functions of src/mod_1.py.",
            "src/mod_1.py",
        ]  # fmt: skip
        out = subprocess.run(cmd, cwd=r.task.root, env=env, capture_output=True, text=True, timeout=TIMEOUT_S)
        assert out.returncode == 0, (out.stdout + out.stderr)[-2000:]
        report = r.check(caplog, key)
        bodies = [b for b in r.sent.bodies["/v1/chat/completions"] if b["model"] == "gpt-4o"]
    maps = [b["messages"][1]["content"] for b in bodies]
    assert all("summaries of some files" in m for m in maps)
    assert len(bodies) >= 3 and len(set(maps)) >= 2, len(set(maps))  # the repo map was rewritten
    main = [s for s in report["sessions"] if s["model"] == "gpt-4o"]
    assert len(main) == 1, report["sessions"]
    assert main[0]["branch_of"] is None and main[0]["calls"] == len(bodies), main
    realigned = [rec.getMessage() for rec in caplog.records if "realigned:" in rec.getMessage()]
    assert len(realigned) == len(bodies) - 1, realigned


def test_aider_through_a_gateway_with_two_workers_stays_one_session(tmp_path: Path) -> None:
    """The same task through ``ctxengine proxy --workers 2`` on PostgreSQL and Redis: the router
    keeps a conversation on a worker by its first user message, which aider rewrites (its repo
    map), so a later request may reach the other worker, which never saw the session: it aligns
    the request with the client digests the store keeps and replays the turns from the store.
    One session, every upstream request valid."""
    from gateway_servers import pg_schema_url
    from test_gateway_cli import _node

    exe = need("aider")
    ws = workspace(tmp_path / "ws")
    up = Upstream(plan=AgentTask(ws, edits=True, mentions=True))
    log = tmp_path / "node.log"
    with (
        pg_schema_url() as store,
        serve(up.app()) as up_url,
        _node(up_url, store, "--workers", "2", log=log) as (base, _proc),
    ):
        env = {"PATH": os.environ["PATH"], "HOME": str(tmp_path), "TERM": "dumb", **QUIET}
        env["OPENAI_API_KEY"] = "sk-test-real-aider-gateway"
        cmd = [
            exe, "--openai-api-base", base + "/v1", "--model", "openai/gpt-4o", "--yes",
            "--no-check-update", "--no-show-model-warnings", "--no-analytics", "--no-auto-commits",
            "--no-pretty", "--no-stream", "--message", "Comment the functions of src/mod_1.py.",
            "src/mod_1.py",
        ]  # fmt: skip
        out = subprocess.run(cmd, cwd=ws, env=env, capture_output=True, text=True, timeout=TIMEOUT_S)
        assert out.returncode == 0, (out.stdout + out.stderr)[-2000:]
        report = httpx.get(base + "/ctxengine/sessions", timeout=60).json()
    main = [s for s in report["sessions"] if s["model"] == "gpt-4o"]
    calls = [s for s in up.seen if s.path.endswith("/chat/completions") and s.body.get("model") == "gpt-4o"]
    assert not [s.problems for s in up.seen if s.problems]
    assert len(main) == 1 and main[0]["branch_of"] is None, (report, log.read_text()[-3000:])
    assert main[0]["calls"] == len(calls) >= 3, report
    # the rewritten repo map sent a request to the worker that had not served the session (the
    # affinity of this pinned aider's requests is deterministic): rebuilt there from the store
    assert report["totals"]["sessions_rebuilt"] >= 1 and report["totals"]["turns_replayed"] >= 1, report


def test_claude_code_through_ctxengine_wrap(tmp_path: Path) -> None:
    exe = need("claude")
    ws = workspace(tmp_path / "ws", modules=4)
    up = Upstream(plan=AgentTask(ws, rounds=3))
    env = {**os.environ, **QUIET, "HOME": str(tmp_path), "ANTHROPIC_API_KEY": "sk-ant-test-wrap"}
    env["PATH"] = f"{Path(exe).parent}{os.pathsep}{env['PATH']}"
    with serve(up.app()) as up_url:
        cmd = [
            sys.executable, "-m", "ctxengine.cli.commands", "wrap", "--store", str(tmp_path / "store"),
            "--anthropic-upstream", up_url, "claude", "--", "-p", "Read the modules.",
            "--output-format", "json", "--allowedTools", "Bash Read",
        ]  # fmt: skip
        done = subprocess.run(cmd, cwd=ws, env=env, capture_output=True, text=True, timeout=TIMEOUT_S)
    assert done.returncode == 0, done.stderr[-2000:]
    assert json.loads(done.stdout)["num_turns"] >= 3
    assert "sk-ant-test-wrap" not in done.stderr + (tmp_path / "store" / "proxy.log").read_text()
    row = [line for line in done.stderr.splitlines() if line.startswith("│")][-1]
    assert int(row.strip("│ ").split("│")[1]) >= 4  # calls: the 3 rounds and the answer (and side calls)
    assert not any(s.problems for s in up.seen)


def test_codex_through_ctxengine_wrap(tmp_path: Path) -> None:
    """Codex's own provider, its base URL set by wrap (a config override: Codex reads no
    variable for it); Codex tries the WebSocket transport first and falls back to HTTP."""
    exe = need("codex")
    ws = workspace(tmp_path / "ws", modules=4)
    up = Upstream(plan=AgentTask(ws, rounds=3))
    env = {**os.environ, "HOME": str(tmp_path), "OPENAI_API_KEY": "sk-test-wrap-codex"}
    env["PATH"] = f"{Path(exe).parent}{os.pathsep}{env['PATH']}"
    with serve(up.app()) as up_url:
        cmd = [
            sys.executable, "-m", "ctxengine.cli.commands", "wrap", "--store", str(tmp_path / "store"),
            "--openai-upstream", up_url + "/v1", "codex", "--", "exec", "--skip-git-repo-check",
            "-m", "gpt-4o", "Read the modules.",
        ]  # fmt: skip
        done = subprocess.run(
            cmd, cwd=ws, env=env, capture_output=True, text=True, timeout=TIMEOUT_S, stdin=subprocess.DEVNULL
        )
    assert done.returncode == 0, done.stderr[-2000:]
    row = [line for line in done.stderr.splitlines() if line.startswith("│")][-1]
    assert int(row.strip("│ ").split("│")[1]) >= 4  # calls: the 3 rounds and the answer
    assert [s.path for s in up.seen if s.path == "/v1/responses"] and not any(s.problems for s in up.seen)
