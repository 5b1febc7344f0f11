"""The open-files working set (after Letta): files the agent opened stay visible in a managed
block, each cut to a per-file char limit that depends on the context window; the least recently
used file is closed first, and the model is told which files were closed.

Reference numbers (Letta, ``calculate_file_defaults_based_on_context_window``):

===============  ==========  ====================
context window   open files  chars per file
===============  ==========  ====================
unknown          5           50,000
≤ 8K             3           5,000
≤ 32K            5           15,000
≤ 128K           10          25,000
≤ 200K           10          40,000
larger           15          40,000
===============  ==========  ====================

(K = 1,024 tokens, so 8,192-, 32,768- and 131,072-token windows fall in their nominal rows.)

Content over the limit ends with ``...[TRUNCATED]`` and a note with the exact
``read(path=..., offset=..., limit=...)`` call for the rest. LRU: opening a file when the set is
full closes the files with the oldest access first (Letta's ``enforce_max_open_files_and_open``);
``touch`` (a read or a grep hit on an open file) counts as an access.

**Where the block goes (unlike Letta).** Letta renders open files inside the system prompt, so
every open, close or edit invalidates the whole prompt cache. Here the block is not part of the
system prompt. ``render()`` is a pure function of which files are open (in opening order), their
ranges, the limits and the files' content: an access (``touch``, or opening an already open file
with the same range) never changes a byte of it, so the LRU order can move without touching the
cache. How the engine should attach it:

1. Before each model call, check ``ws.changed`` (the render differs from the one last delivered).
2. If it did not change, leave the block where it is: the message that carries it keeps its exact
   bytes and the cached prefix stays valid.
3. If it changed, drop the previous copy from the projection (the transcript is append-only; only
   the view loses it) and attach the new one as a text block appended to the newest user turn:
   ``newest = ws.block_message(newest)`` (after its tool results, which Anthropic requires
   first). This is one cache invalidation per batch of changes: any number of
   ``open_files``/``close_files`` calls and file edits between two model calls collapse into one
   new block, and the tool result of ``open_files`` arrives in the same turn as the block.
4. After a compaction that drops the message carrying the block, call ``ws.invalidate()`` so the
   next check re-attaches it.
5. Over MCP there is no user turn to attach to: the server appends the block to the result of
   the first tool call after a change (``ctxengine.tools.mcp_server``).

``block_message`` marks the rendering as delivered; ``block_text`` does the same for an engine
that builds the message itself.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import msgspec

from ctxengine.messages.model import Message, Text
from ctxengine.tools.base import ToolError, ToolSpec
from ctxengine.tools.working_set_render import LINE_CHARS, TRUNCATED, _check_file, _render_range, _Rendered
from ctxengine.tools.workspace import Workspace

__all__ = [  # LINE_CHARS and TRUNCATED moved to working_set_render with the rendering
    "BLOCK_META_KEY",
    "LINE_CHARS",
    "TRUNCATED",
    "FileLimits",
    "WorkingSet",
    "limits_for_window",
    "specs",
]

BLOCK_META_KEY = "working_set"  # Message.meta key marking the message that carries the block


@dataclass(frozen=True)
class FileLimits:
    """How many files may be open and how many chars of each are shown."""

    max_files: int
    per_file_chars: int

    def describe(self) -> str:
        return f"{self.max_files} files, {self.per_file_chars:,} chars each"


def limits_for_window(window: int | None) -> FileLimits:
    """Letta's defaults for a context window of ``window`` tokens (None: unknown). "K" is read as
    1,024 so the nominal sizes land in their own row: GPT-4's 8,192 is "≤ 8K", a 32,768 window
    "≤ 32K", Llama's 131,072 "≤ 128K", Claude's 200,000 "≤ 200K"."""
    if window is None or window <= 0:
        return FileLimits(5, 50_000)
    if window <= 8 * 1024:
        return FileLimits(3, 5_000)
    if window <= 32 * 1024:
        return FileLimits(5, 15_000)
    if window <= 128 * 1024:
        return FileLimits(10, 25_000)
    if window <= 200 * 1024:
        return FileLimits(10, 40_000)
    return FileLimits(15, 40_000)


@dataclass
class _Open:
    rel: str
    path: Path
    offset: int  # 1-based first line
    length: int | None  # lines; None = to the end (within the char limit)
    access: int  # LRU tick


@dataclass
class WorkingSet:
    """Open files of one agent session inside ``workspace``.

    ``window`` is the model's context window in tokens (None: unknown); ``limits`` overrides the
    table.
    """

    workspace: Workspace
    window: int | None = None
    limits: FileLimits | None = None
    _files: dict[str, _Open] = field(default_factory=dict)
    _tick: int = 0
    _cache: dict[str, _Rendered] = field(default_factory=dict)
    _delivered: str | None = None

    def __post_init__(self) -> None:
        if self.limits is None:
            self.limits = limits_for_window(self.window)

    @property
    def file_limits(self) -> FileLimits:
        assert self.limits is not None
        return self.limits

    # ------------------------------------------------------------------ state

    @property
    def open_paths(self) -> list[str]:
        """Open files (relative paths) in opening order."""
        return list(self._files)

    def lru_order(self) -> list[str]:
        """Open files, least recently used first."""
        return [f.rel for f in sorted(self._files.values(), key=lambda f: f.access)]

    def _next_tick(self) -> int:
        self._tick += 1
        return self._tick

    def _rel(self, path: str) -> tuple[str, Path]:
        resolved = self.workspace.resolve(path)
        return self.workspace.rel(resolved), resolved

    def touch(self, path: str) -> bool:
        """Count an access to ``path`` (LRU only; the rendered block does not change). True when
        the file is open."""
        try:
            rel, _ = self._rel(path)
        except ToolError:
            return False
        f = self._files.get(rel)
        if f is None:
            return False
        f.access = self._next_tick()
        return True

    # ------------------------------------------------------------------ tools

    def open(self, paths: Sequence[str], offset: int | None = None, length: int | None = None) -> str:
        """Open ``paths`` (lines ``offset`` .. ``offset + length - 1``, 1-based; default the whole
        file within the char limit). Returns the message for the model: what was opened, what was
        closed to make room. Raises ``ToolError`` when nothing could be opened."""
        if isinstance(paths, str):
            paths = [paths]
        if not paths:
            raise ToolError("open_files needs at least one path")
        if offset is not None and offset < 1:
            raise ToolError("offset is a 1-based line number (>= 1)")
        if length is not None and length < 1:
            raise ToolError("length is a number of lines (>= 1)")
        limit = self.file_limits
        opened: list[str] = []
        errors: list[str] = []
        wanted = self._wanted(paths, limit, errors)
        if not wanted:
            raise ToolError("nothing opened. " + "; ".join(errors))
        closed = self._make_room(wanted, limit)
        for rel, resolved in wanted:
            start = offset or 1
            f = self._files.get(rel)
            if f is None:
                self._files[rel] = _Open(rel, resolved, start, length, self._next_tick())
            else:
                f.offset, f.length, f.access = start, length, self._next_tick()
            opened.append(self._describe(rel))
        return _opened_message(opened, closed, errors, limit)

    def _wanted(self, paths: Sequence[str], limit: FileLimits, errors: list[str]) -> list[tuple[str, Path]]:
        """The files of ``paths`` that can be opened (each once, at most ``limit.max_files``), as
        (relative path, resolved path); the others are added to ``errors`` with the reason."""
        wanted: list[tuple[str, Path]] = []
        for p in dict.fromkeys(paths):
            try:
                rel, resolved = self._rel(p)
            except ToolError as exc:
                errors.append(f"{p}: {exc}")
                continue
            problem = _check_file(resolved)
            if problem:
                errors.append(f"{rel}: {problem}")
                continue
            wanted.append((rel, resolved))
        if len(wanted) > limit.max_files:
            for rel, _ in wanted[limit.max_files :]:
                errors.append(f"{rel}: not opened, at most {limit.max_files} files can be open at once")
            wanted = wanted[: limit.max_files]
        return wanted

    def _make_room(self, wanted: list[tuple[str, Path]], limit: FileLimits) -> list[str]:
        """Close the least recently used files (none of ``wanted``) so that ``wanted`` fits in
        ``limit.max_files``; returns the closed files."""
        keep = {rel for rel, _ in wanted}
        new = [rel for rel, _ in wanted if rel not in self._files]
        overflow = len(self._files) + len(new) - limit.max_files
        closed: list[str] = []
        if overflow > 0:
            for rel in self.lru_order():
                if len(closed) == overflow:
                    break
                if rel not in keep:
                    closed.append(rel)
            for rel in closed:
                self._drop(rel)
        return closed

    def close(self, paths: Sequence[str] | None = None, all: bool = False) -> str:
        """Close ``paths`` (or every file with ``all``). Returns the message for the model."""
        if isinstance(paths, str):
            if paths == "all":
                all, paths = True, None
            else:
                paths = [paths]
        if all:
            closed = list(self._files)
            for rel in closed:
                self._drop(rel)
            return (
                f"Closed all {len(closed)} open file(s)" + (": " + ", ".join(closed) if closed else "") + "."
            )
        if not paths:
            raise ToolError("close_files needs paths, or all=true to close every open file")
        done: list[str] = []
        not_open: list[str] = []
        for p in paths:
            try:
                rel, _ = self._rel(p)
            except ToolError:
                rel = p
            if rel in self._files:
                self._drop(rel)
                done.append(rel)
            else:
                not_open.append(p)
        msg = f"Closed {len(done)} file(s)" + (": " + ", ".join(done) if done else "") + "."
        if not_open:
            still = ", ".join(self._files) or "none"
            msg += f" Not open: {', '.join(not_open)} (open now: {still})."
        return msg

    def _drop(self, rel: str) -> None:
        self._files.pop(rel, None)
        self._cache.pop(rel, None)

    def _describe(self, rel: str) -> str:
        return f"{rel} ({self._render_file(self._files[rel]).describe()})"

    # ------------------------------------------------------------------ block

    def render(self) -> str:
        """The block: every open file in opening order, each cut to the per-file limit. Empty when
        no file is open. Depends only on the open set, ranges, limits and file content."""
        if not self._files:
            return ""
        parts = [f'<open_files limit="{self.file_limits.describe()}">']
        for f in self._files.values():
            parts.append(self._render_file(f).text)
        parts.append("</open_files>")
        return "\n".join(parts)

    @property
    def changed(self) -> bool:
        """True when the rendered block differs from the one last delivered."""
        return self.render() != (self._delivered or "")

    def block_text(self) -> str:
        """The block (see ``render``), marked as delivered."""
        text = self.render()
        self._delivered = text
        return text

    def block_message(self, message: Message) -> Message:
        """``message`` (the newest user turn) with the block appended as a text block, marked in
        ``meta[BLOCK_META_KEY]``; the original message is not modified. When no file is open the
        message comes back unchanged (still marked delivered)."""
        text = self.block_text()
        if not text:
            return message
        meta = dict(message.meta)
        meta[BLOCK_META_KEY] = True
        return msgspec.structs.replace(message, blocks=(*message.blocks, Text(text)), meta=meta)

    def invalidate(self) -> None:
        """Forget what was delivered (after a compaction dropped the message carrying the block)."""
        self._delivered = None

    def _render_file(self, f: _Open) -> _Rendered:
        try:
            st = f.path.stat()
            key = (st.st_mtime_ns, st.st_size, f.offset, f.length, self.file_limits.per_file_chars)
        except OSError:
            text = (
                f'<file path="{f.rel}" status="missing">\n[no longer exists; close_files drops it]\n</file>'
            )
            return _Rendered((0, 0, 0, None, 0), text)
        cached = self._cache.get(f.rel)
        if cached is not None and cached.key == key:
            return cached
        r = _render_range(key, f.rel, f.path, f.offset, f.length, self.file_limits.per_file_chars)
        self._cache[f.rel] = r
        return r


def _opened_message(opened: list[str], closed: list[str], errors: list[str], limit: FileLimits) -> str:
    """The answer of ``open_files``: what was opened, closed to make room, and not opened."""
    lines = [f"Opened {len(opened)} file(s): " + "; ".join(opened) + "."]
    lines.append(
        "Their content is in the <open_files> block attached to this turn; it stays visible "
        "and follows edits on disk until the files are closed."
    )
    if closed:
        lines.append(
            f"Closed (least recently used; at most {limit.max_files} files open): " + ", ".join(closed) + "."
        )
    if errors:
        lines.append("Not opened: " + "; ".join(errors) + ".")
    return "\n".join(lines)


def specs(ws: WorkingSet) -> list[ToolSpec]:
    """``open_files`` and ``close_files`` bound to ``ws``."""

    def open_files(paths: list[str] | str, offset: int | None = None, length: int | None = None) -> str:
        return ws.open([paths] if isinstance(paths, str) else list(paths), offset, length)

    def close_files(paths: list[str] | str | None = None, all: bool = False) -> str:
        return ws.close(paths, all=all)

    lim = ws.file_limits
    return [
        ToolSpec(
            "open_files",
            "Keep files visible: their content (numbered lines) is shown in an <open_files> block that "
            "follows later edits on disk until you close them. Use it for files you will look at "
            f"repeatedly; use read for a one-off look. At most {lim.max_files} files are open, each "
            f"shown up to {lim.per_file_chars:,} chars; opening more closes the least recently used.",
            {
                "type": "object",
                "properties": {
                    "paths": {
                        "type": "array",
                        "items": {"type": "string"},
                        "description": "Files to open, relative to the workspace root.",
                    },
                    "offset": {
                        "type": "integer",
                        "minimum": 1,
                        "description": "First line to show (1-based, as in read). Default 1.",
                    },
                    "length": {
                        "type": "integer",
                        "minimum": 1,
                        "description": "Number of lines to show. Default: to the end, within the char limit.",
                    },
                },
                "required": ["paths"],
            },
            open_files,
        ),
        ToolSpec(
            "close_files",
            "Close open files so they leave the <open_files> block. Give paths, or all=true.",
            {
                "type": "object",
                "properties": {
                    "paths": {
                        "type": "array",
                        "items": {"type": "string"},
                        "description": "Files to close, relative to the workspace root.",
                    },
                    "all": {"type": "boolean", "description": "Close every open file."},
                },
            },
            close_files,
        ),
    ]
