"""``ctxengine proxy`` as a gateway, as processes: what the options refuse, two nodes on two
loopback ports sharing one PostgreSQL schema and one Redis (one killed with SIGKILL), and
``--workers``."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import anthropic
import httpx
import pytest

from gateway_servers import pg_schema_url, redis_url
from proxy_servers import Upstream, serve
from test_proxy import KEY, _turns

pytestmark = pytest.mark.usefixtures("clean_llm_env")
CLI = [sys.executable, "-m", "ctxengine.cli.commands", "proxy"]


def _refused(*args: str) -> str:
    r = subprocess.run([*CLI, *args], capture_output=True, text=True, timeout=60)
    assert r.returncode == 2, r.stderr
    return r.stderr


def test_the_options_refuse_what_they_cannot_do_safely(tmp_path: Path) -> None:
    assert "--admin-token" in _refused("--host", "0.0.0.0")
    assert "--store postgresql" in _refused("--workers", "2", "--store", str(tmp_path))
    assert "--redis" in _refused("--workers", "2", "--store", "postgresql://127.0.0.1/x")
    assert "--store postgresql" in _refused("--redis", "redis://127.0.0.1:6379/0")


def test_without_the_gateway_extra_the_proxy_says_what_to_install() -> None:
    hide = "import sys\nfor m in ('psycopg', 'psycopg_pool', 'redis'): sys.modules[m] = None\n"
    run = "from ctxengine.cli.commands import main\nsys.argv = ['ctxengine', *sys.argv[1:]]\nmain()\n"
    r = subprocess.run(
        [sys.executable, "-c", hide + run, "proxy", "--store", "postgresql://127.0.0.1/x"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == 2 and "pip install 'ctxengine[gateway]'" in r.stderr


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextmanager
def _node(up: str, store: str, *extra: str, log: Path) -> Iterator[tuple[str, subprocess.Popen[bytes]]]:
    port = _port()
    args = [
        "--port",
        str(port),
        "--window",
        "32000",
        "--anthropic-upstream",
        up,
        "--openai-upstream",
        up + "/v1",
    ]
    with open(log, "ab") as out:
        proc = subprocess.Popen(
            [*CLI, *args, "--store", store, "--redis", redis_url(), *extra],
            stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip
    base = f"http://127.0.0.1:{port}"
    try:
        for _ in range(300):
            try:
                httpx.get(base + "/ctxengine/sessions", timeout=1)
                break
            except httpx.TransportError:
                time.sleep(0.05)
        yield base, proc
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
            proc.wait(timeout=30)


def _ask(base: str, t: int) -> str:
    c = anthropic.Anthropic(api_key=KEY, base_url=base, max_retries=0, timeout=60)
    text = c.messages.create(model="claude-sonnet-4-5", max_tokens=8, messages=_turns(t)).content[0]
    return text.text  # type: ignore[union-attr]


def _calls(base: str) -> list[tuple[str, int]]:
    rows = httpx.get(base + "/ctxengine/sessions", timeout=10).json()["sessions"]
    return [(r["id"], r["calls"]) for r in rows]


@dataclass
class Pair:
    """Two nodes on one store: ``a`` (``proc_a``, to be killed) and ``b``."""

    store: str
    a: str
    b: str
    proc_a: subprocess.Popen[bytes]

    def kill_a(self) -> None:
        os.killpg(self.proc_a.pid, signal.SIGKILL)
        self.proc_a.wait(timeout=30)

    def after(self, upto: int) -> tuple[int, int]:
        """Node B serves the conversation's requests up to ``upto`` again; then the session's
        calls and how many message entries the store holds (every session)."""
        import psycopg

        for t in (upto - 1, upto):
            assert _ask(self.b, t).startswith("ok")
        ((_, calls),) = _calls(self.b)
        with psycopg.connect(self.store) as conn:
            kinds = conn.execute("SELECT kind FROM ctx_entries").fetchall()
        return calls, [k for (k,) in kinds].count("message")


@contextmanager
def _pair(up: Upstream, tmp_path: Path) -> Iterator[Pair]:
    with (
        pg_schema_url() as store,
        serve(up.app()) as up_url,
        _node(up_url, store, log=tmp_path / "b.log") as (b, _),
        _node(up_url, store, log=tmp_path / "a.log") as (a, proc_a),
    ):
        yield Pair(store, a, b, proc_a)


def test_two_processes_share_sessions_and_survive_a_kill(tmp_path: Path) -> None:
    up = Upstream()
    with _pair(up, tmp_path) as pair:
        for t in range(1, 5):
            assert _ask(pair.a if t % 2 else pair.b, t).startswith("ok")
        assert _calls(pair.a) == _calls(pair.b) and _calls(pair.a)[0][1] == 4
        pair.kill_a()
        for t in range(5, 8):  # node B alone continues what A served
            assert _ask(pair.b, t).startswith("ok")
        ((_, calls),) = _calls(pair.b)
        assert calls == 7
    assert all(not s.problems for s in up.seen) and len(up.seen) == 7
    assert KEY not in (tmp_path / "a.log").read_text() + (tmp_path / "b.log").read_text()


def test_two_workers_serve_one_session(tmp_path: Path) -> None:
    up = Upstream()
    log = tmp_path / "w.log"
    with (
        pg_schema_url() as store,
        serve(up.app()) as up_url,
        _node(up_url, store, "--workers", "2", log=log) as (base, _),
    ):
        for t in range(1, 7):
            assert _ask(base, t).startswith("ok")
        ((_, calls),) = _calls(base)
    assert calls == 6, log.read_text()
    # the router and its two workers
    assert "2 workers" in log.read_text() and log.read_text().count("Started server process") == 3


def test_a_node_killed_mid_request_leaves_the_session_whole(tmp_path: Path) -> None:
    """Node A is killed with SIGKILL while its request waits on the upstream: the client gets an
    error, its retry on node B is served (once A's lock has expired), and the session holds each
    client message once."""
    import threading

    up = Upstream()
    with _pair(up, tmp_path) as pair:
        assert _ask(pair.a, 1).startswith("ok")
        up.delay_s = 3.0
        failed: list[BaseException] = []

        def doomed() -> None:
            try:
                _ask(pair.a, 2)
            except Exception as exc:
                failed.append(exc)

        t = threading.Thread(target=doomed)
        t.start()
        for _ in range(100):  # the request is at the upstream
            if len(up.seen) == 2:
                break
            time.sleep(0.05)
        pair.kill_a()
        t.join(timeout=30)
        up.delay_s = 0.0
        assert len(failed) == 1
        calls, messages = pair.after(3)  # the retry, then the next request
    assert calls == 3  # the killed request was never answered
    assert messages == len(_turns(3))


def test_a_node_killed_mid_stream_leaves_the_session_whole(tmp_path: Path) -> None:
    """Node A is killed with SIGKILL while it relays a stream (its first event already at the
    client): the client's stream breaks, its retry on node B is served, and the session goes on
    with each client message stored once."""
    up = Upstream()
    with _pair(up, tmp_path) as pair:
        assert _ask(pair.a, 1).startswith("ok")
        up.stream_pause_s = 5.0
        c = anthropic.Anthropic(api_key=KEY, base_url=pair.a, max_retries=0, timeout=60)
        broke: list[Exception] = []
        try:
            with c.messages.stream(model="claude-sonnet-4-5", max_tokens=8, messages=_turns(2)) as s:
                for event in s:
                    if event.type == "message_start":  # mid-stream now
                        os.killpg(pair.proc_a.pid, signal.SIGKILL)
        except Exception as exc:  # the SDK's transport error: the stream was cut
            broke.append(exc)
        assert len(broke) == 1 and "closed" in str(broke[0]), broke
        up.stream_pause_s = 0.0
        calls, messages = pair.after(3)  # the retry, then the next request
    assert calls == 3  # the broken stream was never answered whole
    assert messages == len(_turns(3))
