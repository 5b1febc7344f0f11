"""Session notes (Claude Code's session memory): a markdown notes document kept up to date in the
background, used as the summary by session-memory compaction ($0 at compaction time).

Ten fixed sections (Session Title, Current State, Task specification, Files and Functions,
Workflow, Errors & Corrections, Codebase and System Documentation, Learnings, Key results,
Worklog), at most 2,000 tokens each and 12,000 in all. Cadence (Claude Code): the first update
once the conversation (system prompt and tools not counted) passes 10,000 tokens, then each time
5,000 more tokens *and* 3 tool calls have accrued. The updater sees only the notes and what is new
since the last update, and may only edit the notes.

Two updaters: ``DeterministicNotesUpdater`` ($0, no model: extraction as in ``summarize``) and
``LLMNotesUpdater`` (asks the configured model to rewrite the notes with the new messages; its
reply is parsed back into the ten sections and capped; a reply that loses the structure is
rejected and the notes stay as they were).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Protocol

import msgspec

from ctxengine.messages.model import Message, Text, ToolCall, ToolResult
from ctxengine.summary import structured as summarize
from ctxengine.summary.state import _cut as cut_text
from ctxengine.tokens.counter import fits

if TYPE_CHECKING:
    from ctxengine.llm import LLMClient

SECTIONS = (
    "Session Title",
    "Current State",
    "Task specification",
    "Files and Functions",
    "Workflow",
    "Errors & Corrections",
    "Codebase and System Documentation",
    "Learnings",
    "Key results",
    "Worklog",
)
SECTION_MAX_TOKENS = 2_000
NOTES_MAX_TOKENS = 12_000
FIRST_UPDATE_TOKENS = 10_000  # conversation tokens before the first update
UPDATE_EVERY_TOKENS = 5_000  # and then each time this many more tokens...
UPDATE_EVERY_TOOL_CALLS = 3  # ...and this many tool calls have accrued

SHELL_TOOLS = {"bash", "shell", "exec_command", "local_shell", "run_command"}
# a result line: a line of a tool result that says how a run ended
RESULT_WORDS_RE = re.compile(
    r"(?i)\b\d+ (passed|failed|errors?|tests?)\b|\bOK\b|\bsuccess(fully)?\b|\bexit code \d+"
)
# a learning: a sentence of the agent's text (up to and with its ".", or its line) naming a cause
LEARNING_WORDS_RE = re.compile(r"(?i)\b(root cause|the issue is|turns out|because|learned|note that)\b")
_SENTENCE_RE = re.compile(r"[^.\n]*[.\n]")
MAX_WORKLOG = 60
MAX_COMMANDS = 30
MAX_RESULTS = 20
MAX_LEARNINGS = 20
# the current plan closes Current State, cut to this (head and tail): its status, plan file, title
# and goal stay within the section's cap, which keeps the section's end; the restore after a
# compaction re-attaches the whole plan
NOTES_PLAN_CHARS = 1_000


class NotesState(msgspec.Struct):
    """The notes' facts; ``render`` turns them into the markdown document."""

    facts: summarize.SummaryState = msgspec.field(default_factory=summarize.SummaryState)
    commands: list[str] = msgspec.field(default_factory=list)
    results: list[str] = msgspec.field(default_factory=list)
    learnings: list[str] = msgspec.field(default_factory=list)
    worklog: list[str] = msgspec.field(default_factory=list)
    text: str = ""  # the rendered (or, with an LLM updater, written) notes
    updates: int = 0


class Cadence(msgspec.Struct):
    """When the notes are due for an update (Claude Code's session-memory thresholds)."""

    first_tokens: int = FIRST_UPDATE_TOKENS
    every_tokens: int = UPDATE_EVERY_TOKENS
    every_tool_calls: int = UPDATE_EVERY_TOOL_CALLS
    tokens_at_last: int = 0
    tool_calls_since: int = 0
    updated_once: bool = False

    def due(self, conversation_tokens: int) -> bool:
        """True when an update is due at ``conversation_tokens`` (tokens, system prompt and tools
        not counted)."""
        if not self.updated_once:
            return conversation_tokens >= self.first_tokens
        return (
            conversation_tokens - self.tokens_at_last >= self.every_tokens
            and self.tool_calls_since >= self.every_tool_calls
        )

    def mark(self, conversation_tokens: int) -> None:
        self.updated_once = True
        self.tokens_at_last = conversation_tokens
        self.tool_calls_since = 0


