"""The live examples run end to end as subprocesses against the scripted loopback server: the
model first asks for a tool call (Anthropic ``tool_use`` / OpenAI ``tool_calls``), the example runs
ctxengine's ``read`` tool in a temporary workspace and sends the result back, and the model's final
text is printed."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from llm_server import Recorded, Reply, ScriptedLLMServer

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
FILE_TEXT = "GREETING = 'hello from the ctxengine workspace 7d1e'\n"
FINAL = "The file defines GREETING = 'hello from the ctxengine workspace 7d1e'."

ANTHROPIC_TOOL_USE: dict[str, Any] = {
    "id": "msg_tool_1",
    "type": "message",
    "role": "assistant",
    "model": "claude-sonnet-4-6",
    "content": [
        {"type": "text", "text": "Let me read the file."},
        {"type": "tool_use", "id": "toolu_01", "name": "read", "input": {"path": "src/hello.py"}},
    ],
    "stop_reason": "tool_use",
    "stop_sequence": None,
    "usage": {
        "input_tokens": 1500,
        "output_tokens": 40,
        "cache_read_input_tokens": 0,
        "cache_creation_input_tokens": 0,
    },
}

OPENAI_TOOL_CALLS: dict[str, Any] = {
    "id": "chatcmpl-tool-1",
    "object": "chat.completion",
    "created": 0,
    "model": "gpt-4o",
    "choices": [
        {
            "index": 0,
            "finish_reason": "tool_calls",
            "message": {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": "call_01",
                        "type": "function",
                        "function": {"name": "read", "arguments": json.dumps({"path": "src/hello.py"})},
                    }
                ],
            },
        }
    ],
    "usage": {"prompt_tokens": 1500, "completion_tokens": 30, "total_tokens": 1530},
}


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    ws = tmp_path / "ws"
    (ws / "src").mkdir(parents=True)
    (ws / "src" / "hello.py").write_text(FILE_TEXT, encoding="utf-8")
    return ws


def run_example(script: str, args: list[str], tmp_path: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ANTHROPIC_", "OPENAI_"))}
    env["ANTHROPIC_CONFIG_DIR"] = str(tmp_path / "anthropic-config")
    return subprocess.run(
        [sys.executable, str(EXAMPLES / script), *args],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
        cwd=tmp_path,
    )


def run_against_server(
    script: str,
    args: list[str],
    workspace: Path,
    tmp_path: Path,
    *,
    replies: list[Reply] | None = None,
    default: Reply = ("ok", "ok"),
) -> tuple[subprocess.CompletedProcess[str], list[Recorded]]:
    """Run an example against a ``ScriptedLLMServer(replies, default)`` with ``--base-url`` (``/v1``
    for the OpenAI-compatible one) and ``--workspace``; returns the process and the requests."""
    with ScriptedLLMServer(replies or [], default) as server:
        url = server.openai_url if script.startswith("openai") else server.url
        proc = run_example(script, ["--base-url", url, "--workspace", str(workspace), *args], tmp_path)
        requests = list(server.requests)
    return proc, requests


def check_anthropic_requests(requests: list[Recorded]) -> None:
    first, second = (r.body for r in requests)
    # the tools are ctxengine's, in Anthropic's format
    names = {t["name"] for t in first["tools"]}
    assert {"read", "grep", "glob", "retrieve", "search", "open_files"} <= names
    assert first["messages"][0]["role"] == "user"
    assert "What is in hello?" in json.dumps(first["messages"])
    assert first["system"][0]["text"].startswith("You are a coding assistant")
    # the tool ran in the workspace; its result went back with the call
    assert second["messages"][1]["content"][-1]["type"] == "tool_use"
    results = [
        b
        for m in second["messages"]
        for b in m["content"]
        if isinstance(b, dict) and b["type"] == "tool_result"
    ]
    assert len(results) == 1 and results[0]["tool_use_id"] == "toolu_01"
    assert "hello from the ctxengine workspace 7d1e" in json.dumps(results[0]["content"])
    assert not results[0].get("is_error")


def check_openai_requests(requests: list[Recorded]) -> None:
    assert [r.path for r in requests] == ["/v1/chat/completions"] * 2
    first, second = (r.body for r in requests)
    assert {t["function"]["name"] for t in first["tools"]} >= {"read", "grep", "glob", "retrieve"}
    assert first["messages"][0]["role"] == "system"
    assert first["max_tokens"] == 4096  # a compatible server gets max_tokens
    tool_msgs = [m for m in second["messages"] if m["role"] == "tool"]
    assert len(tool_msgs) == 1 and tool_msgs[0]["tool_call_id"] == "call_01"
    assert "hello from the ctxengine workspace 7d1e" in tool_msgs[0]["content"]
    calls = [m for m in second["messages"] if m.get("tool_calls")]
    assert calls and calls[0]["tool_calls"][0]["function"]["name"] == "read"


@pytest.mark.parametrize(
    ("script", "tool_reply", "extra_args", "check_requests"),
    [
        pytest.param("anthropic_agent.py", ANTHROPIC_TOOL_USE, [], check_anthropic_requests, id="anthropic"),
        pytest.param(
            "openai_compatible_agent.py",
            OPENAI_TOOL_CALLS,
            ["--model", "gpt-4o"],
            check_openai_requests,
            id="openai_compatible",
        ),
    ],
)
def test_agent_reads_a_file_and_answers(
    script: str,
    tool_reply: dict[str, Any],
    extra_args: list[str],
    check_requests: Callable[[list[Recorded]], None],
    workspace: Path,
    tmp_path: Path,
) -> None:
    """One tool call, then the answer: the provider-specific requests are checked by
    ``check_requests``; the exit status and the printed output are the same for both scripts."""
    args = [*extra_args, "--max-turns", "4", "What is in hello?"]
    replies: list[Reply] = [("status", 200, tool_reply, {}), ("ok", FINAL)]
    proc, requests = run_against_server(script, args, workspace, tmp_path, replies=replies)
    assert proc.returncode == 0, proc.stderr
    assert len(requests) == 2
    check_requests(requests)
    # the final text and the per-turn figures are printed
    out = proc.stdout
    assert FINAL in out
    assert "[turn 1]" in out and "[turn 2]" in out and "$" in out
    assert "read(" in out


def test_agent_stops_after_max_turns(workspace: Path, tmp_path: Path) -> None:
    """A model that keeps calling tools is stopped after --max-turns calls. Each response has its
    own message id, as a provider's do (the engine's ingest is idempotent by message id)."""
    replies: list[Reply] = [
        ("status", 200, {**ANTHROPIC_TOOL_USE, "id": f"msg_tool_{k}"}, {}) for k in range(1, 4)
    ]
    proc, requests = run_against_server(
        "anthropic_agent.py",
        ["--max-turns", "3", "Loop"],
        workspace,
        tmp_path,
        replies=replies,
    )
    assert len(requests) == 3
    assert "[stopped after 3 turns]" in proc.stdout
    assert proc.stdout.count("read(") == 3
    # the repeated read is answered by the read tool's dedup stub, not re-sent in full
    last = json.dumps(requests[-1].body["messages"][-1])
    assert "File unchanged since last read" in last and "7d1e" not in last


def test_example_reports_a_server_error(workspace: Path, tmp_path: Path) -> None:
    body = {"type": "error", "error": {"type": "authentication_error", "message": "invalid x-api-key"}}
    proc, _ = run_against_server(
        "anthropic_agent.py", ["Hi"], workspace, tmp_path, default=("status", 401, body, {})
    )
    assert proc.returncode != 0
    assert "invalid x-api-key" in proc.stderr


def _tool_use(msg_id: str, call_id: str, name: str, inp: dict[str, Any]) -> dict[str, Any]:
    content = [{"type": "tool_use", "id": call_id, "name": name, "input": inp}]
    return {**ANTHROPIC_TOOL_USE, "id": msg_id, "content": content}


def test_the_task_tool_spawns_an_explore_subagent_whose_work_stays_out(
    workspace: Path, tmp_path: Path
) -> None:
    """The model calls ``task``: an Explore sub-agent (cheap model, read-only tools, the prompt
    alone) reads the file in its own context; the parent's next request holds only its report
    and the file list, none of its tool calls or the file's content."""
    report = "GREETING is defined in src/hello.py, line 1."
    prompt = "Where is GREETING defined?"
    replies: list[Reply] = [
        ("status", 200, _tool_use("msg_p1", "toolu_task", "task", {"prompt": prompt}), {}),
        ("status", 200, _tool_use("msg_s1", "toolu_sub1", "read", {"path": "src/hello.py"}), {}),
        ("ok", report),
        ("ok", FINAL),
    ]
    proc, requests = run_against_server(
        "anthropic_agent.py", ["--max-turns", "4", "Find GREETING"], workspace, tmp_path, replies=replies
    )
    assert proc.returncode == 0, proc.stderr
    parent1, sub1, sub2, parent2 = (r.body for r in requests)
    assert "task" in {t["name"] for t in parent1["tools"]}
    for sub in (sub1, sub2):
        assert sub["model"] == "claude-haiku-4-5"
        assert {t["name"] for t in sub["tools"]} == {"read", "grep", "glob", "search"}
        assert sub["system"][0]["text"].startswith("You are a read-only search agent")
    assert [m["role"] for m in sub1["messages"]] == ["user"]
    assert prompt in json.dumps(sub1["messages"])
    assert "hello from the ctxengine workspace 7d1e" in json.dumps(sub2["messages"])  # its own read
    sent = json.dumps(parent2["messages"])
    assert report in sent and "Files read: src/hello.py" in sent
    assert "toolu_sub1" not in sent and "7d1e" not in sent
    assert parent2["model"] == "claude-sonnet-4-6"
    assert "-> task (explore on claude-haiku-4-5): 2 calls" in proc.stdout
