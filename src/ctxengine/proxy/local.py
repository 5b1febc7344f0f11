"""The proxy's conversation index in its SQLite file (``--store DIR``): a restart loses no session.

``LocalStore`` is the proxy's ``SQLiteStore`` (``proxy.sqlite``: entries and artifacts) with the
tables of ``ConversationIndex`` beside them, so the sessions of one node are found, continued and
reported as a PostgreSQL store's are (``shared.SharedSessions``, with the process's own locks):
the in-memory table is a cache in front of the file, and a restarted proxy rebuilds a session's
engine from its recorded turns (``apply.replay_turn``) at its next request. It speaks the dialect
the index is written in (``%s`` parameters, ``transaction()``) on one SQLite connection that every
thread uses one at a time (a lock: a transaction is never interleaved with another thread's
statement); a thread of its own checkpoints the file (``checkpoint``). The schema is migrated by
the program (``MIGRATIONS``, numbered, recorded in ``PRAGMA user_version``).
``SQLiteConversationIndex`` replaces the two statements that are PostgreSQL's own
(``= ANY(array)``, ``unnest``).
"""

from __future__ import annotations

import contextlib
import sqlite3
import threading
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from ctxengine.proxy.checkpoint import Checkpointer
from ctxengine.proxy.index import STAT_FIELDS, ConversationIndex, Found, packed
from ctxengine.proxy.index import found as index_found
from ctxengine.proxy.store import ProxyStore
from ctxengine.store.base import NO_FENCE, Entry, EntryKind, StoreError

_STATS = ", ".join(
    f"{f} {'REAL' if f.endswith('_usd') else 'INTEGER'} NOT NULL DEFAULT 0" for f in STAT_FIELDS
)
MIGRATIONS: tuple[tuple[int, str], ...] = (
    (
        1,
        f"""
        CREATE TABLE ctx_proxy_sessions (
            id TEXT PRIMARY KEY, key_digest TEXT NOT NULL, provider TEXT NOT NULL, model TEXT NOT NULL,
            branch_of TEXT, name TEXT, window_tokens INTEGER NOT NULL,
            messages INTEGER NOT NULL DEFAULT 0, turns INTEGER NOT NULL DEFAULT 0, last_link BLOB,
            dropped BOOLEAN NOT NULL DEFAULT FALSE, created REAL NOT NULL DEFAULT (julianday('now')),
            {_STATS}
        );
        CREATE INDEX ctx_proxy_sessions_key ON ctx_proxy_sessions (key_digest, name);
        CREATE TABLE ctx_proxy_links (
            link BLOB PRIMARY KEY, session TEXT NOT NULL REFERENCES ctx_proxy_sessions (id),
            pos INTEGER NOT NULL
        );
        CREATE TABLE ctx_proxy_turns (
            session TEXT NOT NULL REFERENCES ctx_proxy_sessions (id), turn INTEGER NOT NULL,
            messages INTEGER NOT NULL, budget INTEGER, at REAL NOT NULL, status INTEGER, usage BLOB,
            PRIMARY KEY (session, turn)
        );
        """,
    ),
    (
        2,
        """
        CREATE TABLE ctx_proxy_jobs (
            session TEXT NOT NULL REFERENCES ctx_proxy_sessions (id), turn INTEGER NOT NULL,
            kind TEXT NOT NULL, input BLOB NOT NULL, input_bytes INTEGER NOT NULL, created REAL NOT NULL,
            status TEXT NOT NULL DEFAULT 'queued', outcome BLOB, ran_by TEXT, finished REAL,
            applied_turn INTEGER,
            PRIMARY KEY (session, turn, kind)
        );
        CREATE INDEX ctx_proxy_jobs_applied ON ctx_proxy_jobs (session, applied_turn)
            WHERE applied_turn IS NOT NULL;
        """,
    ),
    (
        3,
        """
        ALTER TABLE ctx_proxy_turns ADD COLUMN realigned INTEGER;
        CREATE INDEX ctx_proxy_links_session ON ctx_proxy_links (session, pos);
        """,
    ),
    (
        4,
        """
        ALTER TABLE ctx_proxy_sessions ADD COLUMN digests BLOB;
        """,
    ),
)


class _Connection:
    """The SQLite connection in the index's dialect: ``%s`` parameters, ``transaction()``."""

    def __init__(self, db: sqlite3.Connection) -> None:
        self.db = db

    def execute(self, sql: str | bytes, args: Sequence[Any] = ()) -> sqlite3.Cursor:
        text = sql.decode() if isinstance(sql, bytes) else sql
        return self.db.execute(text.replace("%s", "?"), tuple(args))

    @contextlib.contextmanager
    def transaction(self) -> Iterator[None]:
        self.db.execute("BEGIN IMMEDIATE")
        try:
            yield
        except BaseException:
            self.db.execute("ROLLBACK")
            raise
        self.db.execute("COMMIT")


def migrate(db: sqlite3.Connection) -> list[int]:
    """Bring the file's proxy tables up to date (``MIGRATIONS`` after ``PRAGMA user_version``).

    Returns:
        The numbers applied now.
    """
    done = int(db.execute("PRAGMA user_version").fetchone()[0])
    applied = []
    for version, sql in MIGRATIONS:
        if version <= done:
            continue
        db.execute("BEGIN IMMEDIATE")
        try:
            for statement in filter(str.strip, sql.split(";")):
                db.execute(statement)
            db.execute(f"PRAGMA user_version = {version}")
        except BaseException:
            db.execute("ROLLBACK")
            raise
        db.execute("COMMIT")
        applied.append(version)
    return applied