class NotesUpdate(msgspec.Struct, kw_only=True):
    """What one update cost: LLM calls and tokens (0 for the deterministic updater), USD."""

    llm_calls: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    cost_usd: float = 0.0


class NotesUpdater(Protocol):
    def update(self, state: NotesState, new: Sequence[Message]) -> tuple[NotesState, NotesUpdate]:
        """A new state with ``new`` folded in (``state`` itself is not modified)."""
        ...


def copy_state(state: NotesState) -> NotesState:
    return msgspec.msgpack.decode(msgspec.msgpack.encode(state), type=NotesState)


def _describe(call: ToolCall) -> str:
    if isinstance(call.input, str):
        arg = call.input
    else:
        arg = next((str(v) for v in call.input.values() if isinstance(v, str)), "")
    return f"{call.name}({arg.replace(chr(10), ' ')[:120]})"


def fold(state: NotesState, new: Sequence[Message], *, user_message_chars: int = 2_000) -> NotesState:
    """Fold ``new`` into ``state`` in place (deterministic extraction); returns ``state``."""
    summarize.update(state.facts, new, user_message_chars=user_message_chars)
    for msg in new:
        for b in msg.blocks:
            if isinstance(b, ToolCall):
                state.worklog.append(_describe(b))
                if b.name.lower() in SHELL_TOOLS and isinstance(b.input, dict):
                    cmd = b.input.get("command") or b.input.get("cmd")
                    if isinstance(cmd, list):
                        cmd = " ".join(str(c) for c in cmd)
                    if isinstance(cmd, str) and cmd.strip():
                        line = cmd.strip().splitlines()[0][:200]
                        if line in state.commands:
                            state.commands.remove(line)
                        state.commands.append(line)
            elif isinstance(b, ToolResult):
                text = "\n".join(p.text for p in b.content if isinstance(p, Text))
                state.results.extend(line.strip()[:200] for line in result_lines(text[-4_000:]))
            elif isinstance(b, Text) and msg.role == "assistant":
                state.learnings.extend(s.strip()[:300] for s in learnings(b.text))
    state.worklog = state.worklog[-MAX_WORKLOG:]
    state.commands = state.commands[-MAX_COMMANDS:]
    state.results = list(dict.fromkeys(state.results))[-MAX_RESULTS:]
    state.learnings = list(dict.fromkeys(state.learnings))[-MAX_LEARNINGS:]
    return state


def result_lines(text: str) -> list[str]:
    """The lines of ``text`` (split at ``\\n``) that hold ``RESULT_WORDS_RE``, in order."""
    return [line for line in text.split("\n") if RESULT_WORDS_RE.search(line)]


def learnings(text: str) -> list[str]:
    """The sentences of ``text`` (each run of characters up to and with a ``.`` or a line break;
    an unterminated last run is not one) that hold ``LEARNING_WORDS_RE``, in order. Each sentence
    is scanned once: the same sentences as the single pattern
    ``[^.\\n]*\\b(words)\\b[^.\\n]*[.\\n]``, which tried again at every character of a sentence
    without one."""
    end = max(text.rfind("."), text.rfind("\n")) + 1  # an unterminated tail is no sentence: left
    # out before the search, which would try it again from each of its characters (quadratic)
    return [m.group() for m in _SENTENCE_RE.finditer(text, 0, end) if LEARNING_WORDS_RE.search(m.group())]


def _bullets(items: Sequence[str]) -> str:
    return "\n".join(f"- {x}" for x in items)


