"""Faults of issue 9 (items 9, 11, 12) found on inputs no case named: a value no reader checked,
a byte-order mark, a main file whose own records carry no ``isSidechain`` flag, a Codex line
written twice. Inputs are built here (``tmp_path``) or are edited copies of real transcripts."""

from __future__ import annotations

import json
import warnings
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from conftest import CODEX, SWE_AGENT
from ctxengine.cli.commands import app
from ctxengine.formats import MAX_USAGE_TOKENS, UTF8_BOM, load
from ctxengine.messages.model import Session
from test_faults_readers import ROLLOUT, SIDECHAIN, cc, main_with_subagents, shape

HUGE = 10**30  # past SQLite's integers (2**63): a replay wrote it to its store and crashed


def _lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(x) for x in path.read_text(encoding="utf-8").splitlines() if x.strip()]


def _write(path: Path, records: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    return path


def _quiet_load(path: Path) -> list[Session]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return load(path)


# ------------------------------------------------------------------ usage counts past any window


def _claude_code_huge_usage(tmp_path: Path) -> tuple[Path, int]:
    recs = _lines(SIDECHAIN)
    i = next(i for i, r in enumerate(recs) if r.get("type") == "assistant" and r["message"].get("usage"))
    recs[i]["message"]["usage"]["input_tokens"] = HUGE
    return _write(tmp_path / "cc.jsonl", recs), i + 1


def _openai_chat_huge_usage(tmp_path: Path) -> tuple[Path, int]:
    messages: list[dict[str, Any]] = [{"role": "system", "content": "You are a coding agent."}]
    messages.append({"role": "user", "content": "List the files."})
    for k in range(3):
        usage = {"prompt_tokens": HUGE if k == 1 else 1_000 + k, "completion_tokens": 20}
        call = {"id": f"c{k}", "type": "function", "function": {"name": "bash", "arguments": '{"cmd": "ls"}'}}
        extra = {"response": {"model": "gpt-4o", "usage": usage}}  # as mini-swe-agent keeps it
        messages.append({"role": "assistant", "content": "", "tool_calls": [call], "extra": extra})
        messages.append({"role": "tool", "tool_call_id": f"c{k}", "content": f"file{k}.py"})
    path = tmp_path / "chat.json"
    path.write_text(json.dumps(messages), encoding="utf-8")
    return path, 5  # the second assistant message


def _codex_huge_usage(tmp_path: Path) -> tuple[Path, int]:
    recs = _lines(ROLLOUT)
    i = next(
        i
        for i, r in enumerate(recs)
        if r.get("type") == "event_msg"
        and r["payload"].get("type") == "token_count"
        and isinstance(r["payload"].get("info"), dict)
    )
    recs[i]["payload"]["info"]["last_token_usage"]["input_tokens"] = HUGE
    return _write(tmp_path / "rollout.jsonl", recs), i + 1


@pytest.mark.parametrize(
    "build", [_claude_code_huge_usage, _openai_chat_huge_usage, _codex_huge_usage], ids=["cc", "chat", "cx"]
)
def test_a_usage_count_past_any_window_is_one_malformed_record(tmp_path: Path, build: Any) -> None:
    """A usage count of 10**30 tokens crashed the replay with a traceback (OverflowError from the
    store) or, in a Codex first call, made a fixed prefix of 10**30 tokens that refused the whole
    session. It is one malformed record named by file and line; its message is kept without the
    usage and the replay runs."""
    path, lineno = build(tmp_path)
    with pytest.warns(UserWarning, match=rf"{path.name}:{lineno}:.*not a token count"):
        [session, *_] = load(path)
    assert [m.line for m in session.malformed] == [lineno]
    assert all(
        getattr(m.usage, f) <= MAX_USAGE_TOKENS
        for m in session.messages
        if m.usage is not None
        for f in ("input_tokens", "cache_read_tokens", "cache_write_tokens", "output_tokens")
    )
    out = tmp_path / "r.json"
    res = CliRunner().invoke(app, ["replay", str(path), "--json", str(out), "--quiet"])
    assert res.exit_code == 0, res.output
    report = json.loads(out.read_text(encoding="utf-8"))
    report = report[0] if isinstance(report, list) else report
    assert report["summary"]["malformed_records"] == 1 and report["calls"]


# ------------------------------------------------------------------ a byte-order mark


def _bom_copy(src: Path, dest: Path) -> Path:
    dest.write_bytes(UTF8_BOM + src.read_bytes())
    return dest


@pytest.mark.parametrize(
    "src",
    [SIDECHAIN, ROLLOUT, next(iter(sorted(SWE_AGENT.glob("*.traj"))), SWE_AGENT)],
    ids=["claude-code", "codex", "swe-agent"],
)
def test_a_byte_order_mark_is_not_a_bad_first_record(tmp_path: Path, src: Path) -> None:
    """A file saved with a UTF-8 byte-order mark: a JSON document was "unknown transcript
    format" (exit 2) and a JSONL file lost its first record (the user's task) as malformed. It
    reads as the file without the mark."""
    clean = _quiet_load(src)[0]
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no malformed-record warning
        [s, *_] = load(_bom_copy(src, tmp_path / src.name))
    assert s.malformed == [] and shape(s) == shape(clean)
    assert s.format == clean.format


def test_an_openai_chat_document_with_a_byte_order_mark_loads(tmp_path: Path) -> None:
    path = tmp_path / "chat.json"
    doc = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]
    path.write_bytes(UTF8_BOM + json.dumps(doc).encode())
    [s] = load(path)
    assert [m.role for m in s.messages] == ["user", "assistant"] and s.malformed == []


