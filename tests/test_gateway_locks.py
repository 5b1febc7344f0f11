"""The per-session lock across nodes (``proxy.locks.RedisLocks``) against the real Redis, and the
fencing numbers the PostgreSQL store checks with it."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator

import pytest

from ctxengine.proxy.index import ConversationIndex
from ctxengine.proxy.locks import LockUnavailable, RedisLocks
from ctxengine.proxy.store import FencedWriter
from ctxengine.store.base import NO_FENCE, FencedOut
from ctxengine.store.postgres import PostgresStore
from gateway_servers import pg_schema_url, redis_url


@pytest.fixture
def pg() -> Iterator[PostgresStore]:
    with pg_schema_url() as url:
        store = PostgresStore(url)
        yield store
        store.close()


def _sid() -> str:
    return f"locktest-{time.time_ns()}"


def test_one_holder_at_a_time() -> None:
    async def main() -> list[str]:
        a, b, sid, order = RedisLocks(redis_url()), RedisLocks(redis_url()), _sid(), []
        first = await a.acquire(sid)

        async def second() -> None:
            held = await b.acquire(sid)
            order.append("b acquired")
            await held.release()

        waiting = asyncio.ensure_future(second())
        await asyncio.sleep(0.3)
        order.append("a releases")
        await first.release()
        await waiting
        assert first.fenced and first.fence == NO_FENCE  # its number comes from the store's claim
        await a.close()
        await b.close()
        return order

    assert asyncio.run(main()) == ["a releases", "b acquired"]


def test_a_lock_is_renewed_while_its_request_runs() -> None:
    async def main() -> None:
        a, b, sid = RedisLocks(redis_url(), ttl_s=0.6), RedisLocks(redis_url(), wait_s=0.3), _sid()
        held = await a.acquire(sid)
        await asyncio.sleep(1.5)  # past two expiries: renewed meanwhile
        with pytest.raises(LockUnavailable, match="stayed locked"):
            await b.acquire(sid)
        await held.release()
        await (await b.acquire(sid)).release()
        await a.close()
        await b.close()

    asyncio.run(main())


def test_a_holder_whose_lock_expired_cannot_write(pg: PostgresStore) -> None:
    """A node paused past its lock's expiry (here: the key deleted) and another took the session:
    the first node's appends and turn records are refused, the second's go through."""
    index, sid = ConversationIndex(pg), _sid()
    index.create(sid, "k", "anthropic", "m", 32_000, None, None)

    async def main() -> tuple[int, int]:
        a, b = RedisLocks(redis_url()), RedisLocks(redis_url())
        old = await a.acquire(sid)
        old.fence = pg.claim(sid)
        await a._redis.delete(f"ctxengine:lock:{sid}")  # expired
        new = await b.acquire(sid)
        new.fence = pg.claim(sid)
        await new.release()
        await old.release()  # not its own anymore: a warning, no error
        await a.close()
        await b.close()
        return old.fence, new.fence

    old, new = asyncio.run(main())
    late, current = FencedWriter(pg), FencedWriter(pg)
    late.fence, current.fence = old, new
    late.append(sid, "message", {"from": "the paused node"})  # kept for its turn's record
    with pytest.raises(FencedOut):
        index.record_turn(sid, 0, (None, 0.0), old, [b"link"], 0, late.take())
    with pytest.raises(FencedOut), pg.connection() as conn:
        pg.append_batch(conn, sid, [("message", {"from": "the paused node"})], old)
    current.append(sid, "message", {"from": "the new holder"})
    index.record_turn(sid, 0, (None, 0.0), new, [b"link"], 0, current.take())
    assert [e.payload for e in pg.entries(sid)] == [{"from": "the new holder"}]
    assert [t.turn for t in index.turns(sid, 0)] == [0]


def test_a_lock_never_given_back_expires_after_the_longest_hold() -> None:
    async def main() -> None:
        a, b, sid = (
            RedisLocks(redis_url(), ttl_s=0.3, max_hold_s=0.6),
            RedisLocks(redis_url(), wait_s=3),
            _sid(),
        )
        await a.acquire(sid)  # its holder never releases it (a stuck request)
        started = time.monotonic()
        held = await b.acquire(sid)
        assert 0.6 <= time.monotonic() - started < 2.5
        await held.release()
        await a.close()
        await b.close()

    asyncio.run(main())


def test_redis_unreachable_is_lock_unavailable() -> None:
    async def main() -> None:
        locks = RedisLocks("redis://127.0.0.1:1/0")
        with pytest.raises(LockUnavailable, match="Redis"):
            await locks.acquire(_sid())
        await locks.close()

    asyncio.run(main())


def test_a_turn_counts_as_a_call_once_recorded_so_a_node_killed_after_answering_loses_none(
    pg: PostgresStore,
) -> None:
    """A turn's answer and figures are written after the client has the answer; a node killed
    (SIGKILL) in between left the session's ``calls`` one short of the requests answered (the
    gateway check saw 49 of 50). The call is counted when the turn is recorded, before the
    upstream call; the answer takes it back when the upstream refused the request, and a retry
    of an unanswered turn (same messages) is not counted twice."""
    from ctxengine.messages.model import Usage

    index, sid = ConversationIndex(pg), _sid()
    index.create(sid, "k", "anthropic", "m", 32_000, None, None)

    def calls() -> int:
        (row,) = [r for r in index.report("k") if r["id"] == sid]
        return int(row["calls"])

    index.record_turn(sid, 0, (None, 0.0), NO_FENCE, [b"l0"], 0)
    assert calls() == 1  # the node dies here, after answering: the call is not lost
    index.record_turn(sid, 1, (None, 0.0), NO_FENCE, [b"l0", b"l1"], 1)
    index.finish_turn(sid, 1, (200, Usage(input_tokens=10, output_tokens=2)), {"calls": 1})
    assert calls() == 2  # answered and finished: counted once
    index.record_turn(sid, 2, (None, 0.0), NO_FENCE, [b"l0", b"l1", b"l2"], 2)
    index.finish_turn(sid, 2, (529, None), {"calls": 0, "upstream_errors": 1})
    assert calls() == 2  # the upstream refused it: not a call
    index.finish_turn(sid, None, (200, None), {"calls": 1})  # a request with no recorded turn
    assert calls() == 3
    four = [b"l0", b"l1", b"l2", b"l3"]
    index.record_turn(sid, 3, (None, 0.0), NO_FENCE, four, 3)  # killed before the upstream answered
    index.record_turn(sid, 4, (None, 0.0), NO_FENCE, four, 4)  # the client's retry, on another node
    index.finish_turn(sid, 4, (200, None), {"calls": 1})
    assert calls() == 4  # the unanswered turn and its retry: one call
