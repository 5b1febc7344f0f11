"""Faults of issue 9 in what the readers and the engine take in (items 9-12): each test pins a
*kind* of fault, on inputs built here (``tmp_path``) or on copies of the real transcripts."""

from __future__ import annotations

import base64
import gzip
import json
import random
from pathlib import Path
from typing import Any

import msgspec
import pytest
from typer.testing import CliRunner

from conftest import CLAUDE_CODE, CODEX
from ctxengine.cli.commands import app
from ctxengine.engine.core import ContextEngine
from ctxengine.formats import detect, load
from ctxengine.messages.model import (
    Document,
    Image,
    Message,
    Session,
    Text,
    ToolCall,
    ToolResult,
    TranscriptError,
)
from ctxengine.policy.registry import get_policy
from ctxengine.tools.base import ToolError
from ctxengine.tools.retrieve import retrieve

SIDECHAIN = CLAUDE_CODE / "cc_mimo-v2.5-pro_subagent-sidechain_of-4530697c_agent-aee292b61a7ab9367.jsonl"
ROLLOUT = CODEX / "codex_gpt-5.2-codex_cli-0.98_rollout-2026-02-09T16-41-33-019c44c8.jsonl"

# ------------------------------------------------------------------ 9. one bad line, one bad record

BAD_LINES = {
    "nul-run": b"\x00" * 4096,  # an interrupted append (delayed allocation)
    "one-nul": b'{"type": "user", "x": "a\x00b"}',
    "ff-byte": b"\xff garbage line",
    "latin-1": '{"type": "user", "text": "caf\xe9"}'.encode("latin-1"),
    "cut-utf8": '{"type": "user", "text": "\u00e9'.encode()[:-1],
    "control": b"\x01\x02\x03\x04 half a header",
    "deep-array": b"[" * 3_000 + b"]" * 3_000,  # valid JSON past any parser's recursion limit
    "deep-object": b'{"a":' * 3_000 + b"1" + b"}" * 3_000,
}


def spliced(src: Path, dest: Path, bad: bytes, at: int) -> tuple[Path, int]:
    """A copy of ``src`` with the line ``bad`` inserted before line ``at`` (0-based; -1: at the
    end). Returns the copy and the 1-based number of the bad line in it."""
    lines = src.read_bytes().splitlines(keepends=True)
    at = len(lines) if at < 0 else at
    lines.insert(at, bad + b"\n")
    dest.write_bytes(b"".join(lines))
    return dest, at + 1


def shape(s: Session) -> tuple[int, int, list[str]]:
    return len(s.messages), len(s.calls), [m.role for m in s.messages]