# ------------------------------------------------------------------ sub-agent records, parent unflagged


@pytest.mark.parametrize("flag", ["absent", "null"])
def test_sidechain_records_stay_out_of_a_parent_whose_records_carry_no_flag(
    tmp_path: Path, flag: str
) -> None:
    """Sub-agent records (``isSidechain: true``) in a main file whose own records leave the flag
    out (older and hand-edited files) or set it to null were read into the parent: its calls and
    20,000-char result reached the parent's requests. The parent is the records not marked."""
    path = main_with_subagents(tmp_path / "main.jsonl", ["agent-1"])
    recs = _lines(path)
    for r in recs:
        if r.get("isSidechain") is False:
            if flag == "absent":
                del r["isSidechain"]
            else:
                r["isSidechain"] = None
    _write(path, recs)
    parent, *subs = load(path)
    assert not parent.sidechain
    assert "INTERNAL" not in json.dumps([m.blocks for m in parent.messages], default=repr)
    assert len(parent.calls) == 3 and [len(s.calls) for s in subs] == [2, 2]
    assert all(s.sidechain for s in subs)


def test_a_file_with_no_sidechain_records_is_unchanged_without_the_flag(tmp_path: Path) -> None:
    """An older main file (no ``isSidechain`` at all) still reads as one session."""
    recs = [cc("user", "Fix the bug.", "u0", None, 1_760_000_000.0)]
    recs.append(cc("assistant", [{"type": "text", "text": "Done."}], "a0", "u0", 1_760_000_001.0))
    for r in recs:
        del r["isSidechain"]
    [s] = load(_write(tmp_path / "old.jsonl", recs))
    assert [m.role for m in s.messages] == ["user", "assistant"] and not s.sidechain


# ------------------------------------------------------------------ a Codex line written twice


def test_a_codex_item_written_twice_is_read_once(tmp_path: Path) -> None:
    """A retried append wrote a ``function_call`` line twice: the reader made two calls
    (``call_x`` and ``call_x~2``), answered only the second and left the first unanswered. A
    timestamped response item repeated byte for byte is read once and counted as a duplicate."""
    raw = ROLLOUT.read_bytes().split(b"\n")
    i = next(i for i, line in enumerate(raw) if b'"type":"function_call"' in line.replace(b" ", b""))
    raw.insert(i + 1, raw[i])
    path = tmp_path / ROLLOUT.name
    path.write_bytes(b"\n".join(raw))
    clean, [s] = load(ROLLOUT)[0], load(path)
    assert shape(s) == shape(clean) and s.malformed == []
    assert not any("~" in c.id for m in s.messages for c in m.tool_calls)
    assert s.skipped.get("duplicate:response_item") == 1


