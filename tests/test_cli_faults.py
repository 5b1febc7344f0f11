"""Faults a new user hit on the command line (issue 9, items 13-18), each pinned: what the
commands say and how they exit on inputs and options that used to pass in silence or end in a
traceback. In-process with typer's ``CliRunner`` on small synthetic transcripts (and the smallest
real one), so the file stays cheap."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner, Result

from conftest import SWE_AGENT
from ctxengine.cli.commands import app
from ctxengine.models.registry import ModelWindowWarning

SWE_0X = SWE_AGENT / "sweagent-0.x_gpt-4_pydicom__pydicom-1458.traj"
MODEL = "claude-sonnet-4-5-20250929"


def cli(*args: str) -> Result:
    return CliRunner().invoke(app, list(args))


def one_error_line(res: Result, *words: str) -> str:
    """Exit 2, one line on stderr naming each of ``words``, nothing on stdout; returns the line."""
    assert res.exit_code == 2, (res.exit_code, res.stdout, res.stderr, res.exception)
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1, res.stderr
    assert res.stdout == ""
    for w in words:
        assert w in lines[0], (w, lines[0])
    return lines[0]


def _record(i: int, kind: str, message: dict[str, Any], session: str) -> str:
    return json.dumps(
        {
            "parentUuid": f"00000000-0000-0000-0000-{i - 1:012d}" if i > 1 else None,
            "isSidechain": False,
            "type": kind,
            "message": message,
            "uuid": f"00000000-0000-0000-0000-{i:012d}",
            "timestamp": f"2026-05-01T09:{i // 60:02d}:{i % 60:02d}Z",
            "sessionId": session,
            "cwd": "/home/dev/proj",
            "version": "2.1.0",
            "userType": "external",
        }
    )


def cc_session(
    path: Path,
    calls: int,
    *,
    prefix_tokens: int = 3_000,
    result_chars: int = 400,
    session: str = "s",
    usage: bool = True,
) -> Path:
    """A Claude Code session of ``calls`` model calls (a Read each, its result ``result_chars``
    long), each call's recorded usage (unless not ``usage``) a fixed prefix of ``prefix_tokens``
    plus what came before."""
    lines = [_record(1, "user", {"role": "user", "content": "Read the modules and fix the bug."}, session)]
    n = 1
    grown = 0
    for k in range(calls):
        n += 1
        path_in = {"file_path": f"m{k}.py"}
        read = {"type": "tool_use", "id": f"toolu_{k:04d}", "name": "Read", "input": path_in}
        msg = {
            "id": f"msg_{k:04d}",
            "type": "message",
            "role": "assistant",
            "model": MODEL,
            "content": [read],
            "stop_reason": "tool_use",
            "usage": {
                "input_tokens": 5,
                "cache_read_input_tokens": prefix_tokens + grown,
                "cache_creation_input_tokens": 0,
                "output_tokens": 50,
            },
        }
        if not usage:
            del msg["usage"]
        lines.append(_record(n, "assistant", msg, session))
        n += 1
        body = (f"def f{k}(x):\n    return x + {k}\n" * (result_chars // 30 + 1))[:result_chars]
        result = {"type": "tool_result", "tool_use_id": f"toolu_{k:04d}", "content": body}
        lines.append(_record(n, "user", {"role": "user", "content": [result]}, session))
        grown += 60 + result_chars // 3
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


# ------------------------------------------------------------------ 16: output paths checked first


def no_work(monkeypatch: pytest.MonkeyPatch) -> None:
    """Loading a transcript fails the test: an option must be refused before any work."""

    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("transcripts were loaded before the output path was checked")

    monkeypatch.setattr("ctxengine.cli.common.load_transcripts", refuse)
    monkeypatch.setattr("ctxengine.cli.commands.load_transcripts", refuse)


@pytest.mark.parametrize("option", ["--json", "--plot"])
@pytest.mark.parametrize("command", ["replay", "bench"])
def test_output_path_that_is_a_directory_fails_before_the_work(
    command: str, option: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    no_work(monkeypatch)
    src = cc_session(tmp_path / "s.jsonl", 2)
    one_error_line(cli(command, str(src), option, str(tmp_path)), option, str(tmp_path), "directory")


@pytest.mark.parametrize("command", ["replay", "bench"])
def test_output_path_under_a_file_fails_in_one_line(command: str, tmp_path: Path) -> None:
    src = cc_session(tmp_path / "s.jsonl", 2)
    out = src / "sub" / "report.json"  # its parent's parent is a file: no folder can be made there
    one_error_line(cli(command, str(src), "--json", str(out)), "--json", str(out), "not a directory")


def test_output_path_in_a_folder_that_cannot_be_written_fails_in_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import ctxengine.cli.outputs as common

    src = cc_session(tmp_path / "s.jsonl", 2)
    locked = tmp_path / "locked"
    locked.mkdir()
    real_access = common.os.access
    monkeypatch.setattr(common.os, "access", lambda p, mode: Path(p) != locked and real_access(p, mode))
    out = locked / "report.json"
    one_error_line(cli("replay", str(src), "--json", str(out)), "--json", "cannot write in", str(locked))


@pytest.mark.parametrize("option", ["--json", "--plot"])
@pytest.mark.parametrize("command", ["replay", "bench"])
def test_an_output_path_in_a_missing_folder_fails_before_the_work(
    command: str, option: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 9, item 16: a missing parent is a bad output path, as a directory is (the folders
    were made: a typo in a path wrote the report somewhere unexpected)."""
    no_work(monkeypatch)
    src = cc_session(tmp_path / "s.jsonl", 2)
    out = tmp_path / "new" / "deeper" / "report.png"
    one_error_line(cli(command, str(src), option, str(out)), option, "does not exist")
    assert not (tmp_path / "new").exists()


