"""The first hour of a new user (issue 32): the demo sessions shipped in the package, one error
style for every usage error (click's and typer's own included), one list of policies for
``replay`` and ``bench``, a typo'd policy key that names the valid ones, and ``Message``
refusing a role no provider accepts. In-process with typer's ``CliRunner`` unless said."""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path

import pytest

from ctxengine.demo import demo_dir, demo_sources
from ctxengine.replay.short_names import short_names, two_lines
from test_cli_faults import cc_session, cli, no_work, one_error_line


def _git_blob(data: bytes) -> str:
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def test_the_demo_sessions_are_the_real_files_their_sources_name() -> None:
    """Each shipped session is byte for byte the blob ``SOURCES.md`` names, under a licence
    that allows it, with the licence text beside it."""
    sources = demo_sources().read_text(encoding="utf-8")
    files = sorted(demo_dir().iterdir())
    assert [f.name for f in files] == [
        "cc_opus-4.5_thinking_redacted_43391f62.jsonl",
        "sweagent-0.x_gpt-4_pydicom__pydicom-1458.traj",
    ]
    for f in files:
        section = sources[sources.index(f"## {f.name}") :]
        assert f"blob `{_git_blob(f.read_bytes())}`" in section.split("\n## ")[0]
    assert "CC0" in sources and "MIT" in sources
    for licence in ("LICENSE-M-Claude-CC0.txt", "LICENSE-SWE-agent-MIT.txt"):
        assert (demo_dir().parent / licence).stat().st_size > 1000
    assert sum(f.stat().st_size for f in files) < 1_000_000  # small: in every install


