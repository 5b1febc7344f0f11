"""``SQLiteStore``: the default ``SessionStore`` on stdlib ``sqlite3``.

Entries are msgpack-encoded (msgspec) in one append-only table; artifacts in another. ``":memory:"``
(the default) keeps a replay off the disk; pass a path for a durable store.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import msgspec

from ctxengine.store.base import Entry, EntryKind, StoreError

_SCHEMA = """
CREATE TABLE IF NOT EXISTS entries (
    session TEXT NOT NULL, seq INTEGER NOT NULL, kind TEXT NOT NULL, payload BLOB NOT NULL,
    PRIMARY KEY (session, seq)
);
CREATE TABLE IF NOT EXISTS artifacts (
    session TEXT NOT NULL, id TEXT NOT NULL, content TEXT NOT NULL, meta BLOB NOT NULL,
    PRIMARY KEY (session, id)
);
"""


class SQLiteStore:
    """Append-only entries and artifacts in SQLite (the default ``SessionStore``).

    Any thread may use it, one at a time; every appended entry is durable at once (autocommit).

    Args:
        path: the database file (``":memory:"``, the default, keeps a replay off the disk).
        read_only: open an existing store to read it only (a reader such as ``tool retrieve``):
            nothing is created or written, and a file that is not a session store is refused.

    Raises:
        StoreError: when the database cannot be opened, or (``read_only``) is not a session store.
    """

    def __init__(self, path: str | Path = ":memory:", *, read_only: bool = False) -> None:
        try:
            if read_only:
                uri = Path(path).absolute().as_uri() + "?mode=ro"
                self._db = sqlite3.connect(uri, uri=True, isolation_level=None, check_same_thread=False)
                tables = {r[0] for r in self._db.execute("SELECT name FROM sqlite_master WHERE type='table'")}
                if not {"entries", "artifacts"} <= tables:
                    self._db.close()
                    raise StoreError(f"{path}: not a ctxengine session store")
            else:
                # autocommit: every appended entry is durable at once and visible to other readers;
                # any thread may use it, one at a time (frameworks call hooks from worker threads)
                self._db = sqlite3.connect(str(path), isolation_level=None, check_same_thread=False)
                if str(path) != ":memory:":
                    self._db.execute("PRAGMA journal_mode=WAL")
                self._db.executescript(_SCHEMA)
        except sqlite3.Error as exc:
            raise StoreError(f"{path}: cannot open store: {exc}") from None
        self._enc = msgspec.msgpack.Encoder()
        self._dec = msgspec.msgpack.Decoder()
        self._seq: dict[str, int] = {}

    def _next_seq(self, session: str) -> int:
        if session not in self._seq:
            row = self._db.execute(
                "SELECT COALESCE(MAX(seq), -1) FROM entries WHERE session = ?", (session,)
            ).fetchone()
            self._seq[session] = int(row[0])
        self._seq[session] += 1
        return self._seq[session]

    def append(self, session: str, kind: EntryKind, payload: Any) -> Entry:
        """Append an entry to a session.

        Args:
            session: the session's id.
            kind: the entry's kind ("message", "compaction", "clear", "offload", "notes", "event").
            payload: kind-specific JSON-able data (msgpack-encoded).

        Returns:
            The entry, with its sequence number in the session.

        Raises:
            StoreError: when the write fails.
        """
        seq = self._next_seq(session)
        try:
            self._db.execute(
                "INSERT INTO entries VALUES (?, ?, ?, ?)", (session, seq, kind, self._enc.encode(payload))
            )
        except sqlite3.Error as exc:
            raise StoreError(f"cannot append to {session}: {exc}") from None
        return Entry(session, seq, kind, payload)

    def entries(self, session: str, kind: EntryKind | None = None) -> list[Entry]:
        """All entries of a session, in order.

        Args:
            session: the session's id.
            kind: only entries of this kind (None: all).

        Returns:
            The entries, by sequence number.
        """
        sql = "SELECT seq, kind, payload FROM entries WHERE session = ?"
        args: tuple[Any, ...] = (session,)
        if kind is not None:
            sql += " AND kind = ?"
            args += (kind,)
        rows = self._db.execute(sql + " ORDER BY seq", args).fetchall()
        return [Entry(session, int(s), k, self._dec.decode(p)) for s, k, p in rows]

    def put_artifact(self, session: str, artifact_id: str, content: str, meta: dict[str, Any]) -> None:
        """Store original content under ``artifact_id`` (idempotent: a known id is kept as it is).

        Args:
            session: the session's id.
            artifact_id: the artifact's id within the session.
            content: the original content.
            meta: JSON-able facts about it (layer, call id, ...).

        Raises:
            StoreError: when the write fails.
        """
        try:
            self._db.execute(
                "INSERT OR IGNORE INTO artifacts VALUES (?, ?, ?, ?)",
                (session, artifact_id, content, self._enc.encode(meta)),
            )
        except sqlite3.Error as exc:
            raise StoreError(f"cannot store artifact {artifact_id}: {exc}") from None

    def get_artifact(self, session: str, artifact_id: str) -> tuple[str, dict[str, Any]]:
        """The content and meta of an artifact.

        Args:
            session: the session's id.
            artifact_id: the artifact's id.

        Returns:
            ``(content, meta)``.

        Raises:
            StoreError: when the artifact does not exist.
        """
        row = self._db.execute(
            "SELECT content, meta FROM artifacts WHERE session = ? AND id = ?", (session, artifact_id)
        ).fetchone()
        if row is None:
            raise StoreError(f"no artifact {artifact_id!r} in session {session!r}")
        meta = self._dec.decode(row[1])
        return str(row[0]), dict(meta)

    def artifact_ids(self, session: str) -> list[str]:
        """The ids of a session's artifacts.

        Args:
            session: the session's id.

        Returns:
            The ids, in the order they were stored.
        """
        rows = self._db.execute(
            "SELECT id FROM artifacts WHERE session = ? ORDER BY rowid", (session,)
        ).fetchall()
        return [str(r[0]) for r in rows]

    def close(self) -> None:
        """Close the database."""
        self._db.close()
