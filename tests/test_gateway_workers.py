"""``ctxengine proxy --workers N``: each session kept on one worker process (``proxy.workers``),
on the real PostgreSQL and Redis; a worker killed with SIGKILL is replaced and loses nothing."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path
from typing import Any

import anthropic
import httpx
import msgspec
import pytest

from ctxengine.proxy.identity import SESSION_HEADER
from ctxengine.proxy.workers import affinity
from gateway_servers import pg_schema_url
from processes import dead, kill, stat, wait_dead
from proxy_servers import Upstream, serve
from test_gateway_cli import _node
from test_proxy import _turns

pytestmark = pytest.mark.usefixtures("clean_llm_env")


def _ask(base: str, key: str, t: int, log: Path | None = None) -> str:
    """Turn ``t`` of ``key``'s conversation; given the node's ``log``, a refusal fails the test
    with its status, its message and the log (else it is raised)."""
    c = anthropic.Anthropic(api_key=key, base_url=base, max_retries=0, timeout=60)
    try:
        text = c.messages.create(model="claude-sonnet-4-5", max_tokens=8, messages=_turns(t)).content[0]
    except anthropic.APIStatusError as exc:
        if log is None:
            raise
        pytest.fail(f"turn {t} of {key}: {exc.status_code} {exc.message}\n{log.read_text()}")
    return text.text  # type: ignore[union-attr]


def _report(base: str) -> dict[str, Any]:
    data: dict[str, Any] = httpx.get(base + "/ctxengine/sessions", timeout=10).json()
    return data


def _workers(pid: int) -> list[int]:
    """The worker processes of the router ``pid`` (its spawned children, from /proc; not the
    spawn context's resource tracker)."""
    out = []
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                fields = Path(f"/proc/{d}/stat").read_text()
                cmd = Path(f"/proc/{d}/cmdline").read_bytes()
            except OSError:
                continue
            if int(fields.rsplit(")", 1)[1].split()[1]) == pid and b"spawn_main" in cmd:
                out.append(int(d))
    return out


def test_a_conversations_requests_keep_one_affinity_as_it_grows() -> None:
    """The first user message decides (its ``cache_control`` moved or not); the key matters."""
    h = {"x-api-key": "sk-a"}
    marked = _turns(1)
    block = {"type": "text", "text": marked[0]["content"], "cache_control": {"type": "ephemeral"}}
    marked[0] = {"role": "user", "content": [block]}

    seen = {affinity(h, msgspec.json.encode({"messages": m})) for m in (_turns(1), marked, _turns(9))}
    assert len(seen) == 1
    assert affinity({"x-api-key": "sk-b"}, msgspec.json.encode({"messages": _turns(1)})) not in seen
    chat = [{"role": "system", "content": "S"}, {"role": "user", "content": "hi"}]
    assert affinity(h, msgspec.json.encode({"messages": chat})) == affinity(
        h, msgspec.json.encode({"messages": [*chat, {"role": "assistant", "content": "yo"}]})
    )
    named = {**h, SESSION_HEADER: "s1"}
    assert affinity(named, b"{}") == affinity(named, msgspec.json.encode({"messages": _turns(3)}))
    assert affinity(h, b"not json") == affinity(h, b"[1, 2]")  # the worker answers it: any one


def test_each_session_stays_on_one_worker_and_a_killed_worker_loses_nothing(tmp_path: Path) -> None:
    """Eight conversations (eight keys) of four turns through two workers, each request on a
    new connection: no worker replays another's turns (each session stays on one). Then one
    worker is killed with SIGKILL: the router starts it again, the conversations go on, and the
    store holds each session's calls once."""
    up = Upstream()
    keys = [f"sk-test-affinity-{i}" for i in range(8)]
    log = tmp_path / "w.log"
    with (
        pg_schema_url() as store,
        serve(up.app()) as up_url,
        _node(up_url, store, "--workers", "2", log=log) as (base, proc),
    ):
        for t in range(1, 5):
            for k in keys:
                assert _ask(base, k, t).startswith("ok")
        totals = _report(base)["totals"]
        assert totals["turns_replayed"] == 0, log.read_text()
        assert totals["sessions_rebuilt"] == 0
        workers = _workers(proc.pid)
        assert len(workers) == 2
        assert [len(_workers(w)) for w in workers] == [1, 1]  # each worker's job process
        (orphan,) = _workers(workers[0])
        # returns once the process is gone: a request relayed to it before would be one
        # "given to the worker when it died" (a 502, the next test's case), not this one's
        kill(workers[0])
        for t in range(5, 8):
            for k in keys:
                assert _ask(base, k, t, log).startswith("ok"), log.read_text()
        for _ in range(600):  # the killed worker is started again
            if len(_workers(proc.pid)) == 2 and workers[0] not in _workers(proc.pid):
                break
            time.sleep(0.1)
        report = _report(base)
        for _ in range(100):  # the killed worker's job process exits by itself (parent_watch)
            if dead(orphan):
                break
            time.sleep(0.1)
        assert dead(orphan)
    assert report["totals"]["worker_restarts"] == 1, log.read_text()
    assert sorted(r["calls"] for r in report["sessions"]) == [7] * 8
    assert all(not s.problems for s in up.seen) and len(up.seen) == 56


def test_a_worker_killed_mid_request_fails_that_request_only(tmp_path: Path) -> None:
    """The worker that holds a session is killed with SIGKILL while its request waits on the
    upstream: the client gets the router's 502, its retry is served (by the other worker, or the
    same one started again, once the dead one's lock has expired), and the session holds each
    client message once."""
    import threading

    import psycopg

    up = Upstream()
    key = "sk-test-doomed-worker"
    with (
        pg_schema_url() as store,
        serve(up.app()) as up_url,
        _node(up_url, store, "--workers", "2", log=tmp_path / "w.log") as (base, _),
    ):
        assert _ask(base, key, 1).startswith("ok")
        body = msgspec.json.encode({"messages": _turns(1)})
        which = int.from_bytes(affinity({"x-api-key": key}, body)[:8], "little") % 2
        pid = _report(base)["totals"]["worker_pids"][which]
        up.delay_s = 3.0
        failed: list[BaseException] = []

        def doomed() -> None:
            try:
                _ask(base, key, 2)
            except Exception as exc:
                failed.append(exc)

        t = threading.Thread(target=doomed)
        t.start()
        for _ in range(100):  # the request is at the upstream
            if len(up.seen) == 2:
                break
            time.sleep(0.05)
        os.kill(pid, signal.SIGKILL)
        t.join(timeout=30)
        up.delay_s = 0.0
        assert len(failed) == 1 and isinstance(failed[0], anthropic.InternalServerError), failed
        assert "502" in str(failed[0])
        wait_dead(pid)  # its other connections closed too (see processes.dead)
        for t in (2, 3):  # the retry, then the next request
            assert _ask(base, key, t).startswith("ok")
        ((row),) = _report(base)["sessions"]
        with psycopg.connect(store) as conn:
            kinds = [k for (k,) in conn.execute("SELECT kind FROM ctx_entries").fetchall()]
    assert row["calls"] == 3  # the killed request was never answered
    assert kinds.count("message") == len(_turns(3))


def _alive(pid: int) -> bool:
    try:
        return stat(pid)[0] != "Z"
    except OSError:
        return False


def test_workers_exit_when_their_router_is_killed_alone(tmp_path: Path) -> None:
    """SIGKILL to the router's process only (not its group): its workers do not live on,
    holding sessions nobody can reach."""
    up = Upstream()
    with (
        pg_schema_url() as store,
        serve(up.app()) as up_url,
        _node(up_url, store, "--workers", "2", log=tmp_path / "w.log") as (base, proc),
    ):
        pids = _report(base)["totals"]["worker_pids"]
        assert len(pids) == 2 and all(_alive(p) for p in pids)
        proc.kill()
        proc.wait(timeout=30)
        for _ in range(200):
            if not any(_alive(p) for p in pids):
                break
            time.sleep(0.05)
    assert not any(_alive(p) for p in pids)
