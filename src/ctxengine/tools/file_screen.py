"""Reading the files a search visits: as raw bytes, screened before decoding, on both cores.

A grep over a large tree spends its time opening and reading files, most of which hold no match.
Two things make that cheaper without changing any result:

- **Screening as bytes.** When the pattern is a plain ASCII literal searched case-sensitively,
  a file whose raw bytes lack it has no matching line (an ASCII byte stands for the same
  character in UTF-8 and in the Windows-1252 fallback, and a BOM is never ASCII), so it is passed
  over before it is decoded (``literal_needle``).
- **Screening on a second core.** With such a literal and at least ``PARALLEL_MIN_FILES`` files,
  the second half of the files (in walk order) is read and screened in a forked child process
  (``os.fork``, where the platform has it and the process runs a single thread) while this
  process reads the first half; only the files that pass come back. Threads do not help here:
  each read is a few microseconds of system call between Python bytecode, and two threads
  contending for the GIL were slower (0.34 s against 0.26 s for 20,000 small files) than one.

A file larger than ``BLOCK_BYTES`` is not read here (the caller reads it block by block). An
``OSError`` on a file is handed back in its place, and the caller raises it where the file comes
in order, as reading it in line would.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Iterable, Iterator

BLOCK_BYTES = 8 * 1024 * 1024  # files above this are searched block by block, never loaded whole
PARALLEL_MIN_FILES = 2_000  # below this, starting a worker costs more than it saves
_REGEX_SYNTAX = frozenset(".^$*+?{}[]\\|()\r\n")
_OPEN_FLAGS = os.O_RDONLY | getattr(os, "O_BINARY", 0)


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
        fd = os.open(path, _OPEN_FLAGS)
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


def _screen(paths: list[str], needle: bytes) -> list[tuple[int, Loaded]]:
    """``(index, read_screened(path, needle))`` for the files of ``paths`` that pass the screen."""
    out: list[tuple[int, Loaded]] = []
    for i, path in enumerate(paths):
        loaded = read_screened(path, needle)
        if loaded is not None:
            out.append((i, loaded))
    return out


class WorkerError(OSError):
    """The forked worker screening files ended without its results (killed, out of memory)."""


def _fork_screen(paths: list[str], needle: bytes) -> Callable[[], dict[int, Loaded]] | None:
    """Start screening ``paths`` in a forked child (``os.fork``; its results pickled back through
    a pipe); returns the function that waits for them (``WorkerError`` when the child ended
    without them). None where the platform cannot fork or this process runs other threads
    (forking a threaded process can deadlock). A fork and a pipe, not ``concurrent.futures``:
    importing ``multiprocessing`` and the process pool costs ~20 ms, a tenth of a one-shot grep
    over 20,000 files."""
    if not hasattr(os, "fork") or threading.active_count() > 1:
        return None
    import pickle

    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: screen, send, leave without running the parent's exit handlers
        code = 1
        try:
            os.close(r)
            with os.fdopen(w, "wb") as out:
                out.write(pickle.dumps(_screen(paths, needle), protocol=pickle.HIGHEST_PROTOCOL))
            code = 0
        finally:
            os._exit(code)
    os.close(w)

    def collect() -> dict[int, Loaded]:
        with os.fdopen(r, "rb") as got:
            data = got.read()
        _, status = os.waitpid(pid, 0)
        if os.waitstatus_to_exitcode(status) != 0 or not data:
            raise WorkerError(f"the worker screening {len(paths):,} files ended without its results")
        return dict(pickle.loads(data))

    return collect


def read_files(files: Iterable[tuple[str, str]], needle: bytes | None) -> Iterator[tuple[str, str, Loaded]]:
    """``(rel, path, read_screened(path, needle))`` for each ``(rel, path)`` of ``files``, in
    order; with a ``needle`` and at least ``PARALLEL_MIN_FILES`` files, the second half screened
    in a forked worker (see the module docs), the files it screens out given as None like here.
    Raises ``WorkerError`` when that worker ends without its results."""
    todo = list(files)
    half = len(todo) // 2
    collect = None
    if needle is not None and len(todo) >= PARALLEL_MIN_FILES:
        collect = _fork_screen([p for _, p in todo[half:]], needle)
    if collect is None:
        for rel, path in todo:
            yield rel, path, read_screened(path, needle)
        return
    try:
        for rel, path in todo[:half]:
            yield rel, path, read_screened(path, needle)
    finally:
        passed = collect()  # waits for the child even when the caller stops early
    for i, (rel, path) in enumerate(todo[half:]):
        yield rel, path, passed.get(i)