@pytest.mark.parametrize("command", ["replay", "bench"])
def test_an_output_path_that_is_a_transcript_being_read_is_refused(command: str, tmp_path: Path) -> None:
    """``--json`` naming the transcript replayed, or a transcript inside the folder replayed,
    would replace it by the report after the work: refused first, the file untouched."""
    option = "--json"
    src = cc_session(tmp_path / "s.jsonl", 2)
    before = src.read_bytes()
    one_error_line(cli(command, str(src), option, str(src)), option, str(src), "being replayed")
    other = cc_session(tmp_path / "folder" / "t.jsonl", 2, session="t")
    one_error_line(cli(command, str(other.parent), option, str(other)), option, "being replayed")
    assert src.read_bytes() == before and other.read_text().startswith("{")


def test_an_earlier_report_inside_the_folder_replayed_may_be_written_again(tmp_path: Path) -> None:
    cc_session(tmp_path / "folder" / "t.jsonl", 2, session="t")
    out = tmp_path / "folder" / "report.json"
    for _ in range(2):  # the second run finds the first run's report in the folder: not a transcript
        res = cli("replay", str(tmp_path / "folder"), "--json", str(out), "--quiet")
        assert res.exit_code == 0, res.stderr
    [report] = json.loads(out.read_text())  # a folder's report is a list, one entry per session
    assert report["session"]["calls"] == 2


@pytest.mark.parametrize("command", ["replay", "bench"])
def test_a_plot_format_matplotlib_cannot_write_fails_before_the_work(
    command: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    no_work(monkeypatch)
    src = cc_session(tmp_path / "s.jsonl", 2)
    out = tmp_path / "plot.txt"  # the traceback came after the replay: "Format 'txt' is not supported"
    one_error_line(cli(command, str(src), "--plot", str(out)), "--plot", "cannot write .txt", "png")


# ------------------------------------------------------------------ 18: small things a new user hit


def test_version_prints_the_installed_version() -> None:
    from importlib.metadata import version

    res = cli("--version")
    assert res.exit_code == 0, res.stderr
    assert res.stdout.strip() == f"ctxengine {version('ctxengine')}"


@pytest.mark.parametrize("args", [(), ("tool",)])
def test_bare_command_prints_its_help_and_succeeds(args: tuple[str, ...]) -> None:
    res = cli(*args)
    assert res.exit_code == 0, (res.stdout, res.stderr)
    assert "Usage:" in res.stdout
    for command in ("replay", "bench") if not args else ("read", "search", "instructions"):
        assert command in res.stdout


def test_quiet_without_json_or_plot_is_refused(tmp_path: Path) -> None:
    src = cc_session(tmp_path / "s.jsonl", 2)
    one_error_line(cli("replay", str(src), "--quiet"), "--quiet", "--json", "--plot")


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ("[tool_result_budget]\nmax_chars = -1", "ToolResultBudget.max_chars"),
        ("[tool_result_budget]\nmax_chars = 0", "ToolResultBudget.max_chars"),
        ("[compaction]\nkeep_recent_tokens = -5000", "CompactionSettings.keep_recent_tokens"),
        ("[compaction]\nat_share = 1.5", "CompactionSettings.at_share"),
        ("[idle_clear]\ngap_s = nan", "IdleClear.gap_s"),
        ("[cache_clear]\ntarget = 0.6\ntrigger = 0.5", "CacheClear.target"),
    ],
)
def test_policy_file_with_an_out_of_range_value_is_refused(body: str, field: str, tmp_path: Path) -> None:
    pol = tmp_path / "p.toml"
    pol.write_text(body + "\n", encoding="utf-8")
    src = cc_session(tmp_path / "s.jsonl", 2)
    one_error_line(cli("replay", str(src), "--policy-file", str(pol)), str(pol), field)


