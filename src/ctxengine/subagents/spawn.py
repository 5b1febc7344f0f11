"""Spawning a sub-agent from a parent ``ContextEngine``, ending it, and cleaning up orphans.

``ContextEngine.prepare_subagent_spawn`` and ``on_subagent_ended`` delegate here (OpenClaw's
``prepareSubagentSpawn`` / ``onSubagentEnded``, filled in). A sub-agent gets a ``ContextEngine``
of its own (its own history and cascade, its own session in the parent's store) built in one of
two modes:

- ``isolated`` (the default; Claude Code's typed agents, pi, OpenClaw's default): its own system
  prompt, followed by the allow-listed workspace instruction files and its preloaded skills, and
  the delegation prompt as the only user message. Nothing of the parent's history.
- ``fork`` (Claude Code's fork path, OpenClaw's same-agent fork): the parent's projection as it
  stands (the same message objects, so the same bytes and a prompt-cache hit on the parent's
  model, system prompt and tools), its unanswered tool calls closed by placeholder results, then
  the delegation prompt. The messages are pairing-valid (``layers.pairing``).

A spawn is all or nothing: the depth check comes first, then everything is built, then the
sub-agent is registered and the parent's store gets a ``subagent_spawn`` event; if any step
fails, what was done is undone (the child engine disposed, the registration removed) and
``SpawnError`` is raised. ``SubagentContext.rollback()`` does the same for a host whose own spawn
failed after preparation (OpenClaw's ``{rollback()}``).

``end_subagent`` (``on_subagent_ended``) hands back **only** the final report (cut to the
definition's ``report_max_tokens``; the full text goes to the parent's artifact store) and the
list of files the sub-agent read: as the result of the tool call that spawned it, or as a notice.
Nothing else of the sub-agent's history reaches the parent. The registry ends the sub-agents of a
disposed parent (``released``), and ``SubagentRegistry.sweep`` (run at every spawn, and by a
host at will) those whose parent is gone (garbage-collected) or whose time-to-live has passed
(``swept``).
"""

from __future__ import annotations

import time
import weakref
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import msgspec

from ctxengine.layers.pairing import find_violations
from ctxengine.messages.model import Message, Text, ToolCall, ToolResult
from ctxengine.messages.tool_turns import aborted_unanswered
from ctxengine.store.borrowed import BorrowedStore
from ctxengine.subagents.host import Engine
from ctxengine.subagents.registry import SubagentRegistry, close_subagent
from ctxengine.subagents.spec import (
    AgentSpec,
    EndReason,
    SpawnError,
    SpawnMode,
    SubagentDepthError,
    SubagentError,
)
from ctxengine.tools.bootstrap import load_bootstrap_files

if TYPE_CHECKING:
    from ctxengine.layers.base import LayerEvent

FORK_PLACEHOLDER = "[forked: this call is being handled by a sub-agent; its result goes to the parent only]"
READ_TOOLS = frozenset({"read", "Read", "open_files"})  # tool calls whose path counts as a file read


class SubagentResult(msgspec.Struct, kw_only=True):
    """What a sub-agent hands back (``ContextEngine.on_subagent_ended``).

    Attributes:
        child_id: the sub-agent's id (``SubagentContext.child_id``).
        report: its final report.
        files_read: workspace paths it read (None: taken from the sub-agent's own read calls).
        reason: why it ended, OpenClaw's end reasons ("completed", "deleted", "swept",
            "released").
    """

    child_id: str
    report: str
    files_read: list[str] | None = None
    reason: EndReason = "completed"


class SubagentContext:
    """A prepared sub-agent: ``engine`` (its own ``ContextEngine``, bootstrapped, the initial
    messages ingested), ``messages`` (those initial messages), ``system``, ``model``, the tool
    allowlist ``tools`` (a fork also sends the parent's tool definitions, ``parent_tools``, which
    are part of the cached prefix), ``max_turns``, ``depth`` (1 for a sub-agent of a main agent)
    and ``call_id`` (the parent's tool call it answers, if any)."""

    def __init__(
        self,
        child_id: str,
        spec: AgentSpec,
        mode: SpawnMode,
        engine: Engine,
        messages: list[Message],
        depth: int,
        call_id: str | None,
        parent: Engine,
        registry: SubagentRegistry[SubagentContext],
    ) -> None:
        self.child_id = child_id
        self.spec = spec
        self.mode = mode
        self.engine = engine
        self.messages = messages
        self.depth = depth
        self.call_id = call_id
        self.system = engine.system
        self.model = engine.model.name
        self.tools = spec.tools
        self.max_turns = spec.max_turns
        self.parent_tools = mode == "fork"
        self._parent = weakref.ref(parent)
        self._registry = registry

    @property
    def parent(self) -> Engine | None:
        """The parent engine, or None once it is gone."""
        return self._parent()

    def rollback(self) -> None:
        """Undo the spawn (the host failed to start the sub-agent): unregister it, dispose its
        engine, and record a ``subagent_rollback`` event in the parent's store. Idempotent."""
        if self._registry.take(self.child_id) is None:
            return
        self.engine.dispose()
        parent = self.parent
        if parent is not None:
            rolled = {"event": "subagent_rollback", "child": self.child_id}
            parent.store.append(parent.session_id, "event", rolled)