@pytest.mark.parametrize("kind", sorted(BAD_LINES))
@pytest.mark.parametrize("where", ["first", "early", "middle", "last"])
@pytest.mark.parametrize("src", [SIDECHAIN, ROLLOUT], ids=["claude-code", "codex"])
def test_a_bad_line_anywhere_is_one_malformed_record(
    tmp_path: Path, src: Path, kind: str, where: str
) -> None:
    """A NUL, non-UTF-8 or control-byte line is one malformed record named by line, wherever it
    is (within the 64 KB the format is sniffed from, too); every other record loads as without
    it. Before the fix a bad line in the first 64 KB made the whole file "binary" (exit 2)."""
    clean = load(src)[0]
    n_lines = len(src.read_bytes().splitlines())
    at = {"first": 0, "early": 4, "middle": n_lines // 2, "last": -1}[where]
    path, lineno = spliced(src, tmp_path / src.name, BAD_LINES[kind], at)
    with pytest.warns(UserWarning) as caught:
        [s] = load(path)
    assert [(m.line, m.path) for m in s.malformed] == [(lineno, str(path))]
    assert shape(s) == shape(clean)
    assert any(f"{path}:{lineno}:" in str(w.message) for w in caught)


def test_a_long_nul_run_at_the_start_is_one_bad_line(tmp_path: Path) -> None:
    """A run of NUL bytes longer than the sniffed head, then the session: still one bad line."""
    path, lineno = spliced(SIDECHAIN, tmp_path / "s.jsonl", b"\x00" * 200_000, 0)
    assert detect(path) == "claude-code"
    with pytest.warns(UserWarning):
        [s] = load(path)
    assert [m.line for m in s.malformed] == [lineno]
    assert shape(s) == shape(load(SIDECHAIN)[0])


def _random_bytes(n: int, seed: int = 7) -> bytes:
    return random.Random(seed).randbytes(n)


BINARIES = {
    "png": b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR" + _random_bytes(3000),
    # a real transcript gzipped (a synthetic one without the shared corpus: the gzip is the point)
    "gzip-of-a-transcript": gzip.compress(
        SIDECHAIN.read_bytes() if SIDECHAIN.exists() else b'{"type": "user", "message": {}}\n' * 200
    ),
    "elf": b"\x7fELF\x02\x01\x01" + _random_bytes(5000),
    "random": _random_bytes(200_000),
    "utf-16": "\n".join(['{"type": "user"}'] * 50).encode("utf-16"),
    "all-nul": b"\x00" * 300_000,
    "latin-1-text": "caf\xe9 cr\xe8me\n".encode("latin-1") * 20,
}


@pytest.mark.parametrize("name", sorted(BINARIES))
def test_binary_files_are_still_refused(tmp_path: Path, name: str) -> None:
    """Binary is decided by more than one line: a file of mostly unreadable lines is refused
    with one error naming it (the CLI's exit 2)."""
    path = tmp_path / f"{name}.jsonl"
    path.write_bytes(BINARIES[name])
    with pytest.raises(TranscriptError, match=r"binary|not UTF-8") as exc:
        load(path)
    assert str(path) in str(exc.value)


def test_replay_cli_reports_the_bad_line_and_replays_the_rest(tmp_path: Path) -> None:
    """``ctxengine replay FILE --json OUT`` on a session with a NUL line near its start: exit 0,
    ``malformed_records == 1``, a warning naming file and line, every call replayed."""
    path, lineno = spliced(SIDECHAIN, tmp_path / "nul.jsonl", b"\x00" * 480, 3)
    replays_all_but_one_record(tmp_path, path, SIDECHAIN, lineno)


def replays_all_but_one_record(tmp_path: Path, path: Path, src: Path, lineno: int) -> None:
    """``replay PATH --json`` exits 0, counts one malformed record, names it as ``PATH:LINENO:``
    in a warning, and replays every call of ``src`` (the file before the bad line went in)."""
    out = tmp_path / "out.json"
    res = CliRunner().invoke(app, ["replay", str(path), "--json", str(out), "--quiet"])
    assert res.exit_code == 0, res.stderr
    rep: Any = json.loads(out.read_text(encoding="utf-8"))
    rep = rep[0] if isinstance(rep, list) else rep
    assert rep["summary"]["malformed_records"] == 1
    assert rep["session"]["calls"] == len(load(src)[0].calls)
    assert f"{path}:{lineno}:" in res.stderr


def test_a_json_document_with_a_bad_line_names_the_line(tmp_path: Path) -> None:
    """One JSON document (OpenAI chat list) cannot lose one record: the error names the line."""
    doc = json.dumps([{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}], indent=1)
    lines = doc.encode().split(b"\n")
    lines.insert(3, b"\x00" * 64)
    path = tmp_path / "chat.json"
    path.write_bytes(b"\n".join(lines))
    with pytest.raises(TranscriptError, match=rf"{path}:4: not valid JSON"):
        load(path)


# ------------------------------------------------------------------ 9b. a bad first line, FF/VT lines


def bad_first_line(kind: str, src: Path) -> bytes:
    """A bad line of shape ``kind`` to put before the first record of ``src``."""
    first = src.read_bytes().split(b"\n", 1)[0]
    return {
        "truncated-record": first[:100],  # an append cut short, then the session restarted
        "open-brace": b"{",
        "ff-garbage": b"\x0c\x0cgarbage \x0c",
        "log-line": b"[16:41:33] interrupted",
        "json-scalar": b"42",
    }[kind]


FIRST_KINDS = ["truncated-record", "open-brace", "ff-garbage", "log-line", "json-scalar"]


@pytest.mark.parametrize("kind", FIRST_KINDS)
@pytest.mark.parametrize("src", [SIDECHAIN, ROLLOUT], ids=["claude-code", "codex"])
def test_a_bad_first_line_is_one_malformed_record(tmp_path: Path, src: Path, kind: str) -> None:
    """A first line that is not a record (a truncated record, garbage, a form feed run) does
    not decide the format: the file is still JSONL, line 1 is one malformed record and every
    other record loads. Before the fix detection stopped at it and parsed the whole file as one
    JSON document ("...:1: not valid JSON", or "unknown transcript format"): exit 2."""
    path, lineno = spliced(src, tmp_path / src.name, bad_first_line(kind, src), 0)
    assert detect(path) == detect(src)
    with pytest.warns(UserWarning) as caught:
        [s] = load(path)[:1]
    assert [(m.line, m.path) for m in s.malformed] == [(lineno, str(path))]
    assert shape(s) == shape(load(src)[0])
    assert any(f"{path}:1:" in str(w.message) for w in caught)


def test_a_bad_first_line_before_a_record_longer_than_the_sniff(tmp_path: Path) -> None:
    """The first record after the bad line may be longer than the 64 KB sniffed for the
    format: detection reads on to it."""
    lines = SIDECHAIN.read_bytes().split(b"\n")
    record = json.loads(lines[0])
    record["message"]["content"] = "long prompt " * 20_000  # 240 KB
    lines[0] = json.dumps(record).encode()
    clean = tmp_path / "clean.jsonl"
    clean.write_bytes(b"\n".join(lines))
    path, _ = spliced(clean, tmp_path / "bad.jsonl", lines[0][:100], 0)
    assert detect(path) == "claude-code"
    with pytest.warns(UserWarning):
        [s] = load(path)
    assert [m.line for m in s.malformed] == [1]
    assert shape(s) == shape(load(clean)[0])


@pytest.mark.parametrize("cut", [False, True], ids=["valid", "truncated"])
@pytest.mark.parametrize("src", [SIDECHAIN, ROLLOUT], ids=["claude-code", "codex"])
def test_a_first_record_longer_than_detection_reads_does_not_refuse_the_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, src: Path, cut: bool
) -> None:
    """A first line longer than detection reads of one line (16 MiB; 64 KB here) is judged by the
    lines after it: a valid record loads, a truncated one is one malformed record. Before the fix
    the whole file was refused, naming line 2 ("not valid JSON (Extra data)"), exit 2."""
    monkeypatch.setattr("ctxengine.formats.DETECT_MAX_BYTES", 65_536)
    monkeypatch.setattr("ctxengine.formats.DETECT_SCAN_BYTES", 8 * 65_536)
    lines = src.read_bytes().split(b"\n")
    record = json.loads(lines[0])
    record["padding"] = "long record " * 20_000  # 240 KB in a field no reader reads
    padded = json.dumps(record).encode()
    path = tmp_path / src.name
    path.write_bytes(b"\n".join([padded[:-40] if cut else padded, *lines[1:]]))
    assert detect(path) == detect(src)
    if cut:
        with pytest.warns(UserWarning):
            [s] = load(path)[:1]
        assert [m.line for m in s.malformed] == [1]
    else:
        [s] = load(path)[:1]
        assert s.malformed == []
        assert shape(s) == shape(load(src)[0])