def test_every_built_in_policy_and_preset_is_in_range() -> None:
    from ctxengine.policy.registry import BUILTIN, presets, range_problems

    policies = {**BUILTIN, **presets()}
    assert len(policies) >= 7
    assert {name: range_problems(p) for name, p in policies.items()} == {name: [] for name in policies}


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    root = tmp_path / "ws"
    (root / "src").mkdir(parents=True)
    (root / "src" / "app.py").write_text("def handler():\n    return 'context window'\n", encoding="utf-8")
    (root / "AGENTS.md").write_text("agent rules\n", encoding="utf-8")
    (tmp_path / "secret.md").write_text("context window secret\n", encoding="utf-8")
    return root


@pytest.mark.parametrize("path", ["../..", "..", "../*.md", "/etc"])
def test_tool_search_refuses_a_path_outside_the_workspace_like_read(workspace: Path, path: str) -> None:
    res = cli("tool", "search", "-w", str(workspace), "--index", ":memory:", "--path", path, "context")
    assert res.exit_code == 2, (res.stdout, res.stderr)
    assert res.stderr.startswith("Error: ") and "outside the workspace root" in res.stderr
    assert res.stdout == ""
    read = cli("tool", "read", "--workspace", str(workspace), "../secret.md")
    assert read.exit_code == 2 and "outside the workspace root" in read.stderr  # the same refusal


def test_tool_search_inside_the_workspace_still_filters(workspace: Path) -> None:
    for path in ("src", "src/", "src/*.py", "./src"):
        res = cli("tool", "search", "-w", str(workspace), "--index", ":memory:", "--path", path, "context")
        assert res.exit_code == 0, res.stderr
        assert "src/app.py" in res.stdout


@pytest.mark.parametrize("name", ["../secret.md", "/etc/hostname"])
def test_tool_instructions_refuses_a_file_outside_the_workspace(workspace: Path, name: str) -> None:
    res = cli("tool", "instructions", "--workspace", str(workspace), "AGENTS.md", name)
    assert res.exit_code == 2, (res.stdout, res.stderr)
    assert res.stderr.startswith("Error: ") and "outside the workspace root" in res.stderr
    assert "secret" not in res.stdout + res.stderr.replace("secret.md", "")


def test_bench_without_a_terminal_prints_a_line_per_policy(tmp_path: Path) -> None:
    src = cc_session(tmp_path / "s.jsonl", 3)
    res = cli("bench", str(src), "--policies", "none,default,pi")
    assert res.exit_code == 0, res.stderr
    lines = [x for x in res.stderr.splitlines() if x.startswith("bench: ")]
    assert [x.split()[1] for x in lines] == ["none", "default", "pi"]
    assert all("1 session(s)" in x and x.endswith(" s") for x in lines)


# ------------------------------------------------------------------ 13: what the replay says


def _user_only(path: Path) -> Path:
    lines = [_record(i, "user", {"role": "user", "content": f"note {i}"}, "u") for i in range(1, 4)]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


@pytest.mark.parametrize("command", ["replay", "bench"])
def test_a_file_with_no_model_calls_says_so(command: str, tmp_path: Path) -> None:
    src = _user_only(tmp_path / "notes.jsonl")
    line = one_error_line(cli(command, str(src)), str(src), "no model calls")
    assert "None" not in line