SUBAGENTS: SubagentRegistry[SubagentContext] = SubagentRegistry()
"""The process's sub-agents (a gateway serving many sessions has one registry for all)."""


def prepare_spawn(
    parent: Engine,
    parent_view: Sequence[Message],
    spec: AgentSpec,
    prompt: str,
    *,
    mode: SpawnMode | None = None,
    call_id: str | None = None,
    workspace: Path | None = None,
    ttl_s: float | None = None,
    registry: SubagentRegistry[SubagentContext] = SUBAGENTS,
    new_engine: Callable[..., Engine] | None = None,
) -> SubagentContext:
    """Prepare a sub-agent of ``parent`` (see the module notes). ``parent_view``: the parent's
    projection before repair. Raises ``SubagentDepthError`` past ``spec.max_depth`` (nothing is
    done), ``SpawnError`` when a step fails (everything rolled back)."""
    mode = mode or spec.mode
    registry.sweep()  # a spawn first ends the orphans of parents that are gone
    depth = registry.depth(parent) + 1
    if depth > spec.max_depth:
        raise SubagentDepthError(
            f"agent {spec.name!r} may run at depth {spec.max_depth} at most; spawning it from "
            f"{parent.session_id!r} (depth {depth - 1}) would make it depth {depth}"
        )
    if not prompt.strip():
        raise SpawnError(f"agent {spec.name!r}: the delegation prompt is empty")
    child_id = registry.new_id(parent.session_id, spec.name)
    child: Engine | None = None
    try:
        make = new_engine or type(parent)
        child, messages = _child_engine(make, parent, parent_view, spec, prompt, mode, child_id, workspace)
        ctx = SubagentContext(child_id, spec, mode, child, messages, depth, call_id, parent, registry)
        registry.add(ctx, ttl_s)
        spawned = {"event": "subagent_spawn", "child": child_id, "agent": spec.name, "mode": mode}
        parent.store.append(parent.session_id, "event", spawned | {"depth": depth, "call_id": call_id})
    except Exception as exc:
        registry.take(child_id)
        if child is not None:
            child.dispose()
        raise SpawnError(f"agent {spec.name!r}: spawn failed and was rolled back: {exc}") from exc
    return ctx


def _child_engine(
    new_engine: Callable[..., Engine],
    parent: Engine,
    parent_view: Sequence[Message],
    spec: AgentSpec,
    prompt: str,
    mode: SpawnMode,
    child_id: str,
    workspace: Path | None,
) -> tuple[Engine, list[Message]]:
    """The sub-agent's engine, bootstrapped, its initial messages ingested (they are returned).
    A fork takes the parent's system prompt, tools, fixed prefix and model: the cached prefix."""
    fork = mode == "fork"
    if fork:
        system, model = parent.system, parent.model.name
        messages = fork_messages(parent_view, prompt)
    else:
        system, model = isolated_system(spec, workspace), spec.model or parent.model.name
        messages = [Message("user", (Text(prompt),), f"{child_id}:prompt", timestamp=time.time())]
    child = new_engine(
        parent.policy,
        model=model,
        registry=parent.registry,
        session_id=child_id,
        store=BorrowedStore(parent.store),  # the parent's store: closing it is the parent's job
        workspace=workspace,
    )
    try:
        child.bootstrap(
            system=system,
            tools=parent.compactor.tools if fork else (),
            fixed_prefix_tokens=parent.ledger.state.fixed_prefix if fork else None,
        )
        for m in messages:
            child.ingest(m)
    except Exception:
        child.dispose()
        raise
    return child, messages


def isolated_system(spec: AgentSpec, workspace: Path | None) -> str:
    """The sub-agent's system prompt, then its allow-listed instruction files (those present) and
    its skills (whole; a missing one raises ``SpawnError``)."""
    parts = [spec.system_prompt]
    if workspace is not None and spec.instruction_files:
        found = load_bootstrap_files(workspace, spec.instruction_files, include_missing=False)
        if found.text:
            parts.append("# Instruction files\n\n" + found.text)
    if spec.skills:
        if workspace is None:
            raise SpawnError(f"agent {spec.name!r} preloads skills but no workspace was given")
        skills = load_bootstrap_files(workspace, spec.skills, include_missing=True)
        bad = [f.path for f in skills.files if f.status not in ("loaded", "truncated")]
        if bad:
            raise SpawnError(f"agent {spec.name!r}: skill file(s) not loadable: {', '.join(bad)}")
        parts.append("# Skills\n\n" + skills.text)
    return "\n\n".join(parts)


