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
from typing import TYPE_CHECKING, Any

from ctxengine.store import SQLiteStore
from ctxengine.store.base import NO_FENCE, Entry, EntryKind

if TYPE_CHECKING:
    from ctxengine.store.postgres import PostgresStore


class ProxyStore(SQLiteStore):
    """``SQLiteStore`` at ``path`` (``":memory:"`` for none) without an fsync per commit."""

    def __init__(self, path: str | Path = ":memory:") -> None:
        super().__init__(path)
        if str(path) != ":memory:":
            self._db.execute("PRAGMA synchronous=NORMAL")


class FencedWriter:
    """One engine's view of a shared ``PostgresStore`` (a ``SessionStore``): its appends carry the
    fencing number of the session's lock (``fence``, set on each request), so that a node whose
    lock expired cannot append; while ``muted`` (the engine replays turns the store already
    holds) appends are not written again. ``close`` leaves the shared pool open."""

    def __init__(self, store: PostgresStore) -> None:
        self.store = store
        self.fence = NO_FENCE
        self.muted = False

    def append(self, session: str, kind: EntryKind, payload: Any) -> Entry:
        """Append (not while muted: then the entry comes back with sequence number -1).

        Raises:
            FencedOut: when a later lock holder has claimed the session.
            StoreError: when the write fails.
        """
        if self.muted:
            return Entry(session, -1, kind, payload)
        return self.store.append(session, kind, payload, fence=self.fence)

    def entries(self, session: str, kind: EntryKind | None = None) -> list[Entry]:
        """The session's entries (``PostgresStore.entries``)."""
        return self.store.entries(session, kind)

    def put_artifact(self, session: str, artifact_id: str, content: str, meta: dict[str, Any]) -> None:
        """Store an artifact (idempotent, so a replay may write it again)."""
        self.store.put_artifact(session, artifact_id, content, meta)

    def get_artifact(self, session: str, artifact_id: str) -> tuple[str, dict[str, Any]]:
        """An artifact's content and meta. Raises ``StoreError`` when it does not exist."""
        return self.store.get_artifact(session, artifact_id)

    def artifact_ids(self, session: str) -> list[str]:
        """The session's artifact ids, in the order they were stored."""
        return self.store.artifact_ids(session)

    def close(self) -> None:
        """Nothing: the pool is the proxy's, closed with it."""
