"""``read``: a file of the workspace as numbered lines, paged. Claude Code's rules, pi's hints.

Claude Code's Read tool (see the reference notes, section C1):
- a size gate of 262,144 bytes (256 KB), checked with ``stat`` *before* reading, unless ``offset``
  or ``limit`` is given; the refusal tells the model to page (offset/limit) or grep;
- ``cat -n`` style output (line number right-aligned in 6 columns, a tab, the line), 2,000 lines
  by default, lines longer than 2,000 characters cut with ``... [line truncated, N chars]``;
- a token cap of 25,000 *after* reading, counted with the project's own counter: exact
  ``o200k_base`` (``OpenAICounter("o200k_base")``, ``DEFAULT_COUNTER``). The calibrated Claude
  estimate (``counter_for(None)``) adds ~18% to these texts and would refuse a default page of
  2,000 short numbered lines (~22,000 o200k tokens), which Claude Code shows; pass
  ``counter=counter_for(model)`` for a stricter cap. Over the cap the read is refused with a
  suggested offset/limit. No separate byte cap on the output (pi has one; Claude Code does not);
- dedup: reading the same path and range again while the file's mtime and size are unchanged
  returns the stub ``File unchanged since last read: PATH (lines S-E); the content is earlier in
  the conversation...``. ``ReadState.reset()`` forgets what was read; the engine calls it when it
  compacts (the earlier content may have left the context).

pi's continuation hint, exactly: ``[Showing lines S-E of T. Use offset=E+1 to continue.]``
whenever lines remain after E (``offset`` is a 1-based line number, ``limit`` a number of lines).

Large files are never loaded whole: files above 4 MB are paged through a sparse line index (the
newline count before every 1 MB block, built in one streaming pass and cached by path, mtime and
size), so page 1 and the last page of a 1 GB file cost one counting pass the first time and a
seek afterwards. Lines are split on ``\\n`` only (a trailing ``\\r`` is dropped), as grep does.

Text detection and decoding are ``workspace.sniff``'s: binary files (a NUL in the first 8 KB),
UTF-16/32 and undecodable bytes get a clear refusal; non-UTF-8 text that looks like text is shown
decoded as Windows-1252 / Latin-1 under a one-line note.
"""

from __future__ import annotations

import bisect
import codecs
import os
import stat
import threading
from collections import OrderedDict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO

from ctxengine.tokens.counter import OpenAICounter, TokenCounter
from ctxengine.tools.base import ToolError, ToolSpec
from ctxengine.tools.budgets import READ_DEFAULT_LINES, READ_MAX_BYTES, READ_MAX_LINE_CHARS, READ_MAX_TOKENS
from ctxengine.tools.workspace import (
    ENCODING_SAMPLE_BYTES,
    Sniff,
    Workspace,
    decode,
    sniff,
)

LINE_NUMBER_WIDTH = 6  # cat -n
WHOLE_FILE_BYTES = 4 * 1024 * 1024  # paged reads of files up to this size read them whole
INDEX_BLOCK_BYTES = 1024 * 1024  # line index granularity for larger files
INDEX_CACHE_FILES = 32
DEFAULT_COUNTER: TokenCounter = OpenAICounter("o200k_base")  # for the 25,000-token cap
# Bytes kept of a long line: enough for READ_MAX_LINE_CHARS characters of 4-byte UTF-8.
_LINE_HEAD_BYTES = 4 * READ_MAX_LINE_CHARS + 1


def numbered(n: int, line: str, max_chars: int = READ_MAX_LINE_CHARS, total_chars: int | None = None) -> str:
    """One ``cat -n`` line; cut at ``max_chars`` with ``... [line truncated, N chars]``."""
    full = len(line) if total_chars is None else total_chars
    if full > max_chars:
        line = f"{line[:max_chars]}... [line truncated, {full:,} chars]"
    return f"{n:>{LINE_NUMBER_WIDTH}}\t{line}"


def continuation_hint(start: int, end: int, total: int) -> str:
    """pi's hint: ``[Showing lines S-E of T. Use offset=E+1 to continue.]``."""
    return f"[Showing lines {start}-{end} of {total}. Use offset={end + 1} to continue.]"


