"""The proxy's sessions: one ``ContextEngine`` per conversation, found by its hash chain.

``SessionTable.match`` maps a request to the session whose ingested client messages are the
longest prefix of the request's (``identity``): the session continues when the whole session is a
prefix; when only part of it is (the client edited or rewound its history: Claude Code's own
``/compact``, a rewind, a regenerated turn) a new *branch* starts, a new session that ingests the
request's history from the start, so the stored session is never corrupted; unless the client only
moved messages or rewrote a context message under its unchanged reply (aider: ``align``), when the
session is *realigned* and continues. An explicit
``x-ctxengine-session`` header names the session instead (scoped by the key digest too).

Each session has an ``asyncio.Lock``: the proxy holds it from the request's ingest to the end of
the upstream's response, so requests of one session are serialised and different sessions run in
parallel. The figures kept per session are what ``GET /ctxengine/sessions`` reports.
"""

from __future__ import annotations

import asyncio
import itertools
import secrets
import time
from collections import deque
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from ctxengine.dashboard.timeline import CallPoint, new_timeline
from ctxengine.engine.ahead import CompactionAhead
from ctxengine.engine.core import ContextEngine
from ctxengine.messages.model import Message
from ctxengine.proxy.align import Kind, align
from ctxengine.proxy.body_memo import BodyMemo
from ctxengine.proxy.identity import ChainMemo
from ctxengine.proxy.locks import Held
from ctxengine.proxy.wire import MessageReader


@dataclass
class SessionStats:
    """Per-session figures. Tokens; USD.

    ``client_tokens``: what the client's requests held (fixed prefix + the whole history, the
    engine's estimate at the ledger's scale), summed over calls; ``upstream_tokens``: what the
    proxy sent (the ledger's prediction of each projection), summed; ``reported_input_tokens`` /
    ``cache_read_tokens`` / ``cache_write_tokens`` / ``output_tokens``: the upstream's usage,
    summed; ``cost_saved_usd``: the tokens not sent, priced as uncached input (an upper bound:
    some of them would have been cache reads)."""

    calls: int = 0
    client_tokens: int = 0
    upstream_tokens: int = 0
    reported_input_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0
    output_tokens: int = 0
    compactions: int = 0
    offloads: int = 0
    cost_saved_usd: float = 0.0
    upstream_errors: int = 0  # responses with a status >= 400, returned as sent
    replies_replaced: int = 0  # replies the client sent back changed (the client's turn won)
    retrieve_calls: int = 0  # retrieve-tool calls the proxy resolved itself


@dataclass
class ProxySession:
    """One conversation: its engine, the reader of its client messages and its chain."""

    id: str
    provider: str
    model: str
    engine: ContextEngine
    reader: MessageReader
    links: list[bytes] = field(default_factory=list)
    digests: list[bytes] = field(default_factory=list)  # each client message's own (``align``)
    realign: int | None = None  # the next ``prepare`` takes out the messages from this one on
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    stats: SessionStats = field(default_factory=SessionStats)
    branch_of: str | None = None
    name: str | None = None  # the x-ctxengine-session header's value, when it named this session
    pending_reply: Message | None = None  # the upstream's last reply, until the client sends it back
    history_tokens: int = 0  # the engine's raw estimate of every client message ingested
    ingested: int = 0  # client messages the engine has (``links`` may run ahead while a request is in)
    last_used: float = 0.0  # monotonic seconds of its latest request
    key: str = ""  # the key digest (``identity.key_digest``) of the requests that made it
    root: bytes = b""  # its chain's root (``identity.root``: wire, key, fixed prefix)
    turns: int = 0  # requests the engine has taken (in a shared store: its turns replayed or served)
    output_max: int = 0  # the longest response of the session so far (tokens): its output room
    held: Held | None = None  # its lock across nodes while a request runs (shared store)
    agent: str = ""  # the client program, the first word of the User-Agent of its first request
    timeline: deque[CallPoint] = field(default_factory=new_timeline)  # per call (the dashboard's chart)
    ahead: CompactionAhead = field(default_factory=CompactionAhead)  # its next compaction rehearsed
    body_memo: BodyMemo | None = None  # what its previous request body holds (``body_memo``)

    def realigns(self, digests: Sequence[bytes]) -> int | None:
        """Where a request whose messages have ``digests`` realigns this session (``align``: the
        client moved messages, or rewrote a context message; those of the session from there on
        leave the view), or None (the session continues as it is, or the request branches off it)."""
        if self.ingested != len(self.digests):
            return None  # a request of it is under way
        found = align(self.digests, digests)
        return found.prefix if found.kind is Kind.REALIGNS else None

    def report(self) -> dict[str, Any]:
        """The ``GET /ctxengine/sessions`` entry of this session (no key, no content)."""
        return {
            "id": self.id,
            "provider": self.provider,
            "model": self.model,
            "agent": self.agent,
            "branch_of": self.branch_of,
            "named": self.name is not None,
            "messages": self.ingested,
            "window_tokens": self.engine.window,
            **asdict(self.stats),
        }


