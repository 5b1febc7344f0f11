"""The proxy's background jobs in the session store (table ``ctx_proxy_jobs``): what a job works
on, its outcome, and the turn at which a session applied it.

One row a job, keyed ``(session, turn, kind)``: ``turn`` is the session's turn whose upkeep
started it (a session starts at most one job of a kind a turn); ``input`` its snapshot
(msgpack, ``jobs.NotesInput``; emptied once the outcome is written, ``input_bytes`` its size),
written with the turn's answer (``ConversationIndex.finish_turn``);
``status`` ``queued`` until a worker writes ``done`` or ``failed`` with the ``outcome`` and its
name (``ran_by``), once (a second run of the job, after its worker was thought dead, finds it
written and changes nothing); ``applied_turn`` the turn whose request applied the outcome,
written with that turn's record (``ConversationIndex.record_turn``), so that a node replaying the
session applies it at the same turn. The statements are in the dialect both stores speak
(``%s`` parameters; ``PostgresStore`` and ``local.LocalStore``). Every method raises
``StoreError`` when the database fails.
"""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import AbstractContextManager
from typing import Any, NamedTuple, Protocol

QUEUED, DONE, FAILED = "queued", "done", "failed"

class Connectable(Protocol):
    """A store with connections in the index's dialect (``index.IndexStore``)."""

    def connection(self) -> AbstractContextManager[Any]: ...


class JobState(NamedTuple):
    """A job's row as the session's next request reads it: ``created`` and ``finished`` are
    Unix seconds (``finished`` None while queued)."""

    status: str
    outcome: bytes | None
    created: float
    ran_by: str | None


class Applied(NamedTuple):
    """An outcome a session applied at turn ``at``: the job of turn ``turn``."""

    at: int
    turn: int
    kind: str
    outcome: bytes


class JobIndex:
    """The jobs of the sessions in ``store``'s database (see the module docstring)."""

    def __init__(self, store: Connectable) -> None:
        self.store = store

    @staticmethod
    def add(conn: Any, sid: str, jobs: Sequence[tuple[int, str, bytes]], now: float) -> None:
        """Record ``sid``'s new jobs ``(turn, kind, input)`` queued, inside ``conn``'s transaction."""
        for turn, kind, data in jobs:
            conn.execute(
                "INSERT INTO ctx_proxy_jobs (session, turn, kind, input, input_bytes, created) "
                "VALUES (%s, %s, %s, %s, %s, %s) ON CONFLICT DO NOTHING",
                (sid, turn, kind, data, len(data), now),
            )

    @staticmethod
    def mark_applied(conn: Any, sid: str, jobs: Sequence[tuple[int, str]], at: int) -> None:
        """Record that turn ``at`` of ``sid`` applied the outcomes of ``jobs`` ``(turn, kind)``,
        inside ``conn``'s transaction."""
        for turn, kind in jobs:
            conn.execute(
                "UPDATE ctx_proxy_jobs SET applied_turn = %s WHERE session = %s AND turn = %s AND kind = %s",
                (at, sid, turn, kind),
            )

    def load(self, sid: str, turn: int, kind: str) -> tuple[str, bytes] | None:
        """A job's status and input, None when there is no such job."""
        with self.store.connection() as conn:
            row = conn.execute(
                "SELECT status, input FROM ctx_proxy_jobs WHERE session = %s AND turn = %s AND kind = %s",
                (sid, turn, kind),
            ).fetchone()
        return (str(row[0]), bytes(row[1])) if row is not None else None

    def complete(
        self, sid: str, turn: int, kind: str, status: str, outcome: bytes, ran_by: str, now: float
    ) -> bool:
        """Write a queued job's outcome (``status`` done or failed) and drop its snapshot (no
        longer read; ``input_bytes`` keeps its size); False when it was written already
        (another run of the job)."""
        with self.store.connection() as conn:
            cur = conn.execute(
                "UPDATE ctx_proxy_jobs SET status = %s, outcome = %s, ran_by = %s, finished = %s, "
                "input = %s WHERE session = %s AND turn = %s AND kind = %s AND status = %s",
                (status, outcome, ran_by, now, b"", sid, turn, kind, QUEUED),
            )
            return bool(cur.rowcount)

    def state(self, sid: str, turn: int, kind: str) -> JobState | None:
        """A job's status, outcome (None while queued), creation and worker; None: no such job."""
        with self.store.connection() as conn:
            row = conn.execute(
                "SELECT status, outcome, created, ran_by FROM ctx_proxy_jobs "
                "WHERE session = %s AND turn = %s AND kind = %s",
                (sid, turn, kind),
            ).fetchone()
        if row is None:
            return None
        return JobState(str(row[0]), bytes(row[1]) if row[1] is not None else None, float(row[2]), row[3])

    def applied_since(self, sid: str, start: int) -> list[Applied]:
        """The outcomes ``sid`` applied at turn ``start`` or later, in the order of those turns."""
        with self.store.connection() as conn:
            rows = conn.execute(
                "SELECT applied_turn, turn, kind, outcome FROM ctx_proxy_jobs "
                "WHERE session = %s AND applied_turn >= %s ORDER BY applied_turn, turn",
                (sid, start),
            ).fetchall()
        return [Applied(int(a), int(t), str(k), bytes(o)) for a, t, k, o in rows]

    def counts(self) -> dict[str, int]:
        """How many jobs the store holds by status (every session's)."""
        with self.store.connection() as conn:
            rows = conn.execute("SELECT status, count(*) FROM ctx_proxy_jobs GROUP BY status").fetchall()
        return {str(s): int(n) for s, n in rows}
