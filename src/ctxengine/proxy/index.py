"""The proxy's conversation index in PostgreSQL, shared by every node (``--store postgresql://``),
or in the node's own SQLite file (``--store DIR``: ``local``, where a restart loses no session).

What the in-memory ``SessionTable`` holds for one process, kept where every node finds it:
``ctx_proxy_sessions`` (one row a session: key digest, never a key; wire format, model, branch,
name, how many client messages its chain covers, its figures), ``ctx_proxy_links`` (chain link ->
session and position: the request's links are looked up in one indexed query) and
``ctx_proxy_turns`` (per request: how many client messages the engine had, the output budget, the
clock, the upstream's status and usage), from which a node that never saw a session rebuilds its
engine (``apply.replay_turn``). Every method is synchronous (the proxy calls it on a thread of
its store's) and raises ``StoreError`` when the database fails.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Sequence
from contextlib import AbstractContextManager, nullcontext
from typing import TYPE_CHECKING, Any, Protocol

import msgspec

from ctxengine.messages.model import Usage
from ctxengine.proxy.identity import DIGEST_BYTES
from ctxengine.proxy.job_index import JobIndex
from ctxengine.proxy.sessions import SessionStats
from ctxengine.store.base import NO_FENCE, Entry, EntryKind, SessionStore

if TYPE_CHECKING:
    import psycopg

STAT_FIELDS = tuple(f.name for f in dataclasses.fields(SessionStats))
REPORT_COLUMNS = ("id", "provider", "model", "branch_of", "name", "messages", "window_tokens", *STAT_FIELDS)
_USAGE = msgspec.msgpack.Decoder(Usage)


class Found(msgspec.Struct, frozen=True):
    """A stored session a request may continue: ``whole`` when all of its chain (``messages``
    client messages) is a prefix of the request's; ``shared``: how many leading client messages
    the two have in common (0: only the chain's root, ``ROOT_POS``)."""

    id: str
    messages: int
    turns: int
    model: str
    whole: bool
    shared: int = 0


ROOT_POS = -1  # the position of a chain's root in ``ctx_proxy_links``: the link of no message


class TurnRecord(msgspec.Struct, frozen=True):
    """One request as the engine saw it: ``messages`` client messages ingested, ``budget``
    (tokens, None: the engine's own) and ``at`` (Unix seconds) given to ``assemble``; ``status``
    None when the node died before the upstream answered; ``realigned``: the client had moved
    the session's messages from this index on (``align``), taken out of the view before the
    request's were ingested from there (None: the request continued the session)."""

    turn: int
    messages: int
    budget: int | None
    at: float
    status: int | None
    usage: Usage | None
    realigned: int | None = None


def pipelined(conn: Any) -> AbstractContextManager[Any]:
    """``conn``'s pipeline mode where it has one (psycopg 3 on PostgreSQL: the statements whose
    results nobody reads go out together, one round trip at the next read or at the end, instead
    of one each), else nothing (SQLite)."""
    pipeline = getattr(conn, "pipeline", None)
    return pipeline() if pipeline is not None else nullcontext()


def replayable(turns: Sequence[TurnRecord], realigned_now: int | None = None) -> bool:
    """Whether ``turns`` (in order) can be replayed from a request that continues the session
    (realigns it at ``realigned_now``): each turn's messages must be where the request has them,
    that is before every later realignment (a realignment moved the messages after its index)."""
    floor = realigned_now
    for t in reversed(turns):
        if floor is not None and t.messages > floor:
            return False
        if t.realigned is not None:
            floor = t.realigned if floor is None else min(floor, t.realigned)
    return True


DIGEST_SIZE = 1 + DIGEST_BYTES  # a message's own digest: its role's tag, then its hash


def packed(links: Sequence[bytes], digests: Sequence[bytes]) -> bytes | None:
    """The digests of a chain of ``links`` as one value (None when they do not cover it)."""
    if len(digests) != len(links) or any(len(d) != DIGEST_SIZE for d in digests):
        return None
    return b"".join(digests)


def found(row: Sequence[Any]) -> Found:
    """The ``Found`` of a row ``(id, messages, turns, model, pos)`` of a link lookup."""
    shared = int(row[4]) + 1
    return Found(row[0], int(row[1]), int(row[2]), row[3], int(row[1]) == shared, shared)


class IndexStore(SessionStore, Protocol):
    """A store that holds the index too: ``PostgresStore``, or the proxy's SQLite file
    (``local.LocalStore``)."""

    url: str

    def connection(self) -> AbstractContextManager[Any]:
        """A connection (``execute``, ``transaction()``); failures become ``StoreError``."""
        ...

    def claim(self, session: str, conn: Any = None) -> int:
        """The session's next fencing number (``NO_FENCE`` where there are none)."""
        ...

    def append_batch(
        self, conn: Any, session: str, entries: Sequence[tuple[EntryKind, Any]], fence: int = NO_FENCE
    ) -> list[Entry]:
        """Append ``entries`` inside the caller's transaction on ``conn``."""
        ...


class ConversationIndex:
    """Sessions, chain links, turns and figures of the proxy in ``store``'s database."""

    def __init__(self, store: IndexStore) -> None:
        self.store = store

    def match(self, key: str, links: Sequence[bytes], name: str | None, root: bytes = b"") -> Found | None:
        """The session whose chain is the longest prefix of ``links`` (or the one ``name`` names
        for ``key``), None when there is none. Never one of another key (the key is in each link).
        When no link is known, the newest session of the chain's ``root`` if given (``claim_root``:
        a client that rewrote its first message may still realign it, ``align``)."""
        with self.store.connection() as conn:
            return self._match(conn, key, links, name, root)

    def claim_and_match(
        self, sid: str, key: str, links: Sequence[bytes], name: str | None, root: bytes = b""
    ) -> tuple[Found | None, int]:
        """``sid``'s next fencing number (``PostgresStore.claim``: the caller holds its lock), and
        ``match``, on one connection."""
        with self.store.connection() as conn:
            fence = self.store.claim(sid, conn)
            return self._match(conn, key, links, name, root), fence

    @staticmethod
    def claim_root(conn: Any, sid: str, root: bytes) -> None:
        """Make ``sid`` the session ``root`` finds (at ``ROOT_POS``), inside the caller's
        transaction on ``conn``: the newest session of a root is the one it finds."""
        conn.execute(
            "INSERT INTO ctx_proxy_links (link, session, pos) VALUES (%s, %s, %s) "
            "ON CONFLICT (link) DO UPDATE SET session = EXCLUDED.session, pos = EXCLUDED.pos",
            (root, sid, ROOT_POS),
        )

    @staticmethod
    def _match(
        conn: psycopg.Connection[Any], key: str, links: Sequence[bytes], name: str | None, root: bytes = b""
    ) -> Found | None:
        """``match`` on ``conn``."""
        if name is not None:
            row = conn.execute(
                "SELECT id, messages, turns, model, last_link FROM ctx_proxy_sessions "
                "WHERE key_digest = %s AND name = %s AND NOT dropped ORDER BY created DESC LIMIT 1",
                (key, name),
            ).fetchone()
            if row is None:
                return None
            n = int(row[1])
            whole = n == 0 or (n <= len(links) and bytes(row[4]) == links[n - 1])
            return Found(row[0], n, int(row[2]), row[3], whole, n if whole else 0)
        wanted = [root, *links] if root else list(links)
        if not wanted:
            return None
        row = conn.execute(
            "SELECT s.id, s.messages, s.turns, s.model, l.pos FROM ctx_proxy_links l "
            "JOIN ctx_proxy_sessions s ON s.id = l.session "
            "WHERE l.link = ANY(%s) AND NOT s.dropped ORDER BY l.pos DESC LIMIT 1",
            (wanted,),
        ).fetchone()
        if row is None:
            return None
        return found(row)

    def create(
        self,
        sid: str,
        key: str,
        provider: str,
        model: str,
        window: int,
        branch_of: str | None,
        name: str | None,
    ) -> None:
        """Register a new, empty session."""
        with self.store.connection() as conn:
            conn.execute(
                "INSERT INTO ctx_proxy_sessions "
                "(id, key_digest, provider, model, window_tokens, branch_of, name) "
                "VALUES (%s, %s, %s, %s, %s, %s, %s)",
                (sid, key, provider, model, window, branch_of, name),
            )

    def advance(
        self, sid: str, links: Sequence[bytes], known: int, conn: psycopg.Connection[Any] | None = None,
        digests: Sequence[bytes] = (),
    ) -> None:  # fmt: skip
        """Record that ``sid``'s chain is ``links`` (its first ``known`` already recorded): each
        link now finds it (a branch takes over the links it shares with the session it left),
        and its client messages' own ``digests`` (``identity.chain_and_digests``: what ``align``
        compares; kept whole, ``packed``, so that a node that never saw the session can align a
        request with it). On ``conn`` (inside its transaction) when given."""
        if conn is None:
            with self.store.connection() as own, own.transaction():
                return self.advance(sid, links, known, own, digests)
        new = list(links[known:])
        if new:
            conn.execute(
                "INSERT INTO ctx_proxy_links (link, session, pos) "
                "SELECT l, %s, p FROM unnest(%s::bytea[], %s::int[]) AS t(l, p) "
                "ON CONFLICT (link) DO UPDATE SET session = EXCLUDED.session, pos = EXCLUDED.pos",
                (sid, new, list(range(known, len(links)))),
            )
        conn.execute(
            "UPDATE ctx_proxy_sessions SET messages = %s, last_link = %s, digests = %s WHERE id = %s",
            (len(links), links[-1] if links else None, packed(links, digests), sid),
        )
        return None

    def digests(self, sid: str) -> list[bytes] | None:
        """``sid``'s client messages' own digests as ``advance`` last recorded them (None: not
        recorded, a session from before they were kept)."""
        with self.store.connection() as conn:
            row = conn.execute("SELECT digests FROM ctx_proxy_sessions WHERE id = %s", (sid,)).fetchone()
        if row is None or row[0] is None:
            return None
        raw = bytes(row[0])
        return [raw[i : i + DIGEST_SIZE] for i in range(0, len(raw), DIGEST_SIZE)]

    def turns(self, sid: str, start: int) -> list[TurnRecord]:
        """``sid``'s turns from number ``start`` on, in order."""
        with self.store.connection() as conn:
            rows = conn.execute(
                "SELECT turn, messages, budget, at, status, usage, realigned FROM ctx_proxy_turns "
                "WHERE session = %s AND turn >= %s ORDER BY turn",
                (sid, start),
            ).fetchall()
        return [
            TurnRecord(t, m, b, a, st, _USAGE.decode(u) if u is not None else None, r)
            for t, m, b, a, st, u, r in rows
        ]

    def record_turn(
        self,
        sid: str,
        turn: int,
        at: tuple[int | None, float],
        fence: int,
        links: Sequence[bytes],
        known: int,
        entries: Sequence[tuple[EntryKind, Any]] = (),
        applied: Sequence[tuple[int, str]] = (),
        realigned: int | None = None,
        digests: Sequence[bytes] = (),
    ) -> None:
        """Record turn number ``turn`` (the engine has ingested the ``len(links)`` client messages
        ``links`` stand for, and assembled with budget and clock ``at``), the engine's ``entries`` of
        it, and advance the session's chain to ``links`` (``known`` of them recorded; their messages'
        own ``digests``, ``advance``), in one transaction. ``realigned``: the turn took the session's
        messages from this index on out of the view (``TurnRecord.realigned``); the session's links
        from there on stop finding it (the chain is now the request's). The turn counts as a call now:
        its answer is written after the client has it (``finish_turn``), and a node killed in between
        must not lose the call; ``finish_turn`` takes it back when the upstream refused it, and so
        does this record when it repeats an unanswered turn with the same messages (the client's retry
        of a request whose node was killed before answering). ``applied``: the background jobs
        ``(turn, kind)`` whose outcomes this turn applied (``job_index``).

        Raises:
            FencedOut: when a holder of a later fencing number has claimed the session.
            StoreError: when turn ``turn`` exists already (another writer), or the write fails.
        """
        with self.store.connection() as conn, conn.transaction(), pipelined(conn):
            self.store.append_batch(conn, sid, entries, fence)
            before = conn.execute(
                "SELECT messages, status FROM ctx_proxy_turns WHERE session = %s AND turn = %s",
                (sid, turn - 1),
            ).fetchone()
            retry = before is not None and before[1] is None and before[0] == len(links)
            conn.execute(
                "INSERT INTO ctx_proxy_turns (session, turn, messages, budget, at, realigned) "
                "VALUES (%s, %s, %s, %s, %s, %s)",
                (sid, turn, len(links), *at, realigned),
            )
            if realigned is not None:
                conn.execute("DELETE FROM ctx_proxy_links WHERE session = %s AND pos >= %s", (sid, known))
            conn.execute(
                "UPDATE ctx_proxy_sessions SET turns = %s, calls = calls + %s WHERE id = %s",
                (turn + 1, 0 if retry else 1, sid),
            )
            JobIndex.mark_applied(conn, sid, applied, turn)
            self.advance(sid, links, known, conn, digests)

    def finish_turn(
        self,
        sid: str,
        turn: int | None,
        answer: tuple[int, Usage | None],
        delta: dict[str, Any],
        entries: Sequence[tuple[EntryKind, Any]] = (),
        fence: int = NO_FENCE,
        jobs: Sequence[tuple[int, str, bytes]] = (),
    ) -> None:
        """The upstream's answer to turn ``turn`` (None: no turn was recorded): status and usage;
        the figures it added (``delta``: ``SessionStats`` field -> increment), added to the
        session's (a recorded turn's call was counted by ``record_turn``: its ``calls`` delta is
        one less); the entries the engine appended after it; the background jobs its upkeep
        started (``(turn, kind, input)``, queued: ``job_index``); in one transaction.

        Raises:
            FencedOut: when there are entries and a later lock holder has claimed the session.
            StoreError: when the write fails.
        """
        status, usage = answer
        enc = msgspec.msgpack.encode(usage) if usage is not None else None
        sets = ", ".join(f"{f} = {f} + %s" for f in STAT_FIELDS)
        with self.store.connection() as conn, conn.transaction(), pipelined(conn):
            if entries:
                self.store.append_batch(conn, sid, entries, fence)
            if turn is not None:
                conn.execute(
                    "UPDATE ctx_proxy_turns SET status = %s, usage = %s WHERE session = %s AND turn = %s",
                    (status, enc, sid, turn),
                )
            JobIndex.add(conn, sid, jobs, time.time())
            counted = {"calls": -1} if turn is not None else {}  # by ``record_turn``
            conn.execute(
                f"UPDATE ctx_proxy_sessions SET {sets} WHERE id = %s".encode(),
                (*(delta.get(f, 0) + counted.get(f, 0) for f in STAT_FIELDS), sid),
            )

    def drop(self, sid: str) -> None:
        """Mark a session whose engine failed: no request continues it (the next one starts anew)."""
        with self.store.connection() as conn:
            conn.execute("UPDATE ctx_proxy_sessions SET dropped = true WHERE id = %s", (sid,))

    def report(self, key: str | None) -> list[dict[str, Any]]:
        """The ``GET /ctxengine/sessions`` entries of ``key``'s sessions (None: every key's)."""
        cols = ", ".join(REPORT_COLUMNS)
        where, args = ("WHERE key_digest = %s", (key,)) if key is not None else ("", ())
        with self.store.connection() as conn:
            rows = conn.execute(
                f"SELECT {cols} FROM ctx_proxy_sessions {where} ORDER BY created".encode(), args
            )
            out = [dict(zip(REPORT_COLUMNS, r, strict=True)) for r in rows.fetchall()]
        for r in out:
            r["named"] = r.pop("name") is not None
        return out

    def count(self) -> int:
        """How many sessions the store holds (every key's)."""
        with self.store.connection() as conn:
            row = conn.execute("SELECT count(*) FROM ctx_proxy_sessions").fetchone()
        return int(row[0]) if row is not None else 0