def check_page_args(offset: Any, limit: Any) -> tuple[int, int]:
    """Validate ``offset`` (1-based line, default 1) and ``limit`` (lines, default 2,000)."""
    for name, value in (("offset", offset), ("limit", limit)):
        if value is not None and (isinstance(value, bool) or not isinstance(value, int)):
            raise ToolError(f"{name} must be an integer, got {value!r}")
    start = 1 if offset is None else offset
    count = READ_DEFAULT_LINES if limit is None else limit
    if start < 1:
        raise ToolError(f"offset is a 1-based line number; got {start}. The first line is offset=1.")
    if count < 1:
        raise ToolError(f"limit is a number of lines and must be at least 1; got {count}")
    return start, count


def cap_tokens(text: str, counter: TokenCounter, what: str, start: int, shown: int, tool: str) -> None:
    """Refuse ``text`` when it is over ``READ_MAX_TOKENS`` tokens (counted only when it could be:
    no text counts more than 2 tokens per character)."""
    if len(text) * 2 <= READ_MAX_TOKENS:
        return
    tokens = counter.count_text(text)
    if tokens <= READ_MAX_TOKENS:
        return
    fit = max(1, int(shown * READ_MAX_TOKENS / tokens * 0.9))
    raise ToolError(
        f"{what} lines {start}-{start + shown - 1} come to about {tokens:,} tokens, over the "
        f"{READ_MAX_TOKENS:,}-token limit for one {tool}. Read fewer lines with offset and limit "
        f"(e.g. offset={start}, limit={fit}), or search for what you need with grep."
    )


# ------------------------------------------------------------------------------------------------
# Line index for large files
# ------------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class LineIndex:
    """``starts[i]``: byte offset of block ``i``; ``before[i]``: newlines before it; ``lines``:
    the file's line count (a last line without a newline counts)."""

    starts: tuple[int, ...]
    before: tuple[int, ...]
    lines: int


def build_index(path: Path, block: int = INDEX_BLOCK_BYTES) -> LineIndex:
    """Count lines in one streaming pass (constant memory), noting each block's newline count."""
    starts: list[int] = []
    before: list[int] = []
    newlines = 0
    pos = 0
    last = b"\n"
    buf = bytearray(block)
    with path.open("rb", buffering=0) as f:
        while True:
            n = f.readinto(buf)
            if not n:
                break
            starts.append(pos)
            before.append(newlines)
            newlines += buf.count(b"\n", 0, n)
            last = bytes(buf[n - 1 : n])
            pos += n
    lines = newlines + (1 if pos and last != b"\n" else 0)
    return LineIndex(tuple(starts), tuple(before), lines)


def seek_line(f: BinaryIO, index: LineIndex, line: int, block: int = INDEX_BLOCK_BYTES) -> None:
    """Position ``f`` at the start of 1-based ``line`` using ``index``."""
    if line <= 1 or not index.starts:
        f.seek(0)
        return
    want = line - 1  # newlines to pass
    i = max(0, bisect.bisect_left(index.before, want) - 1)
    pos = index.starts[i]
    skip = want - index.before[i]
    f.seek(pos)
    while skip > 0:
        chunk = f.read(block)
        if not chunk:
            break
        found = chunk.count(b"\n")
        if found < skip:
            skip -= found
            pos += len(chunk)
            continue
        rest = chunk.split(b"\n", skip)[-1]
        pos += len(chunk) - len(rest)
        skip = 0
    f.seek(pos)


def _read_line(f: BinaryIO, info: Sniff) -> tuple[str, int] | None:
    """The next line (without its newline, head only when long) and its full length in chars;
    None at the end of the file. A long line is streamed, never loaded whole."""
    raw = f.readline(_LINE_HEAD_BYTES)
    if not raw:
        return None
    if raw.endswith(b"\n") or len(raw) < _LINE_HEAD_BYTES:
        text = decode(raw.rstrip(b"\n"), info)
        text = text[:-1] if text.endswith("\r") else text
        return text, len(text)
    head = decode(raw, info)
    if info.legacy:
        total = len(raw)
    else:
        dec = codecs.getincrementaldecoder("utf-8")(errors="replace")
        total = len(dec.decode(raw))
    last = ""
    while True:
        piece = f.readline(INDEX_BLOCK_BYTES)
        if not piece:
            break
        body = piece.rstrip(b"\n")
        if info.legacy:
            total += len(body)
            last = chr(body[-1]) if body else last
        else:
            chunk = dec.decode(body)
            total += len(chunk)
            last = chunk[-1:] or last
        if piece.endswith(b"\n"):
            break
    if last == "\r":
        total -= 1
    return head[:READ_MAX_LINE_CHARS], total


