"""Per-session locks across the proxy's nodes (Redis), with fencing numbers.

``RedisLocks.acquire(sid)`` takes ``ctxengine:lock:<sid>`` with redis-py's ``Lock`` (a random
token, an expiry of ``LOCK_TTL_S``, released only by its holder), renews it every third of the
expiry while the request runs (``LOCK_MAX_HOLD_S`` at most). Its holder then claims the
session's next fencing number from the store (``PostgresStore.claim``, ``Held.fenced``): the store
refuses the writes of a holder whose number is older than the session's latest (its lock
expired, a node paused past it, and another node took over).
``LocalLocks`` is the one-node stand-in: no lock beyond the process's own, no fencing number.
Redis unreachable: ``LockUnavailable`` (the proxy then fails open: per-node locks could let two
nodes write one session at once).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Protocol

from ctxengine.store.base import NO_FENCE

log = logging.getLogger("ctxengine.proxy")

LOCK_TTL_S = 10.0  # a dead node's lock is free again after this long
LOCK_WAIT_S = 90.0  # how long a request waits for its session's lock before failing open
# renewals stop after this long: a holder that never gave its lock back (a request stuck, a bug)
# cannot block its session for ever; were it still writing, the fence refuses it then
LOCK_MAX_HOLD_S = 300.0


class LockUnavailable(Exception):
    """The lock service cannot be reached, or the session stayed locked past ``LOCK_WAIT_S``."""


@dataclass
class Held:
    """A session's lock, held: how to give it back; ``fenced``: whether its holder must claim a
    fencing number from the store (a lock across processes), then kept in ``fence``."""

    release: Callable[[], Awaitable[None]]
    fenced: bool = False
    fence: int = NO_FENCE


class SessionLocks(Protocol):
    """Where the proxy takes a session's lock across nodes."""

    async def acquire(self, sid: str) -> Held:
        """Wait for ``sid``'s lock. Raises ``LockUnavailable``."""
        ...

    async def close(self) -> None:
        """Release the connection."""
        ...


async def _nothing() -> None:
    return None


class LocalLocks:
    """One node: the process's own per-session lock is all there is (no fencing number)."""

    async def acquire(self, sid: str) -> Held:
        return Held(_nothing)

    async def close(self) -> None:
        return None


class RedisLocks:
    """Locks in the Redis at ``url`` (``redis://HOST:PORT/N``); see the module docstring."""

    def __init__(
        self,
        url: str,
        ttl_s: float = LOCK_TTL_S,
        wait_s: float = LOCK_WAIT_S,
        max_hold_s: float = LOCK_MAX_HOLD_S,
    ) -> None:
        import redis.asyncio as aredis

        self.url = url
        self.ttl_s, self.wait_s, self.max_hold_s = ttl_s, wait_s, max_hold_s
        self._redis = aredis.Redis.from_url(url, socket_connect_timeout=2, socket_timeout=5)

    async def acquire(self, sid: str) -> Held:
        from redis.exceptions import RedisError

        lock = self._redis.lock(
            f"ctxengine:lock:{sid}",
            timeout=self.ttl_s,
            sleep=0.01,
            blocking_timeout=self.wait_s,
            thread_local=False,
        )
        try:
            if not await lock.acquire(token=secrets.token_hex(16)):
                raise LockUnavailable(f"session {sid} stayed locked for {self.wait_s:.0f} s")
        except RedisError as exc:
            raise LockUnavailable(f"Redis at {self.url}: {type(exc).__name__}: {exc}") from exc
        stop = asyncio.Event()
        renew = asyncio.ensure_future(self._renew(lock, sid, stop))

        async def release() -> None:
            # the renewal is stopped, not cancelled: a cancellation that reaches redis-py inside a
            # command can be lost, and waiting for that task then never ends (a lock renewed for
            # good was seen so); it ends after at most one renewal, else it is left to expire
            stop.set()
            try:
                await asyncio.wait_for(asyncio.shield(renew), timeout=self.ttl_s)
            except (TimeoutError, RedisError) as exc:
                log.warning("proxy: the renewal of session %s's lock did not stop: %r", sid, exc)
            try:
                await lock.release()
            except RedisError as exc:  # expired meanwhile (then the fence protects the store), or Redis gone
                log.warning("proxy: the lock of session %s was not released: %s", sid, exc)

        return Held(release, fenced=True)

    async def _renew(self, lock: object, sid: str, stop: asyncio.Event) -> None:
        """Renew ``lock`` every third of its expiry until ``stop`` is set (or ``max_hold_s``)."""
        from redis.asyncio.lock import Lock
        from redis.exceptions import LockError, RedisError

        assert isinstance(lock, Lock)
        until = time.monotonic() + self.max_hold_s
        while True:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), timeout=self.ttl_s / 3)
            if stop.is_set():
                return
            if time.monotonic() > until:
                log.warning(
                    "proxy: the lock of session %s was held for %.0f s: no longer renewed (it expires)",
                    sid, self.max_hold_s,
                )  # fmt: skip
                return
            try:
                await lock.reacquire()
            except LockError as exc:  # lost: the store's fence refuses this node's writes now
                log.warning("proxy: the lock of session %s expired while its request ran: %s", sid, exc)
                return
            except RedisError as exc:
                log.warning("proxy: could not renew the lock of session %s: %s", sid, exc)

    async def close(self) -> None:
        await self._redis.aclose()