class LocalStore(ProxyStore):
    """``ProxyStore`` at ``path`` with the conversation index's tables (see the module docstring).
    Every method takes the connection's lock. ``checkpoint``: the log copied back by a thread of
    this store's (``checkpoint.Checkpointer``); False for another process's connection to the
    node's file (the job process: ``job_process``), whose commits checkpoint as SQLite's default.

    Raises:
        StoreError: when the file cannot be opened or migrated, and from any method when SQLite fails.
    """

    def __init__(self, path: str | Path, *, checkpoint: bool = True) -> None:
        super().__init__(path)
        self.url = str(path)
        self._lock = threading.RLock()
        try:
            migrate(self._db)
        except sqlite3.Error as exc:
            raise StoreError(f"{path}: cannot migrate the proxy's tables: {exc}") from exc
        self.checkpointer: Checkpointer | None = None
        if str(path) != ":memory:" and checkpoint:  # the log copied back off the requests
            self._db.execute("PRAGMA wal_autocheckpoint=0")
            self.checkpointer = Checkpointer(path)

    @contextlib.contextmanager
    def connection(self) -> Iterator[_Connection]:
        """The connection, this thread's alone until the block ends; SQLite errors become
        ``StoreError``."""
        with self._lock:
            try:
                yield _Connection(self._db)
            except sqlite3.Error as exc:
                raise StoreError(f"SQLite: {type(exc).__name__}: {exc}") from exc

    def claim(self, session: str, conn: Any = None) -> int:
        """No fencing number: one node's locks are its process's own (``LocalLocks``)."""
        return NO_FENCE

    def append_batch(
        self, conn: _Connection, session: str, entries: Sequence[tuple[EntryKind, Any]], fence: int = NO_FENCE
    ) -> list[Entry]:
        """Append ``entries`` in order inside the caller's transaction on ``conn``."""
        if not entries:
            return []
        row = conn.execute("SELECT COALESCE(MAX(seq), -1) FROM entries WHERE session = %s", (session,))
        first = int(row.fetchone()[0]) + 1
        rows = [(session, first + i, k, self._enc.encode(p)) for i, (k, p) in enumerate(entries)]
        conn.db.executemany("INSERT INTO entries VALUES (?, ?, ?, ?)", rows)
        self._seq.pop(session, None)  # ``append`` reads the next number again
        return [Entry(session, first + i, k, p) for i, (k, p) in enumerate(entries)]

    def append(self, session: str, kind: EntryKind, payload: Any) -> Entry:
        with self._lock:
            return super().append(session, kind, payload)

    def entries(self, session: str, kind: EntryKind | None = None) -> list[Entry]:
        with self._lock:
            return super().entries(session, kind)

    def put_artifact(self, session: str, artifact_id: str, content: str, meta: dict[str, Any]) -> None:
        with self._lock:
            super().put_artifact(session, artifact_id, content, meta)

    def get_artifact(self, session: str, artifact_id: str) -> tuple[str, dict[str, Any]]:
        with self._lock:
            return super().get_artifact(session, artifact_id)

    def artifact_ids(self, session: str) -> list[str]:
        with self._lock:
            return super().artifact_ids(session)

    def close(self) -> None:
        if self.checkpointer is not None:
            self.checkpointer.close()
        with self._lock:
            super().close()


class SQLiteConversationIndex(ConversationIndex):
    """``ConversationIndex`` on a ``LocalStore`` (its two PostgreSQL-only statements rewritten)."""

    @staticmethod
    def _match(
        conn: Any, key: str, links: Sequence[bytes], name: str | None, root: bytes = b""
    ) -> Found | None:
        wanted = [root, *links] if root else list(links)
        if name is not None or not wanted:
            return ConversationIndex._match(conn, key, links, name)
        found = None
        for start in range(0, len(wanted), 500):  # SQLite's parameters per statement
            part = wanted[start : start + 500]
            marks = ", ".join("?" * len(part))
            row = conn.execute(
                "SELECT s.id, s.messages, s.turns, s.model, l.pos FROM ctx_proxy_links l "
                "JOIN ctx_proxy_sessions s ON s.id = l.session "
                f"WHERE l.link IN ({marks}) AND NOT s.dropped ORDER BY l.pos DESC LIMIT 1",
                part,
            ).fetchone()
            if row is not None and (found is None or int(row[4]) > found[4]):
                found = row
        return None if found is None else index_found(found)

    def advance(
        self, sid: str, links: Sequence[bytes], known: int, conn: Any = None, digests: Sequence[bytes] = ()
    ) -> None:
        if conn is None:
            with self.store.connection() as own, own.transaction():
                return self.advance(sid, links, known, own, digests)
        rows = [(link, sid, pos) for pos, link in enumerate(links) if pos >= known]
        conn.db.executemany(
            "INSERT INTO ctx_proxy_links (link, session, pos) VALUES (?, ?, ?) "
            "ON CONFLICT (link) DO UPDATE SET session = excluded.session, pos = excluded.pos",
            rows,
        )
        conn.execute(
            "UPDATE ctx_proxy_sessions SET messages = %s, last_link = %s, digests = %s WHERE id = %s",
            (len(links), links[-1] if links else None, packed(links, digests), sid),
        )
        return None