def test_deeply_nested_json_never_breaks_a_reader_or_the_check(tmp_path: Path) -> None:
    """A document or a tool call's arguments nested past the parser's recursion limit is a clear
    error (a document) or a problem (arguments), never a RecursionError traceback."""
    doc = tmp_path / "chat.json"
    doc.write_bytes(b'{"messages": ' + b"[" * 3_000 + b"]" * 3_000 + b"}")
    with pytest.raises(TranscriptError, match=r"chat\.json: not valid JSON \(nested too deeply to read\)"):
        load(doc)
    from ctxengine.formats.validate import validate_openai_chat

    args = "[" * 3_000 + "]" * 3_000
    call = {"id": "c1", "type": "function", "function": {"name": "f", "arguments": args}}
    body = {
        "messages": [
            {"role": "user", "content": "hi"},
            {"role": "assistant", "content": None, "tool_calls": [call]},
            {"role": "tool", "tool_call_id": "c1", "content": "ok"},
        ]
    }
    assert validate_openai_chat(body) == ["messages[1].tool_calls[0]: arguments is not valid JSON (O5)"]


def test_a_pretty_printed_document_is_still_one_document(tmp_path: Path) -> None:
    """Looking past a first line that is not JSON stops short of documents: a file that parses
    as one JSON document is read as one, even when one of its lines looks like a JSONL record."""
    lines = [
        '{"messages": [',
        '{"role": "user", "content": "hi"},',
        '{"type": "user", "role": "assistant", "content": "ok"}',
        "]}",
    ]
    path = tmp_path / "chat.json"
    path.write_text("\n".join(lines), encoding="utf-8")
    assert detect(path) == "openai-chat"


