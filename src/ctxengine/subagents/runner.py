"""A sub-agent's turn loop: what an agent's ``task`` tool runs (``examples/_agent_loop.py``).

The host gives two functions: ``complete(projection, context) -> Message`` (one model call with
``context.model``; the tool definitions of ``context.tools``, or for a fork the parent's, which
are part of the cached prefix) and ``execute(call) -> ToolResult`` (the host's tools). The loop
runs the sub-agent's own engine like the main loop runs the parent's, at most
``context.max_turns`` calls; a call to a tool outside the definition's allowlist is answered
with an error result and never run. The last text the sub-agent wrote is its report; a run that
hits the turn limit says so in the report.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from ctxengine.messages.model import Message, Text, ToolCall, ToolResult
from ctxengine.subagents.host import ProjectionView
from ctxengine.subagents.spawn import SubagentContext, SubagentResult
from ctxengine.subagents.spec import AgentSpec
from ctxengine.tools.base import ToolError, ToolSpec

Complete = Callable[[ProjectionView, SubagentContext], Message]
Execute = Callable[[ToolCall], ToolResult]
TURN_LIMIT_NOTE = "[the sub-agent stopped at its limit of {n} model calls; this report may be incomplete]"


def refused(call: ToolCall, ctx: SubagentContext) -> ToolResult:
    """The error result for a call outside the allowlist (the tool is not run)."""
    allowed = ", ".join(ctx.tools) or "none"
    text = f"Error: tool {call.name!r} is not available to the {ctx.spec.name} agent (allowed: {allowed})"
    return ToolResult(call.id, (Text(text),), True, call.name)


def run_subagent(
    ctx: SubagentContext, complete: Complete, execute: Execute, *, clock: Callable[[], float] = time.time
) -> SubagentResult:
    """Drive the sub-agent until it answers without a tool call or reaches ``ctx.max_turns``.

    A call to a tool outside the definition's allowlist is answered with an error result and
    never run. Exceptions of ``complete`` and ``execute`` propagate (the host ends the sub-agent,
    e.g. with reason ``deleted``).

    Args:
        ctx: the prepared sub-agent (``ContextEngine.prepare_subagent_spawn``).
        complete: one model call, ``complete(projection, ctx) -> Message``.
        execute: the host's tools, ``execute(call) -> ToolResult``.
        clock: the current time, epoch seconds (the engine's ``now``).

    Returns:
        Its result for ``ContextEngine.on_subagent_ended``: the last text it wrote as the report
        (a note when it hit the turn limit or wrote none).
    """
    engine = ctx.engine
    report = ""
    finished = False
    for turn in range(1, ctx.max_turns + 1):
        proj = engine.assemble(now=clock())
        reply = complete(proj, ctx)
        engine.ingest(reply)
        engine.after_turn(reply.usage)
        if reply.text().strip():
            report = reply.text().strip()
        if not reply.tool_calls:
            finished = True
            break
        results = tuple(execute(c) if c.name in ctx.tools else refused(c, ctx) for c in reply.tool_calls)
        engine.ingest(Message("user", results, f"{ctx.child_id}:results-{turn}", timestamp=clock()))
    if not finished:
        report = (report + "\n\n" if report else "") + TURN_LIMIT_NOTE.format(n=ctx.max_turns)
    return SubagentResult(child_id=ctx.child_id, report=report or "[the sub-agent wrote no report]")


TASK_DESCRIPTION = (
    "Delegate a search to the {name} sub-agent: it works in a context of its own with the tools "
    "{tools}, and only its report (and the list of files it read) comes back to you. Use it for "
    "broad searches across many files, so their output does not fill your context. Give it a "
    "self-contained prompt: it does not see this conversation."
)


def task_tool(spec: AgentSpec) -> ToolSpec:
    """The ``task`` tool definition for an agent that may spawn ``spec``.

    Its calls are handled by the agent loop (``prepare_subagent_spawn`` -> ``run_subagent`` ->
    ``on_subagent_ended``), not by a tool executor: running its function raises ``ToolError``.

    Args:
        spec: the sub-agent definition the tool spawns.

    Returns:
        The ``ToolSpec`` (parameters ``prompt``, required, and ``description``).
    """

    def not_here(**arguments: Any) -> str:
        raise ToolError("the task tool is handled by the agent loop (it spawns a sub-agent)")

    parameters = {
        "type": "object",
        "properties": {
            "prompt": {"type": "string", "description": "the task, complete in itself"},
            "description": {"type": "string", "description": "a few words naming the task"},
        },
        "required": ["prompt"],
    }
    text = TASK_DESCRIPTION.format(name=spec.name, tools=", ".join(spec.tools) or "none")
    return ToolSpec("task", text, parameters, not_here)
