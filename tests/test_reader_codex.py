"""Codex rollout reader: real rollouts (counts from SOURCES.md) and edge cases."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from conftest import CODEX
from ctxengine.formats import codex, detect, load
from ctxengine.messages.model import Session, Thinking, Usage
from readers_common import assert_unreadable, pairing_problems, read_damaged, session_fixture, tool_calls

GPT54 = CODEX / "codex_gpt-5.4_cli-0.104_rollout-2026-03-09T18-28-04-019cd524.jsonl"
GPT52 = CODEX / "codex_gpt-5.2-codex_cli-0.98_rollout-2026-02-09T16-41-33-019c44c8.jsonl"


s54 = session_fixture(codex.read, GPT54)
s52 = session_fixture(codex.read, GPT52)


@pytest.mark.parametrize(
    ("name", "n_calls", "n_tool_calls", "peak", "model"),
    [("s54", 56, 73, 142_517, "gpt-5.4"), ("s52", 57, 60, 80_306, "gpt-5.2-codex")],
)
def test_real_rollouts(
    request: pytest.FixtureRequest,
    transcripts: Path,  # the shared corpus: the fixture named by ``name`` reads it
    name: str,
    n_calls: int,
    n_tool_calls: int,
    peak: int,
    model: str,
) -> None:
    s: Session = request.getfixturevalue(name)
    assert s.format == "codex"
    assert s.malformed == []
    assert len(tool_calls(s)) == n_tool_calls
    assert len(s.calls) == n_calls
    # one fresh token_count per call: every call has its usage
    assert all(s.messages[i].usage is not None for i in s.calls)
    assert max(m.usage.total_input for m in s.messages if m.usage) == peak
    assert s.model == model
    assert all(s.messages[i].model == model for i in s.calls)
    assert s.system.startswith("You are Codex")
    assert s.meta["model_context_window"] == 258_400
    assert s.session_id is not None and s.session_id.startswith(Path(s.source).stem[-8:])
    assert pairing_problems(s) == []
    ids = [m.id for m in s.messages]
    assert len(ids) == len(set(ids))
    assert all(isinstance(m.timestamp, float) for m in s.messages)


def test_tool_names_and_custom_input(s54: Session) -> None:
    names: dict[str, int] = {}
    for c in tool_calls(s54):
        names[c.name] = names.get(c.name, 0) + 1
    assert names == {"exec_command": 51, "apply_patch": 16, "update_plan": 6}
    patch = next(c for c in tool_calls(s54) if c.name == "apply_patch")
    assert isinstance(patch.input, str) and patch.input.startswith("*** Begin Patch")
    cmd = next(c for c in tool_calls(s54) if c.name == "exec_command")
    assert isinstance(cmd.input, dict) and "cmd" in cmd.input


def test_no_double_counting_of_events(s52: Session, s54: Session) -> None:
    # agent_message / agent_reasoning / user_message events duplicate response items
    for s, n_reasoning, n_text in ((s52, 45, 16), (s54, 34, 44)):
        thinking = [b for i in s.calls for b in s.messages[i].blocks if isinstance(b, Thinking)]
        assert len(thinking) == n_reasoning
        assert all(t.encrypted.startswith("gAAAA") for t in thinking)
        assert sum(1 for i in s.calls if s.messages[i].text()) == n_text
    assert s52.skipped["event_msg:agent_message"] == 16


def test_usage_normalisation(s52: Session) -> None:
    first = s52.messages[s52.calls[0]]
    # line 13: input_tokens 11082 (incl. cached 8320), output 66
    assert first.usage == Usage(input_tokens=2762, cache_read_tokens=8320, output_tokens=66)
    assert first.usage.total_input == 11_082
    # line 72: output_tokens 1115 already includes reasoning_output_tokens 1024
    reasoning_call = next(s52.messages[i] for i in s52.calls if s52.messages[i].id == "m70")
    assert reasoning_call.usage == Usage(input_tokens=3337, cache_read_tokens=13824, output_tokens=1115)


def test_context_messages(s52: Session) -> None:
    head = s52.messages[:5]
    assert [m.role for m in head] == ["user"] * 5
    assert head[0].meta == {"role": "developer"}
    assert head[1].meta == {"context": "agents_md"}
    assert head[2].meta == {"context": "environment_context"}
    assert head[4].meta == {}
    assert s52.messages[5].role == "assistant"


def test_parallel_calls_group_into_one_message(s54: Session) -> None:
    first = s54.messages[s54.calls[0]]
    assert len(first.tool_calls) == 3
    results = s54.messages[s54.calls[0] + 1]
    assert [r.call_id for r in results.tool_results] == [c.id for c in first.tool_calls]
    assert all(r.name == "exec_command" for r in results.tool_results)


def test_malformed_lines(tmp_path: Path, transcripts: Path) -> None:
    lines = GPT52.read_text(encoding="utf-8").splitlines()
    lines[12] = '{"timestamp": "x", "type": "event_msg", "payload": {'  # line 13: the 1st call's usage
    lines[19] = "[1, 2, 3]"  # line 20: valid JSON, wrong shape
    bad = tmp_path / "rollout.jsonl"
    bad.write_text("\n".join(lines) + "\n", encoding="utf-8")
    s = read_damaged(codex.read, bad, [13, 20])
    assert len(tool_calls(s)) == 60
    assert pairing_problems(s) == []
    # the repeated token_count (line 16) still gives the first call its usage
    assert s.messages[s.calls[0]].usage == Usage(input_tokens=2762, cache_read_tokens=8320, output_tokens=66)


def _write_jsonl(path: Path, records: list[dict[str, object]]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    return path


def _rec(kind: str, payload: dict[str, object], ts: str = "2026-01-01T00:00:00.000Z") -> dict[str, object]:
    return {"timestamp": ts, "type": kind, "payload": payload}


def _tc(inp: int, cached: int, out: int, total: int) -> dict[str, object]:
    last = {"input_tokens": inp, "cached_input_tokens": cached, "output_tokens": out}
    return _rec(
        "event_msg",
        {"type": "token_count", "info": {"last_token_usage": last, "total_token_usage": {"t": total}}},
    )


def test_synthetic_shapes_and_compaction(tmp_path: Path) -> None:
    records = [
        _rec("session_meta", {"id": "abc", "base_instructions": {"text": "SYS"}}),
        _rec("turn_context", {"model": "gpt-x"}),
        _rec(
            "response_item",
            {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "hi"}]},
        ),
        _rec("response_item", {"type": "local_shell_call", "call_id": "c1", "action": {"command": ["ls"]}}),
        _rec(
            "response_item", {"type": "function_call", "name": "f", "arguments": "not json", "call_id": "c2"}
        ),
        _tc(100, 40, 5, 1),
        _tc(100, 40, 5, 1),  # repeated: ignored
        _rec("response_item", {"type": "function_call_output", "call_id": "c1", "output": "ok"}),
        _rec(
            "response_item",
            {
                "type": "function_call_output",
                "call_id": "c2",
                "output": {"content": "boom", "success": False},
            },
        ),
        _rec("compacted", {"message": "SUMMARY"}),
        _rec(
            "response_item",
            {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "done"}]},
        ),
        _tc(50, 0, 2, 2),
        _rec("response_item", {"type": "ghost_snapshot"}),
    ]
    [s] = codex.read(_write_jsonl(tmp_path / "r.jsonl", records))
    assert s.system == "SYS" and s.session_id == "abc" and s.model == "gpt-x"
    roles = [m.role for m in s.messages]
    assert roles == ["user", "assistant", "user", "user", "assistant"]
    call = s.messages[1]
    assert [c.name for c in call.tool_calls] == ["local_shell", "f"]
    assert call.tool_calls[1].input == "not json"
    assert call.usage == Usage(input_tokens=60, cache_read_tokens=40, output_tokens=5)
    results = s.messages[2].tool_results
    assert [(r.call_id, r.is_error, r.name) for r in results] == [
        ("c1", False, "local_shell"),
        ("c2", True, "f"),
    ]
    assert len(s.compactions) == 1 and s.compactions[0].at == 3
    assert s.messages[3].origin == "compact_summary" and s.messages[3].compaction == 0
    assert s.messages[4].usage == Usage(input_tokens=50, output_tokens=2)
    assert s.skipped["response_item:ghost_snapshot"] == 1
    assert s.messages[0].timestamp == 1767225600.0


def test_detect_and_load(transcripts: Path) -> None:
    for path in (GPT52, GPT54):
        assert detect(path) == "codex"
        [s] = load(path)
        assert s.format == "codex" and s.source == str(path)


@pytest.mark.parametrize("content", [b"", b"\n  \n", b"\x00\x01\x02binary\x00", b'{"a": 1}\n{"b": 2}\n'])
def test_unreadable_files_raise(tmp_path: Path, content: bytes) -> None:
    warns = UserWarning if content.startswith(b"{") else None
    assert_unreadable(codex.read, tmp_path / "x.jsonl", content, warns=warns)


def test_missing_path_raises(tmp_path: Path) -> None:
    assert_unreadable(codex.read, tmp_path / "nope.jsonl")


def test_many_malformed_lines_warn_once_each_up_to_a_cap(tmp_path: Path, transcripts: Path) -> None:
    lines = GPT52.read_text(encoding="utf-8").splitlines()
    path = tmp_path / "noisy.jsonl"
    path.write_text("\n".join(lines + ["{oops"] * 30) + "\n", encoding="utf-8")
    with pytest.warns(UserWarning) as caught:
        [s] = codex.read(path)
    assert len(s.malformed) == 30
    assert len(caught) == 21 and "more malformed records" in str(caught[-1].message)
    assert len(tool_calls(s)) == 60