def branched_off(found: ProxySession | None, links: Sequence[bytes], name: object) -> ProxySession | None:
    """The session a new one for a request with ``links`` is a branch of: ``found`` (what
    ``SessionTable.match`` gave) when it shares the request's first message or was named
    (``name`` not None); None for a new conversation (``found`` only has the same chain root)."""
    if found is None or (name is None and found.links[:1] != links[:1]):
        return None
    return found


MAX_SESSIONS = 1_000  # sessions kept in memory; the least recently used idle ones go first


class SessionTable:
    """Every session of the proxy, indexed by chain link and by explicit name. Above
    ``max_sessions`` the least recently used idle session is forgotten (its entries stay in the
    store; a request that would have continued it starts a new session)."""

    def __init__(self, max_sessions: int = MAX_SESSIONS) -> None:
        self.max_sessions = max_sessions
        self.evicted = 0
        self.sessions: dict[str, ProxySession] = {}
        self.chains = ChainMemo()  # requests' hash chains, from where they differ from the previous
        self._by_link: dict[bytes, ProxySession] = {}
        self._by_root: dict[bytes, ProxySession] = {}  # the newest session of each chain root
        self._named: dict[tuple[str, str], ProxySession] = {}
        self._ids = itertools.count(1)
        # ids are the store's keys: a proxy restarted on the same --store must not reuse them,
        # or a new session (another key's, too) would be served the old one's stored results
        self._run = secrets.token_hex(6)

    def match(
        self, links: Sequence[bytes], name: tuple[str, str] | None, root: bytes = b""
    ) -> tuple[ProxySession | None, bool]:
        """The session a request continues, and whether all of it is a prefix of the request
        (False: the request branches off it, or realigns it: ``align``). When no link is known,
        the newest session of the chain's ``root`` (same key, wire and fixed prefix), if given:
        a client that rewrote its first message (aider's repo map) may still realign it."""
        if name is not None:
            s = self._named.get(name)
            if s is None:
                return None, False
            n = len(s.links)
            return s, n == 0 or (n <= len(links) and links[n - 1] == s.links[-1])
        for i in range(len(links) - 1, -1, -1):
            s = self._by_link.get(links[i])
            if s is not None:
                return s, len(s.links) == i + 1
        s = self._by_root.get(root) if root else None
        if s is not None:
            return s, not s.links
        return None, False

    def new_id(self, provider: str) -> str:
        """A fresh session id, ``<provider>-<run>-<n>``: unique to this proxy process's run
        (``run`` random), so never one a store already holds from an earlier run."""
        return f"{provider}-{self._run}-{next(self._ids)}"

    def add(
        self, session: ProxySession, *, branch_of: ProxySession | None, name: tuple[str, str] | None
    ) -> None:
        """Register a new, still empty session (a branch of ``branch_of`` when given)."""
        session.branch_of = branch_of.id if branch_of is not None else None
        if name is not None:
            session.name = name[1]
            self._named[name] = session
        self.sessions[session.id] = session
        if session.root:
            self._by_root[session.root] = session
        session.last_used = time.monotonic()
        if len(self.sessions) > self.max_sessions:
            idle = [s for s in self.sessions.values() if not s.lock.locked() and s is not session]
            if idle:
                self.drop(min(idle, key=lambda s: s.last_used))
                self.evicted += 1

    def advance(
        self,
        session: ProxySession,
        links: Sequence[bytes],
        digests: Sequence[bytes],
        known: int | None = None,
    ) -> None:
        """Record that ``session`` has ingested the client messages ``links`` stand for (their own
        ``digests``); ``known``: how many of its links stay (a realignment: ``align``), the others
        no longer find it (all of them when None)."""
        keep = len(session.links) if known is None else known
        for link in session.links[keep:]:
            if self._by_link.get(link) is session:
                del self._by_link[link]
        for link in links[keep:]:
            self._by_link[link] = session
        session.links, session.digests = list(links), list(digests)

    def drop(self, session: ProxySession) -> None:
        """Forget a session whose engine failed (the next request starts a new one)."""
        self.sessions.pop(session.id, None)
        if self._by_root.get(session.root) is session:
            del self._by_root[session.root]
        for link in session.links:
            if self._by_link.get(link) is session:
                del self._by_link[link]
        if session.name is not None:
            for k, v in list(self._named.items()):
                if v is session:
                    del self._named[k]
        session.links = []