@pytest.mark.parametrize("src", [SIDECHAIN, ROLLOUT], ids=["claude-code", "codex"])
def test_line_separators_inside_a_first_record_are_not_line_breaks(tmp_path: Path, src: Path) -> None:
    """JSONL lines end at LF only: U+2028, U+2029 and U+0085 may stand raw inside a JSON string
    (``str.splitlines`` split on them and made detection refuse the file)."""
    lines = src.read_bytes().split(b"\n")
    record = json.loads(lines[0])
    record["note"] = "a\u2028b\u2029c\u0085d"
    lines[0] = json.dumps(record, ensure_ascii=False).encode()
    path = tmp_path / src.name
    path.write_bytes(b"\n".join(lines))
    assert detect(path) == detect(src)
    s = load(path)[0]
    assert s.malformed == []
    assert shape(s) == shape(load(src)[0])


BLANKISH = {
    "ff": b"\x0c",
    "ff-run": b"\x0c\x0c\x0c\x0c",
    "vt": b"\x0b\x0b",
    "ff-vt-spaces": b" \x0c\t\x0b ",
}


@pytest.mark.parametrize("kind", sorted(BLANKISH))
@pytest.mark.parametrize("where", ["first", "early", "last"])
@pytest.mark.parametrize("src", [SIDECHAIN, ROLLOUT], ids=["claude-code", "codex"])
def test_a_form_feed_or_vertical_tab_line_is_a_bad_record(
    tmp_path: Path, src: Path, kind: str, where: str
) -> None:
    """Only JSON whitespace (space, tab, CR, LF) makes a line blank. A line of form feeds or
    vertical tabs is not JSON: one malformed record named by line (``bytes.strip()`` made it a
    blank line, silently skipped and not counted)."""
    at = {"first": 0, "early": 4, "last": -1}[where]
    path, lineno = spliced(src, tmp_path / src.name, BLANKISH[kind], at)
    assert detect(path) == detect(src)
    with pytest.warns(UserWarning):
        [s] = load(path)[:1]
    assert [(m.line, m.path) for m in s.malformed] == [(lineno, str(path))]
    assert shape(s) == shape(load(src)[0])


@pytest.mark.parametrize("src", [SIDECHAIN, ROLLOUT], ids=["claude-code", "codex"])
def test_json_whitespace_lines_stay_blank(tmp_path: Path, src: Path) -> None:
    """Lines of spaces, tabs and CRs are blank, not records: nothing malformed."""
    path, _ = spliced(src, tmp_path / src.name, b" \t \r", 2)
    assert load(path)[0].malformed == []


@pytest.mark.parametrize("src", [SIDECHAIN, ROLLOUT], ids=["claude-code", "codex"])
def test_replay_cli_with_a_truncated_first_line(tmp_path: Path, src: Path) -> None:
    """``ctxengine replay FILE --json OUT`` on a session whose first line is a truncated record:
    exit 0, ``malformed_records == 1``, a warning naming line 1, every call replayed."""
    path, _ = spliced(src, tmp_path / src.name, bad_first_line("truncated-record", src), 0)
    replays_all_but_one_record(tmp_path, path, src, 1)


