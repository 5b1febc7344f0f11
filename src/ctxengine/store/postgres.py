"""``PostgresStore``: the ``SessionStore`` on PostgreSQL (psycopg 3 and its connection pool), for
sessions shared by several processes and machines (``ctxengine proxy --store postgresql://...``).

Entries are msgpack-encoded (msgspec) in one append-only table whose ``(session, seq)`` key is
unique: an append takes the next sequence number in its ``INSERT``, the writers of one session
queued on a transaction-level advisory lock (the statements pipelined: one round trip); should
another writer take the number all the same (the key refuses it), it retries (``APPEND_TRIES``
times, then ``StoreError``): two writers never share a number and none is lost silently.
Artifact content is stored once by its hash (content-addressed); a session's artifacts point at
it. A writer that holds a fencing number (``fence``, handed out by ``claim`` to the holder of a
lock across nodes) is refused with ``FencedOut`` once a later holder has claimed the session.

The schema is created and migrated by the program (``pg_schema``), on the first use. Needs the
``gateway`` extra (``pip install 'ctxengine[gateway]'``).
"""

from __future__ import annotations

import contextlib
import hashlib
import random
import time
from collections.abc import Iterator, Sequence
from typing import Any

import msgspec
import psycopg
from psycopg_pool import ConnectionPool

from ctxengine.store.base import NO_FENCE, Entry, EntryKind, FencedOut, StoreError
from ctxengine.store.pg_schema import migrate

APPEND_TRIES = 10
RETRY_PAUSE_S = 0.002  # at most, random: two writers that collided do not collide again in step
CONNECT_TIMEOUT_S = 3  # a connection attempt; a request waits at most POOL_TIMEOUT_S for one
POOL_TIMEOUT_S = 5.0

_APPEND = """
INSERT INTO ctx_entries (session, seq, kind, payload)
SELECT %(s)s, COALESCE(MAX(seq), -1) + 1, %(k)s, %(p)s FROM ctx_entries WHERE session = %(s)s
HAVING NOT EXISTS (SELECT 1 FROM ctx_fences WHERE session = %(s)s AND fence > %(f)s)
RETURNING seq
"""
_CLAIM = """
INSERT INTO ctx_fences (session, fence) VALUES (%(s)s, 1)
ON CONFLICT (session) DO UPDATE SET fence = ctx_fences.fence + 1
RETURNING fence
"""


def _asynchronous_commit(conn: psycopg.Connection[Any]) -> None:
    conn.execute("SET synchronous_commit = off")


