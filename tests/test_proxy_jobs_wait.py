"""A session's next request waits for the background notes update this node runs for it
(``JobQueue.settled``: ``--store DIR`` without Redis, the node's thread), so that the update's
outcome is applied at the next turn whatever the timing. Driven by the real Claude Code session
of ``test_proxy_transcripts``."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest

from conftest import CLAUDE_CODE
from ctxengine.formats import load
from ctxengine.formats.anthropic_writer import to_anthropic
from ctxengine.messages.model import Message
from ctxengine.proxy import Proxy, ProxyConfig, create_app
from ctxengine.proxy.job_index import QUEUED
from ctxengine.proxy.jobs import LocalJobs
from proxy_servers import Upstream, serve

pytestmark = [pytest.mark.usefixtures("clean_llm_env"), pytest.mark.filterwarnings("ignore")]

CC_FILE = CLAUDE_CODE / "cc_opus-4.5_general-tool-calls_2-comment-header-lines.jsonl"
MODEL = "claude-opus-4-5"
WINDOW = 32_000


@contextmanager
def _proxy(store: Path) -> Iterator[tuple[Upstream, str, Proxy]]:
    up = Upstream()
    with serve(up.app()) as up_url:
        cfg = ProxyConfig(anthropic_upstream=up_url, window=WINDOW, store=store, background_notes=True)
        app = create_app(cfg)
        with serve(app) as base:
            yield up, base, app.state.proxy


def _settled(proxy: Proxy) -> None:
    """Every request completed and every job the store holds run."""
    shared = proxy.shared
    assert shared is not None
    for _ in range(1_500):
        locked = any(s.lock.locked() for s in list(proxy.table.sessions.values()))
        if not locked and not shared.job_index.counts().get(QUEUED):
            return
        time.sleep(0.01)
    raise AssertionError("a request or a job did not end")


def _requests_done(proxy: Proxy) -> None:
    for _ in range(1_500):
        if not any(s.lock.locked() for s in list(proxy.table.sessions.values())):
            return
        time.sleep(0.01)
    raise AssertionError("a request did not end")


def _drive(
    store: Path, settle: bool = True
) -> tuple[list[Any], dict[str, Any], Proxy, list[tuple[Any, ...]]]:
    """The recorded session's calls through a proxy on ``store``, each job run before the next
    request (``settle``; else the next request is sent once the previous one has ended): the
    bodies sent upstream, the totals, the proxy, its job rows."""
    (session,) = load(CC_FILE)
    history: list[Message] = []
    with _proxy(store) as (up, base, proxy):
        http = httpx.Client(base_url=base, headers={"x-api-key": "sk-jobs"}, timeout=60)
        for msg in session.messages:
            if msg.role == "assistant" and history:
                msgs = to_anthropic(history, model=MODEL, cache_breakpoints=False)["messages"]
                r = http.post("/v1/messages", json={"model": MODEL, "max_tokens": 1024, "messages": msgs})
                assert r.status_code == 200, r.text
                _settled(proxy) if settle else _requests_done(proxy)
            history.append(msg)
        totals = http.get("/ctxengine/sessions").json()["totals"]
        assert proxy.shared is not None
        with proxy.shared.store.connection() as conn:  # type: ignore[attr-defined]
            rows = conn.execute("SELECT turn, status, applied_turn, ran_by FROM ctx_proxy_jobs ORDER BY turn")
            jobs = [tuple(r) for r in rows.fetchall()]
        return [s.body for s in up.seen], totals, proxy, jobs


def test_the_next_request_waits_for_the_job_so_its_outcome_lands_at_the_next_turn(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, transcripts: Path
) -> None:
    """Requests sent one after another without waiting for the jobs, each job slowed to 0.3 s:
    each request waits for the job of the turn before
    (``JobQueue.settled``), so every outcome is applied at the next turn and the bodies are those
    of a run whose jobs were done before each request."""
    from ctxengine.proxy.jobs import JobWorker

    run = JobWorker.execute

    def slow(self: JobWorker, key: Any, give_up_why: str | None = None) -> str:
        time.sleep(0.3)
        return run(self, key, give_up_why)

    monkeypatch.setattr(JobWorker, "execute", slow)
    sent, totals, proxy, jobs = _drive(tmp_path / "eager", settle=False)
    assert proxy.shared is not None and isinstance(proxy.shared.jobs, LocalJobs)
    reference, _, _, ref_jobs = _drive(tmp_path / "settled")
    applied = [j for j in jobs if j[2] is not None]
    assert len(jobs) >= 2 and len(applied) >= len(jobs) - 1
    assert all(j[2] == j[0] + 1 for j in applied) and [j[:3] for j in jobs] == [j[:3] for j in ref_jobs]
    assert sent == reference and totals["jobs_run"] == len(jobs)


def test_settled_waits_for_a_job_of_the_thread_at_most_its_timeout() -> None:
    """``LocalJobs.settled``: False while the job still runs past the timeout, True once it ended
    and at once for a job the thread never had."""
    import asyncio
    import threading

    from ctxengine.proxy.jobs import JobKey

    release = threading.Event()

    class Blocking:
        stats = None

        def execute(self, key: JobKey) -> str:
            release.wait(10)
            return "done"

    async def go() -> tuple[bool, bool, bool]:
        jobs = LocalJobs(Blocking())  # type: ignore[arg-type]
        key = JobKey("s", 3)
        await jobs.submit([key])
        early = await jobs.settled(key, timeout=0.05)
        release.set()
        late = await jobs.settled(key, timeout=10)
        other = await jobs.settled(JobKey("s", 4), timeout=0.0)
        await jobs.close()
        return early, late, other

    assert asyncio.run(go()) == (False, True, True)
