"""``ctxengine bench`` on a small subset of the real sessions: the JSON's shape and figures, the
table, the plot, the comparison of ``default`` with the presets, and the errors a user can fix.

The command is mounted on a local typer app (the project's CLI mounts the same function).
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
import typer
from typer.testing import CliRunner

from conftest import CLAUDE_CODE, CODEX, SWE_AGENT
from ctxengine import bench, peers
from ctxengine.bench import bench_command, compare, resolve, run_bench
from ctxengine.cli.commands import app as ctxengine_app
from ctxengine.formats import load
from ctxengine.policy.registry import get_policy

OPUS = CLAUDE_CODE / "cc_opus-4.5_thinking_redacted_43391f62.jsonl"
SIDECHAIN = CLAUDE_CODE / "cc_mimo-v2.5-pro_subagent-sidechain_of-4530697c_agent-aee292b61a7ab9367.jsonl"
CODEX_52 = CODEX / "codex_gpt-5.2-codex_cli-0.98_rollout-2026-02-09T16-41-33-019c44c8.jsonl"
SWE = SWE_AGENT / "sweagent-0.x_gpt-4_pydicom__pydicom-1458.traj"
POLICIES = ["default", "claude-code", "openclaw", "pi", "letta", "none"]
FIGURES = {
    "sessions",
    "reference_recall",
    "cost_usd",
    "pairing_violations",
    "peak_sent_tokens",
    "overflows",
    "compactions",
    "compactions_free",
    "llm_calls",
    "llm_tokens",
    "cache_hit_ratio",
    "wall_time_s",
    "content_recall",
    "probe_score",
    "latest_request_kept",
    "refetch_tokens",
    "cost_with_refetch_usd",
    "probes",
}

app = typer.Typer(add_completion=False)
app.callback()(lambda: None)
app.command("bench")(bench_command)


def run(*args: str) -> Any:
    return CliRunner().invoke(app, ["bench", *args], catch_exceptions=False)


@pytest.fixture(scope="module")
def subset(transcripts: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, Any], Any, Path]:
    out = tmp_path_factory.mktemp("bench")
    res = run(
        str(OPUS),
        str(CODEX_52),
        str(SWE),
        "--window",
        "64000",
        "--policies",
        ",".join(POLICIES),
        "--json",
        str(out / "bench.json"),
        "--plot",
        str(out / "bench.png"),
    )
    assert res.exit_code == 0, res.stderr
    return json.loads((out / "bench.json").read_text()), res, out


def test_json_holds_every_figure_per_policy_and_per_session(subset: tuple[dict[str, Any], Any, Path]) -> None:
    data, _, _ = subset
    assert data["window_tokens"] == 64_000
    assert list(data["policies"]) == POLICIES
    for name, row in data["policies"].items():
        assert set(row) >= FIGURES, name
        assert row["policy"] == name and row["sessions"] == 3 and not row["errors"]
    rows = data["sessions"]
    assert len(rows) == 3 * len(POLICIES)
    assert {r["policy"] for r in rows} == set(POLICIES)
    for name, row in data["policies"].items():
        mine = [r for r in rows if r["policy"] == name]
        hits, uses = sum(r["recall_hits"] for r in mine), sum(r["recall_uses"] for r in mine)
        assert row["reference_recall"] == round(hits / uses, 4)  # pooled, not a mean of ratios
        assert row["cost_usd"] == pytest.approx(sum(r["cost_usd"] for r in mine), abs=1e-5)
        assert row["peak_sent_tokens"] == max(r["peak_sent_tokens"] for r in mine)
        assert row["compactions"] == sum(r["compactions"] for r in mine)
        assert row["compactions_free"] <= row["compactions"]
        assert row["cache_hit_ratio"] == round(
            sum(r["cache_read_tokens"] for r in mine) / sum(r["sent_tokens"] for r in mine), 4
        )
    assert all(data["policies"][p]["pairing_violations"] == 0 for p in POLICIES)


def test_the_figures_are_the_replays_figures(subset: tuple[dict[str, Any], Any, Path]) -> None:
    from ctxengine.replay import replay_session

    data, _, _ = subset
    (session,) = load(CODEX_52)
    report = replay_session(session, get_policy("pi"), window=64_000)
    (row,) = [r for r in data["sessions"] if r["policy"] == "pi" and r["source"] == str(CODEX_52)]
    assert row["cost_usd"] == report.summary.cost_usd
    assert row["recall_hits"] == report.summary.recall_hits
    assert row["overflows"] == report.summary.overflows


def test_table_has_one_row_per_policy_and_states_the_comparison(
    subset: tuple[dict[str, Any], Any, Path],
) -> None:
    data, res, out = subset
    lines = res.stdout.splitlines()
    for name in POLICIES:  # one table: the halves only with --split
        assert sum(1 for line in lines if re.match(rf"{re.escape(name)} +[\d–]", line)) == 1, name
    assert "ctxengine bench — 3 sessions, window 64,000 tokens" in res.stdout
    assert "tuning half" not in res.stdout and "held-out half" not in res.stdout
    assert "default vs claude-code, openclaw, pi, letta:" in res.stdout
    comparison = data["comparison"]
    assert comparison["among"] == ["claude-code", "openclaw", "pi", "letta"]
    d = data["policies"]["default"]
    assert comparison["default_cost_with_refetch_usd"] == d["cost_with_refetch_usd"]
    assert comparison["default_content_recall"] == d["content_recall"]
    halves = data["halves"]
    for name in POLICIES:
        t, h = halves["tuning"][name], halves["held_out"][name]
        assert t["sessions"] + h["sessions"] == 3
        assert t["content_grounded"] + h["content_grounded"] == data["policies"][name]["content_grounded"]
    assert (out / "bench.png").stat().st_size > 10_000


def test_compare_states_whether_default_wins() -> None:
    runner = resolve(["default"])[0]
    rows = {
        name: bench.PolicyRow(
            policy=name,
            description="",
            engine="ctxengine",
            sessions=1,
            content_recall=rec,
            probe_score=probe,
            cost_with_refetch_usd=cost,
        )
        for name, rec, probe, cost in (
            ("default", 0.9, 0.8, 1.0),
            ("pi", 0.8, 0.7, 2.0),
            ("letta", 0.95, 0.5, 0.5),
        )
    }
    c = compare(rows)
    assert c is not None and c.among == ["pi", "letta"]
    assert not c.default_content_recall_highest and not c.default_cost_with_refetch_lowest
    assert c.default_probe_score_highest
    rows["letta"].content_recall, rows["letta"].cost_with_refetch_usd = 0.5, 3.0
    c = compare(rows)
    assert c is not None and c.default_content_recall_highest and c.default_cost_with_refetch_lowest
    assert compare({"default": rows["default"]}) is None
    assert runner.policy is get_policy("default")


def test_held_out_split_is_documented_and_balanced(transcripts: Path) -> None:
    from collections import Counter

    from ctxengine.cli.common import collect_all

    sessions, _ = collect_all([transcripts])
    halves = Counter((s.format, bench.held_out(s.source, s.name)) for s in sessions)
    for fmt in ("claude-code", "codex", "swe-agent"):
        assert halves[(fmt, True)] == halves[(fmt, False)] > 0, fmt
    assert abs(halves[("openai-chat", True)] - halves[("openai-chat", False)]) <= 5


def test_unknown_policy_and_bad_window_are_one_line_errors(transcripts: Path) -> None:
    res = run(str(SWE), "--policies", "default,cursor")
    assert res.exit_code == 2
    assert "unknown policy 'cursor'" in res.stderr and "langchain-trim" in res.stderr
    res = run(str(SWE), "--window", "0")
    assert res.exit_code == 2 and "--window" in res.stderr
    res = run(str(SWE), "--window", "8000")
    assert res.exit_code == 2 and "16,000" in res.stderr.replace("16000", "16,000")
    res = run(str(SWE.parent / "nowhere.traj"))
    assert res.exit_code == 2 and "no such file" in res.stderr


def test_peers_without_langchain_are_reported_unavailable(
    transcripts: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(peers, "available", lambda: f"LangChain is not installed: {peers.INSTALL_HINT}")
    res = run(str(SWE), "--policies", "default,langchain-trim", "--json", str(tmp_path / "b.json"))
    assert res.exit_code == 0, res.stderr
    row = json.loads((tmp_path / "b.json").read_text())["policies"]["langchain-trim"]
    assert row["sessions"] == 0 and "pip install 'ctxengine[peers]'" in row["unavailable"]
    assert "unavailable" in res.stdout and "ctxengine[peers]" in res.stderr


def test_jobs_give_the_same_figures(transcripts: Path) -> None:
    paths = [OPUS, SWE]
    sessions = [s for p in paths for s in load(p)]
    runners = resolve(["default", "letta"])
    one = run_bench(sessions, runners, window=64_000)
    two = run_bench(sessions, runners, window=64_000, jobs=2, paths=paths)
    for name in ("default", "letta"):
        a, b = one.policies[name], two.policies[name]
        assert (a.cost_usd, a.reference_recall, a.compactions) == (
            b.cost_usd,
            b.reference_recall,
            b.compactions,
        )


# ------------------------------------------------------------------ input handling shared with replay


def _write(content: bytes) -> Any:
    def make(p: Path) -> Path:
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(content)
        return p

    return make


def _sidechain_copy(p: Path) -> Path:
    p.write_bytes(SIDECHAIN.read_bytes())  # read here, not at import: the transcripts fixture checks first
    return p


def _folder_without_transcripts(p: Path) -> Path:
    p.mkdir()
    (p / "README.txt").write_text("nothing to replay here\n", encoding="utf-8")
    return p


BAD_INPUTS = {
    "missing": (lambda p: p, []),
    "unknown-format": (_write(b"These are my notes, not a transcript.\n"), []),
    "empty": (_write(b""), []),
    "binary": (_write(bytes(range(256)) * 8), []),
    "no-transcripts-in-folder": (_folder_without_transcripts, []),
    "bad-llm-spec": (_sidechain_copy, ["--llm", "nosuch:model"]),
    "llm-without-model": (_sidechain_copy, ["--llm", "anthropic:"]),
    "bad-models-file": (_sidechain_copy, ["--models", "{tmp}/models.toml"]),
    "missing-models-file": (_sidechain_copy, ["--models", "{tmp}/nowhere.toml"]),
}


@pytest.mark.parametrize("case", list(BAD_INPUTS))
def test_bad_input_gives_the_same_lines_and_exit_2_as_replay(
    transcripts: Path, tmp_path: Path, case: str
) -> None:
    """bench and replay read paths, --llm and --models through the same code: same stderr, exit 2."""
    make, extra = BAD_INPUTS[case]
    (tmp_path / "models.toml").write_text("x = = 1\n", encoding="utf-8")
    path = make(tmp_path / "some-session-file.jsonl")
    args = [str(path), *(a.format(tmp=tmp_path) for a in extra)]
    ours = run(*args, "--policies", "none")
    theirs = CliRunner().invoke(ctxengine_app, ["replay", *args])
    assert (ours.exit_code, theirs.exit_code) == (2, 2), (ours.stderr, theirs.stderr)
    assert ours.stdout == "" and theirs.stdout == ""
    assert ours.stderr == theirs.stderr
    assert ours.stderr.splitlines()[-1].startswith("error: ")


def test_no_transcripts_under_several_paths_names_them_all(tmp_path: Path) -> None:
    a, b = _folder_without_transcripts(tmp_path / "a"), _folder_without_transcripts(tmp_path / "b")
    res = run(str(a), str(b), "--policies", "none")
    assert res.exit_code == 2
    assert res.stderr.splitlines() == [
        f"note: skipped {a / 'README.txt'}: unknown transcript format",
        f"note: skipped {b / 'README.txt'}: unknown transcript format",
        f"error: {a}, {b}: no transcripts found",
    ]


def test_malformed_record_warns_with_file_and_line_and_the_rest_is_benched(
    transcripts: Path, tmp_path: Path
) -> None:
    lines = SIDECHAIN.read_bytes().splitlines(keepends=True)
    json.loads(lines[56])  # line 57 was a valid record: cut it in half (a torn write)
    lines[56] = lines[56][: len(lines[56]) // 2] + b"\n"
    path = tmp_path / "a-folder-with-a-rather-long-name-as-real-ones-have" / SIDECHAIN.name
    path.parent.mkdir()
    path.write_bytes(b"".join(lines))
    res = run(str(path), "--policies", "none", "--window", "64000", "--json", str(tmp_path / "b.json"))
    assert res.exit_code == 0, res.stderr
    warning = [ln for ln in res.stderr.splitlines() if ln.startswith("warning:")]
    assert len(warning) == 1 and f"{path}:57:" in warning[0]
    note = "note: 1 malformed record(s) in all (left out, or read without their bad part); the rest loaded"
    assert note in res.stderr  # as replay says
    assert json.loads((tmp_path / "b.json").read_text())["policies"]["none"]["sessions"] == 1


def test_model_reaches_the_worker_processes(transcripts: Path, tmp_path: Path) -> None:
    """``--model`` names the model of the sessions whose transcript names none, in this process
    and in the ``--jobs`` workers alike (same figures)."""
    swe = transcripts / "swe-agent-traj" / "sweagent-0.x_gpt-4_pydicom__pydicom-1458.traj"
    costs = []
    for jobs in ("1", "2"):
        out = tmp_path / f"b{jobs}.json"
        res = run(
            str(swe), "--policies", "none,default", "--model", "gpt-4o", "--jobs", jobs, "--json", str(out)
        )
        assert res.exit_code == 0, res.stderr
        data = json.loads(out.read_text())
        assert {r["model"] for r in data["sessions"]} == {"gpt-4o"}
        costs.append([r["cost_usd"] for r in data["sessions"]])
    assert costs[0] == costs[1]


@pytest.mark.parametrize("columns", [80, 120])
def test_the_bench_table_shows_every_figure_in_a_normal_terminal(columns: int, tmp_path: Path) -> None:
    """At 80 columns the bench's figures were cut mid-number (``340,4…``) and its headers too
    (``conte…``): the table keeps within the terminal, stacking two figures per column and
    leaving figures out (named in the caption) rather than cutting one, on the Claude Code
    folder at 64,000 tokens (figures up to six digits: ``none`` peaks at 340,402 tokens)."""
    import os
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if k != "LINES"} | {"COLUMNS": str(columns)}
    out = tmp_path / "b.json"
    cmd = [sys.executable, "-m", "ctxengine.cli", "bench", str(CLAUDE_CODE), "--window", "64000"]
    cmd += ["--policies", "default,none,identifiers-only", "--json", str(out)]
    res = subprocess.run(cmd, capture_output=True, text=True, env=env, check=False, timeout=900)
    assert res.returncode == 0, res.stderr
    lines = res.stdout.splitlines()
    assert max(len(x) for x in lines) <= columns
    assert not any(re.search(r"\d[.,]?…", x) for x in lines)
    data = json.loads(out.read_text())["policies"]
    for name in ("default", "none", "identifiers-only"):
        [row] = [x for x in lines if re.match(rf"{re.escape(name)} +[\d–]", x)]
        assert f"{data[name]['peak_sent_tokens']:,}" in res.stdout  # the widest figure, whole
        assert f"{data[name]['read_recall']:.3f}" in row
    caption = " ".join(lines[lines.index(next(x for x in lines if x.startswith("read: "))) :])
    assert "read: read recall" in caption and "pair: tool-call pairing violations" in caption


def test_split_shows_the_halves_only_when_asked_and_large_enough(transcripts: Path) -> None:
    """``bench`` printed the tuning and held-out halves even for a folder of 2 sessions: one
    table by default; ``--split`` adds the halves when each holds 2 sessions or more, else says
    why not."""
    res = run(str(CLAUDE_CODE), "--policies", "none", "--window", "200000", "--split")
    assert res.exit_code == 0, res.stderr
    assert "tuning half — 3 sessions" in res.stdout and "held-out half — 3 sessions" in res.stdout
    assert sum(1 for x in res.stdout.splitlines() if re.match(r"none +[\d–]", x)) == 3
    small = run(str(SWE), str(OPUS), "--policies", "none", "--split")
    assert small.exit_code == 0, small.stderr
    assert "half" not in small.stdout
    assert "note: --split: 0 + 2 sessions are too few to split" in " ".join(small.stderr.split())