# ------------------------------------------------------------------------------------------------
# State: dedup stubs and line indexes
# ------------------------------------------------------------------------------------------------


@dataclass
class ReadState:
    """What this agent has read (for the dedup stub) and cached line indexes.

    ``reset()`` forgets the reads, so the next read returns content again; call it whenever the
    context is compacted or cleared. Line indexes stay (they are keyed by mtime and size)."""

    _seen: dict[tuple[str, int, int], tuple[int, int, int, int]] = field(default_factory=dict)
    _indexes: OrderedDict[tuple[str, int, int], LineIndex] = field(default_factory=OrderedDict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def reset(self) -> None:
        """Forget every read (compaction may have removed the content from the context)."""
        with self._lock:
            self._seen.clear()

    def forget(self, path: Path) -> None:
        """Forget the reads of one file (e.g. after the agent edited it)."""
        key = str(path)
        with self._lock:
            for k in [k for k in self._seen if k[0] == key]:
                del self._seen[k]

    def seen(self, path: Path, start: int, count: int, st: os.stat_result) -> tuple[int, int] | None:
        """The range (S, E) shown by an earlier identical read of the unchanged file, or None."""
        with self._lock:
            hit = self._seen.get((str(path), start, count))
        if hit is None or hit[:2] != (st.st_mtime_ns, st.st_size):
            return None
        return hit[2], hit[3]

    def remember(
        self, path: Path, start: int, count: int, st: os.stat_result, shown: tuple[int, int]
    ) -> None:
        with self._lock:
            self._seen[(str(path), start, count)] = (st.st_mtime_ns, st.st_size, *shown)

    def index(self, path: Path, st: os.stat_result) -> LineIndex:
        """The line index of ``path``, built once per (path, mtime, size)."""
        key = (str(path), st.st_mtime_ns, st.st_size)
        with self._lock:
            idx = self._indexes.get(key)
            if idx is not None:
                self._indexes.move_to_end(key)
                return idx
        idx = build_index(path)
        with self._lock:
            self._indexes[key] = idx
            while len(self._indexes) > INDEX_CACHE_FILES:
                self._indexes.popitem(last=False)
        return idx


# ------------------------------------------------------------------------------------------------
# read
# ------------------------------------------------------------------------------------------------


def _refuse_kind(rel: str, info: Sniff, size: int) -> None:
    if info.kind == "binary":
        what = "binary file" if info.label == "binary" else "file of unknown encoding (not UTF-8 or text)"
        raise ToolError(
            f"{rel} is a {what} ({size:,} bytes); binary content is not shown. "
            "Inspect it with a tool meant for its format."
        )
    if info.kind == "unsupported":
        raise ToolError(
            f"{rel} is {info.label}-encoded text ({size:,} bytes); only UTF-8 and Latin-1 text "
            "can be shown. Convert it to UTF-8 first."
        )


def _page_small(path: Path, size: int, rel: str, start: int, count: int) -> tuple[list[str], int, Sniff]:
    data = path.read_bytes()
    info = sniff(data, complete=True)
    _refuse_kind(rel, info, size)
    text = decode(data, info)
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    page = [ln[:-1] if ln.endswith("\r") else ln for ln in lines[start - 1 : start - 1 + count]]
    return page, len(lines), info


def _page_large(
    path: Path, st: os.stat_result, rel: str, start: int, count: int, state: ReadState
) -> tuple[list[tuple[str, int]], int, Sniff]:
    with path.open("rb") as f:
        sample = f.read(ENCODING_SAMPLE_BYTES)
        info = sniff(sample, complete=len(sample) >= st.st_size)
        _refuse_kind(rel, info, st.st_size)
        index = state.index(path, st)
        if start > index.lines:
            return [], index.lines, info
        seek_line(f, index, start)
        page: list[tuple[str, int]] = []
        while len(page) < count:
            line = _read_line(f, info)
            if line is None:
                break
            page.append(line)
    return page, index.lines, info


def read_file(
    workspace: Workspace,
    path: str,
    offset: int | None = None,
    limit: int | None = None,
    *,
    state: ReadState | None = None,
    counter: TokenCounter | None = None,
) -> str:
    """Read ``path`` (relative to the workspace root) as numbered lines: ``limit`` lines (default
    2,000) from 1-based line ``offset`` (default 1). Raises ``ToolError`` on every refusal."""
    if not isinstance(path, str) or not path.strip():
        raise ToolError("path is required: a file path relative to the workspace root")
    start, count = check_page_args(offset, limit)
    real = workspace.resolve(path)
    rel = workspace.rel(real)
    try:
        st = real.stat()
    except FileNotFoundError:
        raise ToolError(f"file not found: {path!r}. Find files with glob(pattern=...).") from None
    except OSError as exc:
        raise ToolError(f"cannot read {path!r}: {exc.strerror or exc}") from None
    if stat.S_ISDIR(st.st_mode):
        raise ToolError(f'{rel} is a directory, not a file. List it with glob(pattern="*", path="{rel}").')
    if not stat.S_ISREG(st.st_mode):
        raise ToolError(f"{rel} is not a regular file (a device, socket or pipe); refused.")
    paged = offset is not None or limit is not None
    if not paged and st.st_size > READ_MAX_BYTES:
        raise ToolError(
            f"{rel} is {st.st_size:,} bytes, over the {READ_MAX_BYTES:,}-byte (256 KB) limit for "
            f"reading a whole file. Read it in pages with offset and limit (e.g. offset=1, "
            f'limit={READ_DEFAULT_LINES}), or search it with grep(pattern=..., path="{rel}").'
        )
    state = state if state is not None else ReadState()
    earlier = state.seen(real, start, count, st)
    if earlier is not None:
        return (
            f"File unchanged since last read: {rel} (lines {earlier[0]}-{earlier[1]}); the content "
            "is earlier in the conversation. Refer to it there instead of reading it again."
        )
    try:
        if st.st_size <= WHOLE_FILE_BYTES:
            small, total, info = _page_small(real, st.st_size, rel, start, count)
            page = [(ln, len(ln)) for ln in small]
        else:
            page, total, info = _page_large(real, st, rel, start, count, state)
    except OSError as exc:
        raise ToolError(f"cannot read {rel}: {exc.strerror or exc}") from None
    if total == 0:
        return f"[{rel} exists but is empty (0 lines).]"
    if not page:
        raise ToolError(
            f"offset={start} is past the end of {rel}, which has {total:,} lines. "
            f"Use an offset from 1 to {total}."
        )
    end = start + len(page) - 1
    body = "\n".join(numbered(start + i, text, total_chars=n) for i, (text, n) in enumerate(page))
    cap_tokens(body, counter if counter is not None else DEFAULT_COUNTER, rel, start, len(page), "read")
    parts = []
    if info.legacy:
        parts.append(f"[Note: {rel} is not valid UTF-8; shown decoded as Windows-1252/Latin-1.]")
    parts.append(body)
    if end < total:
        parts.append("\n" + continuation_hint(start, end, total))
    state.remember(real, start, count, st, (start, end))
    return "\n".join(parts)


READ_DESCRIPTION = (
    "Read a text file of the workspace as numbered lines (cat -n style). Paths are relative to the "
    f"workspace root. Reads up to {READ_DEFAULT_LINES:,} lines from line `offset` (1-based); lines "
    f"over {READ_MAX_LINE_CHARS:,} characters are cut. Files over 256 KB must be read in pages with "
    f"offset/limit (or searched with grep); one read may return at most {READ_MAX_TOKENS:,} tokens. "
    "When more lines remain, the output ends with the offset to continue from. Reading the same "
    "range of an unchanged file again returns a short note instead of the content."
)

READ_PARAMETERS: dict[str, Any] = {
    "type": "object",
    "properties": {
        "path": {"type": "string", "description": "File path, relative to the workspace root."},
        "offset": {
            "type": "integer",
            "minimum": 1,
            "description": "1-based line number to start from (default 1).",
        },
        "limit": {
            "type": "integer",
            "minimum": 1,
            "description": f"Number of lines to read (default {READ_DEFAULT_LINES}).",
        },
    },
    "required": ["path"],
    "additionalProperties": False,
}


def specs(
    workspace: Workspace, state: ReadState | None = None, counter: TokenCounter | None = None
) -> list[ToolSpec]:
    """The ``read`` tool bound to ``workspace``, sharing ``state`` (dedup; pass the engine's so
    it can ``reset()`` it on compaction) and ``counter`` (default exact ``o200k_base``)."""
    shared = state if state is not None else ReadState()

    def run(path: str, offset: int | None = None, limit: int | None = None) -> str:
        return read_file(workspace, path, offset, limit, state=shared, counter=counter)

    return [ToolSpec("read", READ_DESCRIPTION, READ_PARAMETERS, run)]
