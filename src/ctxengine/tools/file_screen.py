"""Reading the files a search visits: as raw bytes, screened before decoding, on both cores.

A grep over a large tree spends its time opening and reading files, most of which hold no match.
Two things make that cheaper without changing any result:

- **Screening as bytes.** When the pattern is a plain ASCII literal searched case-sensitively,
  a file whose raw bytes lack it has no matching line (an ASCII byte stands for the same
  character in UTF-8 and in the Windows-1252 fallback, and a BOM is never ASCII), so it is passed
  over before it is decoded (``literal_needle``).
- **Reading ahead in threads.** ``os.open`` / ``os.read`` release the GIL, so ``read_ahead`` reads
  the next files on worker threads (``READ_AHEAD_THREADS``, one per core on the 2-core machines
  we measure on) while the caller searches the current one; results come back in walk order.

A file larger than ``BLOCK_BYTES`` is not read here (the caller reads it block by block). An
``OSError`` on a file is handed back in its place, and the caller raises it where the file comes
in order, as reading it in line would.
"""

from __future__ import annotations

import os
from collections import deque
from collections.abc import Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor

BLOCK_BYTES = 8 * 1024 * 1024  # files above this are searched block by block, never loaded whole
READ_AHEAD_THREADS = 2
READ_AHEAD_BATCH = 64  # files per task: a task costs about what reading one small file does
READ_AHEAD_TASKS = 8  # tasks in flight at most (bounds the memory held: ~512 small files)
_REGEX_SYNTAX = frozenset(".^$*+?{}[]\\|()\r\n")


class Large:
    """The file is above ``BLOCK_BYTES``: the caller reads it in blocks."""


LARGE = Large()
Loaded = bytes | Large | OSError | None  # the bytes; LARGE; the error reading it; None: screened out


def literal_needle(pattern: str, case_insensitive: bool) -> bytes | None:
    """The bytes every matching file must hold, when ``pattern`` is a plain ASCII literal searched
    case-sensitively (no regex syntax, no line break); None otherwise."""
    if case_insensitive or not pattern.isascii() or any(c in _REGEX_SYNTAX for c in pattern):
        return None
    return pattern.encode("ascii")


def read_screened(path: str, needle: bytes | None) -> Loaded:
    """The bytes of the file at ``path`` (``LARGE`` above ``BLOCK_BYTES``), or None when
    ``needle`` is given and not in them; the ``OSError`` when it cannot be read."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_BINARY", 0))
    except OSError as exc:
        return exc
    try:
        size = os.fstat(fd).st_size
        if size > BLOCK_BYTES:
            return LARGE
        # the size fstat gave, read at once (no read to see the end); a size of 0 may hide content
        # (/proc), so such a file is read to its end
        parts = [os.read(fd, size or 65_536)]
        got = len(parts[0])
        while parts[-1] and (got < size or not size):
            parts.append(os.read(fd, max(size - got, 65_536)))
            got += len(parts[-1])
    except OSError as exc:
        return exc
    finally:
        os.close(fd)
    data = parts[0] if len(parts) == 1 else b"".join(parts)
    if needle is not None and needle not in data:
        return None
    return data


def _read_batch(batch: list[tuple[str, str]], needle: bytes | None) -> list[tuple[str, str, Loaded]]:
    return [(rel, path, read_screened(path, needle)) for rel, path in batch]


def read_ahead(files: Iterable[tuple[str, str]], needle: bytes | None) -> Iterator[tuple[str, str, Loaded]]:
    """``(rel, path, read_screened(path, needle))`` for each ``(rel, path)`` of ``files``, in
    order, the reading done ahead on ``READ_AHEAD_THREADS`` threads."""
    it = iter(files)
    with ThreadPoolExecutor(READ_AHEAD_THREADS, thread_name_prefix="ctxengine-read") as pool:
        pending: deque[Future[list[tuple[str, str, Loaded]]]] = deque()
        while True:
            while len(pending) < READ_AHEAD_TASKS:
                batch = [x for _, x in zip(range(READ_AHEAD_BATCH), it, strict=False)]
                if not batch:
                    break
                pending.append(pool.submit(_read_batch, batch, needle))
            if not pending:
                return
            yield from pending.popleft().result()
