"""``ctxengine wrap AGENT [-- ARGS]``: the agent (here a Python script using the official SDKs,
as an agent would) runs through a proxy of its own in front of the loopback upstream."""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path

import pytest

from ctxengine.proxy.wrap import agent_argv, agent_env
from proxy_servers import Upstream, serve

pytestmark = pytest.mark.usefixtures("clean_llm_env")

AGENT = """
import os, sys
import anthropic, openai
assert os.environ["OPENAI_API_BASE"] == os.environ["OPENAI_BASE_URL"]
a = anthropic.Anthropic(api_key="sk-ant-wrap-test", max_retries=0)  # ANTHROPIC_BASE_URL
o = openai.OpenAI(api_key="sk-wrap-test", max_retries=0)  # OPENAI_BASE_URL
msgs = [{"role": "user", "content": "Hello there."}]
print(a.messages.create(model="claude-sonnet-4-5", max_tokens=16, messages=msgs).content[0].text)
print(o.responses.create(model="gpt-4o", input="Hello there.").output_text)
sys.exit(3)
"""


def _wrap(tmp_path: Path, up_url: str, *args: str) -> subprocess.CompletedProcess[str]:
    cmd = [
        sys.executable, "-m", "ctxengine.cli.commands", "wrap", "--store", str(tmp_path / "store"),
        "--window", "32000", "--anthropic-upstream", up_url, "--openai-upstream", up_url + "/v1", *args,
    ]  # fmt: skip
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120, cwd=tmp_path)


def test_the_agent_runs_through_the_proxy_and_a_table_ends_the_run(tmp_path: Path) -> None:
    (tmp_path / "agent.py").write_text(AGENT)
    up = Upstream()
    with serve(up.app()) as up_url:
        done = _wrap(tmp_path, up_url, sys.executable, "--", "agent.py")
    assert done.returncode == 3, done.stderr  # the agent's own status
    assert done.stdout.splitlines() == ["ok 1", "ok 2"]  # the upstream's answers, through the proxy
    assert [s.path for s in up.seen] == ["/v1/messages", "/v1/responses"]
    assert not any(s.problems for s in up.seen)
    table = done.stderr[done.stderr.index("ctxengine wrap: the run") :]
    header, row = [line for line in table.splitlines() if "┃" in line or "│" in line][-2:]
    names = ["sessions", "calls", "agent sent", "sent upstream", "compactions", "cache hits", "saved"]
    assert [c.strip() for c in header.strip("┃ ").split("┃")] == names
    cells = [c.strip() for c in row.strip("│ ").split("│")]
    assert cells[:2] == ["2", "2"] and cells[4] == "0" and cells[5].endswith("%")  # 2 sessions, 2 calls
    log = (tmp_path / "store" / "proxy.log").read_text()
    assert log.count("status=200") == 2 and "wrap-test" not in log + done.stderr
    assert (tmp_path / "store" / "proxy.sqlite").exists()


def test_an_agent_that_is_not_installed_is_one_line(tmp_path: Path) -> None:
    done = _wrap(tmp_path, "http://127.0.0.1:9", "no-such-agent-ctxengine")
    assert done.returncode == 2
    assert done.stderr.strip() == "error: no-such-agent-ctxengine: not installed (not found on PATH)"


def test_a_port_already_taken_is_one_line(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = _wrap(tmp_path, "http://127.0.0.1:9", "--port", str(port), sys.executable, "--", "-c", "pass")
    assert done.returncode == 2
    assert done.stderr.strip().startswith(f"error: port {port} on 127.0.0.1 is already taken")
    assert len(done.stderr.strip().splitlines()) == 1


def test_an_agent_ended_by_a_signal_exits_as_a_shell_would_say(tmp_path: Path) -> None:
    kill = "import os, signal; os.kill(os.getpid(), signal.SIGTERM)"
    done = _wrap(tmp_path, "http://127.0.0.1:9", sys.executable, "--", "-c", kill)
    assert done.returncode == 128 + 15
    assert "ctxengine wrap: the run" in done.stderr  # the table still ends the run


def test_codex_gets_its_base_url_as_a_config_override_and_other_agents_as_they_are() -> None:
    base = "http://127.0.0.1:5555"
    assert agent_argv(["/usr/bin/codex", "exec", "hi"], base) == [
        "/usr/bin/codex", "-c", 'openai_base_url="http://127.0.0.1:5555/v1"', "exec", "hi",
    ]  # fmt: skip
    assert agent_argv(["/usr/bin/claude", "-p", "hi"], base) == ["/usr/bin/claude", "-p", "hi"]
    env = agent_env(base, {"PATH": "/bin"})
    assert env == {
        "PATH": "/bin",
        "ANTHROPIC_BASE_URL": base,
        "OPENAI_BASE_URL": base + "/v1",
        "OPENAI_API_BASE": base + "/v1",
    }