def sections_of(state: NotesState) -> dict[str, str]:
    """The ten sections' bodies from the facts (deterministic rendering)."""
    f = state.facts
    ids = sorted(f.identifiers, key=lambda k: (-f.identifiers[k], k))
    title = (f.primary_request.strip().splitlines() or ["(untitled session)"])[0][:120]
    current = f.current_work
    if f.todos:
        current += "\n\nTodo list:\n" + f.todos
    plan = summarize.current_plan(f)
    if plan:  # the latest ExitPlanMode plan, tracked with the todos (summarize.update)
        plan = cut_text(plan, NOTES_PLAN_CHARS)
        current += "\n\nCurrent plan (latest plan from ExitPlanMode):\n" + plan
    files = ""
    if f.files_modified:
        files += "Modified:\n" + _bullets(f.files_modified[-40:]) + "\n"
    if f.files_read:
        files += "Read:\n" + _bullets(f.files_read[-40:])
    return {
        "Session Title": title,
        "Current State": current.strip(),
        "Task specification": "\n\n".join(f.user_messages),
        "Files and Functions": files.strip(),
        "Workflow": _bullets(state.commands),
        "Errors & Corrections": "\n".join(f.errors),
        "Codebase and System Documentation": "Exact identifiers (newest first): " + " ".join(ids)
        if ids
        else "",
        "Learnings": _bullets(state.learnings),
        "Key results": _bullets(state.results),
        "Worklog": _bullets(state.worklog),
    }


def render_sections(sections: dict[str, str], count: Callable[[str], int]) -> str:
    """The notes document: each section capped at ``SECTION_MAX_TOKENS``, the whole at
    ``NOTES_MAX_TOKENS`` (longest sections cut first). Cuts keep the section's newest end for
    lists (Worklog, Task specification keeps its start: the original request)."""
    bodies = {name: sections.get(name, "") for name in SECTIONS}
    for name, body in bodies.items():
        bodies[name] = _cap(name, body, SECTION_MAX_TOKENS, count)
    while True:
        doc = _join(bodies)
        total = count(doc)
        if total <= NOTES_MAX_TOKENS:
            return doc
        longest = max(bodies, key=lambda n: count(bodies[n]))
        size = count(bodies[longest])
        bodies[longest] = _cap(
            longest, bodies[longest], max(50, size - (total - NOTES_MAX_TOKENS) - 50), count
        )
        if count(bodies[longest]) >= size:  # could not shrink further
            return doc[: NOTES_MAX_TOKENS * 3]


def _join(bodies: dict[str, str]) -> str:
    return "\n\n".join(f"# {name}\n{bodies[name] or '_(nothing yet)_'}" for name in SECTIONS)


def _cap(name: str, body: str, max_tokens: int, count: Callable[[str], int]) -> str:
    if fits(count, body, max_tokens):
        return body
    keep_start = name in ("Task specification", "Session Title")
    chars = len(body)
    while chars > 0:
        chars = int(chars * 0.8)
        cut = body[:chars] + "\n[...]" if keep_start else "[...]\n" + body[-chars:]
        if fits(count, cut, max_tokens):
            return cut
    return ""


class DeterministicNotesUpdater:
    """Updates the notes without a model ($0)."""

    def __init__(self, count: Callable[[str], int]) -> None:
        self.count = count

    def update(self, state: NotesState, new: Sequence[Message]) -> tuple[NotesState, NotesUpdate]:
        """Fold ``new`` into the facts; the document is rendered when it is read (``render``),
        which for the deterministic notes is only at compaction time."""
        nxt = fold(copy_state(state), new)
        nxt.updates += 1
        return nxt, NotesUpdate()


def parse_sections(text: str) -> dict[str, str] | None:
    """The ten sections from a markdown notes document (``# Heading`` or ``## Heading``), or None
    when fewer than eight of the ten headings are present (the structure was lost)."""
    found: dict[str, str] = {}
    pattern = re.compile(r"(?m)^#{1,3}\s*(.+?)\s*$")
    wanted = {s.lower(): s for s in SECTIONS}
    # only the ten section headings split the document; any other heading is section content
    marks = [
        (m.start(), m.end(), wanted[m.group(1).strip().lower()])
        for m in pattern.finditer(text)
        if m.group(1).strip().lower() in wanted
    ]
    for i, (_start, end, name) in enumerate(marks):
        stop = marks[i + 1][0] if i + 1 < len(marks) else len(text)
        found[name] = text[end:stop].strip()
    return found if len(found) >= 8 else None


