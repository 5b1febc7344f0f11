"""Replay: tie each recorded sub-agent run to the parent's tool call that spawned it, and measure
what the delegation kept out of the parent's context.

Claude Code writes a sub-agent's turns either to a file of its own
(``<session>/subagents/agent-<id>.jsonl``: every record ``isSidechain: true``, the parent's
``sessionId`` and the sub-agent's ``agentId``) or, in older versions, into the parent's file
between the ``Task`` call and its result. The readers make each one a ``Session`` of its own
(``sidechain=True``); ``formats.link_sidechains`` sets its ``parent``. This module finds the
spawning call in the parent, in this order:

1. **agent id**: the call's result names it (``agentId: <id>`` in the text of an ``Agent`` /
   ``Task`` result, sync or ``async_launched``), or a ``<task-notification>`` message carries both
   ``<task-id>`` and ``<tool-use-id>``;
2. **delegation prompt**: the call's ``prompt`` input equals the sub-agent's first user message;
3. **time**: the sub-agent's first message falls between the call and its result (or, for a
   background run, its completion notification); the latest such call that is still unlinked.

The report that came back to the parent is the call's tool result plus, for a background run,
the ``<task-notification>`` user message(s) naming the call. Only these reached the parent's
context; everything the sub-agent read stayed in its own.

Figures (``SubagentSummary``, per parent session, in ``summary.subagents`` of the replay):
``spawned`` runs linked to a call; ``subagent_tokens`` the input tokens of their model calls from
the recorded usage (input + cache reads + cache writes, summed over calls); ``report_tokens`` the
report's tokens by the replay's counter; ``tokens_kept_out`` = ``subagent_tokens -
report_tokens``; ``subagent_peak_tokens`` the sum of each run's largest call (what the parent's
context would have grown by, had it done the work inline); ``task_calls`` every ``Task`` /
``Agent`` call of the parent, linked or not; ``unlinked`` sidechain sessions of this parent tied
to no call. The figures describe the recording, so they are the same under every policy.

The links are computed once after loading (``link_runs``, called by ``formats.link_sidechains``)
and kept in the parent's ``meta["subagent_runs"]`` (plain data, so sessions stay picklable);
``subagent_summary`` turns them into the figures with the replay's token counter.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence

import msgspec

from ctxengine.messages.model import Message, Session, Text, ToolCall, ToolResult

TASK_TOOLS = frozenset({"Task", "Agent", "task"})  # Claude Code (old / new name), ctxengine's example
RUNS_KEY = "subagent_runs"
UNLINKED_KEY = "subagent_unlinked"
_AGENT_ID = re.compile(r"agentId:\s*([A-Za-z0-9_-]+)")
_TASK_ID = re.compile(r"<task-id>\s*([^<\s]+)\s*</task-id>")
_CALL_ID = re.compile(r"<tool-use-id>\s*([^<\s]+)\s*</tool-use-id>")


class SubagentRun(msgspec.Struct, kw_only=True):
    """One sub-agent run tied to its spawning call. Tokens from the recorded usage."""

    session: str  # the sidechain session: "<source>#<name>"
    agent_id: str | None
    call_id: str
    tool: str
    description: str
    linked_by: str  # "agent_id", "prompt" or "time"
    calls: int  # model calls of the sub-agent
    input_tokens: int  # summed over its calls
    peak_input_tokens: int  # its largest call
    report_messages: list[int]  # parent message indices holding the report (result, notifications)
    report_tokens: int = 0  # set by ``subagent_summary``


class SubagentSummary(msgspec.Struct, kw_only=True):
    """A parent session's sub-agent figures (see the module notes). Tokens."""

    spawned: int = 0
    task_calls: int = 0
    subagent_calls: int = 0
    subagent_tokens: int = 0
    subagent_peak_tokens: int = 0
    report_tokens: int = 0
    tokens_kept_out: int = 0
    unlinked: int = 0
    runs: list[SubagentRun] = msgspec.field(default_factory=list)


class _Call(msgspec.Struct):
    index: int
    call: ToolCall
    start: float | None
    end: float | None  # when the report was back (result, or the last notification)
    reports: list[int]


def link_runs(sessions: Sequence[Session]) -> None:
    """Tie every sidechain session with a ``parent`` among ``sessions`` to its spawning call, and
    keep the links in the parent's ``meta["subagent_runs"]`` (and the sidechains tied to no call
    in ``meta["subagent_unlinked"]``). Idempotent; changes nothing else."""
    children: dict[str, list[Session]] = {}
    for s in sessions:
        if s.sidechain and s.parent:
            children.setdefault(s.parent, []).append(s)
    for parent in sessions:
        kids = children.get(parent.source, [])
        if parent.sidechain or not kids:
            continue
        runs, unlinked = _link(parent, kids)
        parent.meta[RUNS_KEY] = [msgspec.to_builtins(r) for r in runs]
        parent.meta[UNLINKED_KEY] = unlinked