def test_no_real_codex_rollout_repeats_an_item() -> None:
    """The dedupe reads nothing away from the recorded rollouts."""
    for path in sorted(CODEX.glob("*.jsonl")):
        for s in _quiet_load(path):
            assert "duplicate:response_item" not in s.skipped


# ------------------------------------------------------------------ a document, then an interrupted append


@pytest.mark.parametrize("tail", [b"\x00" * 100, b"\xff\xfe garbage", b"\x00" * 40 + b"\n\n" + b"\x00" * 8])
def test_a_document_followed_by_unreadable_lines_loads_and_names_them(tmp_path: Path, tail: bytes) -> None:
    """A complete SWE-agent trajectory followed by a NUL-padded line (an interrupted append) was
    refused whole: "not valid JSON (trailing characters)", exit 2. The document loads; each line
    after it is one malformed record by number."""
    src = sorted(SWE_AGENT.glob("*.traj"))[0]
    data = src.read_bytes().rstrip(b"\n")
    path = tmp_path / src.name
    path.write_bytes(data + b"\n" + tail + b"\n")
    first = data.count(b"\n") + 2
    with pytest.warns(UserWarning, match=rf"{path.name}:\d+: after the document"):
        [s] = load(path)
    clean = _quiet_load(src)[0]
    assert shape(s) == shape(clean)
    bad = [m.line for m in s.malformed]  # the NUL runs, not the blank line between them
    assert bad[0] == first and len(bad) == len([x for x in tail.split(b"\n") if x])
    with warnings.catch_warnings():  # the replay reports the same lines (its own warning lines)
        warnings.simplefilter("ignore")
        res = CliRunner().invoke(app, ["replay", str(path), "--json", str(tmp_path / "r.json"), "--quiet"])
    assert res.exit_code == 0, res.output


def test_an_openai_chat_document_followed_by_a_nul_line_loads(tmp_path: Path) -> None:
    path = tmp_path / "chat.json"
    doc = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]
    path.write_bytes(json.dumps(doc).encode() + b"\n" + b"\x00" * 64 + b"\n")
    with pytest.warns(UserWarning, match=r"chat.json:2: after the document"):
        [s] = load(path)
    assert [m.role for m in s.messages] == ["user", "assistant"] and [m.line for m in s.malformed] == [2]


def test_a_document_with_a_bad_line_inside_is_still_refused(tmp_path: Path) -> None:
    """Only lines *after* the document are set aside: a bad line inside it spoils it (named)."""
    src = sorted(SWE_AGENT.glob("*.traj"))[0]
    lines = src.read_bytes().split(b"\n")
    if len(lines) < 3:
        pytest.skip("a one-line document")
    lines.insert(1, b"\x00" * 10)
    path = tmp_path / src.name
    path.write_bytes(b"\n".join(lines))
    from ctxengine.messages.model import TranscriptError

    with pytest.raises(TranscriptError, match=rf"{path.name}"):
        _quiet_load(path)


# ------------------------------------------------------------------ tool calls that cannot be paired


def _cc_rounds(tmp_path: Path, ids: list[str | None]) -> Path:
    """A Claude Code session: a prompt, then one Bash call per entry of ``ids`` (None: no id)
    with its result, each call in its own message."""
    from test_faults_readers import tool_result

    t0 = 1_760_000_000.0
    recs = [cc("user", "List the files, three times.", "u0", None, t0)]
    parent = "u0"
    for k, cid in enumerate(ids):
        use: dict[str, Any] = {"type": "tool_use", "name": "Bash", "input": {"command": f"ls {k}"}}
        if cid is not None:
            use["id"] = cid
        recs.append(cc("assistant", [use], f"a{k}", parent, t0 + 10 * k + 1, msg_id=f"msg_{k}"))
        answer = tool_result(cid or f"toolu_lost{k}", f"file{k}.py")
        recs.append(cc("user", answer, f"r{k}", f"a{k}", t0 + 10 * k + 2))
        parent = f"r{k}"
    return _write(tmp_path / "s.jsonl", recs)


