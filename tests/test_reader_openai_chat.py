"""OpenAI chat reader: mini-swe-agent .traj.json, the tau-bench trajectory list, edge cases."""

from __future__ import annotations

import base64
import json
from pathlib import Path

import pytest

from conftest import OPENAI_CHAT
from ctxengine.formats import detect, load, openai_chat
from ctxengine.messages.model import Image, Session, Thinking, Usage
from readers_common import assert_unreadable, pairing_problems, read_damaged, session_fixture, tool_calls

MINI = OPENAI_CHAT / "mini-swe-agent-2.2.7_deepseek-chat_tool_calls_django__django-13265.traj.json"
TAU = OPENAI_CHAT / "tau-bench_gpt-4o_airline_200-trajectories_tool_calls.json"


mini = session_fixture(openai_chat.read, MINI)


@pytest.fixture(scope="module")
def tau(transcripts: Path) -> list[Session]:
    return openai_chat.read(TAU)


def test_mini_real_file(mini: Session) -> None:
    assert mini.format == "openai-chat" and mini.malformed == []
    assert mini.model == "deepseek-chat"
    assert mini.session_id == "django__django-13265"
    assert mini.system.startswith("You are a helpful assistant")
    assert len(mini.calls) == 156
    assert all(mini.messages[i].usage is not None for i in mini.calls)
    assert len(tool_calls(mini)) == 156
    assert mini.skipped == {"exit": 1}
    last_call = tool_calls(mini)[-1]
    # the final submit's "result" is the exit message, which was never sent to the model
    assert pairing_problems(mini) == [f"call {last_call.id} at {len(mini.messages) - 1} unanswered"]
    ids = [m.id for m in mini.messages]
    assert len(ids) == len(set(ids))
    assert all(isinstance(m.timestamp, float) for m in mini.messages if m.role == "assistant")


def test_mini_usage_normalisation(mini: Session) -> None:
    first = mini.messages[mini.calls[0]]
    # prompt_tokens 1835, cached (prompt_cache_hit_tokens) 320, completion 141
    assert first.usage == Usage(input_tokens=1515, cache_read_tokens=320, output_tokens=141)
    assert first.timestamp == 1775809100.1269045
    assert first.model == "deepseek-chat"
    last = mini.messages[mini.calls[-1]]
    assert last.usage == Usage(input_tokens=255, cache_read_tokens=81_728, output_tokens=86)
    assert max(m.usage.total_input for m in mini.messages if m.usage) == 81_983


def test_tau_real_file(tau: list[Session]) -> None:
    assert len(tau) == 200
    assert tau[0].name == "task 0 trial 0"
    assert len({s.name for s in tau}) == 200
    assert sum(len(tool_calls(s)) for s in tau) == 1164
    assert sum(len(s.messages) for s in tau) == 5308 - 200  # system prompts go to Session.system
    assert sum(len(s.calls) for s in tau) == 2454
    for s in tau:
        assert s.format == "openai-chat" and s.malformed == []
        assert s.model is None  # tau-bench records no model name
        assert s.system.startswith("# Airline Agent Policy")
        assert pairing_problems(s) == []
        assert all(m.usage is None for m in s.messages)
    assert tau[0].meta["reward"] == 0.0 and tau[0].meta["task_id"] == 0
    call = tool_calls(tau[0])[0]
    assert call.name == "get_user_details" and call.input == {"user_id": "mia_li_3668"}


def test_malformed_mini_message(tmp_path: Path, transcripts: Path) -> None:
    doc = json.loads(MINI.read_text(encoding="utf-8"))
    doc["messages"][5] = "garbage"
    doc["messages"][6]["content"] = {"not": "a list"}
    bad = tmp_path / "bad.traj.json"
    bad.write_text(json.dumps(doc), encoding="utf-8")
    s = read_damaged(openai_chat.read, bad, [6, 7])
    assert len(s.messages) == 310
    assert len(tool_calls(s)) == 155  # message 7 was an assistant call


def test_malformed_tau_trajectory(tmp_path: Path, transcripts: Path) -> None:
    doc = json.loads(TAU.read_text(encoding="utf-8"))
    doc[0]["traj"][2] = 5
    doc[1] = "not a trajectory"
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(doc), encoding="utf-8")
    with pytest.warns(UserWarning):
        sessions = openai_chat.read(bad)
    assert len(sessions) == 200
    assert [(m.line, m.error.split(":")[0]) for m in sessions[0].malformed] == [(3, "task 0 trial 0")]
    assert sessions[1].messages == [] and sessions[1].malformed[0].line == 2
    assert all(s.malformed == [] for s in sessions[2:])


