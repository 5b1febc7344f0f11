"""Reading the files a search visits: as raw bytes, screened before decoding, on both cores.

A grep over a large tree spends its time opening and reading files, most of which hold no match.
Two things make that cheaper without changing any result:

- **Screening as bytes.** When the pattern is a plain ASCII literal searched case-sensitively,
  a file whose raw bytes lack it has no matching line (an ASCII byte stands for the same
  character in UTF-8 and in the Windows-1252 fallback, and a BOM is never ASCII), so it is passed
  over before it is decoded (``literal_needle``).
- **Screening on a second core, while the walk goes on.** With such a literal and at least
  ``PARALLEL_MIN_FILES`` files, a forked child process (``os.fork``, where the platform has it
  and the process runs a single thread) screens three of every five batches of files as the walk
  finds them, while this process walks on and screens the other two; only the files that pass
  come back. Before, the walk ended first and each process took half: the walk (~25 ms of
  20,000 files) was not overlapped. Threads do not help here: each read is a few microseconds of
  system call between Python bytecode, and two threads contending for the GIL were slower (0.34 s
  against 0.26 s for 20,000 small files) than one.

A file larger than ``BLOCK_BYTES`` is not read here (the caller reads it block by block). An
``OSError`` on a file is handed back in its place, and the caller raises it where the file comes
in order, as reading it in line would.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterable, Iterator
from itertools import chain, count, islice
from typing import IO

BLOCK_BYTES = 8 * 1024 * 1024  # files above this are searched block by block, never loaded whole
PARALLEL_MIN_FILES = 2_000  # below this, starting a worker costs more than it saves
BATCH_FILES = 256  # paths sent to the child at a time
BATCHES, CHILD_BATCHES = 5, 3  # of every 5 batches the child screens 3 (this process also walks)
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


class WorkerError(OSError):
    """The forked worker screening files ended without its results (killed, out of memory)."""


class _Screener:
    """A forked child that screens the files whose paths it is sent, while the parent walks on.

    Paths go to it in batches through a pipe (a 4-byte big-endian length, then the paths encoded
    with ``os.fsencode`` and joined by NUL, which no path holds; length 0 ends); it screens each
    as it arrives and, at the end, sends back the ones that pass (pickled, each with its index
    among the paths it was sent). Nothing comes back before the end, so neither side ever waits on
    a full pipe while the other waits on it."""

    def __init__(self, pid: int, paths: IO[bytes], results: int) -> None:
        self.pid, self._paths, self._results = pid, paths, results
        self.sent = 0

    @classmethod
    def start(cls, needle: bytes) -> _Screener | None:
        """The started child; None where the platform cannot fork or this process runs other
        threads (forking a threaded process can deadlock). A fork and pipes, not
        ``concurrent.futures``: importing ``multiprocessing`` and the process pool costs ~20 ms,
        a tenth of a one-shot grep over 20,000 files."""
        if not hasattr(os, "fork") or threading.active_count() > 1:
            return None
        import pickle

        paths_r, paths_w = os.pipe()
        results_r, results_w = os.pipe()
        pid = os.fork()
        if pid == 0:  # the child: screen, send, leave without running the parent's exit handlers
            code = 1
            try:
                os.close(paths_w)
                os.close(results_r)
                passed: list[tuple[int, Loaded]] = []
                n = 0
                with os.fdopen(paths_r, "rb") as src:
                    while size := int.from_bytes(src.read(4) or b"\0", "big"):
                        for raw in src.read(size).split(b"\0"):
                            loaded = read_screened(os.fsdecode(raw), needle)
                            if loaded is not None:
                                passed.append((n, loaded))
                            n += 1
                with os.fdopen(results_w, "wb") as out:
                    out.write(pickle.dumps(passed, protocol=pickle.HIGHEST_PROTOCOL))
                code = 0
            finally:
                os._exit(code)
        os.close(paths_r)
        os.close(results_w)
        return cls(pid, os.fdopen(paths_w, "wb"), results_r)

    def send(self, paths: list[str]) -> None:
        """Screen ``paths`` (not empty) in the child; their indices follow those sent before."""
        data = b"\0".join(map(os.fsencode, paths))
        self._paths.write(len(data).to_bytes(4, "big") + data)
        self.sent += len(paths)

    def results(self) -> dict[int, Loaded]:
        """Tell the child that no more paths come and wait for what passed, by index among the
        paths sent; ``WorkerError`` when it ended without its results."""
        import pickle

        try:
            self._paths.write(b"\0\0\0\0")
            self._paths.close()
        except OSError:  # the child is gone: said below, by its missing results
            pass
        with os.fdopen(self._results, "rb") as got:
            data = got.read()
        _, status = os.waitpid(self.pid, 0)
        if os.waitstatus_to_exitcode(status) != 0 or not data:
            raise WorkerError(f"the worker screening {self.sent:,} files ended without its results")
        return dict(pickle.loads(data))


def read_files(files: Iterable[tuple[str, str]], needle: bytes | None) -> Iterator[tuple[str, str, Loaded]]:
    """``(rel, path, read_screened(path, needle))`` for each ``(rel, path)`` of ``files``, in
    order. With a ``needle`` and at least ``PARALLEL_MIN_FILES`` files, a forked child screens
    ``CHILD_BATCHES`` of every ``BATCHES`` batches of ``BATCH_FILES`` files while this process
    walks on (``files`` is the walk) and screens the rest: the walk overlaps the reading, and
    this process, which also walks, takes the smaller share. The results come in order once
    every file is screened (the files that passed are then held in memory, as the child's
    already were). Raises ``WorkerError`` when the child ends without its results."""
    it = iter(files)
    head = list(islice(it, PARALLEL_MIN_FILES)) if needle is not None else []
    screener = _Screener.start(needle) if needle is not None and len(head) == PARALLEL_MIN_FILES else None
    if screener is None:
        for rel, path in chain(head, it):
            yield rel, path, read_screened(path, needle)
        return
    todo: list[tuple[str, str]] = []
    passed: dict[int, Loaded] = {}
    theirs: list[int] = []  # the index in ``todo`` of each path sent to the child, in order
    stream = chain(head, it)
    try:
        for number in count():
            batch = list(islice(stream, BATCH_FILES))
            if not batch:
                break
            start = len(todo)
            todo += batch
            if number % BATCHES < CHILD_BATCHES:
                screener.send([path for _, path in batch])
                theirs += range(start, start + len(batch))
                continue
            for i, (_, path) in enumerate(batch, start):
                loaded = read_screened(path, needle)
                if loaded is not None:
                    passed[i] = loaded
    finally:
        got = screener.results()  # waits for the child even when the walk failed
    passed.update((theirs[i], loaded) for i, loaded in got.items())
    for i, (rel, path) in enumerate(todo):
        yield rel, path, passed.get(i)
