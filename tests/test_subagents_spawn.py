"""Sub-agents spawned from a ``ContextEngine``: isolated and fork contexts, the depth limit,
rollback, the report as the only thing that comes back, orphan clean-up, the Explore preset."""

from __future__ import annotations

import gc
import json
import time
from pathlib import Path
from typing import Any

import pytest

from ctxengine.engine.core import ContextEngine, Projection
from ctxengine.formats.anthropic_writer import to_anthropic
from ctxengine.formats.openai_writer import to_openai_chat
from ctxengine.formats.validate import validate_anthropic, validate_openai_chat
from ctxengine.layers.pairing import find_violations
from ctxengine.messages.model import Message, Text, ToolCall, ToolResult
from ctxengine.policy.registry import get_policy
from ctxengine.store.base import StoreError
from ctxengine.subagents.runner import run_subagent
from ctxengine.subagents.spawn import FORK_PLACEHOLDER, SUBAGENTS, SubagentContext, SubagentResult
from ctxengine.subagents.spec import (
    EXPLORE,
    READ_ONLY_TOOLS,
    AgentSpec,
    SpawnError,
    SubagentDepthError,
    SubagentError,
    explore_for,
)

MODEL = "claude-sonnet-4-6"
EDIT = ToolCall("in3", "edit", {})  # not on Explore's allowlist


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "AGENTS.md").write_text("Run the tests with make test. AGENTS-MARK\n", encoding="utf-8")
    (ws / "TOOLS.md").write_text("grep is fast here. TOOLS-MARK\n", encoding="utf-8")
    (ws / "CLAUDE.md").write_text("Parent-only notes. CLAUDE-MARK\n", encoding="utf-8")
    (ws / "skills").mkdir()
    (ws / "skills" / "review.md").write_text("Review checklist: SKILL-MARK\n", encoding="utf-8")
    return ws


def parent_engine(pending_task: bool = True) -> ContextEngine:
    """A main session: a request, one read round, then (optionally) a ``task`` call in flight."""
    e = ContextEngine(get_policy("default"), model=MODEL, session_id="agent:main:cli:dm:alice")
    e.bootstrap(system="You are the main agent.")
    e.ingest(Message("user", (Text("Find where the ledger is reset and explain it."),), "u1"))
    e.ingest(Message("assistant", (ToolCall("r1", "read", {"path": "src/app.py"}),), "a1"))
    e.ingest(Message("user", (ToolResult("r1", (Text("def main(): ..."),), False, "read"),), "t1"))
    if pending_task:
        e.assemble()  # the request that carried the task call's turn
        call = ToolCall("task1", "task", {"prompt": "find ledger resets"})
        e.ingest(Message("assistant", (Text("Delegating the search."), call), "a2"))
    return e


def test_isolated_context_is_prompt_system_and_allowlisted_files_only(workspace: Path) -> None:
    parent = parent_engine()
    spec = AgentSpec(name="helper", system_prompt="You help. HELPER-SYSTEM", skills=("skills/review.md",))
    ctx = parent.prepare_subagent_spawn(spec, "Find the ledger resets.", call_id="task1", workspace=workspace)
    assert [m.text() for m in ctx.messages] == ["Find the ledger resets."]  # the only user message
    for mark in ("HELPER-SYSTEM", "AGENTS-MARK", "TOOLS-MARK", "SKILL-MARK"):
        assert mark in ctx.system
    assert "CLAUDE-MARK" not in ctx.system  # not on the default allowlist (AGENTS.md, TOOLS.md)
    proj = ctx.engine.assemble()
    assert [m.text() for m in proj.messages] == ["Find the ledger resets."]  # nothing of the parent
    assert ctx.depth == 1 and ctx.model == MODEL  # no model in the definition: the parent's
    # the allowlist of instruction files is configurable
    only = spec.with_(name="claude-only", instruction_files=("CLAUDE.md",), skills=())
    other = parent.prepare_subagent_spawn(only, "x", workspace=workspace)
    assert "CLAUDE-MARK" in other.system and "AGENTS-MARK" not in other.system
    parent.dispose()


