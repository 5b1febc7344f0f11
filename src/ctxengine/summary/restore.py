"""Restoring the working set after a compaction (Claude Code's post-compaction attachments).

After the summary, re-attach:
- up to ``restore_max_files`` (5) recently read files, newest first, re-read from disk at that
  moment (at most 5,000 tokens each, 50,000 in all), skipping files already read in the kept tail
  and files gone from disk; in replay (``from_transcript``), where the file is not on this machine,
  the latest content the session read of it;
- the instruction files (CLAUDE.md / AGENTS.md / a configured list) through the bootstrap loader
  (20,000 chars per file, 60,000 in all, 75% head / 25% tail when cut);
- the current plan (the latest ExitPlanMode plan, with its status) and todo list;
- (ours, ``recent_changes``) the last change of each recently modified file, as its new text
  (an edit's replacement, a write's content, a patch's added lines): the lines the agent is about
  to change again, which a file list cannot give back; and the latest error with the call that
  produced it (``latest_error``).
Pure apart from reading the files: it returns messages; the engine places them after the summary.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TypeVar

from ctxengine.layers.base import result_text
from ctxengine.messages.identifiers import normalize_path
from ctxengine.messages.model import Message, Text, ToolCall, ToolResult
from ctxengine.messages.prefix_scan import PrefixScan
from ctxengine.messages.tool_failures import failed
from ctxengine.summary.state import READ_TOOLS, _tool_paths
from ctxengine.tokens.counter import fits

RESTORE_MAX_FILES = 5
RESTORE_FILE_TOKENS = 5_000
RESTORE_TOTAL_TOKENS = 50_000

S = TypeVar("S")


class _Reads:
    """The reads fold (``_read_step``): each read call's paths by call id, and the (normalised
    path, result text) of every read with a result, oldest first."""

    __slots__ = ("calls", "out", "shell")

    def __init__(self, shell: bool) -> None:
        self.shell = shell
        self.calls: dict[str, list[str]] = {}
        self.out: list[tuple[str, str]] = []


def _read_step(state: _Reads, m: Message) -> None:
    from ctxengine.tools.shell.commands import shell_read_paths

    calls = state.calls
    for b in m.blocks:
        if isinstance(b, ToolCall):
            if b.name.lower() in READ_TOOLS:
                calls[b.id] = _tool_paths(b)
            elif state.shell and len(paths := shell_read_paths(b)) == 1:
                calls[b.id] = [normalize_path(paths[0])]
        elif isinstance(b, ToolResult) and b.call_id in calls and not b.is_error:
            text = "\n".join(p.text for p in b.content if isinstance(p, Text))
            for path in calls[b.call_id]:
                state.out.append((path, text))


class _Changes:
    """The changes fold (``_change_step``): each changed file's last change, (call id, tool, new
    text), in the order of their last changes."""

    __slots__ = ("last",)

    def __init__(self) -> None:
        self.last: dict[str, tuple[str, str, str]] = {}


def _change_step(state: _Changes, m: Message) -> None:
    from ctxengine.messages.file_writes import file_changes

    last = state.last
    for b in m.blocks:
        if isinstance(b, ToolCall):
            for ch in file_changes(b):
                last.pop(ch.path, None)
                last[ch.path] = (b.id, b.name, ch.text)


class _Errors:
    """The failures fold (``_error_step``): the calls by id, and the latest failed tool result
    with its call and text."""

    __slots__ = ("calls", "found")

    def __init__(self) -> None:
        self.calls: dict[str, ToolCall] = {}
        self.found: tuple[ToolCall | None, ToolResult, str] | None = None


def _error_step(state: _Errors, m: Message) -> None:
    for b in m.blocks:
        if isinstance(b, ToolCall):
            state.calls[b.id] = b
        elif isinstance(b, ToolResult):
            text = result_text(b)
            if failed(b, text):
                state.found = (state.calls.get(b.call_id), b, text)


class RestoreScans:
    """One session's restore folds over its history, each resumed where the previous
    compaction's (or rehearsal's) left off (``messages.prefix_scan``): the reads (with and
    without shell reads), the changes, the latest failure. The same results as folding the
    whole history each time."""

    def __init__(self) -> None:
        self._reads = {
            shell: PrefixScan(functools.partial(_Reads, shell), _read_step) for shell in (False, True)
        }
        self.changes: PrefixScan[_Changes] = PrefixScan(_Changes, _change_step)
        self.errors: PrefixScan[_Errors] = PrefixScan(_Errors, _error_step)

    def reads(self, shell: bool) -> PrefixScan[_Reads]:
        """The reads fold, with or without the files printed by shell commands."""
        return self._reads[shell]


def _fold(state: S, step: Callable[[S, Message], None], messages: Sequence[Message]) -> S:
    for m in messages:
        step(state, m)
    return state


def _reads(
    messages: Sequence[Message], shell: bool = False, scans: RestoreScans | None = None
) -> list[tuple[str, str]]:
    """(normalised path, result text) of every read with a result, oldest first: read tool calls
    and, with ``shell``, shell commands that print one file (``shell_read_paths``: ``cat f``,
    ``sed -n '1,80p' f``; a command reading several files is left out, its output mixes them).
    With ``scans``, resumed from its previous fold (the list is the scan's: not to be changed)."""
    state = scans.reads(shell)(messages) if scans is not None else _fold(_Reads(shell), _read_step, messages)
    return state.out


def _cut_to_tokens(text: str, max_tokens: int, count: Callable[[str], int]) -> tuple[str, bool]:
    if fits(count, text, max_tokens):
        return text, False
    chars = len(text)
    while chars > 200:
        chars = int(chars * 0.8)
        if fits(count, text[:chars], max_tokens):
            break
    return text[:chars], True


def _fit_text(
    header: str, note: str, sep: str, content: str, limit: int, count: Callable[[str], int]
) -> str | None:
    """``header`` + (``note`` when cut) + ``sep`` + ``content``, the content cut (head kept) so
    that the whole text counts at most ``limit`` tokens; None when not even a head fits."""
    room = limit - count(header + note + sep)
    if room <= 0:
        return None
    body, cut = _cut_to_tokens(content, room, count)
    text = f"{header}{note if cut else ''}{sep}{body}"
    while count(text) > limit and room > 0:  # header and body count more together than apart
        room -= count(text) - limit
        body, cut = _cut_to_tokens(content, room, count)
        text = f"{header}{note if cut else ''}{sep}{body}"
    return text if room > 0 else None


def recent_files(
    summarized: Sequence[Message],
    kept: Sequence[Message],
    count: Callable[[str], int],
    *,
    workspace: Path | None = None,
    from_transcript: bool = False,
    max_files: int = RESTORE_MAX_FILES,
    file_tokens: int = RESTORE_FILE_TOKENS,
    total_tokens: int = RESTORE_TOTAL_TOKENS,
    origin_note: str = "",
    shell_reads: bool = False,
    scans: RestoreScans | None = None,
) -> list[Message]:
    """Messages re-attaching the files read before the cut (see the module docstring); with
    ``shell_reads`` (ours) files printed by a shell command count as read (Claude Code restores
    only its Read tool's files). ``scans``: the session's folds, resumed (the same messages)."""
    in_tail = {p for p, _ in _reads(kept, shell_reads)}
    latest: dict[str, str] = {}  # path -> its latest read's text, in the order of latest reads
    for path, text in _reads(summarized, shell_reads, scans):
        latest.pop(path, None)
        latest[path] = text
    out: list[Message] = []
    used = 0
    for path in reversed(latest):
        if len(out) >= max_files or used >= total_tokens:
            break
        if path in in_tail:
            continue
        content: str | None = None
        source = "re-read from disk"
        disk = _on_disk(path, workspace)
        if disk is not None:
            try:
                content = disk.read_text(encoding="utf-8", errors="replace")
            except OSError:
                content = None
        if content is None and from_transcript:
            content, source = latest[path], "as last read in this session"
        if content is None:
            continue  # gone from disk
        header = f"[Restored after compaction{origin_note}] {path} ({source})"
        note = f" [cut to {file_tokens:,} tokens; read the rest with offset/limit]"
        fitted = _fit_text(header, note, ":\n", content, min(file_tokens, total_tokens - used), count)
        if fitted is None:
            break
        used += count(fitted)
        out.append(Message(role="user", blocks=(Text(fitted),), id=f"restore:{path}", origin="restore"))
    return out


def _on_disk(path: str, workspace: Path | None) -> Path | None:
    p = Path(path)
    if not p.is_absolute():
        if workspace is None:
            return None
        p = workspace / p
    try:
        return p if p.is_file() else None
    except OSError:
        return None


def todo_message(todos: str, plan: str = "") -> list[Message]:
    """The current plan and todo list as one restore message (none when both are empty).

    ``todos`` is the latest todo list (``SummaryState.todos``: TodoWrite, Codex's update_plan...),
    ``plan`` the latest plan proposed with ExitPlanMode as ``summarize.current_plan`` renders it
    (its status, plan file and text). With only a todo list the message is as it always was."""
    parts = []
    if plan.strip():
        parts.append("[Restored after compaction] Current plan (latest plan from ExitPlanMode):\n" + plan)
    if todos.strip():
        head = "Current todo list:" if parts else "[Restored after compaction] Current todo list / plan:"
        parts.append(f"{head}\n{todos}")
    if not parts:
        return []
    return [Message(role="user", blocks=(Text("\n\n".join(parts)),), id="restore:todos", origin="restore")]


def instruction_files(workspace: Path | None, names: Sequence[str]) -> list[Message]:
    """The instruction files (CLAUDE.md, AGENTS.md, ...) found in ``workspace``, loaded with the
    bootstrap loader's caps; nothing when there is no workspace."""
    if workspace is None or not names:
        return []
    from ctxengine.tools.instruction_files import load_bootstrap_files

    text = load_bootstrap_files(workspace, list(names), include_missing=False).text
    if not text.strip():
        return []
    return [
        Message(
            role="user",
            blocks=(Text("[Restored after compaction] Instruction files:\n" + text),),
            id="restore:instructions",
            origin="restore",
        )
    ]


def _shown_whole(call_id: str, text: str, kept: Sequence[Message]) -> bool:
    """Whether a kept message holds the result of ``call_id`` with its whole ``text``."""
    return any(
        isinstance(b, ToolResult) and b.call_id == call_id and result_text(b) == text
        for m in kept
        for b in m.blocks
    )


def _calls_in(messages: Sequence[Message]) -> set[str]:
    return {b.id for m in messages for b in m.blocks if isinstance(b, ToolCall)}


def recent_changes(
    history: Sequence[Message],
    kept: Sequence[Message],
    count: Callable[[str], int],
    *,
    max_files: int,
    change_tokens: int,
    total_tokens: int,
    shown: str = "",
    scans: RestoreScans | None = None,
) -> list[Message]:
    """Messages re-attaching the last change of up to ``max_files`` recently modified files,
    newest first (``file_writes.file_changes``: Edit / Write / MultiEdit / str_replace_editor /
    apply_patch / heredoc writes), each cut to ``change_tokens`` (head kept), ``total_tokens``
    in all; a file whose last change is in the ``kept`` messages is left out (it is there), and
    so is one whose new text is already in ``shown`` (the transcript skeleton restored with it).
    ``scans``: the session's folds, resumed (the same messages)."""
    in_tail = _calls_in(kept)
    changes = scans.changes(history) if scans is not None else _fold(_Changes(), _change_step, history)
    last = changes.last  # path -> (call id, tool, new text)
    out: list[Message] = []
    used = 0
    for path, (call_id, tool, text) in reversed(list(last.items())):
        if len(out) >= max_files or used >= total_tokens:
            break
        if call_id in in_tail or (shown and text.strip() and text.strip() in shown):
            continue
        header = f"[Restored after compaction] The last change made to {path} ({tool}); its new text"
        note = " [cut; read the file for the rest]"
        msg = _fit_text(header, note, ":\n", text, min(change_tokens, total_tokens - used), count)
        if msg is None:
            break
        used += count(msg)
        out.append(Message(role="user", blocks=(Text(msg),), id=f"restore-change:{path}", origin="restore"))
    return out


def latest_error(
    history: Sequence[Message],
    kept: Sequence[Message],
    count: Callable[[str], int],
    *,
    max_tokens: int,
    scans: RestoreScans | None = None,
) -> list[Message]:
    """The latest failed tool result of ``history`` (``failed``: flagged ``is_error``, a non-zero
    exit status, a Python traceback) with the call that produced it, within ``max_tokens`` (its
    head and its tail, where a traceback names the exception, when it is long), unless the ``kept``
    messages show it whole (a kept result cut to a preview or cleared is restored all the same).
    ``scans``: the session's folds, resumed (the same messages)."""
    found = (scans.errors(history) if scans is not None else _fold(_Errors(), _error_step, history)).found
    if found is None or _shown_whole(found[1].call_id, found[2], kept):
        return []
    call, result, text = found
    what = "unknown call"
    if call is not None:
        what = (
            call.name + " " + (call.input if isinstance(call.input, str) else json.dumps(call.input))[:1_000]
        )
    header = f"[Restored after compaction] The latest error came from: {what}\nIts output"
    if count(text) > max_tokens // 2:  # long: its head and its tail (a traceback ends with the exception)
        half = max(200, max_tokens * 2)  # chars, ~half the budget each side
        text = text[:half] + "\n[...]\n" + text[-half:] if len(text) > 2 * half else text
    msg = _fit_text(header, " [cut]", ":\n", text, max_tokens, count)
    if msg is None:
        return []
    return [Message(role="user", blocks=(Text(msg),), id=f"restore-error:{result.call_id}", origin="restore")]


__all__ = [
    "RestoreScans",
    "instruction_files",
    "latest_error",
    "normalize_path",
    "recent_changes",
    "recent_files",
    "todo_message",
]