# ------------------------------------------------------------------ 11. sub-agent records in a main file

T0 = 1_760_000_000.0
SESSION_ID = "00000000-0000-4000-8000-0000000000aa"


def cc(kind: str, content: Any, uid: str, parent: str | None, ts: float, **extra: Any) -> dict[str, Any]:
    """One Claude Code JSONL record (user or assistant), as the harness writes it."""
    iso = f"2025-10-09T{int(ts - T0) // 3600:02d}:{int(ts - T0) // 60 % 60:02d}:{int(ts - T0) % 60:02d}.000Z"
    rec: dict[str, Any] = {
        "parentUuid": parent,
        "isSidechain": False,
        "userType": "external",
        "cwd": "/repo",
        "sessionId": SESSION_ID,
        "version": "1.0.30",
        "type": kind,
        "uuid": uid,
        "timestamp": iso,
    }
    if kind == "user":
        rec["message"] = {"role": "user", "content": content}
    else:
        usage = extra.pop(
            "usage", {"input_tokens": 10, "cache_read_input_tokens": 5_000, "output_tokens": 40}
        )
        rec["message"] = {
            "model": "claude-sonnet-4-5",
            "id": extra.pop("msg_id", f"msg_{uid}"),
            "type": "message",
            "role": "assistant",
            "content": content,
            "stop_reason": None,
            "usage": usage,
        }
    rec.update(extra)
    return rec


def tool_use(cid: str, name: str, **inp: Any) -> list[dict[str, Any]]:
    return [{"type": "tool_use", "id": cid, "name": name, "input": inp}]


def tool_result(cid: str, text: str) -> list[dict[str, Any]]:
    return [{"type": "tool_result", "tool_use_id": cid, "content": text}]


def subagent(agent: str | None, tag: str, t: float) -> list[dict[str, Any]]:
    """A sub-agent's own records (its prompt, a Grep call, a 20,000-char result, its report)."""
    side: dict[str, Any] = {"isSidechain": True} | ({"agentId": agent} if agent else {})
    big = f"{tag}-INTERNAL " + " ".join(f"/repo/src/file{i}.py:{i}: token=abc{i}" for i in range(600))
    return [
        cc("user", f"Search the repo for {tag}", f"{tag}-u", None, t, **side),
        cc(
            "assistant",
            tool_use(f"toolu_{tag}_grep", "Grep", pattern=tag),
            f"{tag}-a1",
            f"{tag}-u",
            t + 1,
            **side,
        ),
        cc("user", tool_result(f"toolu_{tag}_grep", big[:20_000]), f"{tag}-r1", f"{tag}-a1", t + 2, **side),
        cc(
            "assistant",
            [{"type": "text", "text": f"{tag}: found 3 places"}],
            f"{tag}-a2",
            f"{tag}-r1",
            t + 3,
            **side,
        ),
    ]


def main_with_subagents(path: Path, agents: list[str | None]) -> Path:
    """A main session: the parent calls Task once per sub-agent; each sub-agent's records are
    written between the Task call and its result (and one sub-agent runs in the background, its
    records interleaved with the parent's later calls); then the parent goes on."""
    recs: list[dict[str, Any]] = [
        cc("user", "Find where /auth tokens are logged and remove that.", "u0", None, T0)
    ]
    parent, t = "u0", T0 + 1
    for k, agent in enumerate(agents):
        tag = f"SUB{k}"
        recs.append(
            cc("assistant", tool_use(f"toolu_task{k}", "Task", prompt=f"search {tag}"), f"a{k}", parent, t)
        )
        recs += subagent(agent, tag, t + 1)
        recs.append(
            cc("user", tool_result(f"toolu_task{k}", f"{tag}: found 3 places"), f"r{k}", f"a{k}", t + 5)
        )
        parent, t = f"r{k}", t + 10
    for k in range(2):
        recs.append(
            cc("assistant", tool_use(f"toolu_edit{k}", "Edit", file_path=f"/repo/{k}.py"), f"e{k}", parent, t)
        )
        if k == 0:  # a background sub-agent writes while the parent works
            recs += subagent("bg", "BGSUB", t + 0.5)
        recs.append(cc("user", tool_result(f"toolu_edit{k}", "edited"), f"er{k}", f"e{k}", t + 1))
        parent, t = f"er{k}", t + 10
    path.write_text("".join(json.dumps(r) + "\n" for r in recs), encoding="utf-8")
    return path


