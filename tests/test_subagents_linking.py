"""Replay: sub-agent runs are tied to the parent's Task/Agent call that spawned them, on the real
Claude Code sidechain file and its parent, and on a main file holding sidechain records."""

from __future__ import annotations

import json
from pathlib import Path

from conftest import CLAUDE_CODE
from ctxengine.cli.common import collect
from ctxengine.formats import link_sidechains, load
from ctxengine.models.registry import Registry
from ctxengine.policy.registry import get_policy
from ctxengine.replay import replay_session
from ctxengine.subagents.linking import subagent_summary
from ctxengine.tokens.counter import counter_for
from test_faults_readers import T0, cc, main_with_subagents, tool_result, tool_use

PARENT = CLAUDE_CODE / "cc_mimo-v2.5-pro_vscode_2x-autocompact_4530697c.jsonl"
SIDECHAIN = CLAUDE_CODE / "cc_mimo-v2.5-pro_subagent-sidechain_of-4530697c_agent-aee292b61a7ab9367.jsonl"
SPAWNING_CALL = "call_4ca500225b854e1bbf616a3d"  # the parent's Agent call whose result names the agent


def _count(text: str) -> int:
    return counter_for(Registry.default().get("mimo-v2.5-pro")).count_text(text)


def test_real_sidechain_is_tied_to_the_agent_call_that_spawned_it() -> None:
    """The folder still holds one session per file; the parent's summary names the sidechain's
    spawning call (its result says ``agentId: aee292b61a7ab9367``), the sub-agent's 19 calls and
    their recorded input, and a report that is the sub-agent's final answer."""
    sessions, _ = collect(CLAUDE_CODE)
    assert len(sessions) == len(list(CLAUDE_CODE.glob("*.jsonl")))  # a sidechain stays a session
    parent = next(s for s in sessions if s.source == str(PARENT))
    side = next(s for s in sessions if s.source == str(SIDECHAIN))
    summary = subagent_summary(parent, _count)
    assert summary is not None
    assert summary.spawned == 1 and summary.unlinked == 0
    run = summary.runs[0]
    assert (run.call_id, run.agent_id, run.linked_by, run.tool) == (
        SPAWNING_CALL,
        "aee292b61a7ab9367",
        "agent_id",
        "Agent",
    )
    recorded = [m.usage.total_input for m in side.messages if m.role == "assistant" and m.usage]
    assert run.calls == 19 and len(recorded) == 18  # one call recorded no usage
    assert summary.subagent_tokens == sum(recorded) > 500_000
    assert summary.subagent_peak_tokens == max(recorded)
    # the report: the async launch result and the completion notification, the answer in it
    shown = [parent.messages[i] for i in run.report_messages]
    report = "\n".join(m.text() or str(m.blocks) for m in shown)
    assert "All 32 au-*.md files" in report
    assert 0 < summary.report_tokens < 2_000
    assert summary.tokens_kept_out == summary.subagent_tokens - summary.report_tokens
    # the parent spawned 12 sub-agents; only this one's file is in the corpus
    assert summary.task_calls == 12


def test_replay_of_the_parent_reports_the_figures_and_the_parent_alone_spawns_none() -> None:
    sessions, _ = collect(CLAUDE_CODE)
    parent = next(s for s in sessions if s.source == str(PARENT))
    alone = load(PARENT)[0]
    link_sidechains([alone])
    report = replay_session(alone, get_policy("none"), window=200_000)
    assert report.summary.subagents is not None
    assert (report.summary.subagents.spawned, report.summary.subagents.task_calls) == (0, 12)
    assert subagent_summary(parent, _count) is not None


