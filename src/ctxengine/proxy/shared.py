"""Sessions shared by every node of the proxy (``--store postgresql://...``, ``--redis``), or
kept in one node's SQLite file (``--store DIR``: ``open_local``, the process's own locks).

The in-memory ``SessionTable`` becomes a cache in front of the store: a request's session is
the one the store's conversation index (``index``) finds for its chain links, so any node finds
any session, and a restarted node loses none (the table only gives a first guess, checked
against the store). Then, in order: the node's own lock of the session (requests of one session
on one node queue there), the lock across nodes (``locks``: Redis, with a fencing number the
store checks), the match in the store (another node may have moved the session on meanwhile),
and the cached engine brought up to the store's last turn (a node that never saw the session, or
saw it turns ago, replays the recorded turns on a new or its cached engine:
``apply.replay_turn``, the writes muted, as they are stored). The request's turn is recorded
once the projection is made (``prepare``: with the engine's entries and the request's links, in
one transaction), its usage and figures once the upstream answered (``finish``, ``release``):
what ``GET /ctxengine/sessions`` reports is the store's, the same on every node. A request that
only moves the session's messages or rewrites a context message (``align``: aider) realigns it
on the node that holds its engine at the last turn; a node that must first replay turns a
realignment has moved since (``index.replayable``) replays them from the store's entries instead
(``stored_replay``).

Any failure of the store or of the lock service makes the request fail open (forwarded
unchanged, counted; a warning once per outage, ``Outage``); the session catches up at the first
request after the store is back (the client sends the whole conversation every time).
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
import weakref
from collections.abc import Awaitable, Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict
from typing import Any, TypeVar

from ctxengine.engine.core import ContextEngine
from ctxengine.messages.model import Usage
from ctxengine.proxy.align import Kind, align
from ctxengine.proxy.apply import Prepared, finish, prepare, replay_turn
from ctxengine.proxy.identity import SESSION_HEADER, key_digest, root
from ctxengine.proxy.index import ConversationIndex, Found, IndexStore, TurnRecord, replayable
from ctxengine.proxy.job_index import QUEUED, Applied, JobIndex
from ctxengine.proxy.jobs import NOTES, JobKey, JobQueue, attach, decode_outcome, encode_input, runner_of
from ctxengine.proxy.locks import Held, LockUnavailable, SessionLocks
from ctxengine.proxy.outage import Outage
from ctxengine.proxy.sessions import ProxySession, SessionTable
from ctxengine.proxy.store import FencedWriter
from ctxengine.proxy.stored_replay import StoredTurns
from ctxengine.proxy.wire import ClientRequest, Wire
from ctxengine.store.base import NO_FENCE, EntryKind, StoreError

log = logging.getLogger("ctxengine.proxy")
T = TypeVar("T")
Run = Callable[..., Awaitable[Any]]
MakeEngine = Callable[[str, str, "int | None", FencedWriter], ContextEngine]
REQUEUE_S = 120.0  # a job still queued this long after its turn is submitted again (a queue lost)
IO_THREADS = 8  # the store's round trips of one node at once (its pool holds as many connections)
MATCH_TRIES = 5  # a session moved on under a waiting request: match again, this many times
# a finished turn, for ``ConversationIndex.finish_turn``: turn, (status, usage), figures added,
# the engine's entries since the turn's record, fencing number, the jobs its upkeep started
Answer = tuple[
    int | None, tuple[int, Usage | None], dict[str, Any], list[tuple[EntryKind, Any]], int,
    list[tuple[int, str, bytes]],
]  # fmt: skip
Chain = tuple[list[bytes], list[bytes], int]  # a request's links, its messages' digests, how many are stored


class Unreplayable(Exception):
    """The session's recorded turns cannot be replayed (the store's entries do not hold them):
    the request starts a branch instead."""


class SharedSessions:
    """The sessions of a proxy node on a shared store (see the module docstring).

    Args:
        store: the shared PostgreSQL store, or the node's own SQLite file (``local.LocalStore``).
        locks: the lock across nodes (``RedisLocks``, or ``LocalLocks`` for one node).
        table: the node's cache of sessions (engines).
        run: runs a function on the engine thread.
        make_engine: ``(sid, model, window or None, writer) -> ContextEngine`` (engine thread).
        jobs: the queue of the engines' background notes updates (``jobs``; None: they run in
            line, or on the engine's own thread, unrecorded).
    """

    def __init__(
        self,
        store: IndexStore,
        locks: SessionLocks,
        table: SessionTable,
        run: Run,
        make_engine: MakeEngine,
        index: ConversationIndex | None = None,
        jobs: JobQueue | None = None,
    ) -> None:
        self.store, self.locks, self.table, self.run = store, locks, table, run
        self.jobs, self.job_index = jobs, JobIndex(store)
        self._requeued: dict[JobKey, float] = {}  # when this node last submitted a job again
        # the store's round trips run here, in parallel, leaving the engine thread to the engines
        self._io = ThreadPoolExecutor(max_workers=IO_THREADS, thread_name_prefix="ctxengine-store")
        self._answers: dict[str, Answer] = {}  # a finished turn's, until ``release`` stores it
        self._stats_at: dict[str, dict[str, Any]] = {}  # a session's figures when its request began
        self._chains: dict[str, Chain] = {}
        self.make_engine = make_engine
        self.index = index if index is not None else ConversationIndex(store)
        self.store_outage = Outage(f"the session store ({_where(store.url)})")
        self.lock_outage = Outage("the lock service")
        # the node's own lock of each session: held by its cached session and by waiting requests
        # (a weak map, so it goes with them)
        self._local: weakref.WeakValueDictionary[str, asyncio.Lock] = weakref.WeakValueDictionary()
        self._creating = asyncio.Lock()
        # engines made for a session this node had not cached, and turns replayed to catch up
        # (another worker or node served them): what session affinity saves
        self.rebuilt = 0
        self.replayed = 0

    async def session(
        self, wire: Wire, request: ClientRequest, headers: Mapping[str, str], window: int | None
    ) -> ProxySession:
        """The session of ``request``, both its locks held and the engine caught up with the
        store. Raises ``StoreError`` or ``LockUnavailable`` (the caller fails open)."""
        key = key_digest(headers)
        start = root(wire.provider, key, request.fixed_prefix)
        links, digests = self.table.chains.chain(start, request.conversation, request.raws)
        name, keyed = headers.get(SESSION_HEADER) or None, (key, start)
        for attempt in range(MATCH_TRIES):
            # first a guess from this node's cache (no round trip), checked once locked
            sid = self._cached(links) if attempt == 0 and name is None else None
            if sid is None:
                found = await self.io(self.index.match, key, links, name, start)
                if found is not None and not found.whole and await self._realigns(found, digests) is not None:
                    sid = found.id  # the client moved messages: the session continues, realigned
                elif found is None or not found.whole:
                    made = await self._create(wire, request, keyed, (links, digests, 0), name, found, window)
                    if made is None:
                        continue  # made meanwhile by a concurrent request: match again
                    return made
                else:
                    sid = found.id
            local, held = await self._lock(sid)
            try:
                if held.fenced:
                    claim = self.index.claim_and_match
                    again, held.fence = await self.io(claim, sid, key, links, name, start)
                else:
                    again = await self.io(self.index.match, key, links, name, start)
                if again is not None and again.id == sid:
                    known = again.messages if again.whole else await self._realigns(again, digests)
                    if known is not None:
                        chained = (links, digests, known)
                        return await self._continue(again, wire, request, key, chained, (local, held), window)
            except Unreplayable as exc:
                await self._unlock(local, held)
                log.warning("proxy: session %s: %s; the request starts a branch of it", sid, exc)
                made = await self._create(wire, request, keyed, (links, digests, 0), name, again, window)
                if made is None:
                    continue
                return made
            except BaseException:
                await self._unlock(local, held)
                raise
            await self._unlock(local, held)
        raise StoreError(f"the session kept changing under the request ({MATCH_TRIES} matches)")

    async def _realigns(self, found: Found, digests: list[bytes]) -> int | None:
        """Where the request realigns ``found`` (``align``: the client moved its messages), or
        None (a branch): aligned with this node's cached session when it is at the store's last
        turn, else with the digests the store keeps of the session's client messages
        (``ConversationIndex.digests``; the turns are then replayed, from the store's entries
        where the request moved their messages: ``stored_replay``)."""
        s = self.table.sessions.get(found.id)
        if s is not None and s.turns == found.turns and s.ingested == found.messages:
            return s.realigns(digests)
        live = await self.io(self.index.digests, found.id)
        if live is None or len(live) != found.messages:
            return None
        done = align(live, digests)
        return done.prefix if done.kind is Kind.REALIGNS else None

    def _cached(self, links: list[bytes]) -> str | None:
        """The id of the session this node last saw ``links`` continue, if any (a guess)."""
        found, _ = self.table.match(links, None)
        return found.id if found is not None else None

    async def io(self, fn: Callable[..., T], *args: Any) -> T:
        """``fn(*args)`` on a thread of the store's."""
        return await asyncio.get_running_loop().run_in_executor(self._io, functools.partial(fn, *args))

    async def start(self) -> None:
        """Start this node's job worker (if it runs one)."""
        if self.jobs is not None:
            await self.jobs.start()

    async def close(self) -> None:
        """Stop the job worker; release the lock service's connection, the store's threads and pool."""
        if self.jobs is not None:
            await self.jobs.close()
        await self.locks.close()
        self._io.shutdown(wait=True)
        self.store.close()

    async def _lock(self, sid: str) -> tuple[asyncio.Lock, Held]:
        local = self._local.get(sid)
        if local is None:
            local = self._local[sid] = asyncio.Lock()
        await local.acquire()
        try:
            held = await self.locks.acquire(sid)
        except BaseException:
            local.release()
            raise
        return local, held

    @staticmethod
    async def _unlock(local: asyncio.Lock, held: Held) -> None:
        try:
            await held.release()
        finally:
            if local.locked():
                local.release()

    async def _create(
        self, wire: Wire, request: ClientRequest, keyed: tuple[str, bytes], chained: Chain,
        name: str | None, branch_of: Found | None, window: int | None,
    ) -> ProxySession | None:  # fmt: skip
        """A new session for ``request`` (``keyed``: the key digest and the chain's root), made
        one at a time for one conversation on every node (this node's lock, then the lock across
        nodes of the request's last link); None when a concurrent request made it meanwhile.
        ``branch_of``: what the lookup found (a branch's parent when it shares a message)."""
        key, start = keyed
        async with self._creating:
            links = chained[0]
            held = await self.locks.acquire("new-" + (links[-1].hex() if links else key))
            try:
                if await self.io(self.index.match, key, links, name, start) != branch_of:
                    return None
                parent = branch_of if branch_of is not None and (branch_of.shared or name) else None
                return await self._new(wire, request, keyed, chained, name, parent, window)
            finally:
                await held.release()

    async def _new(
        self, wire: Wire, request: ClientRequest, keyed: tuple[str, bytes], chained: Chain,
        name: str | None, branch_of: Found | None, window: int | None,
    ) -> ProxySession:  # fmt: skip
        (key, start), links = keyed, chained[0]
        sid = self.table.new_id(wire.provider)
        writer = FencedWriter(self.store)
        engine = await self.run(self._make, sid, request.model, window, writer)
        parent = branch_of.id if branch_of is not None else None
        await self.io(self.index.create, sid, key, wire.provider, request.model, engine.window, parent, name)
        local, held = await self._lock(sid)
        try:  # its links now, so that a concurrent request of the conversation finds it
            await self.io(self._start, sid, held, chained, start)
        except BaseException:
            await self._unlock(local, held)
            raise
        s = ProxySession(sid, wire.provider, request.model, engine, wire.reader(), lock=local, key=key)
        s.root = start
        self.table.add(s, branch_of=None, name=None)
        s.branch_of, s.name = parent, name
        self._attach(s, held, writer)
        self._chains[s.id] = (links, chained[1], len(links))
        return s

    async def _continue(
        self, found: Found, wire: Wire, request: ClientRequest, key: str, chained: Chain,
        locks: tuple[asyncio.Lock, Held],
        window: int | None,
    ) -> ProxySession:  # fmt: skip
        """``found``'s cached engine brought up to its last turn (replayed from ``request``, or
        from the store's entries when a realignment moved the turns' messages since:
        ``stored_replay``), to take the request (``chained``: its links, digests, and how many of
        them the session keeps; fewer than ``found.messages``: the client moved the rest, ``align``).

        Raises:
            Unreplayable: when the store's entries do not hold the turns to replay."""
        s = self.table.sessions.get(found.id)
        if s is None or s.turns > found.turns or s.ingested > found.messages:
            s = await self._rebuild(found, wire, key, locks[0], window, s)  # s: ahead of the store
        try:
            if s.turns < found.turns:
                turns, applied = await self.io(self._history, s.id, s.turns)
                step: Callable[[TurnRecord], None] = functools.partial(replay_turn, s, wire, request)
                now = chained[2] if chained[2] < found.messages else None  # the request realigns here
                if not replayable(turns, now):  # from the store, on an engine rebuilt from the start
                    if s.turns:
                        s = await self._rebuild(found, wire, key, locks[0], window, s)
                        turns, applied = await self.io(self._history, s.id, 0)
                    entries = await self.io(self.store.entries, s.id)
                    try:
                        step = StoredTurns(s, wire, request, turns, entries)
                    except ValueError as exc:
                        raise Unreplayable(f"its recorded turns cannot be replayed: {exc}") from exc
                self._attach(s, locks[1], _writer(s))
                await self.run(_replay, s, turns, applied, step)
                self.replayed += len(turns)
            else:
                self._attach(s, locks[1], _writer(s))
        except BaseException:
            self.table.drop(s)  # its engine may be between two turns
            raise
        s.last_used = time.monotonic()
        if chained[2] < found.messages:
            s.realign = chained[2]
        self._chains[s.id] = chained
        return s

    async def _rebuild(
        self, found: Found, wire: Wire, key: str, local: asyncio.Lock, window: int | None,
        old: ProxySession | None,
    ) -> ProxySession:  # fmt: skip
        """A new engine for ``found`` (``old``, its cached one, forgotten), to replay its turns."""
        if old is not None:
            self.table.drop(old)
        self.rebuilt += 1
        writer = FencedWriter(self.store)
        engine = await self.run(self._make, found.id, found.model, window, writer)
        s = ProxySession(found.id, wire.provider, found.model, engine, wire.reader(), lock=local, key=key)
        self.table.add(s, branch_of=None, name=None)
        return s

    def _make(self, sid: str, model: str, window: int | None, writer: FencedWriter) -> ContextEngine:
        engine = self.make_engine(sid, model, window, writer)
        if self.jobs is not None and engine.background_notes:
            attach(engine, model)
        return engine

    def _history(self, sid: str, start: int) -> tuple[list[TurnRecord], list[Applied]]:
        """``sid``'s turns from ``start`` on, and the job outcomes they applied."""
        return self.index.turns(sid, start), self.job_index.applied_since(sid, start) if self.jobs else []

    def _start(self, sid: str, held: Held, chained: Chain, start: bytes) -> None:
        with self.store.connection() as conn, conn.transaction():
            if held.fenced:
                held.fence = self.store.claim(sid, conn)
            self.index.claim_root(conn, sid, start)
            self.index.advance(sid, chained[0], 0, conn, chained[1])

    def _attach(self, s: ProxySession, held: Held, writer: FencedWriter) -> None:
        s.held = held
        writer.fence = held.fence
        self._stats_at[s.id] = asdict(s.stats)  # what this request adds goes to the store

    # ------------------------------------------------------------ the turn

    async def prepare(self, session: ProxySession, wire: Wire, request: ClientRequest) -> Prepared:
        """``apply.prepare`` (engine thread), then the turn recorded. Raises what they raise
        (``FencedOut`` when this node's lock was taken over: the request then fails open).
        A background job's outcome written meanwhile is applied at this turn (``_ready``)."""
        applied = await self._ready(session)
        p: Prepared = await self.run(prepare, session, wire, request)
        entries = _writer(session).take()  # the turn's entries, stored with it
        links, digests, known = self._chains.pop(session.id)
        turn, at = session.turns - 1, (p.budget, p.at)
        if p.realigned is not None:
            known = min(known, p.realigned)
        fence = _fence(session)
        record, realigned = self.index.record_turn, p.realigned
        await self.io(record, session.id, turn, at, fence, links, known, entries, applied, realigned, digests)
        # the next request's guess (``_cached``), and what ``_realigns`` aligns it with
        self.table.advance(session, links, digests, known if p.realigned is not None else None)
        p.recorded = True
        if self.jobs is not None:
            self.jobs.stats.jobs_applied += len(applied)
        return p

    async def _ready(self, session: ProxySession) -> list[tuple[int, str]]:
        """The job the session's engine waits for, resolved when its outcome is stored (the
        engine applies it in this turn's ``assemble``): ``[(its turn, kind)]``, else ``[]``
        (still queued: submitted again after ``REQUEUE_S``, in case its queue lost it). Raises
        ``RuntimeError`` when the store has no such job (the engine is not the store's)."""
        runner = runner_of(session.engine)
        turn = runner.waiting if runner is not None else None
        if runner is None or turn is None or self.jobs is None:
            return []
        state = await self.io(self.job_index.state, session.id, turn, NOTES)
        if state is None:
            raise RuntimeError(f"session {session.id}: the notes job of turn {turn} is not in the store")
        if state.status == QUEUED or state.outcome is None:
            key, now = JobKey(session.id, turn), time.time()
            if now - max(state.created, self._requeued.get(key, 0.0)) > REQUEUE_S:
                if len(self._requeued) > 10_000:  # those of sessions gone
                    self._requeued.clear()
                self._requeued[key] = now
                self.jobs.stats.jobs_requeued += 1
                await self.jobs.submit([key])
            return []
        self._requeued.pop(JobKey(session.id, turn), None)
        runner.resolve(turn, decode_outcome(state.outcome))
        return [(turn, NOTES)]

    def finish(
        self, session: ProxySession, wire: Wire, prepared: Prepared | None, status: int,
        usage: Usage | None, reply: dict[str, Any] | None,
    ) -> None:  # fmt: skip
        """``apply.finish`` (engine thread); the turn's answer and the figures it added go to the
        store in ``release``."""
        before = self._stats_at.pop(session.id, None) or asdict(session.stats)
        finish(session, wire, prepared, status, usage, reply)
        delta = {k: v - before[k] for k, v in asdict(session.stats).items()}
        turn = session.turns - 1 if prepared is not None and prepared.recorded else None
        answer = (status, usage if status < 400 else None)
        runner, jobs = runner_of(session.engine), list[tuple[int, str, bytes]]()
        job = runner.take_fresh(turn) if runner is not None and turn is not None else None
        if runner is not None and job is not None and turn is not None:  # this turn's ``after_turn``
            jobs.append((turn, NOTES, encode_input(job, runner.model)))
        self._answers[session.id] = (turn, answer, delta, _writer(session).take(), _fence(session), jobs)

    # ------------------------------------------------------------ after the turn

    async def release(self, session: ProxySession) -> None:
        """Record the turn's answer and figures (``finish``), then give back the session's lock
        across nodes (the caller releases the node's own). Raises ``StoreError`` when the
        record fails (the lock is given back all the same)."""
        held, session.held = session.held, None
        answer = self._answers.pop(session.id, None)
        try:
            if answer is not None:
                try:
                    await self.io(self.index.finish_turn, session.id, *answer)
                except BaseException:  # the engine is ahead of the store: rebuilt from it next time
                    self.table.drop(session)
                    raise
                if answer[5] and self.jobs is not None:
                    self.jobs.stats.jobs_queued += len(answer[5])
                    await self.jobs.submit([JobKey(session.id, t, kind) for t, kind, _ in answer[5]])
        finally:
            if held is not None:
                await held.release()

    async def abandon(self, session: ProxySession, exc: BaseException) -> None:
        """Forget a session's engine after ``exc``; unless the store or the lock failed (the
        session then catches up later), mark it dropped so the next request starts a new one."""
        self.table.drop(session)
        self._chains.pop(session.id, None)
        self._answers.pop(session.id, None)
        self._stats_at.pop(session.id, None)
        try:
            if not isinstance(exc, StoreError | LockUnavailable):
                await self.io(self.index.drop, session.id)
        except StoreError as err:
            self.store_outage.failed(err)
        finally:
            await self.release(session)

    async def report(self, key: str | None) -> list[dict[str, Any]]:
        """The sessions of ``key`` (None: all) as the store has them, each with the ``agent`` this
        node saw send it ("" for a session this node has not served: the store does not keep it)."""
        rows: list[dict[str, Any]] = await self.io(self.index.report, key)
        for row in rows:
            served = self.table.sessions.get(row["id"])
            row["agent"] = served.agent if served is not None else ""
        return rows

    def failed(self, exc: BaseException) -> None:
        """Count and say (once per outage) a failure of the store or the lock service."""
        (self.lock_outage if isinstance(exc, LockUnavailable) else self.store_outage).failed(exc)


def _writer(session: ProxySession) -> FencedWriter:
    writer = session.engine.store
    assert isinstance(writer, FencedWriter)
    return writer


def _fence(session: ProxySession) -> int:
    return session.held.fence if session.held is not None else NO_FENCE


def _replay(
    session: ProxySession, turns: list[TurnRecord], applied: list[Applied], step: Callable[[TurnRecord], None]
) -> None:
    """Replay ``turns`` with ``step`` (``replay_turn`` from the request, or ``StoredTurns``),
    each job outcome resolved before the turn that applied it (as served)."""
    writer, runner = _writer(session), runner_of(session.engine)
    writer.muted = True
    try:
        for t in turns:
            for a in applied:
                if a.at == t.turn and runner is not None:
                    runner.resolve(a.turn, decode_outcome(a.outcome))
            step(t)
            if runner is not None:
                runner.take_fresh(t.turn)
    finally:
        writer.muted = False


def _where(url: str) -> str:
    """``url`` without a password (for the log)."""
    from urllib.parse import urlsplit

    parts = urlsplit(url)
    host = parts.hostname or ""
    return f"{parts.scheme}://{host}{':' + str(parts.port) if parts.port else ''}{parts.path}"