def _texts(s: Session) -> str:
    return json.dumps([m.blocks for m in s.messages], default=repr)


@pytest.mark.parametrize(
    "agents", [["agent-1"], ["agent-1", "agent-2"], [None]], ids=["one", "two", "no-agent-id"]
)
def test_interleaved_sidechain_records_stay_out_of_the_parent(
    tmp_path: Path, agents: list[str | None]
) -> None:
    """``isSidechain`` records in a main file belong to their sub-agent: none of its prompt,
    calls or results is in the parent's history; the parent keeps its Task calls, each answered
    by the next message; each sub-agent is its own sidechain session of this file."""
    path = main_with_subagents(tmp_path / "main.jsonl", agents)
    parent, *subs = load(path)
    assert not parent.sidechain
    assert "INTERNAL" not in _texts(parent) and "toolu_SUB" not in _texts(parent)
    assert len(parent.calls) == len(agents) + 2
    for i, m in enumerate(parent.messages):
        for c in m.tool_calls:
            assert c.id in {r.call_id for r in parent.messages[i + 1].tool_results}
    assert all(s.sidechain and s.parent == str(path) and s.session_id == SESSION_ID for s in subs)
    assert len(subs) == len(set(agents)) + 1  # the background sub-agent too
    assert sorted(len(s.calls) for s in subs) == [2] * len(subs)
    assert all("INTERNAL" in _texts(s) for s in subs)


def test_replay_of_a_main_file_with_sidechain_records(tmp_path: Path) -> None:
    """The replay sends the parent's requests without the sub-agent's 20,000-char result; the
    sub-agent replays as its own session."""
    path = main_with_subagents(tmp_path / "main.jsonl", ["agent-1"])
    out = tmp_path / "out.json"
    res = CliRunner().invoke(app, ["replay", str(path), "--window", "200000", "--json", str(out), "--quiet"])
    assert res.exit_code == 0, res.stderr
    reps = json.loads(out.read_text(encoding="utf-8"))
    assert [(r["session"]["sidechain"], r["session"]["calls"]) for r in reps] == [
        (False, 3),
        (True, 2),
        (True, 2),
    ]
    calls = reps[0]["calls"]
    assert all(abs(c["sent_tokens"] - c["recorded_input_tokens"]) < 1_000 for c in calls), calls


def test_a_sidechain_file_stays_one_sidechain_session() -> None:
    [s] = load(SIDECHAIN)
    assert s.sidechain and s.calls


# ------------------------------------------------------------------ 12. re-ingest on a retry


def _engine() -> ContextEngine:
    e = ContextEngine(get_policy("default"), model="claude-sonnet-4-5", window=200_000)
    e.bootstrap(system="You are a coding agent.", fixed_prefix_tokens=2_000)
    return e


def _turns() -> list[Message]:
    return [
        Message("user", (Text("Fix the failing test in /repo/tests/test_io.py."),), "u1", timestamp=T0),
        Message("assistant", (ToolCall("c1", "bash", {"command": "pytest -x"}),), "a1", timestamp=T0 + 1),
        Message(
            "user",
            (ToolResult("c1", (Text("1 failed: test_read " * 50),), name="bash"),),
            "r1",
            timestamp=T0 + 2,
        ),
    ]