def test_sidechain_records_in_a_main_file_are_tied_by_time(tmp_path: Path) -> None:
    """Older Claude Code wrote sub-agent records between the Task call and its result; their
    prompt is not the call's (``main_with_subagents``), so the call is found by time. A background
    sub-agent that starts when no Task call is open is reported as unlinked."""
    path = main_with_subagents(tmp_path / "main.jsonl", ["agent-1", "agent-2"])
    sessions = load(path)
    link_sidechains(sessions)
    summary = subagent_summary(sessions[0], len)
    assert summary is not None
    linked = [(r.call_id, r.linked_by) for r in summary.runs]
    assert linked == [("toolu_task0", "time"), ("toolu_task1", "time")]
    assert summary.unlinked == 1 and summary.task_calls == 2
    # each run's report is the Task result alone: none of the sub-agent's own tool output
    assert all(sessions[0].messages[i].tool_results for r in summary.runs for i in r.report_messages)
    assert summary.report_tokens == len("SUB0: found 3 places") + len("SUB1: found 3 places")
    assert summary.subagent_tokens == 4 * 5_010  # two calls each, 10 input + 5,000 cache read


def test_a_sidechain_file_is_tied_by_its_prompt(tmp_path: Path) -> None:
    """With no agent id in the result, the delegation prompt ties the sub-agent to its call."""
    prompt = "List every module that imports the ledger."
    main = [
        cc("user", "Clean up the ledger.", "u0", None, T0, isSidechain=False),
        cc("assistant", tool_use("toolu_a", "Task", prompt="something else"), "a0", "u0", T0 + 1),
        cc("user", tool_result("toolu_a", "done"), "r0", "a0", T0 + 2),
        cc("assistant", tool_use("toolu_b", "Task", prompt=prompt), "a1", "r0", T0 + 3),
        cc("user", tool_result("toolu_b", "three modules"), "r1", "a1", T0 + 100),
    ]
    side = [
        cc("user", prompt, "s0", None, T0 + 1.5, isSidechain=True, agentId="x1"),  # inside toolu_a's window
        cc("assistant", [{"type": "text", "text": "three modules"}], "s1", "s0", T0 + 50, isSidechain=True),
    ]
    (tmp_path / "main.jsonl").write_text("".join(json.dumps(r) + "\n" for r in main), encoding="utf-8")
    (tmp_path / "agent-x1.jsonl").write_text("".join(json.dumps(r) + "\n" for r in side), encoding="utf-8")
    sessions, _ = collect(tmp_path)
    parent = next(s for s in sessions if not s.sidechain)
    summary = subagent_summary(parent, len)
    assert summary is not None
    assert [(r.call_id, r.linked_by) for r in summary.runs] == [("toolu_b", "prompt")]


def test_the_table_and_the_bench_rows_show_the_subagent_figures() -> None:
    """The replay table has a ``sub-agents`` column when a run was linked (runs and the tokens
    kept out), and the bench rows carry the figures, summed per policy."""
    from rich.console import Console

    from ctxengine.bench import Runner, session_row, summarize_rows
    from ctxengine.replay.report import summary_table

    sessions, _ = collect(CLAUDE_CODE)
    parent = next(s for s in sessions if s.source == str(PARENT))
    report = replay_session(parent, get_policy("none"), window=200_000)
    console = Console(record=True, width=220)
    console.print(summary_table([report], "t", 220))
    text = console.export_text()
    assert "sub-" in text and "1 (632K)" in text
    alone = replay_session(load(PARENT)[0], get_policy("none"), window=200_000)
    console = Console(record=True, width=220)
    console.print(summary_table([alone], "t", 220))
    assert "sub-" not in console.export_text()  # no run linked: no column
    row = session_row(report, 0.0)
    assert (row.subagents_spawned, row.subagent_tokens) == (1, 632_622)
    assert row.subagent_tokens_kept_out == report.summary.subagents.tokens_kept_out  # type: ignore[union-attr]
    total = summarize_rows(Runner(name="none", policy=get_policy("none")), [row, row], [])
    assert total.subagents_spawned == 2 and total.subagent_tokens == 2 * 632_622
