"""What our read and grep limits would have kept out of a recorded session's context.

For every recorded tool result that read a file or searched, apply the limits of
``ctxengine.tools.read`` / ``ctxengine.tools.grep`` (``ctxengine.tools.budgets``) to the recorded output:
- read: the 256 KB size gate first (a whole-file read, i.e. no offset/limit, of a file over
  262,144 bytes is refused before reading), then 2,000 lines, lines cut at 2,000 chars, then
  refused above 25,000 tokens. A refused read keeps everything out but the refusal (which asks
  the model to page), counted as ``REFUSAL_TOKENS``;
- grep: a page of 100 output lines, lines cut at 500 chars.
The difference in tokens is what the limits would have kept out. A measurement only: the replay
reports it per session; nothing is changed.

Which calls count (``classify``):
- tools by name (``READ_TOOLS``, ``GREP_TOOLS``); a read tool's call is a whole-file read unless
  its input gives an offset, a limit or a line range (``PAGE_KEYS``);
- shell tools (``SHELL_TOOLS``): the command is parsed by ``bashlex`` into its commands (split on
  ``&&``, ``||``, ``;``, ``&`` and newlines, compound commands entered), each a pipeline split on
  ``|`` (``shell_parse.parsed_first_commands``); when bashlex refuses a script (``[[ ]]``,
  ``$(( ))``, ``time``, an unbalanced quote) the hand-written splitter reads it instead
  (``split_commands``: quote-aware, never raising) and ``shell_parse.FALLBACKS`` counts it. The
  call counts as a read or a grep when the *first* command of one of those pipelines is a read
  (``cat``, ``head``, ``tail``, ``sed``, ``nl``, ``less``) or a search (``grep``, ``rg``, ``ag``,
  ``ack``, ``egrep``, ``fgrep``), after leading ``VAR=value`` assignments and prefixes such as
  ``do``, ``then``, ``!``, ``time``, ``env``, ``sudo``, ``timeout N``; ``bash -c SCRIPT`` (and
  ``sh``/``zsh``, ``-lc``…) is classified by SCRIPT. So ``cd X && cat f``, ``cd X; rg p`` and
  ``for f in *; do head -1 "$f"; done`` count. The first such command decides the kind, and the
  whole recorded output is measured against its limits (the ``cd`` before it prints nothing; any
  other output is small next to what a limit cuts).

  Pipelines are classified by their first command, the one that reads or searches: ``grep x |
  head -5`` is a grep and ``cat f | tail -30`` a read, while ``ps aux | grep x`` and ``python
  run.py | head`` are neither (our tools could not have produced their output). The limits are
  applied to the recorded output, which is what is left after the pipeline's own cut: such a call
  counts in ``results`` but keeps nothing out unless the pipeline left more than the limits allow
  (``grep x | head -500`` can). A shell read is a whole-file read (the size gate applies) only for
  ``cat``/``nl``/``less`` with nothing after them in the pipeline; ``head``, ``tail`` and ``sed``
  read a part, like offset/limit.

  Not counted: a read or search whose standard output goes to a file (``cat > f``, ``grep x f >
  out``), whose input is a here-document or here-string (``cat <<EOF``, ``grep x <<< "$s"``), and
  ``sed -i`` (an edit). Command substitutions (``$(...)``, backquotes) stay inside their word:
  ``n=$(grep -c x f)`` is not a grep whose output the model saw.

The size gate needs the file's size, which a recording does not give: it is estimated from the
recorded output, without the ``cat -n`` line numbers when the output is numbered (Claude Code's
Read). Claude Code applies the same 256 KB gate itself, so its recorded Read results never pass it.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from typing import NamedTuple

import msgspec

from ctxengine.messages.model import Message, Text, ToolCall, ToolResult
from ctxengine.tools.budgets import (
    GREP_MAX_LINE_CHARS,
    GREP_PAGE_MATCHES,
    READ_DEFAULT_LINES,
    READ_MAX_BYTES,
    READ_MAX_LINE_CHARS,
    READ_MAX_TOKENS,
)
from ctxengine.tools.shell.commands import (
    GREP_COMMANDS,
    WHOLE_FILE_COMMANDS,
    is_read,
    shell_command,
)
from ctxengine.tools.shell.commands import shell_read_paths as shell_read_paths  # moved to ctxengine.shell
from ctxengine.tools.shell.commands import split_commands as split_commands  # moved to ctxengine.shell
from ctxengine.tools.shell.parse import fallback_count, parsed_first_commands

READ_TOOLS = frozenset({"read", "read_file", "view_file", "open_file", "view"})
GREP_TOOLS = frozenset({"grep", "rg", "ripgrep", "grep_search", "search_files", "search"})
# a read tool's input keys that page it: with one of them set, the size gate does not apply
PAGE_KEYS = ("offset", "limit", "view_range", "start_line", "end_line", "line_start", "line_end")
REFUSAL_TOKENS = 60  # what the model sees instead of an over-cap (or over-size) read

_NUMBERED_LINE = re.compile(r"^ *\d+(?:\t|→)", re.M)  # cat -n / Claude Code's Read prefix


class LimitFigures(msgspec.Struct):
    """Per tool kind: results seen, results over a limit, tokens those limits keep out."""

    results: int = 0
    over_limit: int = 0
    tokens_kept_out: int = 0


class ToolLimitReport(msgspec.Struct):
    """The read and grep figures of one session; ``shell_fallbacks``: its shell commands that
    bashlex refused and the hand-written splitter classified instead (``shell_parse.FALLBACKS``)."""

    read: LimitFigures = msgspec.field(default_factory=LimitFigures)
    grep: LimitFigures = msgspec.field(default_factory=LimitFigures)
    shell_fallbacks: int = 0


class ToolUse(NamedTuple):
    """How a recorded call is measured: ``kind`` is ``"read"`` or ``"grep"``; ``whole_file``: a
    read of a whole file (no offset/limit), to which the 256 KB size gate applies."""

    kind: str
    whole_file: bool = False


def _shell_use(script: str) -> ToolUse | None:
    """The kind of the first read or search among the pipelines' first commands, as bashlex
    parses them (``parsed_first_commands``; the hand-written splitter when it cannot)."""
    for cmd in parsed_first_commands(script):
        if is_read(cmd):
            return ToolUse("read", whole_file=cmd.name in WHOLE_FILE_COMMANDS and cmd.alone)
        if cmd.name in GREP_COMMANDS:
            return ToolUse("grep")
    return None


# ------------------------------------------------------------------ classifying and measuring


def classify(call: ToolCall) -> ToolUse | None:
    """How ``call`` is measured (see the module docstring), or None: not a read or a search."""
    name = call.name.lower()
    if name in READ_TOOLS:
        paged = isinstance(call.input, dict) and any(call.input.get(k) is not None for k in PAGE_KEYS)
        return ToolUse("read", whole_file=not paged)
    if name in GREP_TOOLS:
        return ToolUse("grep")
    cmd = shell_command(call)
    return _shell_use(cmd) if cmd is not None else None


def _kind(call: ToolCall) -> str | None:
    use = classify(call)
    return None if use is None else use.kind


def file_bytes(text: str) -> int:
    """The size in bytes of the file a recorded read output shows: the UTF-8 bytes of ``text``,
    without the ``cat -n`` line numbers when its first line is numbered."""
    if _NUMBERED_LINE.match(text):
        text = _NUMBERED_LINE.sub("", text)
    return len(text.encode("utf-8"))


def limited_read(text: str, count: Callable[[str], int], whole_file: bool = False) -> str:
    """The recorded read output as our read tool would have shown it (``""``: refused, by the
    size gate when ``whole_file`` and the file is over 262,144 bytes, or by the token cap)."""
    if whole_file and file_bytes(text) > READ_MAX_BYTES:
        return ""  # refused before reading: the model is told to page or grep
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
    uses: dict[str, ToolUse] = {}
    fallbacks = fallback_count()
    for m in messages:
        for b in m.blocks:
            if isinstance(b, ToolCall):
                use = classify(b)
                if use is not None:
                    uses[b.id] = use
            elif isinstance(b, ToolResult) and b.call_id in uses:
                use = uses[b.call_id]
                text = "\n".join(p.text for p in b.content if isinstance(p, Text))
                fig = report.read if use.kind == "read" else report.grep
                fig.results += 1
                limited = (
                    limited_read(text, count, use.whole_file) if use.kind == "read" else limited_grep(text)
                )
                if limited != text:
                    full = count(text)
                    shown = count(limited) if limited else REFUSAL_TOKENS
                    if full > shown:
                        fig.over_limit += 1
                        fig.tokens_kept_out += full - shown
    report.shell_fallbacks = fallback_count() - fallbacks
    return report