def fork_messages(view: Sequence[Message], prompt: str) -> list[Message]:
    """The parent's projection (the same objects) with its unanswered tool calls closed by
    placeholder results, then ``prompt``: a pairing-valid list. Raises ``SpawnError`` when the
    parent's projection itself is not pairing-valid beyond the open calls."""
    answered = {r.call_id for m in view for r in m.tool_results}
    skipped = aborted_unanswered(view)
    open_calls = [c for m in view for c in m.tool_calls if c.id not in answered and c.id not in skipped]
    blocks: list[Any] = [ToolResult(c.id, (Text(FORK_PLACEHOLDER),), False, c.name) for c in open_calls]
    blocks.append(Text(prompt))
    out = [*view, Message("user", tuple(blocks), "fork:prompt", timestamp=time.time())]
    problems = find_violations(out)
    if problems:
        raise SpawnError(f"the parent's projection cannot be forked: {problems[0]}")
    return out


def end_subagent(
    parent: Engine, result: SubagentResult, registry: SubagentRegistry[SubagentContext] = SUBAGENTS
) -> list[LayerEvent]:
    """Hand ``result`` back to ``parent`` (``on_subagent_ended``): the capped report and the files
    read, as the spawning call's result (or a notice), ingested into the parent; then the
    sub-agent is disposed. Returns the parent's ingest events. Raises ``SubagentError`` for a
    sub-agent that is not live or not the parent's."""
    ctx = registry.take(result.child_id)
    if ctx is None:
        raise SubagentError(f"no live sub-agent {result.child_id!r} (ended, rolled back or swept)")
    if ctx.parent is not parent:
        registry.add(ctx, None)
        raise SubagentError(f"sub-agent {result.child_id!r} is not a sub-agent of {parent.session_id!r}")
    files = result.files_read if result.files_read is not None else files_read(ctx.engine.history)
    text = _capped_report(parent, ctx, result.report)
    if files:
        text += "\n\nFiles read: " + ", ".join(files)
    if ctx.call_id is not None:
        block: Any = ToolResult(ctx.call_id, (Text(text),), False, "task")
        msg = Message("user", (block,), f"{ctx.child_id}:result", timestamp=time.time())
    else:
        head = f"<subagent-report agent={ctx.spec.name!r} reason={result.reason!r}>"
        body = f"{head}\n{text}\n</subagent-report>"
        msg = Message("user", (Text(body),), f"{ctx.child_id}:report", timestamp=time.time(), origin="notice")
    events = parent.ingest(msg)
    close_subagent(ctx, result.reason)
    return events


def _capped_report(parent: Engine, ctx: SubagentContext, report: str) -> str:
    """``report`` cut to the definition's token cap; the whole text kept as an artifact."""
    cap = ctx.spec.report_max_tokens
    tokens = parent.counter.count_text(report)
    if tokens <= cap:
        return report
    artifact = f"subagent/{ctx.child_id}/report"
    parent.store.put_artifact(parent.session_id, artifact, report, {"child": ctx.child_id, "tokens": tokens})
    keep = max(1, len(report) * cap // tokens - 200)
    return (
        report[:keep]
        + f"\n[report cut to {cap:,} of {tokens:,} tokens; the whole report: retrieve artifact {artifact}]"
    )


def files_read(history: Sequence[Message]) -> list[str]:
    """Paths the sub-agent's read calls asked for, in first-read order."""
    out: list[str] = []
    for m in history:
        for c in m.tool_calls:
            path = _path(c)
            if c.name in READ_TOOLS and path and path not in out:
                out.append(path)
    return out


def _path(call: ToolCall) -> str:
    if not isinstance(call.input, dict):
        return ""
    for key in ("path", "file_path", "paths"):
        value = call.input.get(key)
        if isinstance(value, str):
            return value
        if isinstance(value, list) and value and isinstance(value[0], str):
            return str(value[0])
    return ""


def release_children(parent: Engine, registry: SubagentRegistry[SubagentContext] = SUBAGENTS) -> list[str]:
    """End the live sub-agents of ``parent`` (it is being disposed; reason ``released``)."""
    ended = []
    for ctx in registry.children(parent):
        if registry.take(ctx.child_id) is not None:
            ended_event = {"event": "subagent_end", "child": ctx.child_id, "reason": "released"}
            parent.store.append(parent.session_id, "event", ended_event)
            close_subagent(ctx, "released")
            ended.append(ctx.child_id)
    return ended
