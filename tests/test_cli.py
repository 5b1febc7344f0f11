"""Tests of the ``ctxengine replay`` command line, in-process with typer's ``CliRunner`` (and once
through the installed console script), on copies of the real transcripts in ``tmp_path``."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner, Result

from conftest import CLAUDE_CODE, TRANSCRIPTS
from ctxengine.cli.commands import app
from ctxengine.formats import load

# the smallest real Claude Code session (19 calls, peak ~59K tokens): cheap to replay
SIDECHAIN = CLAUDE_CODE / "cc_mimo-v2.5-pro_subagent-sidechain_of-4530697c_agent-aee292b61a7ab9367.jsonl"
MIMO_DB3 = CLAUDE_CODE / "cc_mimo-v2.5-pro_2x-autocompact_db3f6604.jsonl"
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
CORRUPT_LINE = 57  # 1-based line of the sidechain copy that the malformed tests cut in half


def run(*args: str, env: dict[str, str] | None = None) -> Result:
    return CliRunner().invoke(app, ["replay", *args], env=env)


def copy_of(src: Path, dest: Path) -> Path:
    """A writable copy (the shared transcripts are read-only)."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    dest.write_bytes(src.read_bytes())
    return dest


def corrupted_copy(dest: Path, lineno: int = CORRUPT_LINE) -> Path:
    """A copy of the sidechain session with line ``lineno`` cut in half (a torn write)."""
    lines = SIDECHAIN.read_bytes().splitlines(keepends=True)
    line = lines[lineno - 1]
    json.loads(line)  # it was a valid record
    lines[lineno - 1] = line[: len(line) // 2] + b"\n"
    dest.parent.mkdir(parents=True, exist_ok=True)
    dest.write_bytes(b"".join(lines))
    return dest


def read_json(path: Path) -> Any:
    return json.loads(path.read_text(encoding="utf-8"))


def one_error_line(res: Result) -> str:
    """Exit 2 and exactly one line on stderr, nothing on stdout; returns the line."""
    assert res.exit_code == 2, (res.exit_code, res.stderr, res.exception)
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1, res.stderr
    assert res.stdout == ""
    return lines[0]


# ------------------------------------------------------------------ errors a user can fix


def _unknown(p: Path) -> None:
    p.write_text("These are my notes, not a transcript.\n", encoding="utf-8")


def _empty(p: Path) -> None:
    p.write_bytes(b"")


def _binary(p: Path) -> None:
    p.write_bytes(bytes(range(256)) * 8)


def _latin1(p: Path) -> None:
    p.write_bytes("caf\xe9 cr\xe8me br\xfbl\xe9e, encoded as Latin-1\n".encode("latin-1") * 4)


def _other_json(p: Path) -> None:
    p.write_text('{"name": "not a transcript", "version": 3}\n', encoding="utf-8")


@pytest.mark.parametrize(
    "make",
    [None, _unknown, _empty, _binary, _latin1, _other_json],
    ids=["missing", "unknown-format", "empty", "binary", "not-utf8", "other-json"],
)
def test_unreadable_path_is_one_line_and_exit_2(make: Any, tmp_path: Path) -> None:
    path = tmp_path / "some-session-file.jsonl"
    if make is not None:
        make(path)
    line = one_error_line(run(str(path)))
    assert str(path) in line
    assert line.startswith("error:")


def test_folder_without_transcripts_is_exit_2(tmp_path: Path) -> None:
    (tmp_path / "README.txt").write_text("nothing to replay here\n", encoding="utf-8")
    res = run(str(tmp_path))
    assert res.exit_code == 2
    assert "README.txt" in res.stderr
    assert f"{tmp_path}: no transcripts found" in res.stderr


def test_unknown_policy_is_one_line_and_exit_2() -> None:
    line = one_error_line(run(str(SIDECHAIN), "--policy", "smart"))
    assert "smart" in line and "default" in line and "recorded" in line


def test_window_below_the_minimum_is_one_line_and_exit_2() -> None:
    line = one_error_line(run(str(SIDECHAIN), "--window", "1000"))
    assert "16,000" in line


def test_small_window_warns_once_in_one_line(transcripts: Path, tmp_path: Path) -> None:
    """Under 32,000 tokens: one warning line for the whole folder (3 sessions), not a Python
    warning per session. (30,000: at 20,000 some real sessions' fixed prefix cannot fit, an error
    since issue 9 item 17.)"""
    for name in ("a", "b", "c"):
        copy_of(SIDECHAIN, tmp_path / "folder" / f"{name}.jsonl")
    res = run(str(tmp_path / "folder"), "--window", "30000")
    assert res.exit_code == 0, res.stderr
    lines = [ln for ln in res.stderr.splitlines() if "32,000" in ln]
    assert lines == [
        "warning: context window of 30,000 tokens is below 32,000 tokens: expect frequent compaction"
    ]
    assert "WindowWarning" not in res.stderr


def test_non_positive_window_is_one_line_and_exit_2() -> None:
    line = one_error_line(run(str(SIDECHAIN), "--window", "0"))
    assert "window" in line


# ------------------------------------------------------------------ malformed records


def test_malformed_line_warns_with_file_and_line_and_the_rest_loads(tmp_path: Path) -> None:
    path = corrupted_copy(tmp_path / "cc_sidechain_torn.jsonl")
    out = tmp_path / "report.json"
    res = run(str(path), "--json", str(out), "--quiet")
    assert res.exit_code == 0, res.stderr
    # rich wraps long lines at 80 columns when stderr is not a terminal: read it unwrapped
    assert f"{path}:{CORRUPT_LINE}:" in res.stderr.replace("\n", "")
    assert "warning" in res.stderr
    data = read_json(out)
    assert isinstance(data, dict)
    assert data["summary"]["malformed_records"] == 1
    assert any(f":{CORRUPT_LINE}:" in w for w in data["warnings"])
    whole = load(SIDECHAIN)[0]
    assert len(whole.messages) - 1 <= data["session"]["messages"] <= len(whole.messages)
    assert data["session"]["calls"] >= len(whole.calls) - 1


def test_malformed_warning_is_one_line_when_stderr_is_a_log(tmp_path: Path) -> None:
    path = corrupted_copy(tmp_path / "a-folder-with-a-rather-long-name-as-real-ones-have" / SIDECHAIN.name)
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")}
    res = subprocess.run(
        [str(console_script()), "replay", str(path)],
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )
    assert res.returncode == 0, res.stderr
    warning = [ln for ln in res.stderr.splitlines() if ln.startswith("warning:")]
    assert len(warning) == 1
    assert f"{path}:{CORRUPT_LINE}:" in warning[0]


MARKUP_BUG = (
    "BUG: cli.replay prints paths and warnings through rich markup with emoji codes on "
    "(err.print(f'...{path}...')), so text is not printed literally: a malformed record on line 100 "
    "reads 'FILE💯 malformed record skipped' (':100:' is the emoji code for 💯; ':1234:' gives 🔢), "
    "and a folder named '[old]' vanishes from the path ('error: /x//s.jsonl: empty file'); a path "
    "part like '[/x]' raises rich.errors.MarkupError. Fix: escape (rich.markup.escape) or print "
    "with markup=False, emoji=False."
)


def test_warning_names_line_100_literally(tmp_path: Path) -> None:
    path = corrupted_copy(tmp_path / "s.jsonl", lineno=100)
    res = run(str(path))
    assert res.exit_code == 0, res.stderr
    assert f"{path}:100:" in res.stderr.replace("\n", "")


def test_error_names_a_path_with_brackets_literally(tmp_path: Path) -> None:
    path = tmp_path / "[old]" / "s.jsonl"
    path.parent.mkdir()
    path.write_bytes(b"")
    line = one_error_line(run(str(path)))
    assert str(path) in line


# ------------------------------------------------------------------ folders and JSON


def test_folder_skips_other_files_with_a_note_and_writes_a_list(tmp_path: Path) -> None:
    folder = tmp_path / "sessions"
    copy_of(SIDECHAIN, folder / "project" / "s.jsonl")
    (folder / "README.txt").write_text("Sessions exported from my laptop.\n", encoding="utf-8")
    out = tmp_path / "report.json"
    res = run(str(folder), "--json", str(out), "--quiet")
    assert res.exit_code == 0, res.stderr
    unwrapped = res.stderr.replace("\n", "")
    assert "note: skipped" in unwrapped
    assert str(folder / "README.txt") in unwrapped
    data = read_json(out)
    assert isinstance(data, list) and len(data) == 1
    assert data[0]["session"]["source"] == str(folder / "project" / "s.jsonl")
    assert data[0]["session"]["format"] == "claude-code"


def test_json_on_a_file_is_one_object(tmp_path: Path) -> None:
    out = tmp_path / "report.json"
    res = run(str(SIDECHAIN), "--json", str(out))
    assert res.exit_code == 0, res.stderr
    data = read_json(out)
    assert isinstance(data, dict)
    assert data["schema_version"] == 1
    assert data["policy"] == "default"
    assert data["session"]["source"] == str(SIDECHAIN)
    assert data["session"]["calls"] == len(data["calls"]) > 0
    # the table goes to stdout, one row for the session
    assert "ctxengine replay — policy default" in res.stdout
    assert SIDECHAIN.name[:25] in res.stdout  # long names are cut in the middle


def test_plot_writes_a_png(tmp_path: Path) -> None:
    out = tmp_path / "sent.png"
    res = run(str(SIDECHAIN), "--plot", str(out), "--quiet")
    assert res.exit_code == 0, res.stderr
    data = out.read_bytes()
    assert data[:8] == PNG_MAGIC
    assert len(data) > 10_000  # a drawn figure, not an empty canvas
    assert f"wrote {out}" in res.stderr.replace("\n", "")


# ------------------------------------------------------------------ policies


def _replay_json(tmp_path: Path, name: str, *args: str) -> dict[str, Any]:
    out = tmp_path / f"{name}.json"
    res = run(str(SIDECHAIN), "--json", str(out), "--quiet", "--window", "200000", *args)
    assert res.exit_code == 0, res.stderr
    data = read_json(out)
    assert isinstance(data, dict)
    return data


def test_policy_file_is_honoured(tmp_path: Path) -> None:
    toml = tmp_path / "early.toml"
    toml.write_text('base = "default"\nname = "early20"\n[compaction]\nat_share = 0.2\n', encoding="utf-8")
    builtin = _replay_json(tmp_path, "builtin")
    early = _replay_json(tmp_path, "early", "--policy-file", str(toml))
    assert builtin["policy"] == "default"
    assert early["policy"] == "early20"
    # the session peaks near 59K: under 40% of 200K (default), over 20% (the file's threshold)
    assert 40_000 < builtin["summary"]["peak_sent_tokens"] < 80_000
    assert early["summary"]["compactions"] != builtin["summary"]["compactions"]
    assert early["summary"]["peak_sent_tokens"] < builtin["summary"]["peak_sent_tokens"]


def test_policy_file_without_a_name_is_not_reported_as_the_builtin(tmp_path: Path) -> None:
    toml = tmp_path / "p.toml"
    toml.write_text('base = "default"\n[compaction]\nat_share = 0.3\n', encoding="utf-8")
    data = _replay_json(tmp_path, "p", "--policy-file", str(toml))
    assert data["policy"] != "default"


def test_an_old_flat_key_in_a_policy_file_still_loads_and_says_where_it_moved(tmp_path: Path) -> None:
    old = tmp_path / "old.toml"
    old.write_text('base = "default"\nname = "old"\ncompact_at_share = 0.2\n', encoding="utf-8")
    new = tmp_path / "new.toml"
    new.write_text('base = "default"\nname = "old"\n[compaction]\nat_share = 0.2\n', encoding="utf-8")
    res = run(str(SIDECHAIN), "--policy-file", str(old), "--quiet", "--json", str(tmp_path / "old.json"))
    assert res.exit_code == 0, res.stderr
    warning = [line for line in res.stderr.splitlines() if line.startswith("warning:")]
    assert warning == [f"warning: {old}: compact_at_share is deprecated: use [compaction] at_share"]
    res = run(str(SIDECHAIN), "--policy-file", str(new), "--quiet", "--json", str(tmp_path / "new.json"))
    # (not "warning:" alone: a ResourceWarning of another test's socket, collected meanwhile, is one)
    assert res.exit_code == 0 and "deprecated" not in res.stderr, res.stderr
    # the same policy either way: the same report
    assert read_json(tmp_path / "old.json")["summary"] == read_json(tmp_path / "new.json")["summary"]


@pytest.mark.parametrize(
    "body",
    [
        pytest.param(
            'base = "default"\ncompact_at_shar = 0.3\n',
            id="unknown-key",
        ),
        pytest.param('base = "default"\n[compaction]\nat_share = "early"\n', id="wrong-type"),
        pytest.param('base = "default"\n[compaction]\nat_share = 0.3\n[unclosed\n', id="not-toml"),
    ],
)
def test_bad_policy_file_is_one_line_and_exit_2(body: str, tmp_path: Path) -> None:
    toml = tmp_path / "bad-policy.toml"
    toml.write_text(body, encoding="utf-8")
    line = one_error_line(run(str(SIDECHAIN), "--policy-file", str(toml), "--quiet"))
    assert str(toml) in line


def test_policy_recorded_replays_the_recorded_compactions(tmp_path: Path) -> None:
    out = tmp_path / "recorded.json"
    res = run(str(MIMO_DB3), "--policy", "recorded", "--window", "200000", "--json", str(out))
    assert res.exit_code == 0, res.stderr
    data = read_json(out)
    assert data["policy"] == "recorded"
    assert data["summary"]["compactions"] == {"recorded_compaction": 2}
    assert data["summary"]["llm_calls"] == 2
    assert data["summary"]["llm_cost_usd"] > 0
    assert "policy recorded" in res.stdout


# ------------------------------------------------------------------ no PATH: the user's newest session


def test_no_path_and_no_sessions_names_the_folders(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    line = one_error_line(run(env={"HOME": str(home)}))
    assert "~/.claude/projects" in line


def test_no_path_replays_the_newest_claude_code_session(tmp_path: Path) -> None:
    home = tmp_path / "home"
    session = copy_of(SIDECHAIN, home / ".claude" / "projects" / "x" / "s.jsonl")
    out = tmp_path / "newest.json"
    res = run("--json", str(out), "--quiet", env={"HOME": str(home)})
    assert res.exit_code == 0, res.stderr
    assert str(session) in res.stderr.replace("\n", "")
    data = read_json(out)
    assert data["session"]["source"] == str(session)
    assert data["session"]["calls"] > 0


# ------------------------------------------------------------------ the console script


def console_script() -> Path:
    script = Path(sys.executable).with_name("ctxengine")
    if not script.exists():
        pytest.fail(f"console script not installed beside {sys.executable}")
    return script


def test_console_script_replays_a_real_session(tmp_path: Path) -> None:
    out = tmp_path / "report.json"
    res = subprocess.run(
        [str(console_script()), "replay", str(SIDECHAIN), "--json", str(out)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert res.returncode == 0, res.stderr
    assert "ctxengine replay — policy default" in res.stdout
    data = read_json(out)
    assert isinstance(data, dict)
    assert data["session"]["source"] == str(SIDECHAIN)
    missing = subprocess.run(
        [str(console_script()), "replay", str(tmp_path / "missing.jsonl")],
        capture_output=True,
        text=True,
        check=False,
    )
    assert missing.returncode == 2
    assert missing.stderr.strip().splitlines() == [
        f"error: {tmp_path / 'missing.jsonl'}: no such file or directory"
    ]


# ------------------------------------------------------------------ --model


def test_model_fills_in_only_for_transcripts_that_name_none(transcripts: Path, tmp_path: Path) -> None:
    """SWE-agent 0.x trajectories do not name their model (this one is gpt-4 by its source):
    ``--model`` prices it as that model; a transcript that names its model keeps it."""
    swe = transcripts / "swe-agent-traj" / "sweagent-0.x_gpt-4_pydicom__pydicom-1458.traj"
    sidechain = next(CLAUDE_CODE.glob("*sidechain*.jsonl"))
    out = tmp_path / "r.json"
    plain = run(str(swe), "--json", str(out), "--quiet")
    assert plain.exit_code == 0, plain.stderr
    before = json.loads(out.read_text())
    before = before[0] if isinstance(before, list) else before
    assert before["session"]["model"] is None

    res = run(str(swe), "--model", "gpt-4o", "--json", str(out), "--quiet")
    assert res.exit_code == 0, res.stderr
    assert "note: 1 session(s) name no model: replayed as gpt-4o" in res.stderr
    after = json.loads(out.read_text())
    after = after[0] if isinstance(after, list) else after
    assert after["session"]["model"] == "gpt-4o"
    assert not any("fallback" in w for w in after["warnings"])  # a known price now
    assert after["summary"]["cost_usd"] != before["summary"]["cost_usd"]

    named = run(str(sidechain), "--model", "gpt-4o", "--json", str(out), "--quiet")
    assert named.exit_code == 0 and "name no model" not in named.stderr
    kept = json.loads(out.read_text())
    kept = kept[0] if isinstance(kept, list) else kept
    assert kept["session"]["model"] == load(sidechain)[0].model != "gpt-4o"


def test_unknown_model_is_refused_in_one_line(transcripts: Path) -> None:
    swe = transcripts / "swe-agent-traj" / "sweagent-0.x_gpt-4_pydicom__pydicom-1458.traj"
    res = run(str(swe), "--model", "gpt-9000")
    assert res.exit_code == 2
    assert res.stderr.strip().splitlines() == [
        "error: --model gpt-9000: unknown model (add it with --models FILE.toml)"
    ]


def test_a_folder_replayed_in_worker_processes_gives_the_same_reports(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``--jobs 2`` replays a folder's sessions in two worker processes (``replay.pool``): the
    JSON is the one ``--jobs 1`` writes, session for session and in the same order."""
    from ctxengine.replay import pool

    used: list[int] = []
    real = pool.replay_many

    def spy(*args: Any, **kw: Any) -> Any:
        used.append(kw["jobs"])
        return real(*args, **kw)

    monkeypatch.setattr(pool, "replay_many", spy)
    folder = tmp_path / "folder"
    copy_of(SIDECHAIN, folder / "a.jsonl")
    copy_of(
        TRANSCRIPTS / "swe-agent-traj" / "sweagent-1.0_claude-4-sonnet_exit-context_sympy__sympy-13877.traj",
        folder / "b.traj",
    )
    copy_of(SIDECHAIN, folder / "c" / "d.jsonl")
    outs = []
    for jobs in ("1", "2"):
        out = tmp_path / f"jobs{jobs}.json"
        res = run(str(folder), "--window", "64000", "--jobs", jobs, "--quiet", "--json", str(out))
        assert res.exit_code == 0, res.stderr
        outs.append(json.loads(out.read_text()))
    assert used == [2]
    assert len(outs[0]) == 3 and outs[0] == outs[1]


def test_workers_that_are_not_forked_get_the_sessions_pickled(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Forked workers are sent each session's index (they inherit the loaded sessions); where
    the start method is not ``fork`` the sessions travel pickled: the same JSON either way."""
    from ctxengine.replay import pool

    folder = tmp_path / "folder"
    copy_of(SIDECHAIN, folder / "a.jsonl")
    copy_of(SIDECHAIN, folder / "c" / "d.jsonl")
    outs = []
    for method in ("fork", "spawn"):
        monkeypatch.setattr(pool.multiprocessing, "get_start_method", lambda m=method: m)
        out = tmp_path / f"{method}.json"
        res = run(str(folder), "--window", "64000", "--jobs", "2", "--quiet", "--json", str(out))
        assert res.exit_code == 0, res.stderr
        outs.append(json.loads(out.read_text()))
    assert len(outs[0]) == 2 and outs[0] == outs[1]
    assert pool._INHERITED == ()  # not held after the run


def test_worker_processes_take_the_longest_sessions_first() -> None:
    """``replay.pool.largest_first``: the order the workers take a folder's sessions in, the most
    messages first (the reports still come back in the sessions' order: the test above)."""
    from ctxengine.messages.model import Message, Session, Text
    from ctxengine.replay.pool import largest_first

    def session(n: int) -> Session:
        msgs = [Message(role="user", blocks=(Text("x"),), id=str(i)) for i in range(n)]
        return Session(source=f"s{n}", format="claude-code", messages=msgs)

    assert largest_first([session(n) for n in (2, 5, 1, 5, 3)]) == [1, 3, 4, 0, 2]


def test_jobs_below_one_is_one_line_and_exit_2() -> None:
    line = one_error_line(run(str(SIDECHAIN), "--jobs", "0"))
    assert "--jobs" in line


def test_the_identifiers_only_baseline_runs_as_a_policy(tmp_path: Path) -> None:
    """``--policy identifiers-only`` runs the baseline engine (as ``bench`` does), and
    ``replay --help`` names it; it was refused as an unknown policy."""
    out = tmp_path / "r.json"
    res = run(
        str(SIDECHAIN), "--policy", "identifiers-only", "--window", "64000", "--quiet", "--json", str(out)
    )
    assert res.exit_code == 0, res.stderr
    summary = json.loads(out.read_text())["summary"]
    ours = tmp_path / "ours.json"
    assert run(str(SIDECHAIN), "--window", "64000", "--quiet", "--json", str(ours)).exit_code == 0
    default = json.loads(ours.read_text())["summary"]
    # a list of names: high on reference recall, well below ours on content
    assert summary["reference_recall"] > 0.9 and summary["content_recall"] < default["content_recall"] - 0.3
    assert "identifiers-only" in " ".join(CliRunner().invoke(app, ["replay", "--help"]).stdout.split())


@pytest.mark.skipif(not Path("/proc/self").is_dir(), reason="needs /proc (Linux)")
def test_an_output_the_early_check_cannot_foresee_is_one_line_and_exit_2() -> None:
    """``/proc/x.json`` passes the early check (its folder is writable to root) and fails only
    when written, after the work: one ``error:`` line and exit 2, not a traceback."""
    line = one_error_line(run(str(SIDECHAIN), "--quiet", "--json", "/proc/x.json"))
    assert "/proc/x.json" in line


def test_a_window_too_small_in_a_worker_process_is_the_same_one_line_error(tmp_path: Path) -> None:
    """``--jobs 2`` on a folder where one session's fixed prefix is larger than the window: the
    worker's error comes back whole (it was unpicklable: the pool broke with a traceback), the
    same ``error:`` line and exit 2 as in one process."""
    import pickle

    from ctxengine.models.registry import WindowTooSmallError
    from ctxengine.replay.records import PrefixTooLargeError

    for err in (WindowTooSmallError(9_000), PrefixTooLargeError("a.jsonl", 16_000, 24_530)):
        again = pickle.loads(pickle.dumps(err))
        assert type(again) is type(err) and str(again) == str(err)
    folder = tmp_path / "folder"
    copy_of(SIDECHAIN, folder / "a.jsonl")
    copy_of(MIMO_DB3, folder / "b.jsonl")
    results = [run(str(folder), "--window", "16000", "--jobs", j) for j in ("1", "2")]
    assert [r.exit_code for r in results] == [2, 2]
    errors = [[ln for ln in r.stderr.splitlines() if ln.startswith("error:")] for r in results]
    assert errors[0] == errors[1] and len(errors[0]) == 1 and "fixed prefix" in errors[0][0]
    assert "Traceback" not in results[1].stderr


@pytest.mark.parametrize("columns", [80, 120])
def test_the_table_keeps_to_columns_when_piped(columns: int) -> None:
    """``COLUMNS=80 ctxengine replay ... | cat`` was 107 columns wide (126 with sub-agents):
    piped, the table took its log width whatever ``COLUMNS`` said."""
    env = {k: v for k, v in os.environ.items() if k != "LINES"} | {"COLUMNS": str(columns)}
    for path in (SIDECHAIN, SIDECHAIN.parent):
        res = subprocess.run(
            [str(console_script()), "replay", str(path)], capture_output=True, text=True, env=env, check=False
        )
        assert res.returncode == 0, res.stderr
        assert max(len(line) for line in res.stdout.splitlines()) <= columns
