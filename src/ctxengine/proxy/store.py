"""The proxy's session store: the project's ``SQLiteStore`` with ``synchronous=NORMAL``.

Every ingested message is an appended entry, committed at once. With SQLite's default
(``FULL``) each commit waits for an fsync of the write-ahead log: measured on this machine, the
first request of a 10,000-token session took ~100 ms instead of ~33 ms, all of it in fsync, and
every later request paid one or two more. In WAL mode ``NORMAL`` keeps the database consistent
(no corruption on a crash) and loses at most the last commits on a power cut, which the client's
next request (it carries the whole conversation) brings back anyway.
"""

from __future__ import annotations

from pathlib import Path

from ctxengine.store import SQLiteStore


class ProxyStore(SQLiteStore):
    """``SQLiteStore`` at ``path`` (``":memory:"`` for none) without an fsync per commit."""

    def __init__(self, path: str | Path = ":memory:") -> None:
        super().__init__(path)
        if str(path) != ":memory:":
            self._db.execute("PRAGMA synchronous=NORMAL")