def serialize(messages: Sequence[Message], max_result_chars: int = 2_000) -> str:
    """Messages as labelled text for a model that must not continue them (pi's format)."""
    lines = []
    for m in messages:
        for b in m.blocks:
            if isinstance(b, Text):
                lines.append(f"[{'User' if m.role == 'user' else 'Assistant'}]: {b.text}")
            elif isinstance(b, ToolCall):
                arg = b.input if isinstance(b.input, str) else json.dumps(b.input, ensure_ascii=False)
                lines.append(f"[Assistant tool call]: {b.name}({arg[:max_result_chars]})")
            elif isinstance(b, ToolResult):
                text = "\n".join(p.text for p in b.content if isinstance(p, Text))
                if len(text) > max_result_chars:
                    text = (
                        text[:max_result_chars]
                        + f"\n[... {len(text) - max_result_chars} more characters truncated]"
                    )
                lines.append(f"[Tool result{' (error)' if b.is_error else ''}]: {text}")
    return "\n".join(lines)


NOTES_SYSTEM = (
    "You maintain the session notes of a coding agent. You may only edit the notes: do not answer, "
    "do not continue the conversation, do not call tools. Reply with the complete updated notes "
    "document and nothing else."
)
NOTES_PROMPT = """Update the session notes below with what happened in the new part of the conversation.

Rules:
- Keep exactly these ten top-level headings, in this order: {headings}.
- Keep what is still true, add what is new, correct what changed; the Worklog gets one terse line per step.
- Copy exact identifiers verbatim: file paths, URLs, ids, hashes, hostnames, ports, error messages.
- At most about {section_cap} tokens per section and {total_cap} tokens in all.

<current-notes>
{notes}
</current-notes>

<new-conversation>
{conversation}
</new-conversation>"""


class LLMNotesUpdater:
    """Updates the notes with the configured model; on a reply without the ten sections (or an
    LLM error) the update is rejected and the caller keeps the previous notes."""

    def __init__(
        self, client: LLMClient, count: Callable[[str], int], max_tokens: int = 4_096, window: int = 200_000
    ) -> None:
        self.client = client
        self.count = count
        self.max_tokens = max_tokens
        self.window = window  # the notes model's context window (tokens): the request stays within it

    def _bounded(self, conversation: str, room: int) -> str:
        """``conversation`` within ``room`` tokens: when it is larger (a pre-compaction flush over
        a long span), its middle is left out behind a marker, 30% head and 70% tail kept (the
        newest part matters most to the notes); the summary compaction still reads it all."""
        size = self.count(conversation)
        if size <= room:
            return conversation
        keep = int(len(conversation) * room / size * 0.9)
        head = int(keep * 0.3)
        tail = keep - head
        left_out = len(conversation) - keep
        marker = f"\n[... {left_out:,} chars left out to fit the notes model's window ...]\n"
        return conversation[:head] + marker + conversation[len(conversation) - tail :]

    def update(self, state: NotesState, new: Sequence[Message]) -> tuple[NotesState, NotesUpdate]:
        from ctxengine.llm import LLMRequest

        nxt = fold(copy_state(state), new)  # the facts stay current for the deterministic fallback
        current = state.text or render_sections(sections_of(state), self.count)
        prompt = NOTES_PROMPT.format(
            headings=", ".join(SECTIONS),
            section_cap=SECTION_MAX_TOKENS,
            total_cap=NOTES_MAX_TOKENS,
            notes=current,
            conversation="{conversation}",
        )
        room = int((self.window - self.max_tokens) / 1.2) - self.count(prompt) - self.count(NOTES_SYSTEM)
        prompt = prompt.replace("{conversation}", self._bounded(serialize(new), max(1_000, room)))
        request = LLMRequest(
            system=NOTES_SYSTEM,
            messages=[Message(role="user", blocks=(Text(prompt),), id="notes-update")],
            max_tokens=self.max_tokens,
            purpose="notes",
        )
        response = self.client.complete(request)
        cost = NotesUpdate(
            llm_calls=1,
            input_tokens=response.usage.total_input,
            output_tokens=response.usage.output_tokens,
            cost_usd=response.cost_usd,
        )
        sections = parse_sections(response.text)
        if sections is None:
            raise NotesError("the notes update lost the ten-section structure", cost)
        nxt.text = render_sections(sections, self.count)
        nxt.updates += 1
        return nxt, cost


class NotesError(Exception):
    """A notes update was rejected; ``cost`` is what the failed attempt spent."""

    def __init__(self, message: str, cost: NotesUpdate) -> None:
        super().__init__(message)
        self.cost = cost