def _link(parent: Session, kids: list[Session]) -> tuple[list[SubagentRun], list[str]]:
    calls = _task_calls(parent.messages)
    by_agent = _agent_ids(parent.messages, calls)
    free = dict(calls)
    runs: list[SubagentRun] = []
    unlinked: list[str] = []
    for kid in sorted(kids, key=lambda k: _first_time(k) or 0.0):
        agent = kid.meta.get("agent_id")
        found: tuple[str, str] | None = None
        if isinstance(agent, str) and by_agent.get(agent) in free:
            found = (by_agent[agent], "agent_id")
        else:
            found = _by_prompt(kid, free) or _by_time(kid, free)
        if found is None:
            unlinked.append(_key(kid))
            continue
        c = free.pop(found[0])
        inputs = [m.usage.total_input for m in kid.messages if _is_call(m) and m.usage is not None]
        runs.append(
            SubagentRun(
                session=_key(kid),
                agent_id=agent if isinstance(agent, str) else None,
                call_id=c.call.id,
                tool=c.call.name,
                description=str(_input(c.call).get("description", ""))[:200],
                linked_by=found[1],
                calls=sum(1 for m in kid.messages if _is_call(m)),
                input_tokens=sum(inputs),
                peak_input_tokens=max(inputs, default=0),
                report_messages=c.reports,
            )
        )
    return runs, unlinked


def _task_calls(messages: Sequence[Message]) -> dict[str, _Call]:
    """The parent's Task/Agent calls by id, with where and when their report came back."""
    calls: dict[str, _Call] = {}
    for i, m in enumerate(messages):
        for c in m.tool_calls:
            if c.name in TASK_TOOLS:
                calls[c.id] = _Call(i, c, m.timestamp, None, [])
        for r in m.tool_results:
            if r.call_id in calls:
                calls[r.call_id].reports.append(i)
                calls[r.call_id].end = m.timestamp
        if m.role == "user" and "<task-notification>" in (text := m.text()):
            for cid in _CALL_ID.findall(text):
                if cid in calls:
                    calls[cid].reports.append(i)
                    calls[cid].end = m.timestamp
    return calls


def _agent_ids(messages: Sequence[Message], calls: dict[str, _Call]) -> dict[str, str]:
    """Agent id -> spawning call id, from the calls' results and the completion notifications."""
    out: dict[str, str] = {}
    for cid, c in calls.items():
        for i in c.reports:
            text = _report_text(messages[i], cid)
            ids = _TASK_ID.findall(text) if "<task-notification>" in text else _AGENT_ID.findall(text)
            for agent in ids:
                out.setdefault(agent, cid)
    return out


def _by_prompt(kid: Session, free: dict[str, _Call]) -> tuple[str, str] | None:
    first = next((m.text().strip() for m in kid.messages if m.role == "user" and m.text().strip()), "")
    if not first:
        return None
    for cid, c in free.items():
        if str(_input(c.call).get("prompt", "")).strip() == first:
            return cid, "prompt"
    return None


def _by_time(kid: Session, free: dict[str, _Call]) -> tuple[str, str] | None:
    t = _first_time(kid)
    if t is None:
        return None
    inside = [
        (c.start, cid)
        for cid, c in free.items()
        if c.start is not None and c.start <= t and (c.end is None or t <= c.end)
    ]
    return (max(inside)[1], "time") if inside else None


def subagent_summary(session: Session, count_text: Callable[[str], int]) -> SubagentSummary | None:
    """The sub-agent figures of ``session`` (a parent), with report tokens by ``count_text``.
    None when the session has neither a Task/Agent call nor a linked sidechain."""
    task_calls = sum(1 for m in session.messages for c in m.tool_calls if c.name in TASK_TOOLS)
    raw = session.meta.get(RUNS_KEY) or []
    unlinked = session.meta.get(UNLINKED_KEY) or []
    if not task_calls and not raw and not unlinked:
        return None
    runs = [msgspec.convert(r, SubagentRun) for r in raw]
    for run in runs:
        text = "\n".join(_report_text(session.messages[i], run.call_id) for i in run.report_messages)
        run.report_tokens = count_text(text) if text else 0
    spent = sum(r.input_tokens for r in runs)
    back = sum(r.report_tokens for r in runs)
    return SubagentSummary(
        spawned=len(runs),
        task_calls=task_calls,
        subagent_calls=sum(r.calls for r in runs),
        subagent_tokens=spent,
        subagent_peak_tokens=sum(r.peak_input_tokens for r in runs),
        report_tokens=back,
        tokens_kept_out=max(0, spent - back),
        unlinked=len(unlinked),
        runs=runs,
    )


def _report_text(msg: Message, call_id: str) -> str:
    """What of ``msg`` is the report of ``call_id``: that tool result's text, or the whole
    message when it is a completion notification."""
    parts: list[str] = []
    for b in msg.blocks:
        if isinstance(b, ToolResult) and b.call_id == call_id:
            parts.extend(p.text for p in b.content if isinstance(p, Text))
    return "\n".join(parts) if parts else msg.text()


def _input(call: ToolCall) -> dict[str, object]:
    return call.input if isinstance(call.input, dict) else {}


def _is_call(msg: Message) -> bool:
    return msg.role == "assistant" and not msg.meta.get("synthetic")


def _first_time(s: Session) -> float | None:
    return next((m.timestamp for m in s.messages if m.timestamp is not None), None)


def _key(s: Session) -> str:
    return f"{s.source}#{s.name}"
