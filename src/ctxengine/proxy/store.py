"""The proxy's session stores: the project's ``SQLiteStore`` with ``synchronous=NORMAL``
(``ProxyStore``), and each engine's fenced view of a shared PostgreSQL store (``FencedWriter``).

Every ingested message is an appended entry, committed at once. With SQLite's default
(``FULL``) each commit waits for an fsync of the write-ahead log: measured on this machine, the
first request of a 10,000-token session took ~100 ms instead of ~33 ms, all of it in fsync, and
every later request paid one or two more. In WAL mode ``NORMAL`` keeps the database consistent
(no corruption on a crash) and loses at most the last commits on a power cut, which the client's
next request (it carries the whole conversation) brings back anyway.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ctxengine.store import SQLiteStore
from ctxengine.store.base import NO_FENCE, Entry, EntryKind, SessionStore
from ctxengine.store.borrowed import BorrowedStore


class ProxyStore(SQLiteStore):
    """``SQLiteStore`` at ``path`` (``":memory:"`` for none) without an fsync per commit."""

    def __init__(self, path: str | Path = ":memory:") -> None:
        super().__init__(path)
        if str(path) != ":memory:":
            self._db.execute("PRAGMA synchronous=NORMAL")


class FencedWriter(BorrowedStore):
    """One engine's view of a shared ``PostgresStore`` or of the node's ``local.LocalStore`` (a
    ``SessionStore``, lent: ``close`` leaves it open for the proxy). Its appends wait in
    ``pending`` until the proxy stores them with the request's turn (``take``), in one
    transaction that checks the session lock's fencing number (``fence``): a turn is stored whole
    or not at all, and a node whose lock expired cannot append. While ``muted`` (the engine
    replays turns the store already holds) appends are dropped. Artifacts go to the store at once
    (storing one is idempotent)."""

    def __init__(self, store: SessionStore) -> None:
        super().__init__(store)
        self.fence = NO_FENCE
        self.muted = False
        self.pending: list[tuple[EntryKind, Any]] = []

    def append(self, session: str, kind: EntryKind, payload: Any) -> Entry:
        """Keep the entry for the turn's record (none while muted); it comes back with sequence
        number -1 (the store numbers it then)."""
        if not self.muted:
            self.pending.append((kind, payload))
        return Entry(session, -1, kind, payload)

    def take(self) -> list[tuple[EntryKind, Any]]:
        """The entries appended since the last ``take``, in order (and no more pending)."""
        out, self.pending = self.pending, []
        return out