def test_depth_limit_refuses_a_spawn_past_max_depth() -> None:
    parent = parent_engine()
    first = parent.prepare_subagent_spawn(EXPLORE, "look around")
    before = len(SUBAGENTS.children(first.engine))
    with pytest.raises(SubagentDepthError, match=r"depth 1 at most.*would make it depth 2"):
        first.engine.prepare_subagent_spawn(EXPLORE, "look deeper")
    assert len(SUBAGENTS.children(first.engine)) == before == 0  # nothing registered
    deeper = AgentSpec(name="nested", max_depth=2)
    second = first.engine.prepare_subagent_spawn(deeper, "look deeper")
    assert second.depth == 2
    with pytest.raises(SubagentDepthError):
        second.engine.prepare_subagent_spawn(deeper, "deeper still")
    parent.dispose()  # releases the whole tree
    assert first.child_id not in SUBAGENTS and second.child_id not in SUBAGENTS


def _spawn_events(engine: ContextEngine) -> list[dict[str, Any]]:
    return [e.payload for e in engine.store.entries(engine.session_id, "event")]


def test_a_failed_spawn_rolls_back(workspace: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A missing skill, or a store that refuses the spawn's record, leaves nothing behind: no live
    sub-agent, no spawn event, the parent's history unchanged."""
    parent = parent_engine()
    history = list(parent.history)
    bad = AgentSpec(name="skilled", skills=("skills/missing.md",))
    with pytest.raises(SpawnError, match=r"rolled back.*skills/missing\.md"):
        parent.prepare_subagent_spawn(bad, "go", workspace=workspace)
    real_append = parent.store.append

    def failing(session: str, kind: Any, payload: Any) -> Any:
        if isinstance(payload, dict) and payload.get("event") == "subagent_spawn":
            raise StoreError("disk full")
        return real_append(session, kind, payload)

    monkeypatch.setattr(parent.store, "append", failing)
    with pytest.raises(SpawnError, match="disk full"):
        parent.prepare_subagent_spawn(EXPLORE, "go")
    monkeypatch.undo()
    assert SUBAGENTS.children(parent) == []
    assert not [e for e in _spawn_events(parent) if e.get("event") == "subagent_spawn"]
    assert parent.history == history
    # a host whose own start fails after preparation rolls back: the child is gone for good
    ctx = parent.prepare_subagent_spawn(EXPLORE, "go")
    ctx.rollback()
    ctx.rollback()  # idempotent
    assert ctx.child_id not in SUBAGENTS
    assert {"event": "subagent_rollback", "child": ctx.child_id} in _spawn_events(parent)
    with pytest.raises(SubagentError, match="no live sub-agent"):
        parent.on_subagent_ended(SubagentResult(child_id=ctx.child_id, report="late"))
    parent.dispose()


def test_fork_shares_the_parent_prefix_and_its_requests_are_valid() -> None:
    """The fork's context is the parent's projection (the same messages, system prompt and tools:
    a prompt-cache hit), the task call in flight closed by a placeholder, then the prompt; its
    requests pass both providers' rules, before and after a round of its own."""
    parent = parent_engine()
    parent_view = parent.assemble().messages  # what the parent sends with the task call
    ctx = parent.prepare_subagent_spawn(AgentSpec(name="fork", mode="fork"), "Now only the ledger part.")
    proj = ctx.engine.assemble()
    n = len(parent_view) - 1  # all but the synthetic result the parent's repair adds for the call
    assert proj.messages[:n] == parent_view[:n] and proj.system == parent.system
    closing = proj.messages[n]
    assert [r.call_id for r in closing.tool_results] == ["task1"]
    assert closing.tool_results[0].content == (Text(FORK_PLACEHOLDER),)
    assert closing.text() == "Now only the ledger part."
    assert ctx.model == MODEL and ctx.parent_tools
    ctx.engine.ingest(Message("assistant", (ToolCall("g1", "grep", {"pattern": "reset"}),), "f-a1"))
    ctx.engine.ingest(Message("user", (ToolResult("g1", (Text("ledger.py:80"),), False, "grep"),), "f-t1"))
    for messages in (proj.messages, ctx.engine.assemble().messages):
        assert find_violations(messages) == []
        assert validate_anthropic(to_anthropic(messages, system=proj.system, model=MODEL)) == []
        assert validate_openai_chat(to_openai_chat(messages, system=proj.system, model="gpt-4o")) == []
    parent.dispose()


def _scripted(replies: list[Message]) -> Any:
    def complete(proj: Projection, ctx: SubagentContext) -> Message:
        return replies.pop(0)

    return complete


def test_only_the_report_and_files_read_reach_the_parent() -> None:
    parent = parent_engine()
    ctx = parent.prepare_subagent_spawn(EXPLORE, "Where is the ledger reset?", call_id="task1")
    replies = [
        Message("assistant", (ToolCall("in1", "grep", {"pattern": "reset"}),), "s1"),
        Message("assistant", (ToolCall("in2", "read", {"path": "src/ledger.py"}), EDIT), "s2"),
        Message("assistant", (Text("Reset in src/ledger.py:80 (Ledger.reset)."),), "s3"),
    ]

    def execute(call: ToolCall) -> ToolResult:
        return ToolResult(call.id, (Text(f"INTERNAL-OUTPUT of {call.name}"),), False, call.name)

    result = run_subagent(ctx, _scripted(replies), execute)
    assert result.report == "Reset in src/ledger.py:80 (Ledger.reset)."
    refused = [r for m in ctx.engine.history for r in m.tool_results if r.call_id == "in3"]
    assert refused[0].is_error and "not available to the explore agent" in refused[0].content[0].text  # type: ignore[union-attr]
    parent.on_subagent_ended(result)
    last = parent.history[-1]
    assert [r.call_id for r in last.tool_results] == ["task1"]
    text = last.tool_results[0].content[0].text  # type: ignore[union-attr]
    assert text == "Reset in src/ledger.py:80 (Ledger.reset).\n\nFiles read: src/ledger.py"
    dumped = json.dumps([repr(m.blocks) for m in parent.assemble().messages])
    for internal in ("in1", "in2", "in3", "INTERNAL-OUTPUT"):
        assert internal not in dumped
    assert ctx.child_id not in SUBAGENTS
    assert find_violations(parent.assemble().messages) == []
    parent.dispose()


def test_a_long_report_is_capped_and_kept_whole_as_an_artifact() -> None:
    parent = parent_engine()
    spec = AgentSpec(name="brief", report_max_tokens=50)
    ctx = parent.prepare_subagent_spawn(spec, "summarize", call_id="task1")
    long_report = " ".join(f"finding-{i}" for i in range(400))
    parent.on_subagent_ended(SubagentResult(child_id=ctx.child_id, report=long_report, files_read=[]))
    shown = parent.history[-1].tool_results[0].content[0].text  # type: ignore[union-attr]
    assert parent.counter.count_text(shown) < 120 and "report cut to 50" in shown
    artifact = f"subagent/{ctx.child_id}/report"
    assert parent.retrieve(artifact) == long_report
    parent.dispose()


def test_orphans_are_cleaned_up() -> None:
    """A parent that is disposed releases its sub-agents; one that is dropped without dispose
    leaves orphans that ``sweep`` ends; a sub-agent past its time-to-live is swept too."""
    parent = parent_engine(pending_task=False)
    kept = parent.prepare_subagent_spawn(EXPLORE, "a")
    short = parent.prepare_subagent_spawn(EXPLORE, "b", ttl_s=10)
    assert SUBAGENTS.sweep(now=time.time() + 5) == []
    assert SUBAGENTS.sweep(now=time.time() + 11) == [short.child_id]
    parent.dispose()
    assert kept.child_id not in SUBAGENTS
    gone = parent_engine(pending_task=False)
    orphan = gone.prepare_subagent_spawn(EXPLORE, "c")
    orphan_id = orphan.child_id
    del gone, orphan
    gc.collect()
    assert orphan_id in SUBAGENTS.sweep()
    assert orphan_id not in SUBAGENTS


def test_explore_preset_is_read_only_cheap_and_capped() -> None:
    assert EXPLORE.tools == READ_ONLY_TOOLS == ("read", "grep", "glob", "search")
    assert "task" not in EXPLORE.tools and EXPLORE.max_depth == 1
    assert EXPLORE.model == "claude-haiku-4-5" and explore_for("openai").model == "gpt-4o-mini"
    assert EXPLORE.report_max_tokens == 2_000
    parent = parent_engine(pending_task=False)
    ctx = parent.prepare_subagent_spawn(EXPLORE, "look")
    assert ctx.model == "claude-haiku-4-5" and ctx.engine.model.input < parent.model.input
    parent.dispose()