def test_replay_demo_needs_nothing_beside_the_package(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    out = tmp_path / "demo.json"
    res = cli("replay", "--demo", "--window", "32000", "--json", str(out))
    assert res.exit_code == 0, res.stderr
    assert "cc_opus-4.5_thinking_redacted_43391f62.jsonl" in res.stdout
    assert "sweagent-0.x_gpt-4_pydicom" in res.stdout
    # the SWE-agent 0.x run names no model: its cost is marked, and the caption says the mark
    caption = " ".join(res.stdout.split())
    assert (
        "*: cost $ at fallback rates (Sonnet-class list prices), for a model the transcript does "
        "not name (no known price)"
    ) in caption
    marked = [line for line in res.stdout.splitlines() if re.search(r"\d\.\d\d\*", line)]
    assert [line.split()[0][:8] for line in marked] == ["sweagent", "all"]  # its row and the total
    assert "–: nothing to count there" in caption  # the Claude Code row's read and content
    reports = json.loads(out.read_text())
    assert len(reports) == 2 and sum(r["session"]["calls"] for r in reports) == 50
    assert sum(sum(r["summary"]["compactions"].values()) for r in reports) > 0  # 32,000 tokens: it compacts


def test_replay_alone_with_no_session_here_says_what_to_try(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A new machine has no ``~/.claude`` or ``~/.codex``: the error names where it looked and the
    two commands that work (a path, the shipped demo)."""
    monkeypatch.setenv("HOME", str(tmp_path))
    one_error_line(cli("replay"), "~/.claude/projects", "ctxengine replay PATH", "ctxengine replay --demo")


def test_demo_and_a_path_together_are_refused(tmp_path: Path) -> None:
    one_error_line(cli("replay", str(cc_session(tmp_path / "s.jsonl", 2)), "--demo"), "--demo")


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (("--window", "abc"), ("--window", "replay --help")),
        (("--frob",), ("--frob", "--window", "--policy", "--jobs")),  # the valid options named
        (("--jobs", "2.5"), ("--jobs",)),
    ],
)
def test_click_usage_errors_are_one_error_line(
    tmp_path: Path, args: tuple[str, ...], words: tuple[str, ...]
) -> None:
    """A Typer box (usage, a frame, the message over several lines) for a bad integer or an
    unknown option: now one ``error:`` line and exit 2, like every other usage error."""
    line = one_error_line(cli("replay", str(cc_session(tmp_path / "s.jsonl", 2)), *args), *words)
    assert line.startswith("error: ") and "╭" not in line


def test_a_missing_argument_and_an_unknown_command_are_one_error_line() -> None:
    one_error_line(cli("bench"), "missing argument")
    one_error_line(cli("frobnicate"), "frobnicate")


def test_json_where_nothing_can_be_written_is_refused_before_the_work(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``/proc`` passes the permission check (as root) but takes no file: the report was lost
    after the whole replay."""
    src = cc_session(tmp_path / "s.jsonl", 2)
    no_work(monkeypatch)
    one_error_line(
        cli("replay", str(src), "--json", "/proc/ctxengine-x.json"), "--json", "cannot write in /proc"
    )


@pytest.mark.parametrize("command", ["replay", "bench"])
def test_jobs_0_is_refused_before_the_folder_is_read(
    command: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cc_session(tmp_path / "a.jsonl", 2)
    (tmp_path / "notes.txt").write_text("not a transcript\n", encoding="utf-8")  # would be a note
    no_work(monkeypatch)
    one_error_line(cli(command, str(tmp_path), "--jobs", "0"), "--jobs", "at least 1")


def test_replay_and_bench_name_the_same_policies(tmp_path: Path) -> None:
    src = str(cc_session(tmp_path / "s.jsonl", 2))
    replay = one_error_line(cli("replay", src, "--policy", "defualt"), "unknown policy")
    bench = one_error_line(cli("bench", src, "--policies", "defualt"), "unknown policy")
    assert replay == bench
    for name in ("default", "evict-importance", "claude-code", "identifiers-only", "langchain-trim"):
        assert re.search(rf"\b{name}\b", replay), name
    assert "did you mean default?" in replay


def test_replay_runs_a_peer_as_bench_does(tmp_path: Path) -> None:
    """``langchain-trim`` was a bench policy only; replay refused it as unknown."""
    src = cc_session(tmp_path / "s.jsonl", 6)
    out = tmp_path / "r.json"
    res = cli("replay", str(src), "--policy", "langchain-trim", "--window", "16000", "--json", str(out))
    assert res.exit_code == 0, res.stderr
    report = json.loads(out.read_text())
    assert report["policy"] == "langchain-trim" and report["session"]["calls"] == 6


def test_a_typod_policy_key_names_the_valid_keys(tmp_path: Path) -> None:
    bad = tmp_path / "typo.toml"
    bad.write_text("[compaction]\nat_shar = 0.5\n", encoding="utf-8")
    line = one_error_line(cli("replay", str(cc_session(tmp_path / "s.jsonl", 2)), "--policy-file", str(bad)))
    assert "unknown key 'at_shar' (did you mean at_share?)" in line
    assert "keep_recent_tokens" in line  # every valid key of [compaction]
    bad.write_text("[compactoin]\nat_share = 0.5\n", encoding="utf-8")
    line = one_error_line(cli("replay", str(cc_session(tmp_path / "t.jsonl", 2)), "--policy-file", str(bad)))
    assert "did you mean compaction?" in line


@pytest.mark.parametrize("role", ["human", "tool", "developer", ""])
def test_message_refuses_a_role_no_provider_accepts(role: str) -> None:
    from ctxengine import Message, Text

    with pytest.raises(ValueError, match="'system', 'user' or 'assistant'"):
        Message(role, (Text("hi"),), "m1")  # type: ignore[arg-type]


def test_session_names_are_cut_in_the_middle_and_stay_distinct() -> None:
    """The replay table cut every MiMo session to ``cc_mimo-v2.5-p…4.jsonl``."""
    names = [
        "cc_mimo-v2.5-pro_2x-autocompact_db3f6604.jsonl",
        "cc_mimo-v2.5-pro_subagent-sidechain_of-4530697c_agent-aee292b61a7ab9367.jsonl",
        "cc_mimo-v2.5-pro_vscode_2x-autocompact_4530697c.jsonl",
        "cc_mimo-v2.5-pro_vscode_2x-autocompact_4530697d.jsonl",  # differs in one character
    ]
    for limit in (16, 24, 32):
        short = short_names(names, limit)
        assert len(set(short)) == len(names) and all(len(s) <= limit for s in short), short
        assert all(s[:3] == "cc_" for s in short)
        assert not any(re.search(r"\d[.,]?…", s) for s in short), short  # never read as a cut figure
    assert two_lines("abcdefgh", 4) == "abcd\nefgh" and two_lines("abc", 4) == "abc"