def test_generic_message_list(tmp_path: Path) -> None:
    # a whole IHDR chunk: imagesize (ctxengine.messages.media) reads its bit depth and colour type too
    png = base64.b64encode(
        b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR"
        + (640).to_bytes(4, "big")
        + (480).to_bytes(4, "big")
        + b"\x08\x02\x00\x00\x00"
    ).decode()
    messages = [
        {"role": "system", "content": "A"},
        {"role": "developer", "content": [{"type": "text", "text": "B"}]},
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "look"},
                {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{png}"}},
            ],
        },
        {
            "role": "assistant",
            "content": None,
            "reasoning_content": "hmm",
            "tool_calls": [
                {"id": "a", "type": "function", "function": {"name": "f", "arguments": "{bad json"}},
                {"type": "function", "function": {"name": "g", "arguments": "[1]"}},
            ],
        },
        {"role": "tool", "tool_call_id": "a", "content": "ra"},
        {"role": "tool", "tool_call_id": "call_m3_1", "content": "rg"},
        {"role": "assistant", "content": "ok"},
    ]
    path = tmp_path / "chat.json"
    path.write_text(json.dumps(messages), encoding="utf-8")
    assert detect(path) == "openai-chat"
    [s] = load(path)
    assert s.system == "A\n\nB"
    image = s.messages[0].blocks[1]
    assert isinstance(image, Image) and (image.width, image.height) == (640, 480)
    assert image.media_type == "image/png"
    call = s.messages[1]
    assert isinstance(call.blocks[0], Thinking)
    assert [(c.id, c.input) for c in call.tool_calls] == [("a", "{bad json"), ("call_m3_1", "[1]")]
    assert [r.name for r in s.messages[2].tool_results] == ["f", "g"]  # merged into one user message
    assert [m.role for m in s.messages] == ["user", "assistant", "user", "assistant"]
    assert pairing_problems(s) == []


def test_detect_and_load(transcripts: Path) -> None:
    assert detect(MINI) == "openai-chat" and detect(TAU) == "openai-chat"
    assert len(load(MINI)) == 1
    assert len(load(TAU)) == 200


@pytest.mark.parametrize(
    "content", [b"", b"\n\n", b"\x00\x00binary", b'[{"role": ', b'{"foo": 1}', b"[1, 2, 3]", b"[]"]
)
def test_unreadable_files_raise(tmp_path: Path, content: bytes) -> None:
    assert_unreadable(openai_chat.read, tmp_path / "x.json", content)


def test_missing_path_raises(tmp_path: Path) -> None:
    assert_unreadable(openai_chat.read, tmp_path / "nope.json")


def _mini_text_mode(tmp_path: Path, task: str, rounds: int = 3) -> Path:
    """A mini-swe-agent 1.x text-mode .traj.json: no tools; a THOUGHT and one ```bash block per
    reply, the output sent back as a user message; one reply with two blocks and its format error."""
    msgs: list[dict[str, object]] = [
        {"role": "system", "content": "You are a helpful assistant that can interact with a computer."},
        {"role": "user", "content": task},
    ]
    for k in range(rounds):
        msgs.append({"role": "assistant", "content": f"THOUGHT: look {k}\n\n```bash\nls src/part_{k}\n```"})
        msgs.append(
            {"role": "user", "content": f"<returncode>0</returncode>\n<output>\nfile_{k}.py\n</output>"}
        )
    msgs.append({"role": "assistant", "content": "```bash\nls\n```\nand\n```bash\npwd\n```"})
    msgs.append({"role": "user", "content": "Please always provide EXACTLY ONE action in triple backticks."})
    msgs.append(
        {
            "role": "assistant",
            "content": "THOUGHT: done\n\n```bash\necho COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT\n```",
        }
    )
    path = tmp_path / "mini-text.traj.json"
    path.write_text(
        json.dumps(
            {"info": {"exit_status": "Submitted"}, "messages": msgs, "trajectory_format": "mini-swe-agent-1"}
        )
    )
    return path


def test_mini_text_mode_actions_are_tool_calls_and_observations_their_results(tmp_path: Path) -> None:
    """mini-swe-agent's text mode: each fenced action is a tool call and the observation its result,
    so the newest command output is never taken for the user's request (it was, at every call)."""
    from ctxengine.summary.audit import latest_user_request

    task = "Fix the failing parser test in src/parse.py.\n"
    s = openai_chat.read(_mini_text_mode(tmp_path, task))[0]
    calls = tool_calls(s)
    assert [c.input for c in calls] == [
        {"command": "ls src/part_0"},
        {"command": "ls src/part_1"},
        {"command": "ls src/part_2"},
        {"command": "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"},
    ]
    assert {c.name for c in calls} == {"bash"}
    assert s.messages[1].blocks[0].text == "THOUGHT: look 0"  # the discussion, without the block
    results = [b for m in s.messages for b in m.tool_results]
    assert [r.call_id for r in results] == [c.id for c in calls[:3]]
    assert "file_2.py" in results[-1].content[0].text
    assert [m.origin for m in s.messages if m.role == "user" and not m.tool_results] == [
        "message",
        "attachment",
    ]
    assert latest_user_request(s.messages) == task  # verbatim, its newline kept
    assert pairing_problems(s) == [f"call {calls[-1].id} at {len(s.messages) - 1} unanswered"]