@pytest.mark.parametrize("retried", [0, 1, 2], ids=["prompt", "tool-call", "tool-result"])
@pytest.mark.parametrize("copy", [False, True], ids=["same-object", "rebuilt-later"])
def test_ingest_is_idempotent_by_message_id(retried: int, copy: bool) -> None:
    """A harness that ingests the same message again on a retry (the same object, or the same
    message rebuilt with a later timestamp) sends it once; the store keeps one entry of it."""
    once, twice = _engine(), _engine()
    for i, m in enumerate(_turns()):
        once.ingest(m)
        twice.ingest(m)
        if i == retried:
            again = msgspec.structs.replace(m, timestamp=(m.timestamp or T0) + 30) if copy else m
            assert twice.ingest(again) == []
    p1, p2 = once.assemble(now=T0 + 60), twice.assemble(now=T0 + 60)
    assert p2.messages == p1.messages and p2.tokens == p1.tokens
    assert len(twice.history) == 3 and twice.reingested == 1
    assert len(twice.store.entries(twice.session_id, "message")) == 3


def test_ingest_refuses_another_message_under_a_known_id() -> None:
    """The same id with other content is a harness bug: a clear error, nothing changed."""
    e = _engine()
    first = _turns()[0]
    e.ingest(first)
    with pytest.raises(ValueError, match="'u1' was already ingested"):
        e.ingest(Message("user", (Text("Something else entirely."),), "u1", timestamp=T0 + 5))
    assert e.history == [first]


# ------------------------------------------------------------------ 10. documents and images

PRESETS = ("default", "claude-code", "openclaw", "pi", "letta")


def make_pdf(texts: list[str]) -> str:
    """A base64 PDF with one page per text (Helvetica, a real xref table)."""
    objs = ["<< /Type /Catalog /Pages 2 0 R >>", "", "<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>"]
    kids = []
    for t in texts:
        stream = f"BT /F1 12 Tf 72 712 Td ({t}) Tj ET"
        objs.append(f"<< /Length {len(stream)} >>\nstream\n{stream}\nendstream")
        objs.append(
            "<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] "
            f"/Resources << /Font << /F1 3 0 R >> >> /Contents {len(objs)} 0 R >>"
        )
        kids.append(len(objs))
    objs[1] = f"<< /Type /Pages /Kids [{' '.join(f'{k} 0 R' for k in kids)}] /Count {len(kids)} >>"
    out = b"%PDF-1.4\n"
    offsets = []
    for i, o in enumerate(objs, 1):
        offsets.append(len(out))
        out += f"{i} 0 obj\n{o}\nendobj\n".encode()
    xref = len(out)
    out += f"xref\n0 {len(objs) + 1}\n0000000000 65535 f \n".encode()
    out += "".join(f"{o:010d} 00000 n \n" for o in offsets).encode()
    out += f"trailer\n<< /Size {len(objs) + 1} /Root 1 0 R >>\nstartxref\n{xref}\n%%EOF\n".encode()
    return base64.b64encode(out).decode()


def pdf(pages: int, tag: str = "SPEC") -> Document:
    return Document(
        "application/pdf", make_pdf([f"{tag} page {i} MARK-{i:03d}" for i in range(1, pages + 1)])
    )


def screenshots(n: int) -> tuple[Image, ...]:
    return tuple(
        Image("image/png", data="iVBORw0KGgo" + "A" * 4_000, width=1568, height=1000) for _ in range(n)
    )


def media_session(kind: str) -> list[tuple[str, tuple[Text | Image | Document, ...]]]:
    """(tool, result parts) of three reads: PDFs of 12, 40 and 12 pages (by the ``read`` tool,
    whose text results are exempt from the budget), or batches of screenshots, or a mix."""
    if kind == "pdf":
        return [("read", (pdf(n, f"V{k}"),)) for k, n in enumerate((12, 40, 12))]
    if kind == "images":
        return [("screenshot", (Text("captured"), *screenshots(n))) for n in (10, 40, 10)]
    return [("read", (Text("Read 40 pages."), pdf(40))), ("browser", (Text("x" * 30_000), *screenshots(30)))]


def request_tokens(e: ContextEngine, p: Any) -> int:
    return int(e.ledger.state.fixed_prefix + sum(e.counter.count_message(m) for m in p.messages))


