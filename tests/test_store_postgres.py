"""``PostgresStore`` against the real PostgreSQL server (``gateway_servers``), and
``store_from_url``: the numbered migrations, appends racing for a sequence number, fencing,
content-addressed artifacts, a real transcript through the engine on both stores."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path

import msgspec
import psycopg
import pytest

from conftest import CLAUDE_CODE
from ctxengine.engine.core import ContextEngine
from ctxengine.formats import load
from ctxengine.policy.registry import get_policy
from ctxengine.store import SessionStore, SQLiteStore, StoreError, store_from_url
from ctxengine.store.base import FencedOut
from ctxengine.store.pg_schema import MIGRATIONS
from ctxengine.store.postgres import PostgresStore
from gateway_servers import pg_schema_url


@pytest.fixture
def pg_url() -> Iterator[str]:
    with pg_schema_url() as url:
        yield url


@pytest.fixture
def pg(pg_url: str) -> Iterator[PostgresStore]:
    store = PostgresStore(pg_url)
    yield store
    store.close()


def test_store_from_url_picks_the_store_by_its_url(tmp_path: Path) -> None:
    pg = store_from_url("postgresql://127.0.0.1:1/none")  # the pool connects later, in the background
    assert isinstance(pg, PostgresStore)
    pg.close()
    in_dir = store_from_url(tmp_path)
    assert isinstance(in_dir, SQLiteStore)
    in_dir.append("s", "message", {"a": 1})
    assert (tmp_path / "store.sqlite").is_file()
    in_dir.close()
    for url in (str(tmp_path / "x.sqlite"), f"sqlite:///{tmp_path}/y.sqlite"):
        s = store_from_url(url)
        s.append("s", "event", {})
        s.close()
    assert (tmp_path / "x.sqlite").is_file() and (tmp_path / "y.sqlite").is_file()
    assert isinstance(store_from_url("sqlite://"), SQLiteStore)


def test_the_schema_is_migrated_once_and_recorded(pg_url: str, pg: PostgresStore) -> None:
    pg.append("s", "message", {"n": 0})
    again = PostgresStore(pg_url)
    again.append("s", "message", {"n": 1})  # a second process finds the schema up to date
    again.close()
    with psycopg.connect(pg_url) as conn:
        versions = [r[0] for r in conn.execute("SELECT version FROM ctx_migrations ORDER BY version")]
    assert versions == [v for v, _ in MIGRATIONS]
    assert [e.payload["n"] for e in pg.entries("s")] == [0, 1]


def test_entries_and_artifacts_round_trip(pg: PostgresStore) -> None:
    first = pg.append("a", "message", {"role": "user", "text": "héllo"})
    pg.append("b", "message", {"other": True})
    pg.append("a", "offload", {"call": "c1"})
    assert first.seq == 0
    assert [(e.seq, e.kind) for e in pg.entries("a")] == [(0, "message"), (1, "offload")]
    assert [e.payload for e in pg.entries("a", "offload")] == [{"call": "c1"}]
    pg.put_artifact("a", "t1", "big result " * 100, {"layer": "x"})
    pg.put_artifact("a", "t1", "other content", {"layer": "y"})  # idempotent: the first stays
    pg.put_artifact("b", "t9", "big result " * 100, {"layer": "z"})
    assert pg.get_artifact("a", "t1") == ("big result " * 100, {"layer": "x"})
    assert pg.artifact_ids("a") == ["t1"]
    with pg.connection() as conn:  # content-addressed: the same content is stored once
        assert conn.execute("SELECT count(*) FROM ctx_blobs").fetchone() == (1,)
    with pytest.raises(StoreError):
        pg.get_artifact("b", "t1")


def test_two_writers_racing_for_a_sequence_lose_nothing(pg_url: str) -> None:
    stores = [PostgresStore(pg_url), PostgresStore(pg_url)]
    stores[0].append("warm", "event", {})  # the schema exists before the race
    errors: list[Exception] = []
    taken: list[list[int]] = [[], []]
    start = threading.Barrier(2)

    def write(w: int) -> None:
        start.wait()
        for i in range(150):
            try:
                taken[w].append(stores[w].append("race", "message", {"w": w, "i": i}).seq)
            except StoreError as exc:  # allowed, but then the entry must not be there
                errors.append(exc)

    threads = [threading.Thread(target=write, args=(w,)) for w in (0, 1)]
    [t.start() for t in threads]
    [t.join() for t in threads]
    entries = stores[0].entries("race")
    assert [e.seq for e in entries] == list(range(len(entries)))  # one number each, no gap
    assert sorted(taken[0] + taken[1]) == [e.seq for e in entries]  # every success is stored
    assert len(entries) + len(errors) == 300
    print(f"race: {stores[0].append_retries + stores[1].append_retries} retries, {len(errors)} refused")
    for w in (0, 1):  # each writer's own entries in its order
        assert [e.payload["i"] for e in entries if e.payload["w"] == w] == sorted(
            e.payload["i"] for e in entries if e.payload["w"] == w
        )
    for s in stores:
        s.close()


def test_a_writer_whose_fence_is_older_cannot_append(pg: PostgresStore) -> None:
    pg.append("f", "message", {"free": True})  # no lock yet: anyone may write
    first = pg.claim("f")
    pg.append("f", "message", {"by": first}, fence=first)
    second = pg.claim("f")  # the lock expired and another holder took it
    assert (first, second) == (1, 2)
    with pytest.raises(FencedOut):
        pg.append("f", "message", {"by": first, "late": True}, fence=first)
    with pytest.raises(FencedOut):
        pg.append("f", "message", {"unlocked": True})
    pg.append("f", "message", {"by": second}, fence=second)
    assert [e.payload for e in pg.entries("f")] == [{"free": True}, {"by": 1}, {"by": 2}]


def test_an_unreachable_database_raises_store_error_in_bounded_time() -> None:
    store = PostgresStore("postgresql://127.0.0.1:1/none", timeout=1.0)
    started = time.monotonic()
    with pytest.raises(StoreError, match="PostgreSQL"):
        store.append("s", "message", {})
    assert time.monotonic() - started < 5
    store.close()


def _engine_entries(store: SessionStore) -> tuple[list[tuple[str, bytes]], list[str]]:
    session = load(CLAUDE_CODE / "cc_opus-4.5_general-tool-calls_2-comment-header-lines.jsonl")[0]
    engine = ContextEngine(
        get_policy("default"), model=session.model, window=32_000, store=store, session_id="t"
    )
    engine.bootstrap(system=session.system)
    for m in session.messages:
        engine.ingest(m)
        if m.role == "assistant":
            engine.assemble(now=m.timestamp)
    entries = [(e.kind, msgspec.json.encode(e.payload)) for e in store.entries("t")]
    return entries, store.artifact_ids("t")


def test_a_real_session_stores_the_same_entries_in_postgres_as_in_sqlite(pg: PostgresStore) -> None:
    in_pg, in_sqlite = _engine_entries(pg), _engine_entries(SQLiteStore())
    assert len(in_pg[0]) > 20
    assert in_pg == in_sqlite


def test_large_values_are_compressed_with_lz4(pg_url: str, pg: PostgresStore) -> None:
    """Migration 6: a long message is stored compressed with lz4 (pglz cost the server ~4x the CPU
    on a 150,000-token history), and reads back whole."""
    text = "def load(path):\n    return json.loads(path.read_text())\n" * 400
    pg.append("s", "message", {"role": "user", "content": text})
    with psycopg.connect(pg_url) as conn:
        (method,) = conn.execute(
            "SELECT pg_column_compression(payload) FROM ctx_entries WHERE session = 's'"
        ).fetchone()
    assert method == "lz4"
    assert pg.entries("s")[0].payload["content"] == text
