"""The replay's tool-limits report (``ctxengine.tools.limits``): which recorded calls count as a
read or a grep, and what our read/grep limits would have kept out of their results.

Unit tests of the quote-aware shell splitting (``split_commands``) and of the classification
(compound commands, pipelines, redirections, here-documents, ``bash -c``), the 256 KB size gate
on whole-file reads, then the report on the six real Claude Code sessions, where most Bash calls
start with ``cd DIR &&`` and were all missed when only the first word was looked at.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import msgspec
import pytest

from conftest import CLAUDE_CODE
from ctxengine.formats import load
from ctxengine.messages.model import Message, Session, Text, ToolCall, ToolResult
from ctxengine.models.registry import Registry
from ctxengine.tokens.counter import counter_for
from ctxengine.tools.budgets import READ_MAX_BYTES
from ctxengine.tools.limits import (
    REFUSAL_TOKENS,
    ToolUse,
    classify,
    file_bytes,
    limited_read,
    split_commands,
    tool_limit_report,
)


def bash(command: str) -> ToolCall:
    return ToolCall("t1", "Bash", {"command": command})


def approx(text: str) -> int:
    """A stand-in token count (4 characters a token): the unit tests need no tokenizer."""
    return len(text) // 4


# ------------------------------------------------------------------ splitting


@pytest.mark.parametrize(
    ("script", "commands"),
    [
        ("cat f.txt", [[["cat", "f.txt"]]]),
        ("cd src && cat f.txt", [[["cd", "src"]], [["cat", "f.txt"]]]),
        ("cd src; rg -n foo", [[["cd", "src"]], [["rg", "-n", "foo"]]]),
        ("ls x || echo none", [[["ls", "x"]], [["echo", "none"]]]),
        ("make &\ncat log", [[["make"]], [["cat", "log"]]]),
        ("grep x f | head -5", [[["grep", "x", "f"], ["head", "-5"]]]),
        ("cmd 2>&1 | grep x", [[["cmd", "2>&1"], ["grep", "x"]]]),
        ("cmd |& tee log", [[["cmd"], ["tee", "log"]]]),
        ("cat f &>/dev/null", [[["cat", "f", "&>/dev/null"]]]),
        ("(cd a && cat b)", [[["cd", "a"]], [["cat", "b"]]]),
        # operators inside quotes or escaped do not split
        ('grep "a && b" f.txt && cat g', [[["grep", "a && b", "f.txt"]], [["cat", "g"]]]),
        ("rg 'x; y || z | w' src; head -3 f", [[["rg", "x; y || z | w", "src"]], [["head", "-3", "f"]]]),
        ('echo "say \\"a && b\\"" && cat f', [[["echo", 'say "a && b"']], [["cat", "f"]]]),
        (
            "find . -name x -exec cat {} \\; && ls",
            [[["find", ".", "-name", "x", "-exec", "cat", "{}", ";"]], [["ls"]]],
        ),
        # substitutions stay inside their word
        ("n=$(grep -c x f && echo y); echo $n", [[["n=$(grep -c x f && echo y)"]], [["echo", "$n"]]]),
        (
            "git commit -m \"$(cat <<'EOF'\nit's done && cat x\nEOF\n)\" && ls",
            [[["git", "commit", "-m", "$(cat <<'EOF'\n)"]], [["ls"]]],
        ),
        # comments, line continuations, here-document bodies
        ("# cat secret\nls -la # && cat x", [[["ls", "-la"]]]),
        ("cat \\\n  f.txt", [[["cat", "f.txt"]]]),
        (
            "cat > out.md <<'EOF'\nit's a body && cat x\nEOF\nhead -1 f",
            [[["cat", ">", "out.md", "<<EOF"]], [["head", "-1", "f"]]],
        ),
        ("", []),
        ("  ;; && ", []),
    ],
)
def test_split_commands(script: str, commands: list[list[list[str]]]) -> None:
    assert split_commands(script) == commands


@pytest.mark.parametrize(
    "script",
    [
        'cd x && cat "f',
        "cd x && grep 'a && b",
        "echo $(cat f",
        "echo `cat f",
        'a "b $(c "d',
        "\\",
        "cat <<EOF",
    ],
)
def test_split_commands_never_raises_on_unbalanced_quotes(script: str) -> None:
    commands = split_commands(script)
    assert commands and all(all(stage for stage in pipeline) for pipeline in commands)


def test_a_nul_in_a_command_is_dropped_not_fatal() -> None:
    """A NUL (possible in a JSON transcript as \\u0000) once met the substitution marker and
    raised IndexError out of the replay."""
    assert split_commands("echo $(a) '\x005\x00'") == [[["echo", "$(a)", "5"]]]
    assert classify(bash("cat f\x00 && grep x g")) == ToolUse("read", whole_file=True)


def test_process_substitution_stays_inside_its_word() -> None:
    assert split_commands("diff <(cat a) <(cat b)") == [[["diff", "<(cat a)", "<(cat b)"]]]
    assert classify(bash("diff <(cat a) <(cat b)")) is None  # a diff, not a read
    assert classify(bash("while read l; do echo $l; done < <(grep x f)")) is None


def test_unbalanced_quote_runs_to_the_end() -> None:
    # the command before the open quote is still found; the open quote takes the rest as a word
    assert split_commands('cd x && cat "f && ls') == [[["cd", "x"]], [["cat", '"f', "&&", "ls"]]]
    assert classify(bash('cd x && cat "f && ls')) == ToolUse("read", whole_file=True)


# ------------------------------------------------------------------ classifying


@pytest.mark.parametrize(
    ("command", "use"),
    [
        ("cat f.txt", ToolUse("read", True)),
        ("cd /repo && cat f.txt", ToolUse("read", True)),
        ('cd "E:\\AI\\Test" && cat data.json 2>/dev/null | tail -30', ToolUse("read", False)),
        ("cd /repo && grep -n foo src/a.py", ToolUse("grep")),
        ("cd /repo; rg foo", ToolUse("grep")),
        ("cd /repo || exit 1; sed -n '1,40p' f", ToolUse("read", False)),
        ("cd x && ls -la f && head -5 f", ToolUse("read", False)),  # the first read decides
        ("cat f | head -20", ToolUse("read", False)),
        ("grep -rn x . | head -5", ToolUse("grep")),  # a grep the pipeline already cut
        ("FOO=1 timeout 30 cat f", ToolUse("read", True)),
        ("if grep -q x f; then echo y; fi", ToolUse("grep")),
        ('for f in *.md; do\n  echo "== $f"\n  head -1 "$f" | cat -A\ndone', ToolUse("read", False)),
        ("bash -lc 'cd /repo && rg -n foo'", ToolUse("grep")),
        ("/usr/bin/cat f", ToolUse("read", True)),
        # not a read or a search
        ("cd /repo && python -m pytest 2>&1 | grep -E 'passed|failed'", None),
        ("ps aux | grep -i git | grep -v grep", None),
        ("ls -la | head -20", None),
        ("git status --short | grep '^??'", None),
        ("echo 'cd x && cat secret'", None),
        ("cat > notes.md <<'EOF'\n# Notes\ncat them all\nEOF", None),  # a write
        ("cat <<EOF\nhello\nEOF", None),  # prints a here-document, reads no file
        ('grep x <<< "$text"', None),
        ("grep -n x f > hits.txt", None),
        ("cat f >/dev/null", None),
        ("sed -i 's/a/b/' f.py", None),  # an edit
        ("sed --in-place=.bak 's/a/b/' f.py", None),
        ("n=$(grep -c x f); echo $n", None),
        ("cd /repo && git log -1", None),
        ("", None),
    ],
)
def test_classify_shell_commands(command: str, use: ToolUse | None) -> None:
    assert classify(bash(command)) == use


def test_classify_keeps_redirections_to_stderr_and_fd2() -> None:
    assert classify(bash("cat f 2>/dev/null")) == ToolUse("read", True)
    assert classify(bash("cat f >&2")) == ToolUse("read", True)  # still shown
    assert classify(bash("grep x f 2>&1")) == ToolUse("grep")


def test_classify_tools_by_name_and_codex_command_lists() -> None:
    assert classify(ToolCall("r", "Read", {"file_path": "a.py"})) == ToolUse("read", True)
    assert classify(ToolCall("r", "Read", {"file_path": "a.py", "offset": 10})) == ToolUse("read", False)
    assert classify(ToolCall("r", "Read", {"file_path": "a.py", "limit": 50})) == ToolUse("read", False)
    assert classify(ToolCall("r", "Read", {"file_path": "a.py", "offset": None})) == ToolUse("read", True)
    assert classify(ToolCall("g", "Grep", {"pattern": "x"})) == ToolUse("grep")
    assert classify(ToolCall("e", "Edit", {"file_path": "a.py"})) is None
    codex = ToolCall("c", "exec_command", {"cmd": ["bash", "-lc", "cd /repo && rg -n foo"]})
    assert classify(codex) == ToolUse("grep")
    assert classify(ToolCall("c", "exec_command", {"cmd": ["cat", "a b.txt"]})) == ToolUse("read", True)
    assert classify(ToolCall("c", "exec_command", {"cmd": "sed -n '1,140p' spec.md"})) == ToolUse("read")
    assert classify(ToolCall("c", "apply_patch", "*** Begin Patch")) is None


# ------------------------------------------------------------------ the size gate


def test_whole_file_read_over_256_kb_is_refused_before_reading() -> None:
    # 30,000 short lines: 300,000 bytes. Without the gate the first 2,000 lines (~5,000 tokens)
    # would be shown; with it the read is refused: only the refusal reaches the context.
    text = "\n".join(f"row {i:05d}" for i in range(30_000))
    assert len(text.encode()) > READ_MAX_BYTES
    paged = limited_read(text, approx)
    assert paged.count("\n") == 1_999
    assert limited_read(text, approx, whole_file=True) == ""
    under = text[: READ_MAX_BYTES - 10]
    assert limited_read(under, approx, whole_file=True) == limited_read(under, approx)


def test_file_size_is_estimated_without_the_line_numbers() -> None:
    body = "x" * 90
    lines = [f"{i:6d}\t{body}" for i in range(1, 2_801)]  # Claude Code's cat -n layout
    numbered = "\n".join(lines)
    assert len(numbered.encode()) > READ_MAX_BYTES  # 271,599 bytes shown ...
    assert file_bytes(numbered) == 2_800 * 91 - 1 < READ_MAX_BYTES  # ... of a 254,799-byte file
    arrows = "\n".join(f"{i:>6}→{body}" for i in range(1, 11))
    assert file_bytes(arrows) == 10 * 91 - 1
    plain = "plain text\n  12\tnumbered, but not from the first line"
    assert file_bytes(plain) == len(plain.encode())


def messages_for(call: ToolCall, output: str) -> list[Message]:
    return [
        Message("assistant", (call,), "a1"),
        Message("user", (ToolResult(call.id, (Text(output),)),), "u1"),
    ]


def test_report_applies_the_gate_only_to_whole_file_reads() -> None:
    text = "\n".join(f"row {i:05d}" for i in range(30_000))
    whole = tool_limit_report(messages_for(ToolCall("r1", "Read", {"file_path": "big.csv"}), text), approx)
    assert whole.read.results == whole.read.over_limit == 1
    assert whole.read.tokens_kept_out == approx(text) - REFUSAL_TOKENS
    paged_call = ToolCall("r1", "Read", {"file_path": "big.csv", "offset": 1, "limit": 30_000})
    paged = tool_limit_report(messages_for(paged_call, text), approx)
    assert paged.read.tokens_kept_out == approx(text) - approx(limited_read(text, approx))
    assert paged.read.tokens_kept_out < whole.read.tokens_kept_out
    cat = tool_limit_report(messages_for(bash("cd /data && cat big.csv"), text), approx)
    assert cat.read == whole.read
    tail = tool_limit_report(messages_for(bash("cd /data && cat big.csv | tail -n 30000"), text), approx)
    assert tail.read == paged.read  # part of a file: the line limit, not the gate


def test_grep_pipeline_output_over_a_page_is_cut() -> None:
    out = "\n".join(f"src/a.py:{i}: match" for i in range(1, 501))
    report = tool_limit_report(messages_for(bash("cd /repo && grep -rn match . | head -500"), out), approx)
    assert report.grep.results == report.grep.over_limit == 1
    assert report.grep.tokens_kept_out == approx(out) - approx("\n".join(out.split("\n")[:100]))
    small = tool_limit_report(messages_for(bash("grep -rn match . | head -5"), out[:100]), approx)
    assert small.grep.results == 1 and small.grep.over_limit == 0


def test_report_shape() -> None:
    report = tool_limit_report([], approx)
    assert msgspec.to_builtins(report) == {
        "read": {"results": 0, "over_limit": 0, "tokens_kept_out": 0},
        "grep": {"results": 0, "over_limit": 0, "tokens_kept_out": 0},
        "shell_fallbacks": 0,
    }


# ------------------------------------------------------------------ the real Claude Code sessions

DB3 = "cc_mimo-v2.5-pro_2x-autocompact_db3f6604.jsonl"
SIDECHAIN = "cc_mimo-v2.5-pro_subagent-sidechain_of-4530697c_agent-aee292b61a7ab9367.jsonl"
VSCODE = "cc_mimo-v2.5-pro_vscode_2x-autocompact_4530697c.jsonl"
OPUS_GENERAL = "cc_opus-4.5_general-tool-calls_2-comment-header-lines.jsonl"
OPUS_THINKING = "cc_opus-4.5_thinking_redacted_43391f62.jsonl"
SONNET = "cc_sonnet-4.5_long-290-tools_redacted_3cfce0ff.jsonl"


@pytest.fixture(scope="module")
def cc_sessions(transcripts: Path) -> dict[str, Session]:
    return {p.name: load(p)[0] for p in sorted(CLAUDE_CODE.glob("*.jsonl"))}


def cd_calls(session: Session) -> list[ToolCall]:
    return [
        c
        for m in session.messages
        for c in m.tool_calls
        if c.name == "Bash" and isinstance(c.input, dict) and c.input["command"].lstrip().startswith("cd ")
    ]


def command(call: ToolCall) -> str:
    assert isinstance(call.input, dict)
    return str(call.input["command"])


# Bash calls starting with ``cd`` (all of them missed before: ``cd`` is neither a read nor a
# search) and those now counted, by a piece of their command. The rest run python, git, ls,
# mkdir... or pipe a program into grep/head (``python -m ... | grep -E``, ``git status | grep``),
# which our read/grep tools could not have produced.
CD_CALLS: dict[str, tuple[int, dict[str, str]]] = {
    # 35 of 42 Bash calls: one lists a file then shows its first 5 lines
    DB3: (35, {"ls -la data/kp_validation_log.csv 2>&1 && head -5 data/kp_validation_log.csv": "read"}),
    # its only Bash call, a for loop running ``head -1 "$f" | cat -A`` (permission denied)
    SIDECHAIN: (1, {'head -1 "$f" | cat -A': "read"}),
    # 69 of 96 Bash calls
    VSCODE: (69, {"cat data/kp_metrics.json 2>/dev/null | tail -30": "read"}),
    OPUS_GENERAL: (1, {}),
    OPUS_THINKING: (6, {}),
    SONNET: (40, {"cat .git/hooks/pre-commit 2>/dev/null | head -30": "read"}),
}


@pytest.mark.parametrize("name", list(CD_CALLS))
def test_cd_compound_calls_are_now_classified(cc_sessions: dict[str, Session], name: str) -> None:
    calls = cd_calls(cc_sessions[name])
    total, counted = CD_CALLS[name]
    assert len(calls) == total
    found = {command(c): use.kind for c in calls if (use := classify(c)) is not None}
    assert len(found) == len(counted)
    for piece, kind in counted.items():
        assert [k for cmd, k in found.items() if piece in cmd] == [kind]


# The report per session (results seen, over a limit, tokens kept out), read and grep. Before the
# fix read.results were 63, 61, 114, 7, 2 and 7: one more read each in DB3, SIDECHAIN, VSCODE and
# SONNET, the ``cd … &&`` calls above. Their outputs (5 to 30 lines, or a refusal) are far under
# the limits, so nothing more is kept out: the one result over a limit is still DB3's Read of a
# 78,735-byte plan whose 1,590 tokens over the 2,000-character line cut stay out. No recorded
# whole-file read passes 256 KB (Claude Code refuses those itself).
EXPECTED: dict[str, dict[str, dict[str, int]]] = {
    DB3: {"read": {"results": 64, "over_limit": 1, "tokens_kept_out": 1_590}, "grep": {"results": 2}},
    SIDECHAIN: {"read": {"results": 62}, "grep": {"results": 0}},
    VSCODE: {"read": {"results": 115}, "grep": {"results": 23}},
    OPUS_GENERAL: {"read": {"results": 7}, "grep": {"results": 0}},
    OPUS_THINKING: {"read": {"results": 2}, "grep": {"results": 1}},
    SONNET: {"read": {"results": 8}, "grep": {"results": 0}},
}


def count_for(session: Session) -> Callable[[str], int]:
    return counter_for(Registry.default().get(session.model or "unknown")).count_text


@pytest.mark.parametrize("name", list(EXPECTED))
def test_report_on_the_real_claude_code_sessions(cc_sessions: dict[str, Session], name: str) -> None:
    session = cc_sessions[name]
    got: dict[str, Any] = msgspec.to_builtins(tool_limit_report(session.messages, count_for(session)))
    for kind in ("read", "grep"):
        want = {"over_limit": 0, "tokens_kept_out": 0, **EXPECTED[name][kind]}
        assert got[kind] == want, (name, kind)


def test_the_report_counts_the_shell_commands_bashlex_refused() -> None:
    # bashlex cannot parse ``[[ ]]``: the hand-written splitter classifies it, and the report says so
    text = "\n".join(f"row {i}" for i in range(3_000))
    refused = tool_limit_report(messages_for(bash("[[ -f big.csv ]] && cat big.csv"), text), approx)
    assert refused.shell_fallbacks == 1
    assert refused.read.results == 1 and refused.read.over_limit == 1
    parsed = tool_limit_report(messages_for(bash("test -f big.csv && cat big.csv"), text), approx)
    assert parsed.shell_fallbacks == 0 and parsed.read.over_limit == 1


def test_a_real_session_reports_the_commands_bashlex_refused() -> None:
    # the SWE-agent pydicom run types shell that bashlex 0.18 cannot parse; the hand splitter
    # classifies those commands and the report counts them (5: read off the output, not derived)
    from conftest import SWE_AGENT

    session = load(SWE_AGENT / "sweagent-0.x_gpt-4_pydicom__pydicom-1458.traj")[0]
    report = tool_limit_report(session.messages, counter_for(Registry.default().get("gpt-4")).count_text)
    assert report.shell_fallbacks == 5
    # SWE-agent's own commands (open, search_file) are neither a read nor a grep to the report
    assert report.read.results == report.grep.results == 0
