"""``ctxengine proxy --store DIR`` (SQLite): a restarted proxy loses no session. The conversation
index is kept in ``proxy.sqlite`` beside the entries (``proxy.local``), and a restarted proxy
rebuilds a session's engine from its recorded turns, sending what one proxy that never
stopped sends."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import anthropic
import httpx
import pytest

from ctxengine.proxy.app import create_app
from ctxengine.proxy.config import ProxyConfig
from ctxengine.proxy.local import MIGRATIONS, LocalStore
from ctxengine.store import SQLiteStore
from proxy_servers import Upstream, serve
from test_proxy import KEY, _turns

pytestmark = pytest.mark.usefixtures("clean_llm_env")


@contextmanager
def _proxy(up_url: str, store: Path) -> Iterator[str]:
    cfg = ProxyConfig(
        anthropic_upstream=up_url,
        openai_upstream=up_url + "/v1",
        window=32_000,
        store=store,
        background_notes=False,
    )
    with serve(create_app(cfg)) as base:
        yield base


def _ask(base: str, t: int) -> str:
    c = anthropic.Anthropic(api_key=KEY, base_url=base, max_retries=0)
    r = c.messages.create(model="claude-sonnet-4-5", max_tokens=64, messages=_turns(t, 6_000))
    return r.content[0].text  # type: ignore[union-attr]


def _report(base: str) -> dict[str, Any]:
    data: dict[str, Any] = httpx.get(base + "/ctxengine/sessions", timeout=10).json()
    return data


def _bodies(up: Upstream) -> list[dict[str, Any]]:
    return [s.body for s in up.seen if s.path == "/v1/messages"]


def test_a_restarted_proxy_continues_its_sessions_with_the_same_projection(tmp_path: Path) -> None:
    """A 70-turn conversation that outgrows the window: once through one proxy, once through a
    proxy stopped after turn 35 and started again on the same folder. Every upstream body is
    the same; the session is one, with its 70 calls; the restarted proxy rebuilt it once (35
    turns replayed)."""
    turns, stop = 70, 35
    alone = Upstream()
    with serve(alone.app()) as up_url, _proxy(up_url, tmp_path / "alone") as base:
        for t in range(1, turns + 1):
            assert _ask(base, t).startswith("ok")
    up = Upstream()
    with serve(up.app()) as up_url:
        with _proxy(up_url, tmp_path / "st") as base:
            for t in range(1, stop + 1):
                assert _ask(base, t).startswith("ok")
            (before,) = _report(base)["sessions"]
        with _proxy(up_url, tmp_path / "st") as base:  # a new process: nothing in memory
            for t in range(stop + 1, turns + 1):
                assert _ask(base, t).startswith("ok")
            report = _report(base)
    sent = _bodies(up)
    assert [s.problems for s in up.seen] == [[]] * turns
    assert len(sent[-1]["messages"]) < len(_turns(turns)) // 2  # compacted after the restart
    assert sent == _bodies(alone)
    (after,) = report["sessions"]
    assert after["id"] == before["id"] and after["calls"] == turns
    assert after["messages"] == len(_turns(turns)) and after["compactions"] >= 1
    assert report["totals"]["sessions_rebuilt"] == 1 and report["totals"]["turns_replayed"] == stop


def test_a_store_from_before_the_index_is_migrated_and_keeps_its_entries(tmp_path: Path) -> None:
    path = tmp_path / "proxy.sqlite"
    old = SQLiteStore(path)
    old.append("anthropic-old-1", "message", {"role": "user", "content": "hi"})
    old.close()
    store = LocalStore(path)
    try:
        assert [e.payload["content"] for e in store.entries("anthropic-old-1")] == ["hi"]
        with store.connection() as conn:
            assert conn.execute("SELECT count(*) FROM ctx_proxy_sessions").fetchone()[0] == 0
    finally:
        store.close()
    with sqlite3.connect(path) as db:
        assert db.execute("PRAGMA user_version").fetchone()[0] == MIGRATIONS[-1][0]
    LocalStore(path).close()  # opened again: nothing to migrate, nothing lost