def test_sessions_without_model_calls_are_left_out_of_a_folder_with_a_note(tmp_path: Path) -> None:
    _user_only(tmp_path / "f" / "a_notes.jsonl")
    cc_session(tmp_path / "f" / "b.jsonl", 2)
    out = tmp_path / "r.json"
    res = cli("replay", str(tmp_path / "f"), "--json", str(out), "--quiet")
    assert res.exit_code == 0, res.stderr
    assert "1 session(s) with no model calls left out: a_notes.jsonl" in " ".join(res.stderr.split())
    assert [r["session"]["calls"] for r in json.loads(out.read_text())] == [2]


def test_replay_help_lists_every_policy() -> None:
    from ctxengine.policy.registry import BUILTIN, presets

    res = cli("replay", "--help")
    assert res.exit_code == 0
    for name in [*BUILTIN, *presets()]:
        assert name in res.stdout, name
    src = Path(__file__)  # each listed preset is accepted by --policy (refused only as a transcript)
    for name in presets():
        line = one_error_line(cli("replay", str(src), "--policy", name))
        assert "unknown policy" not in line


def test_swe_agent_recorded_cost_is_the_trajectory_s_own(transcripts: Path, tmp_path: Path) -> None:
    recorded = json.loads(SWE_0X.read_text())["info"]["model_stats"]["instance_cost"]
    out = tmp_path / "r.json"
    res = cli("replay", str(SWE_0X), "--model", "gpt-4o", "--json", str(out))
    assert res.exit_code == 0, res.stderr
    summary = json.loads(out.read_text())["summary"]
    assert summary["recorded_cost_usd"] == pytest.approx(recorded)
    assert summary["recorded_cost_from"] == "transcript"
    assert f"{recorded:.2f}" in res.stdout  # beside ours in the table


def test_a_session_with_usage_keeps_its_usage_as_the_recorded_cost(tmp_path: Path) -> None:
    out = tmp_path / "r.json"
    res = cli("replay", str(cc_session(tmp_path / "s.jsonl", 3)), "--json", str(out), "--quiet")
    assert res.exit_code == 0, res.stderr
    summary = json.loads(out.read_text())["summary"]
    assert summary["recorded_cost_from"] == "usage" and summary["recorded_cost_usd"] > 0


