"""A plain ``ctxengine replay`` command line skips typer's option parsing
(``ctxengine.cli.launch_replay``) and gives what the full command line gives: the same exit
code, stdout, stderr and written report; every other command line goes to the full command line."""

from __future__ import annotations

import json
import subprocess
import sys
import warnings
from pathlib import Path

import pytest
from typer.testing import CliRunner

from conftest import CLAUDE_CODE
from ctxengine.cli.commands import app
from ctxengine.cli.launch_replay import fast_replay, parse_replay

# the smallest real Claude Code session (19 calls): cheap to replay
SIDECHAIN = CLAUDE_CODE / "cc_mimo-v2.5-pro_subagent-sidechain_of-4530697c_agent-aee292b61a7ab9367.jsonl"


TIMING_FIELDS = frozenset({"wall_time_s", "wall_time_s_per_session"})  # as benchmarks/compare_reports.py


def _without_timing(report: object) -> object:
    """The report with its timing fields (seconds of wall clock of this run) left out."""
    if isinstance(report, dict):
        return {k: _without_timing(v) for k, v in report.items() if k not in TIMING_FIELDS}
    if isinstance(report, list):
        return [_without_timing(v) for v in report]
    return report


@pytest.mark.parametrize(
    "args",
    [
        ["--quiet", "--json", "{out}"],
        ["--json={out}", "--policy", "claude-code", "--window", "64000"],  # the table on stdout too
        ["--quiet", "--json", "{out}", "--window", "20000"],  # a window under 32,000: a warning line
        ["--quiet", "--json", "{out}", "--window", "1000"],  # refused: exit 2 and one error line
        ["--quiet", "--json", "{out}", "--policy", "no-such-policy"],
        ["--quiet", "--json", "{out}", "--model", "no-such-model"],
        ["--quiet", "--json", "{out}", "--engine", "no-such-engine"],
        ["--quiet", "--json", "{out}", "--jobs", "0"],
        ["--quiet"],  # nothing to write
    ],
)
def test_fast_replay_gives_what_the_full_command_line_gives(
    args: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", "200")
    monkeypatch.setattr(warnings, "showwarning", warnings.showwarning)  # fast_replay sets it
    fast_out, full_out = tmp_path / "fast.json", tmp_path / "full.json"
    argv = ["replay", str(SIDECHAIN), *args]
    code = fast_replay([a.format(out=fast_out) for a in argv])
    fast = capsys.readouterr()
    full = CliRunner().invoke(app, [a.format(out=full_out) for a in argv])
    assert code == full.exit_code, (fast.err, full.stderr)
    assert fast.out == full.stdout.replace(str(full_out), str(fast_out))
    assert fast.err == full.stderr.replace(str(full_out), str(fast_out))
    assert fast_out.exists() == full_out.exists()
    if full_out.exists():
        fast_report = _without_timing(json.loads(fast_out.read_text()))
        assert fast_report == _without_timing(json.loads(full_out.read_text()))


@pytest.mark.parametrize(
    "args",
    [
        [],  # no path: the newest session of the user
        ["--help"],
        ["f.jsonl", "--help"],
        ["a.jsonl", "b.jsonl"],
        ["--", "f.jsonl"],
        ["-", "--json", "o.json"],
        ["f.jsonl", "--json"],
        ["f.jsonl", "--json", ""],
        ["f.jsonl", "--json", "--quiet"],
        ["f.jsonl", "--window", "64k"],
        ["f.jsonl", "--window", "-1"],
        ["f.jsonl", "--jobs", "\u0663"],  # a digit, but not ASCII
        ["f.jsonl", "--policy", "a", "--policy", "b"],
        ["f.jsonl", "--quiet", "--quiet"],
        ["f.jsonl", "--quiet=yes"],
        ["f.jsonl", "--no-quiet"],
        ["f.jsonl", "--llm", "anthropic:claude"],
        ["f.jsonl", "--demo"],
        ["f.jsonl", "-q"],
    ],
)
def test_other_command_lines_go_to_the_full_command_line(args: list[str]) -> None:
    assert parse_replay(args) is None


def test_a_refusal_exits_2_with_one_error_line(tmp_path: Path) -> None:
    """The exit ``fail`` makes (typer's, imported then) is the exit code, through ``main``."""
    probe = (
        "import sys\n"
        "sys.argv = ['ctxengine', 'replay', sys.argv[1], '--quiet', '--json', sys.argv[2]]\n"
        "from ctxengine.cli.launch import main\n"
        "main()\n"
    )
    missing = tmp_path / "missing.jsonl"
    done = subprocess.run(
        [sys.executable, "-c", probe, str(missing), str(tmp_path / "r.json")], capture_output=True, text=True
    )
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [f"error: {missing}: no such file or directory"]


def test_other_commands_are_not_taken() -> None:
    assert fast_replay(["bench", "f.jsonl"]) is None
    assert fast_replay([]) is None


def test_plain_command_line_is_parsed() -> None:
    args = ["--quiet", "t.jsonl", "--json=o.json", "--window", "64000", "--policy", "pi", "--jobs=2"]
    assert parse_replay(args) == {
        "quiet": True,
        "path": Path("t.jsonl"),
        "json_out": Path("o.json"),
        "window": 64000,
        "policy": "pi",
        "jobs": 2,
    }


def test_console_script_replay_skips_typer_option_parsing(tmp_path: Path) -> None:
    """Through the console script's ``main``: exit 0, the report written, and never imported:
    typer and its click, pydantic (which typer builds each option's parser with), the typer
    application, the proxy's commands, rich's progress bars (one session: no bar), tenacity (the
    LLM summarizer's retries; no ``--llm``), the sub-agents' spawning (none spawned) and jinja2
    (no ``--html``)."""
    out = tmp_path / "r.json"
    probe = (
        "import sys\n"
        "sys.argv = ['ctxengine', 'replay', sys.argv[1], '--quiet', '--json', sys.argv[2]]\n"
        "from ctxengine.cli.launch import main\n"
        "try:\n"
        "    main()\n"
        "except SystemExit as exc:\n"
        "    heavy = ['typer', 'click', 'pydantic', 'ctxengine.cli.commands', 'ctxengine.proxy.command',"
        " 'rich.progress', 'tenacity', 'ctxengine.subagents.spawn', 'jinja2']\n"
        "    print(exc.code, [m for m in heavy if m in sys.modules])\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe, str(SIDECHAIN), str(out)], capture_output=True, text=True, check=True
    )
    assert done.stdout.strip().splitlines()[-1] == "0 []"
    assert done.stderr.strip().splitlines() == [f"wrote {out}"]
    assert json.loads(out.read_text())["session"]["calls"] > 0