@pytest.mark.parametrize("kind", ["pdf", "images", "mixed"])
@pytest.mark.parametrize("window", [64_000, 200_000])
@pytest.mark.parametrize("policy", PRESETS)
def test_documents_and_images_never_push_a_request_past_the_window(
    policy: str, window: int, kind: str
) -> None:
    """Documents and images get the budget text results get: a 40-page PDF (~120,000 tokens by
    the engine's own count) or 40 screenshots as the newest result do not make a request larger
    than the window, under every preset (the guard cannot cut the newest round)."""
    e = ContextEngine(get_policy(policy), model="claude-sonnet-4-5", window=window)
    e.bootstrap(system="You are a coding agent.", fixed_prefix_tokens=2_000)
    e.ingest(Message("user", (Text("Compare the vendor specs."),), "u0", timestamp=T0))
    sizes = []
    for k, (tool, parts) in enumerate(media_session(kind)):
        ts = T0 + 30 * k
        sizes.append(request_tokens(e, e.assemble(now=ts)))
        e.ingest(
            Message(
                "assistant", (ToolCall(f"d{k}", tool, {"file_path": f"/specs/v{k}"}),), f"a{k}", timestamp=ts
            )
        )
        e.ingest(Message("user", (ToolResult(f"d{k}", parts, name=tool),), f"r{k}", timestamp=ts + 1))
    sizes.append(request_tokens(e, e.assemble(now=T0 + 200)))
    assert max(sizes) <= window, sizes


def test_an_offloaded_pdf_is_read_back_page_wise() -> None:
    """The offloaded PDF's placeholder names its artifact and how to read it; ``retrieve`` with
    ``pages`` gives those pages' text and the next range; the engine gives the part back whole."""
    e = ContextEngine(get_policy("default"), model="claude-sonnet-4-5", window=64_000)
    e.bootstrap(system="sys", fixed_prefix_tokens=2_000)
    doc = pdf(40)
    e.ingest(Message("user", (Text("Summarize the spec."),), "u0", timestamp=T0))
    e.ingest(Message("assistant", (ToolCall("d1", "read", {"file_path": "/spec.pdf"}),), "a1", timestamp=T0))
    events = e.ingest(Message("user", (ToolResult("d1", (doc,), name="read"),), "r1", timestamp=T0 + 1))
    assert [ev.layer for ev in events] == ["tool_result_budget"]
    assert events[0].details["media_offloaded"] == 1
    shown = e.assemble(now=T0 + 2).messages[-1].tool_results[0]
    assert not any(isinstance(p, Document) for p in shown.content)
    placeholder = shown.content[0].text  # type: ignore[union-attr]
    aid = "tool-result/d1/part-1"
    assert aid in placeholder and "40 pages" in placeholder and 'pages="1-10"' in placeholder
    text = retrieve(e.store, e.session_id, aid, pages="3-5")
    assert all(f"MARK-{i:03d}" in text for i in (3, 4, 5)) and "MARK-006" not in text
    assert 'pages="6-8"' in text
    assert "MARK-001" in retrieve(e.store, e.session_id, aid)  # the first pages by default
    with pytest.raises(ToolError, match="at most 20 pages"):
        retrieve(e.store, e.session_id, aid, pages="1-40")
    assert e.retrieve_part(aid) == doc


def test_an_offloaded_image_is_kept_whole() -> None:
    e = ContextEngine(get_policy("default"), model="claude-sonnet-4-5", window=64_000)
    e.bootstrap(system="sys", fixed_prefix_tokens=2_000)
    shots = screenshots(40)
    e.ingest(Message("assistant", (ToolCall("s1", "screenshot", {}),), "a1", timestamp=T0))
    e.ingest(Message("user", (ToolResult("s1", (Text("captured"), *shots), name="screenshot"),), "r1"))
    shown = e.assemble(now=T0 + 2).messages[-1].tool_results[0]
    assert [type(p) for p in shown.content] == [Text]
    assert "captured" in shown.content[0].text  # type: ignore[union-attr]
    assert e.retrieve_part("tool-result/s1/part-2") == shots[0]
    assert "image" in retrieve(e.store, e.session_id, "tool-result/s1/part-2")
