"""What our read and grep limits would have kept out of a recorded session's context.

For every recorded tool result that read a file or searched (by tool name, or a shell command
whose first word is ``cat``/``head``/``tail``/``sed`` or ``grep``/``rg``/``ag``), apply the limits
of ``ctxengine.tools.read`` / ``ctxengine.tools.grep`` to the recorded output:
- read: 2,000 lines, lines cut at 2,000 chars, then refused above 25,000 tokens (the model gets
  the refusal, which asks it to page: everything is kept out);
- grep: a page of 100 output lines, lines cut at 500 chars.
The difference in tokens is what the limits would have kept out. A measurement only: the replay
reports it per session; nothing is changed.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import msgspec

from ctxengine.messages import Message, Text, ToolCall, ToolResult
from ctxengine.tools.grep import GREP_MAX_LINE_CHARS, GREP_PAGE_MATCHES
from ctxengine.tools.read import READ_DEFAULT_LINES, READ_MAX_LINE_CHARS, READ_MAX_TOKENS

READ_TOOLS = frozenset({"read", "read_file", "view_file", "open_file", "view"})
GREP_TOOLS = frozenset({"grep", "rg", "ripgrep", "grep_search", "search_files", "search"})
SHELL_TOOLS = frozenset({"bash", "shell", "exec_command", "local_shell", "run_command"})
READ_COMMANDS = frozenset({"cat", "head", "tail", "sed", "nl", "less"})
GREP_COMMANDS = frozenset({"grep", "rg", "ag", "ack", "egrep", "fgrep"})
REFUSAL_TOKENS = 60  # what the model sees instead of an over-cap read


class LimitFigures(msgspec.Struct):
    """Per tool kind: results seen, results over a limit, tokens those limits keep out."""

    results: int = 0
    over_limit: int = 0
    tokens_kept_out: int = 0


class ToolLimitReport(msgspec.Struct):
    read: LimitFigures = msgspec.field(default_factory=LimitFigures)
    grep: LimitFigures = msgspec.field(default_factory=LimitFigures)


def _kind(call: ToolCall) -> str | None:
    name = call.name.lower()
    if name in READ_TOOLS:
        return "read"
    if name in GREP_TOOLS:
        return "grep"
    if name in SHELL_TOOLS and isinstance(call.input, dict):
        cmd = call.input.get("command") or call.input.get("cmd")
        if isinstance(cmd, list):
            cmd = " ".join(str(c) for c in cmd)
        if isinstance(cmd, str) and cmd.strip():
            words = cmd.strip().split()
            first = words[0].rsplit("/", 1)[-1]
            if first in ("bash", "sh", "zsh") and len(words) > 2 and words[1] in ("-lc", "-c"):
                first = words[2].strip("'\"").rsplit("/", 1)[-1]
            if first in READ_COMMANDS:
                return "read"
            if first in GREP_COMMANDS:
                return "grep"
    return None


def limited_read(text: str, count: Callable[[str], int]) -> str:
    """The recorded read output as our read tool would have shown it."""
    lines = text.split("\n")
    kept = [
        ln if len(ln) <= READ_MAX_LINE_CHARS else ln[:READ_MAX_LINE_CHARS]
        for ln in lines[:READ_DEFAULT_LINES]
    ]
    out = "\n".join(kept)
    if count(out) > READ_MAX_TOKENS:
        return ""  # refused: the model is told to page instead
    return out


def limited_grep(text: str) -> str:
    """The recorded search output as our grep tool would have paged it."""
    lines = text.split("\n")[:GREP_PAGE_MATCHES]
    return "\n".join(ln if len(ln) <= GREP_MAX_LINE_CHARS else ln[:GREP_MAX_LINE_CHARS] for ln in lines)


def tool_limit_report(messages: Sequence[Message], count: Callable[[str], int]) -> ToolLimitReport:
    """Apply the read and grep limits to every matching recorded tool result."""
    report = ToolLimitReport()
    kinds: dict[str, str] = {}
    for m in messages:
        for b in m.blocks:
            if isinstance(b, ToolCall):
                k = _kind(b)
                if k is not None:
                    kinds[b.id] = k
            elif isinstance(b, ToolResult) and b.call_id in kinds:
                text = "\n".join(p.text for p in b.content if isinstance(p, Text))
                fig = report.read if kinds[b.call_id] == "read" else report.grep
                fig.results += 1
                limited = limited_read(text, count) if kinds[b.call_id] == "read" else limited_grep(text)
                if limited != text:
                    full = count(text)
                    shown = count(limited) if limited else REFUSAL_TOKENS
                    if full > shown:
                        fig.over_limit += 1
                        fig.tokens_kept_out += full - shown
    return report
