"""The proxy as a gateway: nodes sharing sessions in PostgreSQL (and locks in Redis), against the
real servers (``gateway_servers``). Each node is a ``create_app`` served on its own loopback port;
the upstream is the checking stub of ``proxy_servers``."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import httpx
import pytest

from ctxengine.proxy.app import create_app
from ctxengine.proxy.config import ProxyConfig
from gateway_servers import Forwarder, pg_schema_url, redis_url
from proxy_servers import Upstream, serve
from test_proxy import KEY, Rig, _offloaded_id, _turns

pytestmark = pytest.mark.usefixtures("clean_llm_env")
OTHER_KEY = "sk-test-another-key-5678"


class Node(Rig):
    """One proxy node (``Rig``: its upstream, base URL and ``Proxy``)."""

    def ask(self, msgs: list[dict[str, Any]], key: str = KEY) -> str:
        text = self.anthropic(key).messages.create(model="claude-sonnet-4-5", max_tokens=64, messages=msgs)
        return text.content[0].text  # type: ignore[union-attr]

    def sessions(self, headers: dict[str, str] | None = None) -> httpx.Response:  # type: ignore[override]
        self.settle()
        return httpx.get(self.base + "/ctxengine/sessions", headers=headers or {"x-api-key": KEY})


@dataclass
class Gateway:
    upstream: Upstream
    up_url: str
    store: str
    stack: ExitStack

    def node(self, **config: Any) -> Node:
        cfg = ProxyConfig(
            anthropic_upstream=self.up_url,
            openai_upstream=self.up_url + "/v1",
            window=32_000,
            store=config.pop("store", self.store),
            background_notes=False,
            **config,
        )
        app = create_app(cfg)
        return Node(self.upstream, self.stack.enter_context(serve(app)), app.state.proxy)


@contextmanager
def _gateway() -> Iterator[Gateway]:
    up = Upstream()
    with pg_schema_url() as store, serve(up.app()) as up_url, ExitStack() as stack:
        yield Gateway(up, up_url, store, stack)


@pytest.fixture
def gw() -> Iterator[Gateway]:
    with _gateway() as g:
        yield g


def _bodies(upstream: Upstream) -> list[dict[str, Any]]:
    return [s.body for s in upstream.seen if s.path == "/v1/messages"]


def test_nodes_continue_each_others_sessions_with_the_same_projection(gw: Gateway) -> None:
    """A conversation whose turns alternate between two nodes is one session on both, and every
    request goes upstream exactly as one node alone sends it (the other node replays the turns
    it did not serve); the conversation outgrows the window, so compaction acts across nodes."""
    turns = 70
    with _gateway() as alone:
        single = alone.node()
        for t in range(1, turns + 1):
            assert single.ask(_turns(t, 6_000)).startswith("ok")
        reference = _bodies(alone.upstream)
    a, b = gw.node(redis=redis_url()), gw.node(redis=redis_url())
    for t in range(1, turns + 1):
        assert (a if t % 2 else b).ask(_turns(t, 6_000)).startswith("ok")
    sent = _bodies(gw.upstream)
    assert [s.problems for s in gw.upstream.seen] == [[]] * turns
    assert len(sent[-1]["messages"]) < len(_turns(turns)) // 2  # compacted, by node B
    assert sent == reference
    for node in (a, b):
        (s,) = node.sessions().json()["sessions"]
        assert s["calls"] == turns and s["messages"] == len(_turns(turns))
        assert s["upstream_tokens"] < s["client_tokens"] // 2 and s["compactions"] >= 1
    ids = {n.sessions().json()["sessions"][0]["id"] for n in (a, b)}
    assert len(ids) == 1


def test_a_restarted_node_loses_no_session(gw: Gateway) -> None:
    first = gw.node()
    for t in range(1, 4):
        first.ask(_turns(t))
    (before,) = first.sessions().json()["sessions"]
    restarted = gw.node()  # a new process on the same store: nothing in its memory
    restarted.ask(_turns(4))
    (after,) = restarted.sessions().json()["sessions"]
    assert after["id"] == before["id"] and after["calls"] == 4
    assert restarted.proxy.table.sessions[after["id"]].turns == 4  # 3 replayed, 1 served


@pytest.mark.parametrize("store", ["postgres", "sqlite", "memory"])
def test_each_key_sees_only_its_sessions_and_the_admin_all(gw: Gateway, store: str, tmp_path: Path) -> None:
    where = {"postgres": {}, "sqlite": {"store": tmp_path / "st"}, "memory": {"store": None}}[store]
    node = gw.node(admin_token="adm-secret", **where)
    node.ask(_turns(1), key=KEY)
    node.ask(_turns(2), key=OTHER_KEY)  # the same messages under another key: another session
    mine = node.sessions({"x-api-key": KEY}).json()["sessions"]
    theirs = node.sessions({"authorization": f"Bearer {OTHER_KEY}"}).json()["sessions"]
    assert len(mine) == len(theirs) == 1 and mine[0]["id"] != theirs[0]["id"]
    assert len(node.sessions({"x-ctxengine-admin": "adm-secret"}).json()["sessions"]) == 2
    refused = httpx.get(node.base + "/ctxengine/sessions")
    assert refused.status_code == 401 and "sessions" not in refused.json()
    assert node.sessions({"x-ctxengine-admin": "wrong"}).status_code == 401


def test_an_unreachable_database_fails_open_and_says_so_once(
    gw: Gateway, caplog: pytest.LogCaptureFixture
) -> None:
    node = gw.node(store="postgresql://127.0.0.1:1/none?connect_timeout=1")
    node.proxy.shared.store._pool.timeout = 1.0  # type: ignore[union-attr]
    with caplog.at_level(logging.WARNING, logger="ctxengine.proxy"):
        for t in (1, 2):
            raw = httpx.post(
                node.base + "/v1/messages",
                json={"model": "claude-sonnet-4-5", "max_tokens": 8, "messages": _turns(t)},
                headers={"x-api-key": KEY},
                timeout=30,
            )
            assert raw.status_code == 200
    assert [s.body["messages"] for s in gw.upstream.seen] == [_turns(1), _turns(2)]  # unchanged
    totals = node.proxy.totals
    assert totals.fail_open == totals.store_failures == 2
    said = [r for r in caplog.records if "session store" in r.getMessage()]
    assert len(said) == 1 and "upstream unchanged" in said[0].getMessage()


def test_redis_down_fails_open_with_one_warning(gw: Gateway, caplog: pytest.LogCaptureFixture) -> None:
    node = gw.node(redis="redis://127.0.0.1:1/0")
    with caplog.at_level(logging.WARNING, logger="ctxengine.proxy"):
        assert node.ask(_turns(1)).startswith("ok")
        assert node.ask(_turns(2)).startswith("ok")
    assert [s.body["messages"] for s in gw.upstream.seen] == [_turns(1), _turns(2)]
    assert node.proxy.totals.store_failures == 2
    said = [r for r in caplog.records if "lock service" in r.getMessage()]
    assert len(said) == 1


def test_a_session_catches_up_when_the_database_is_back(
    gw: Gateway, caplog: pytest.LogCaptureFixture
) -> None:
    """The database goes away between two requests and comes back: the request meanwhile goes
    upstream unchanged, the next one continues the session with every message since."""
    parts = urlsplit(gw.store)
    link = Forwarder((parts.hostname or "127.0.0.1", parts.port or 5432))
    via = urlunsplit(parts._replace(netloc=f"127.0.0.1:{link.port}"))
    node = gw.node(store=via)
    node.proxy.shared.store._pool.timeout = 2.0  # type: ignore[union-attr]
    node.ask(_turns(1))
    node.ask(_turns(2))
    node.settle()  # its figures are in the store
    link.cut()
    with caplog.at_level(logging.WARNING, logger="ctxengine.proxy"):
        assert node.ask(_turns(3)).startswith("ok")
        link.restore()
        assert node.ask(_turns(4)).startswith("ok")
    sent = [s.body["messages"] for s in gw.upstream.seen]
    assert sent[2] == _turns(3)  # forwarded as the client sent it
    (s,) = node.sessions().json()["sessions"]
    assert s["calls"] == 3 and s["messages"] == len(_turns(4))
    assert node.proxy.totals.store_failures == 1
    said = [r.getMessage() for r in caplog.records if r.name == "ctxengine.proxy"]
    assert len(said) == 2 and "failed" in said[0] and "is back" in said[1]


def _post(node: Node, msgs: list[dict[str, Any]]) -> int:
    body = {"model": "claude-sonnet-4-5", "max_tokens": 8, "messages": msgs}
    headers = {"x-api-key": KEY, "x-test-tag": "one-session"}
    return httpx.post(node.base + "/v1/messages", json=body, headers=headers, timeout=60).status_code


def test_two_nodes_at_once_serialise_one_session(gw: Gateway) -> None:
    """The same conversation's requests reach both nodes at the same moment: its first request
    makes one session, not two; later requests of it run one at a time across the nodes."""
    a, b = gw.node(redis=redis_url()), gw.node(redis=redis_url())
    gw.upstream.delay_s = 0.3  # the requests overlap
    with ThreadPoolExecutor(2) as pool:
        assert list(pool.map(_post, (a, b), (_turns(1), _turns(1)))) == [200, 200]
        # (a request with fewer messages than the session would be a rewind: a branch)
        assert list(pool.map(_post, (a, b), (_turns(2), _turns(2)))) == [200, 200]
    (s,) = a.sessions().json()["sessions"]
    assert s["calls"] == 4 and s["messages"] == len(_turns(2))
    assert gw.upstream.max_in_flight["one-session"] == 1
    assert all(not seen.problems for seen in gw.upstream.seen)


def test_a_result_offloaded_on_one_node_is_retrieved_on_the_other(gw: Gateway) -> None:
    """Node A offloads a large tool result to the store; the model's retrieve call for it on the
    next request, at node B (which never saw the session), gets the original back."""
    a, b = gw.node(redis=redis_url(), retrieve_tool=True), gw.node(redis=redis_url(), retrieve_tool=True)
    msgs = _turns(3, size=20_000)  # each result far over the offload cap of a 32,000-token window
    gw.upstream.script.append({"content": [{"type": "text", "text": "probe"}]})
    assert a.ask(msgs) == "probe"
    aid = _offloaded_id(gw.upstream.seen[-1].body)
    msgs = [*msgs, {"role": "assistant", "content": "probe"}, {"role": "user", "content": "what is in it?"}]
    call = {
        "type": "tool_use",
        "id": "toolu_r1",
        "name": "retrieve",
        "input": {"id": aid, "offset": 1, "limit": 3},
    }
    gw.upstream.script.append({"content": [call]})
    assert b.ask(msgs).startswith("ok")
    result = gw.upstream.seen[-1].body["messages"][-1]["content"][0]
    assert result["tool_use_id"] == "toolu_r1" and result["is_error"] is False
    assert f"line {aid.rsplit('_', 1)[1]}.0 value_0 = compute(0)" in result["content"]
    (s,) = b.sessions().json()["sessions"]
    assert s["retrieve_calls"] == 1 and s["calls"] == 2