class PostgresStore:
    """Append-only entries and content-addressed artifacts in PostgreSQL (a ``SessionStore``).

    Any thread may use it at once (each call takes a pooled connection). Nothing in it is a key or
    a credential: the URL's password, if any, is used to connect and never stored.

    Args:
        url: a libpq URL or conninfo, ``postgresql://USER@HOST:PORT/DB`` (add
            ``?options=-csearch_path%3DNAME`` to keep the tables in schema NAME).
        min_size / max_size: the pool's connections.
        timeout: seconds a call waits for a connection before ``StoreError``.
        synchronous_commit: False: a commit does not wait for its write-ahead log to reach the
            disk (``synchronous_commit = off``): a crash of the server can lose the last commits
            (never corrupts); an append took 0.7 ms instead of 3.7 ms (an fsync) here.

    Raises:
        StoreError: from any method when the database cannot be reached within ``POOL_TIMEOUT_S``
            or a statement fails (after ``timeout`` seconds at most when it is down). The
            constructor itself does not connect (the pool connects in the background), so a
            proxy starts while the database is down.
    """

    def __init__(
        self,
        url: str,
        *,
        min_size: int = 1,
        max_size: int = 8,
        timeout: float = POOL_TIMEOUT_S,
        synchronous_commit: bool = True,
    ) -> None:
        self.url = url
        self._pool = ConnectionPool(
            url,
            min_size=min_size,
            max_size=max_size,
            open=False,
            timeout=timeout,
            kwargs={"autocommit": True, "connect_timeout": CONNECT_TIMEOUT_S},
            check=ConnectionPool.check_connection,
            configure=None if synchronous_commit else _asynchronous_commit,
            name="ctxengine",
        )
        self._pool.open(wait=False)
        self._migrated = False
        self.append_retries = 0  # appends that found their number taken by another writer
        self._enc = msgspec.msgpack.Encoder()
        self._dec = msgspec.msgpack.Decoder()

    @contextlib.contextmanager
    def connection(self) -> Iterator[psycopg.Connection[tuple[Any, ...]]]:
        """A pooled connection (autocommit) to a migrated schema; psycopg and pool errors become
        ``StoreError`` (``StoreError`` raised inside passes as it is)."""
        try:
            with self._pool.connection() as conn:
                if not self._migrated:
                    migrate(conn)
                    self._migrated = True
                yield conn
        except StoreError:
            raise
        except (psycopg.Error, OSError) as exc:  # PoolTimeout is a psycopg.OperationalError
            raise StoreError(f"PostgreSQL: {type(exc).__name__}: {exc}".strip()) from exc

    def claim(self, session: str, conn: psycopg.Connection[Any] | None = None) -> int:
        """Hand the caller (who holds the session's lock across processes) the session's next
        fencing number: from now on, writes with an older one are refused (``FencedOut``). On
        ``conn``, one of this store's connections, when given. The numbers live here, with
        what they protect, so that no restart of the lock service can hand out an old one.

        Returns:
            The number, 1 for the session's first claim.

        Raises:
            StoreError: when the database fails.
        """
        if conn is None:
            with self.connection() as own:
                return self.claim(session, own)
        row = conn.execute(_CLAIM, {"s": session}).fetchone()
        return int(row[0]) if row is not None else NO_FENCE

    def append(self, session: str, kind: EntryKind, payload: Any, *, fence: int = NO_FENCE) -> Entry:
        """Append an entry with the session's next sequence number.

        Args:
            session: the session's id.
            kind: the entry's kind.
            payload: kind-specific JSON-able data (msgpack-encoded).
            fence: the writer's fencing number (``NO_FENCE`` without a lock: refused only once
                a lock holder has claimed the session).

        Returns:
            The entry, with its sequence number.

        Raises:
            FencedOut: when a lock holder with a higher fencing number has claimed the session.
            StoreError: when the write fails, or another writer took the number ``APPEND_TRIES``
                times in a row.
        """
        args = {"s": session, "k": kind, "p": self._enc.encode(payload), "f": fence}
        for _ in range(APPEND_TRIES):
            with self.connection() as conn:
                try:  # the writers of one session queue on the lock (pipelined: one round trip)
                    with conn.pipeline(), conn.transaction():
                        conn.execute("SELECT pg_advisory_xact_lock(hashtextextended(%s, 0))", (session,))
                        row = conn.execute(_APPEND, args).fetchone()
                except psycopg.errors.UniqueViolation:  # another writer took the number all the same
                    self.append_retries += 1
                    time.sleep(random.uniform(0, RETRY_PAUSE_S))
                    continue
            if row is None:
                raise FencedOut(f"cannot append to {session}: fencing number {fence} is out of date")
            return Entry(session, int(row[0]), kind, payload)
        raise StoreError(f"cannot append to {session}: {APPEND_TRIES} concurrent writers took the number")

    def append_batch(
        self,
        conn: psycopg.Connection[Any],
        session: str,
        entries: Sequence[tuple[EntryKind, Any]],
        fence: int = NO_FENCE,
    ) -> list[Entry]:
        """Append ``entries`` (kind, payload) in order, on ``conn`` (one of this store's
        connections) inside the caller's transaction: they are stored with whatever else it
        writes, or not at all. The session's writers queue on its advisory lock, so the numbers
        taken are free.

        Raises:
            FencedOut: when a lock holder with a higher fencing number has claimed the session
                (checked even for no entries).
            psycopg.Error: when a statement fails (inside ``connection()``: ``StoreError``).
        """
        conn.execute("SELECT pg_advisory_xact_lock(hashtextextended(%s, 0))", (session,))
        stale = conn.execute(
            "SELECT 1 FROM ctx_fences WHERE session = %s AND fence > %s", (session, fence)
        ).fetchone()
        if stale is not None:
            raise FencedOut(f"cannot append to {session}: fencing number {fence} is out of date")
        if not entries:
            return []
        row = conn.execute("SELECT COALESCE(MAX(seq), -1) FROM ctx_entries WHERE session = %s", (session,))
        first = int((row.fetchone() or (-1,))[0]) + 1
        rows = [(session, first + i, k, self._enc.encode(p)) for i, (k, p) in enumerate(entries)]
        with conn.cursor() as cur:
            cur.executemany(
                "INSERT INTO ctx_entries (session, seq, kind, payload) VALUES (%s, %s, %s, %s)", rows
            )
        return [Entry(session, first + i, k, p) for i, (k, p) in enumerate(entries)]

    def entries(self, session: str, kind: EntryKind | None = None) -> list[Entry]:
        """All entries of a session (optionally of one kind), by sequence number.

        Raises:
            StoreError: when the read fails.
        """
        sql = "SELECT seq, kind, payload FROM ctx_entries WHERE session = %s"
        args: tuple[Any, ...] = (session,)
        if kind is not None:
            sql += " AND kind = %s"
            args += (kind,)
        with self.connection() as conn:
            rows = conn.execute(sql + " ORDER BY seq", args).fetchall()
        return [Entry(session, int(s), k, self._dec.decode(p)) for s, k, p in rows]

    def put_artifact(self, session: str, artifact_id: str, content: str, meta: dict[str, Any]) -> None:
        """Store original content under ``artifact_id`` (idempotent; the content itself is kept
        once for every session and id that hold it).

        Raises:
            StoreError: when the write fails.
        """
        h = hashlib.blake2b(content.encode(), digest_size=20).digest()
        with self.connection() as conn, conn.transaction():
            known = "SELECT 1 FROM ctx_artifacts WHERE session = %s AND id = %s"
            if conn.execute(known, (session, artifact_id)).fetchone() is not None:
                return
            conn.execute(
                "INSERT INTO ctx_blobs (hash, content) VALUES (%s, %s) ON CONFLICT DO NOTHING", (h, content)
            )
            conn.execute(
                "INSERT INTO ctx_artifacts (session, id, hash, meta) VALUES (%s, %s, %s, %s) "
                "ON CONFLICT DO NOTHING",
                (session, artifact_id, h, self._enc.encode(meta)),
            )

    def get_artifact(self, session: str, artifact_id: str) -> tuple[str, dict[str, Any]]:
        """``(content, meta)`` of an artifact.

        Raises:
            StoreError: when it does not exist or the read fails.
        """
        with self.connection() as conn:
            row = conn.execute(
                "SELECT b.content, a.meta FROM ctx_artifacts a JOIN ctx_blobs b ON b.hash = a.hash "
                "WHERE a.session = %s AND a.id = %s",
                (session, artifact_id),
            ).fetchone()
        if row is None:
            raise StoreError(f"no artifact {artifact_id!r} in session {session!r}")
        return str(row[0]), dict(self._dec.decode(row[1]))

    def artifact_ids(self, session: str) -> list[str]:
        """The ids of a session's artifacts, in the order they were stored.

        Raises:
            StoreError: when the read fails.
        """
        with self.connection() as conn:
            rows = conn.execute("SELECT id FROM ctx_artifacts WHERE session = %s ORDER BY ord", (session,))
            return [str(r[0]) for r in rows.fetchall()]

    def close(self) -> None:
        """Close the pool (waits for connections in use)."""
        self._pool.close()