@pytest.fixture
def failing_layer(monkeypatch: pytest.MonkeyPatch) -> None:
    """The cache-aware clearing layer raises on every call; the engine catches it and goes on."""

    def broken(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("injected layer fault")

    monkeypatch.setattr("ctxengine.engine.steps.clearing.cache_clear", broken)


@pytest.mark.usefixtures("failing_layer")
def test_layer_failures_the_engine_swallows_are_reported_by_replay(tmp_path: Path) -> None:
    out = tmp_path / "r.json"
    res = cli("replay", str(cc_session(tmp_path / "s.jsonl", 3)), "--json", str(out))
    assert res.exit_code == 0, res.stderr
    data = json.loads(out.read_text())
    assert data["summary"]["layer_failures"] == len(data["calls"]) == 3  # once per assemble
    assert "warning: 3 layer failure(s)" in " ".join(res.stderr.split())
    from ctxengine.replay.report import COLUMNS

    assert COLUMNS["fail"].explain in " ".join(res.stdout.split())  # a table column when non-zero


@pytest.mark.usefixtures("failing_layer")
def test_layer_failures_are_reported_by_bench(tmp_path: Path) -> None:
    out = tmp_path / "b.json"
    src = cc_session(tmp_path / "s.jsonl", 3)
    res = cli("bench", str(src), "--policies", "none,default", "--json", str(out))
    assert res.exit_code == 0, res.stderr
    data = json.loads(out.read_text())
    assert data["policies"]["default"]["layer_failures"] == 3
    assert [s["layer_failures"] for s in data["sessions"]] == [3, 3]
    assert "layer" in res.stdout and "failures" in res.stdout  # the column appears when non-zero
    assert "warning: 6 layer failure(s)" in " ".join(res.stderr.split())


def test_no_layer_failure_no_column_and_no_warning(tmp_path: Path) -> None:
    res = cli("bench", str(cc_session(tmp_path / "s.jsonl", 2)), "--policies", "none")
    assert res.exit_code == 0, res.stderr
    assert "failures" not in res.stdout and "layer failure" not in res.stderr


# ------------------------------------------------------------------ 14: the replay table


def _reports(tmp_path: Path) -> list[Any]:
    """Reports of a session with recorded usage, one without, and the SWE-agent 0.x file."""
    from ctxengine.formats import load
    from ctxengine.policy.registry import get_policy
    from ctxengine.replay import replay_session

    files = [
        cc_session(tmp_path / "a_long_session_name_as_real_ones_have_4530697c.jsonl", 4),
        cc_session(tmp_path / "b_without_usage.jsonl", 3, usage=False),
        SWE_0X,
    ]
    return [replay_session(s, get_policy("default"), window=64_000) for f in files for s in load(f)]


@pytest.mark.parametrize("width", [80, 120])
def test_the_table_fits_the_terminal_without_cutting_a_number(width: int, tmp_path: Path) -> None:
    from rich.console import Console

    from ctxengine.replay import report

    reports = _reports(tmp_path)
    console = Console(width=width, record=True)
    table = report.summary_table(reports, report.table_title("default", reports), width)
    console.print(table)
    text = console.export_text()
    assert max(len(line) for line in text.splitlines()) <= width
    labels = [str(c) for c in table.columns[0]._cells]
    assert text.count("…") == sum(label.count("…") for label in labels)  # only names are cut
    # every figure of every shown column is printed whole, and the caption explains them
    for key in ("calls", "peak", "ovf", "cost", "rec", "content", "refs", "hit", "pair", "pred", "delta"):
        assert report.COLUMNS[key].explain in " ".join(text.split()), key
        for r in reports:
            assert report._cells([r])[key] in text
    assert "window 64,000 tokens" in text.splitlines()[0]


def test_the_table_shows_content_recall_beside_reference_recall(tmp_path: Path) -> None:
    import types

    import msgspec
    from rich.console import Console

    from ctxengine.replay import report

    [r] = _reports(tmp_path)[:1]
    fields = msgspec.structs.asdict(r.summary) | {"content_hits": 5, "content_grounded": 8}
    with_content = msgspec.structs.replace(r, summary=types.SimpleNamespace(**fields))
    assert report._cells([with_content])["content"] == "0.625"  # pooled: hits / grounded
    console = Console(width=80, record=True)
    console.print(report.summary_table([with_content], "t", 80))
    text = console.export_text()
    assert "0.625" in text and "content" in text and "refs" in text


def test_the_total_compares_costs_on_the_same_sessions(tmp_path: Path) -> None:
    from rich.console import Console

    from ctxengine.replay import report

    reports = _reports(tmp_path)[:2]  # one with recorded usage, one without
    assert [r.summary.recorded_cost_usd is None for r in reports] == [False, True]
    console = Console(width=200, record=True)
    console.print(report.summary_table(reports, "t", 200))
    rows = {line.split("  ")[0].strip(): line for line in console.export_text().splitlines()}
    cells = report._cells([reports[0]])
    assert "all (2)" in rows and "with rec. $ (1)" in rows
    assert f" {cells['cost']} " in rows["with rec. $ (1)"] and f" {cells['rec']} " in rows["with rec. $ (1)"]
    assert report._cells(reports)["rec"] == "–"  # no sum over only some of the sessions on the "all" row
    ours_all = report._cells(reports)["cost"]
    assert f" {ours_all} " in rows["all (2)"]


def test_replay_table_title_names_the_window(tmp_path: Path) -> None:
    res = cli("replay", str(cc_session(tmp_path / "s.jsonl", 2)), "--window", "64000")
    assert res.exit_code == 0, res.stderr
    assert "ctxengine replay — policy default, window 64,000 tokens" in res.stdout


# ------------------------------------------------------------------ 17: windows the engine refuses


def test_a_model_window_under_the_minimum_says_what_to_do(transcripts: Path) -> None:
    res = cli("replay", str(SWE_0X), "--model", "gpt-4")
    assert res.exit_code == 2 and res.stdout == "", (res.stdout, res.stderr)
    [line] = [x for x in res.stderr.splitlines() if x.startswith("error:")]  # after the --model note
    for words in ("gpt-4", "8,192", "16,000", "--window 16000", "overflow guard"):
        assert words in line, words
    with pytest.warns(ModelWindowWarning, match="8,192"):  # over the model's window: said, not refused
        res = cli("replay", str(SWE_0X), "--model", "gpt-4", "--window", "16000")  # the advice works
    assert res.exit_code == 0, res.stderr


@pytest.mark.parametrize("command", ["replay", "bench"])
def test_a_fixed_prefix_larger_than_the_window_is_one_clear_error(command: str, tmp_path: Path) -> None:
    import re

    src = cc_session(tmp_path / "big_prefix.jsonl", 6, prefix_tokens=26_000)
    res = cli(command, str(src), "--window", "20000")
    assert res.exit_code == 2 and res.stdout == "", (res.stdout, res.stderr)
    [line] = [x for x in res.stderr.splitlines() if x.startswith("error:")]  # besides the <32K warning
    assert str(src) in line and "fixed prefix" in line and "20,000" in line
    found = re.search(r"prefix \(system prompt and tool definitions\) is ([\d,]+)", line)
    assert found is not None
    prefix = int(found[1].replace(",", ""))
    assert 25_000 < prefix <= 26_005
    advice = re.search(r"--window (\d+)", line)
    assert advice is not None and int(advice[1]) > prefix
    suggested = advice[1]
    out = tmp_path / "r.json"
    res = cli("replay", str(src), "--window", suggested, "--json", str(out), "--quiet")  # the advice works
    assert res.exit_code == 0, res.stderr
    assert json.loads(out.read_text())["summary"]["overflows"] == 0


@pytest.mark.parametrize("command", ["replay", "bench"])
def test_a_fixed_prefix_that_leaves_no_room_for_a_response_is_the_same_clear_error(
    command: str, tmp_path: Path
) -> None:
    """A prefix under the window but within the room of one response (4,000 tokens) of it left
    every call over the window or cut to nothing, exit 0 (15,204 of 16,000 tokens: 17 overflows
    in 18 calls under openclaw): the same one-line error, with a window that does fit."""
    src = cc_session(tmp_path / "near_prefix.jsonl", 6, prefix_tokens=17_500)
    res = cli(command, str(src), "--window", "20000")
    assert res.exit_code == 2 and res.stdout == "", (res.stdout, res.stderr)
    [line] = [x for x in res.stderr.splitlines() if x.startswith("error:")]
    assert "fixed prefix" in line and "leaving less than 4,000 tokens of the 20,000-token window" in line


# ------------------------------------------------------------------ 15: --llm, the server unreachable


class _DeadServer:
    """An ``LLMClient`` whose server is unreachable (after ``answers`` good replies): every call
    raises ``LLMConnectionError`` at once, and each attempt is counted."""

    provider = "openai"
    model = "gpt-4o-mini"
    timeout = 1.0
    max_retries = 0

    def __init__(self, answers: int = 0) -> None:
        self.answers = answers
        self.attempts = 0
        self.calls: list[Any] = []

    def complete(self, request: Any) -> Any:
        from ctxengine.llm import LLMConnectionError, LLMResponse
        from ctxengine.messages.model import Usage

        self.attempts += 1
        if self.attempts <= self.answers:
            text = "## Current state\nReading the modules m0.py to m9.py.\n"
            usage = Usage(input_tokens=1_000, output_tokens=50)
            return LLMResponse(text, usage, self.model, 0.001, 0.01, "stop")
        raise LLMConnectionError("Connection error: [Errno 111] Connection refused", provider="openai")


@pytest.fixture
def dead_server(monkeypatch: pytest.MonkeyPatch) -> Any:
    def make(answers: int = 0) -> _DeadServer:
        server = _DeadServer(answers)
        monkeypatch.setattr("ctxengine.llm.make_client", lambda *a, **k: server)
        return server

    return make


def _llm_replay(tmp_path: Path, *extra: str) -> tuple[Result, dict[str, Any]]:
    src = cc_session(tmp_path / "s.jsonl", 24, result_chars=6_000)
    out = tmp_path / "r.json"
    llm = ("--llm", "openai:gpt-4o-mini")
    res = cli("replay", str(src), "--window", "32000", *llm, "--json", str(out), *extra)
    return res, json.loads(out.read_text()) if out.exists() else {}


def test_llm_unreachable_fails_fast_and_exits_non_zero(tmp_path: Path, dead_server: Any) -> None:
    from ctxengine.cli.common import BREAKER_FAILURES

    server = dead_server()
    res, data = _llm_replay(tmp_path)
    assert res.exit_code == 2, (res.stdout, res.stderr)
    assert server.attempts == BREAKER_FAILURES  # then no request waits for the server again
    errors = [x for x in res.stderr.splitlines() if x.startswith("error:")]
    assert len(errors) == 1 and "no LLM call succeeded" in errors[0] and "Connection refused" in errors[0]
    failed = [e for c in data["calls"] for e in c["events"] if "error" in e["details"]]
    # once the client declines to send, the notes and summaries are the $0 ones: no more
    # failures, and the session compacts as it does without --llm (it stopped compacting after
    # three failed summaries, the context growing past what the $0 path keeps)
    assert len(failed) == BREAKER_FAILURES
    assert data["summary"]["llm_calls"] == 0
    out0 = tmp_path / "r0.json"
    assert cli("replay", str(tmp_path / "s.jsonl"), "--window", "32000", "--json", str(out0)).exit_code == 0
    without = json.loads(out0.read_text())["summary"]
    assert data["summary"]["compactions"] == without["compactions"]
    assert data["summary"]["compaction_failures"] == 0
    assert data["summary"]["peak_sent_tokens"] == without["peak_sent_tokens"]


def test_llm_failing_after_an_answer_ends_with_a_warning_and_exit_0(tmp_path: Path, dead_server: Any) -> None:
    server = dead_server(answers=1)
    res, _ = _llm_replay(tmp_path)
    assert res.exit_code == 0, (res.stdout, res.stderr)
    assert server.attempts == 1 + 3
    [warning] = [x for x in " ".join(res.stderr.split()).split("warning: ")[1:] if "--llm" in x]
    assert "1 LLM call(s) succeeded, 3 LLM call(s) failed" in warning and "fell back to $0" in warning


def test_a_window_above_the_models_own_is_one_warning_line(tmp_path: Path) -> None:
    """The engine's ModelWindowWarning came out as Python shows a warning (the file, the line, the
    category, the source line) where the other notes are ``warning:`` lines."""
    import subprocess
    import sys

    src = cc_session(tmp_path / "s.jsonl", 3)
    models = tmp_path / "m.toml"
    models.write_text(f'[models."{MODEL}"]\ncontext_window = 20000\n', encoding="utf-8")
    out = tmp_path / "r.json"
    cmd = [sys.executable, "-m", "ctxengine.cli.commands", "replay", str(src), "--models", str(models)]
    cmd += ["--window", "64000"]
    res = subprocess.run([*cmd, "--json", str(out), "--quiet"], capture_output=True, text=True, check=False)
    assert res.returncode == 0, res.stderr
    assert "ModelWindowWarning" not in res.stderr and "engine.py" not in res.stderr, res.stderr
    assert any(
        ln.startswith("warning: window of 64,000 tokens is above") for ln in res.stderr.splitlines()
    ), res.stderr


@pytest.mark.parametrize("window", ["16000", "24000"])
def test_llm_unreachable_never_fails_a_layer(tmp_path: Path, dead_server: Any, window: str) -> None:
    """When the third failed call (a pre-compaction notes flush) tripped the client's breaker
    between a compaction's plan and its summary, the compaction still took the model route
    with no summarizer: an assertion, reported as ``layer _compaction failed:`` with no reason.
    It takes the $0 summary, as every later one does."""
    from conftest import SWE_AGENT

    dead_server()
    src = SWE_AGENT / "sweagent-0.x_gpt-4_pydicom__pydicom-1458.traj"
    out = tmp_path / "r.json"
    res = cli("replay", str(src), "--window", window, "--llm", "openai:gpt-4o-mini", "--json", str(out))
    assert res.exit_code == 2, (res.stdout, res.stderr)
    summary = json.loads(out.read_text())["summary"]
    assert summary["layer_failures"] == 0, res.stderr
    assert "layer _compaction failed" not in res.stderr


@pytest.mark.parametrize("command", ["replay", "bench"])
def test_json_and_plot_naming_one_file_is_refused_before_the_work(tmp_path: Path, command: str) -> None:
    """``--json X --plot X`` wrote the report and then the plot over it (exit 0)."""
    src = cc_session(tmp_path / "s.jsonl", 3)
    same = tmp_path / "out.png"
    res = cli(command, str(src), "--json", str(same), "--plot", str(same))
    assert res.exit_code == 2 and not same.exists()
    [error] = [x for x in res.stderr.splitlines() if x.startswith("error:")]
    assert "--json and --plot both name" in error


def test_a_policy_file_that_is_not_utf8_names_the_file_and_line(tmp_path: Path) -> None:
    """A policy file in Latin-1 printed ``error: utf-8`` alone."""
    src = cc_session(tmp_path / "s.jsonl", 3)
    bad = tmp_path / "p.toml"
    bad.write_bytes(b'base = "default"\n# caf\xe9\n')
    res = cli("replay", str(src), "--policy-file", str(bad))
    assert res.exit_code == 2
    [error] = [x for x in res.stderr.splitlines() if x.startswith("error:")]
    assert f"{bad}:2:" in error and "not UTF-8" in error


def test_the_readmes_models_example_is_accepted(tmp_path: Path) -> None:
    """The README's ``--models`` example (a window and two prices) was refused: "needs a
    'provider'", then "missing required field 'max_output'". A new model's other fields are
    guessed from its name as for an unknown model; its prices are the file's."""
    import re

    readme = (Path(__file__).parents[1] / "README.md").read_text(encoding="utf-8")
    line = next(x for x in readme.splitlines() if '`[models."my-model"]`' in x)
    models = tmp_path / "m.toml"
    models.write_text("\n".join(re.findall(r"`([^`]+)`", line)) + "\n", encoding="utf-8")
    src = cc_session(tmp_path / "s.jsonl", 3)
    out = tmp_path / "r.json"
    res = cli("replay", str(src), "--models", str(models), "--model", "my-model", "--json", str(out))
    assert res.exit_code == 0, res.stderr
    from ctxengine.models.registry import Registry

    info = Registry.default().with_overrides(models).get("my-model")
    assert (info.context_window, info.input, info.output, info.price_known) == (128_000, 1.0, 4.0, True)


def test_a_bad_models_file_is_named_once(tmp_path: Path) -> None:
    models = tmp_path / "m.toml"
    models.write_text('[models."x"]\ncontext_window = -5\n', encoding="utf-8")
    res = cli("replay", str(cc_session(tmp_path / "s.jsonl", 3)), "--models", str(models))
    [error] = [x for x in res.stderr.splitlines() if x.startswith("error:")]
    assert res.exit_code == 2 and error.count(str(models)) == 1 and "positive" in error


def test_an_overflow_reserve_of_half_the_window_is_one_clear_error(tmp_path: Path) -> None:
    """``[overflow_guard] reserve = 1000000`` at ``--window 16000`` was accepted: 23
    compactions in 12 calls, the guard cutting every request to nothing."""
    from ctxengine.engine.core import ContextEngine
    from ctxengine.models.window import ReserveTooLargeError
    from ctxengine.policy.registry import OverflowGuard, get_policy

    policy = tmp_path / "p.toml"
    policy.write_text("[overflow_guard]\nreserve = 1000000\n", encoding="utf-8")
    src = cc_session(tmp_path / "s.jsonl", 3)
    res = cli("replay", str(src), "--policy-file", str(policy), "--window", "16000")
    [error] = [x for x in res.stderr.splitlines() if x.startswith("error:")]
    assert res.exit_code == 2 and "[overflow_guard] reserve" in error and "8,000" in error
    p = get_policy("default")
    big = p.with_(p.settings(OverflowGuard).with_(reserve=8_000))
    with pytest.raises(ReserveTooLargeError):
        ContextEngine(big, model="claude-sonnet-4-5", window=16_000)
    ContextEngine(big, model="claude-sonnet-4-5", window=32_000)  # a quarter of it is fine


def test_a_ttl_prune_soft_ratio_above_its_hard_ratio_is_refused(tmp_path: Path) -> None:
    """As ``cache_clear``'s target above its trigger is: the soft trim would start after the hard
    clear."""
    policy = tmp_path / "p.toml"
    policy.write_text("[ttl_prune]\nsoft_ratio = 0.9\nhard_ratio = 0.1\n", encoding="utf-8")
    res = cli("replay", str(cc_session(tmp_path / "s.jsonl", 3)), "--policy-file", str(policy))
    [error] = [x for x in res.stderr.splitlines() if x.startswith("error:")]
    assert res.exit_code == 2 and "soft_ratio (0.9) must not exceed hard_ratio (0.1)" in error
