"""SWE-agent .traj reader: the real 1.x and 0.x trajectories and edge cases."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from conftest import SWE_AGENT
from ctxengine.formats import detect, load, swe_agent
from ctxengine.messages.model import Session, Text
from readers_common import assert_unreadable, pairing_problems, read_damaged, session_fixture, tool_calls

V1 = SWE_AGENT / "sweagent-1.0_claude-4-sonnet_exit-context_sympy__sympy-13877.traj"
V0 = SWE_AGENT / "sweagent-0.x_gpt-4_pydicom__pydicom-1458.traj"


v1 = session_fixture(swe_agent.read, V1)
v0 = session_fixture(swe_agent.read, V0)


def test_v1_real_file(v1: Session) -> None:
    assert v1.format == "swe-agent" and v1.malformed == []
    assert v1.model == "claude-sonnet-4-20250514"
    assert v1.system == "You are a helpful assistant that can interact with a computer to solve tasks."
    assert len(v1.messages) == 49  # 50 history messages minus the system prompt
    assert len(tool_calls(v1)) == 23
    assert pairing_problems(v1) == []
    assert v1.meta["model_stats"]["tokens_sent"] == 110_004
    assert v1.meta["model_stats"]["api_calls"] == 23
    assert v1.meta["exit_status"] == "submitted (exit_context)"
    assert all(m.usage is None for m in v1.messages)
    ids = [m.id for m in v1.messages]
    assert len(ids) == len(set(ids))
    first = tool_calls(v1)[0]
    assert first.id == "toolu_01Wzhhnu2wZ5Ys9Jm4LsbiM1"
    assert first.name == "str_replace_editor" and first.input == {"command": "view", "path": "/testbed"}
    assert v1.messages[2].tool_results[0].name == "str_replace_editor"


def test_v1_autosubmit_exit_is_marked_synthetic(v1: Session) -> None:
    real_calls = [i for i in v1.calls if not v1.messages[i].meta.get("synthetic")]
    assert len(real_calls) == 23  # = model_stats.api_calls
    exit_msg, exited = v1.messages[-2], v1.messages[-1]
    assert exit_msg.role == "assistant" and exit_msg.text() == "Exit due to context window"
    assert exit_msg.meta["synthetic"] is True and exit_msg.model is None and exit_msg.tool_calls == []
    assert exited.role == "user" and exited.meta["synthetic"] is True
    # the largest observation (100,316 characters of JSON) is kept whole
    longest = max(len(b.content[0].text) for m in v1.messages for b in m.tool_results if b.content)  # type: ignore[union-attr]
    assert longest > 90_000


def test_v0_real_file(v0: Session) -> None:
    assert v0.format == "swe-agent" and v0.malformed == []
    assert v0.model is None  # 0.x records no model; the run directory is not in the path here
    assert v0.system.startswith("SETTING: You are an autonomous programmer")
    calls = tool_calls(v0)
    assert len(calls) == 12
    assert [c.id for c in calls] == [f"call_{i}" for i in range(12)]
    assert all(c.name == "shell" for c in calls)
    steps = json.loads(V0.read_text(encoding="utf-8"))["trajectory"]
    assert [c.input for c in calls] == [{"command": s["action"]} for s in steps]
    # the final `submit` has no observation in history: its only unanswered call
    assert pairing_problems(v0) == ["call call_11 at 24 unanswered"]
    assert v0.meta["model_stats"]["api_calls"] == 12


def test_v0_text_action_split(v0: Session) -> None:
    demo = v0.messages[0]
    assert demo.role == "user" and demo.meta["is_demo"] is True
    first_call = v0.messages[v0.calls[0]]
    text = [b for b in first_call.blocks if isinstance(b, Text)]
    assert len(text) == 1 and "```" not in text[0].text
    assert text[0].text.startswith("First, I'll create a new Python script")
    assert first_call.tool_calls[0].input == {"command": "create reproduce_bug.py\n"}
    obs = v0.messages[v0.calls[0] + 1]
    assert obs.tool_results[0].call_id == "call_0" and obs.tool_results[0].name == "shell"
    assert obs.tool_results[0].content[0].text.startswith("[File: /pydicom__pydicom/reproduce_bug.py")  # type: ignore[union-attr]


def test_v0_model_from_run_directory(tmp_path: Path, transcripts: Path) -> None:
    run = tmp_path / "gpt4__swe-bench-dev-easy_first_only__default__t-0.00__p-0.95__c-3.00__install-1"
    run.mkdir()
    copy = run / "pydicom__pydicom-1458.traj"
    shutil.copyfile(V0, copy)
    [s] = swe_agent.read(copy)
    assert s.model == "gpt4"
    assert s.messages[s.calls[0]].model == "gpt4"


def test_malformed_history_message(tmp_path: Path, transcripts: Path) -> None:
    doc = json.loads(V1.read_text(encoding="utf-8"))
    doc["history"][4] = {"role": "assistant", "content": "x", "tool_calls": "oops"}  # a call
    doc["history"][5] = 42  # its observation
    bad = tmp_path / "bad.traj"
    bad.write_text(json.dumps(doc), encoding="utf-8")
    s = read_damaged(swe_agent.read, bad, [5, 6])
    assert len(s.messages) == 47
    assert len(tool_calls(s)) == 22
    assert pairing_problems(s) == []


def test_detect_and_load(transcripts: Path) -> None:
    for path in (V0, V1):
        assert detect(path) == "swe-agent"
        [s] = load(path)
        assert s.format == "swe-agent" and s.source == str(path)


@pytest.mark.parametrize(
    "content",
    [b"", b"   \n", b"\x89PNG\r\n\x1a\n\x00\x00\x00", b'{"trajectory": [', b'{"info": {}}', b"[1, 2]"],
)
def test_unreadable_files_raise(tmp_path: Path, content: bytes) -> None:
    assert_unreadable(swe_agent.read, tmp_path / "x.traj", content)


def test_missing_path_raises(tmp_path: Path) -> None:
    assert_unreadable(swe_agent.read, tmp_path / "nope.traj")