@pytest.mark.parametrize(
    ("ids", "bad"),
    [(["toolu_0", None, "toolu_2"], [4]), (["toolu_0", "toolu_0", "toolu_0"], [4, 6])],
    ids=["no-id", "reused-id"],
)
def test_a_call_that_cannot_be_paired_is_a_malformed_record(
    tmp_path: Path, ids: list[str | None], bad: list[int]
) -> None:
    """A ``tool_use`` with no id lost its result, and one reusing an earlier message's id became
    an empty message whose result was dropped as a duplicate, both without a word. Each is
    one malformed record by line; the other calls load."""
    with pytest.warns(UserWarning, match="the Bash call is left out"):
        [s] = load(_cc_rounds(tmp_path, ids))
    assert [m.line for m in s.malformed] == bad
    assert sum(len(m.tool_calls) for m in s.messages) == len(ids) - len(bad)


def test_one_message_written_over_several_lines_is_still_one_call(tmp_path: Path) -> None:
    """Claude Code writes one line per content block under one message id: the repeated
    tool_use is the same call, not a reused id."""
    path = _cc_rounds(tmp_path, ["toolu_0", "toolu_1"])
    recs = _lines(path)
    recs.insert(2, dict(recs[1], uuid="a0-again"))
    _write(path, recs)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        [s] = load(path)
    assert s.malformed == [] and [c.id for m in s.messages for c in m.tool_calls] == ["toolu_0", "toolu_1"]


# ------------------------------------------------------------------ epoch timestamps in milliseconds


def test_epoch_timestamps_in_milliseconds_are_read_as_seconds(tmp_path: Path) -> None:
    """mini-swe-agent's ``extra.timestamp`` written by a JavaScript clock (milliseconds) was read
    as seconds: letta's compaction failed on "year 57742 is out of range" (a layer failure)."""
    t_ms = 1_760_000_000_000
    messages: list[dict[str, Any]] = [{"role": "user", "content": "List the files."}]
    for k in range(6):
        call = {"id": f"c{k}", "type": "function", "function": {"name": "bash", "arguments": '{"cmd": "ls"}'}}
        extra = {"timestamp": t_ms + 10_000 * k, "response": {"model": "gpt-4o"}}
        messages.append({"role": "assistant", "content": "", "tool_calls": [call], "extra": extra})
        messages.append({"role": "tool", "tool_call_id": f"c{k}", "content": "x" * 8_000})
    path = tmp_path / "chat.json"
    path.write_text(json.dumps({"messages": messages}), encoding="utf-8")
    [s] = load(path)
    stamps = [m.timestamp for m in s.messages if m.timestamp is not None]
    assert stamps and all(1.7e9 < t < 1.8e9 for t in stamps)
    out = tmp_path / "r.json"
    args = ["replay", str(path), "--policy", "letta", "--window", "16000", "--json", str(out)]
    res = CliRunner().invoke(app, args)
    assert res.exit_code == 0, res.output
    assert json.loads(out.read_text())["summary"]["layer_failures"] == 0


def test_epoch_seconds_scales_milli_and_micro_seconds() -> None:
    from ctxengine.formats import epoch_seconds

    assert epoch_seconds(1_760_000_000.5) == 1_760_000_000.5
    assert epoch_seconds(1_760_000_000_500) == 1_760_000_000.5
    assert epoch_seconds(1_760_000_000_500_000) == 1_760_000_000.5
    assert epoch_seconds(-1.0) is None and epoch_seconds(float("inf")) is None


@pytest.mark.parametrize("damage", ["usage-string", "no-type", "type-number"])
def test_a_wrong_typed_record_field_is_named_by_line(tmp_path: Path, damage: str) -> None:
    """A usage given as a string dropped the call's recorded cost without a word, and a record
    with no ``type`` (or a number) was only counted among the skipped kinds, with no line."""
    path = _cc_rounds(tmp_path, ["toolu_0", "toolu_1"])
    recs = _lines(path)
    if damage == "usage-string":
        recs[1]["message"]["usage"] = "10 in, 40 out"
    elif damage == "no-type":
        del recs[2]["type"]
    else:
        recs[2]["type"] = 7
    _write(path, recs)
    with pytest.warns(UserWarning, match=r"s\.jsonl:(2|3): malformed record"):
        [s] = load(path)
    assert [m.line for m in s.malformed] == [2 if damage == "usage-string" else 3]
    assert "<no type>" not in s.skipped
