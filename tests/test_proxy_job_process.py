"""A node's background jobs in its job process (``proxy.job_process``): a real Claude Code session
through a proxy on its SQLite store, its session-notes updates queued as jobs. Each job is run by
a child process of the node, its outcome applied at a later request of the session; a job process
killed with SIGKILL between two jobs is replaced and the jobs after it run. PostgreSQL's path is
the same code on the other store (``test_gateway_jobs``). Without a store, an engine's $0 notes
updates computed in the job process (``ProcessNotes``) make the same notes at the same turns as
in line, on the real 290-tool session."""

from __future__ import annotations

import asyncio
import errno
import logging
import multiprocessing
import os
import sqlite3
import time
from collections.abc import Iterator
from concurrent.futures import Future
from pathlib import Path
from typing import Any

import httpx
import msgspec
import pytest

from conftest import CLAUDE_CODE
from ctxengine.compaction.notes import NotesJob, NotesOutcome
from ctxengine.formats import load
from ctxengine.formats.anthropic_writer import to_anthropic
from ctxengine.messages.model import Message
from ctxengine.proxy import Proxy, ProxyConfig, create_app
from ctxengine.proxy.app import STORE_FILE
from ctxengine.proxy.job_index import DONE
from ctxengine.proxy.job_process import JobProcess, ProcessNotes, notes_in
from ctxengine.proxy.jobs import JobKey
from ctxengine.store.base import StoreError
from processes import kill, parent
from proxy_servers import Upstream, serve
from test_notes import SONNET, make_engine, updates_side_by_side

pytestmark = [pytest.mark.usefixtures("clean_llm_env"), pytest.mark.filterwarnings("ignore")]

CC_FILE = CLAUDE_CODE / "cc_opus-4.5_general-tool-calls_2-comment-header-lines.jsonl"
MODEL = "claude-opus-4-5"


@pytest.fixture
def rig(tmp_path: Path) -> Iterator[tuple[Upstream, str, Proxy, Path]]:
    up = Upstream()
    store = tmp_path / "store"
    with serve(up.app()) as up_url:
        cfg = ProxyConfig(
            anthropic_upstream=up_url, window=32_000, store=store, background_notes=True, job_process=True
        )
        app = create_app(cfg)
        with serve(app) as base:
            yield up, base, app.state.proxy, store


def _jobs(store: Path) -> list[tuple[str, int, str, int | None, str]]:
    """Every job row of the node's SQLite file: session, turn, status, applied turn, worker."""
    with sqlite3.connect(store / STORE_FILE) as conn:
        rows = conn.execute(
            "SELECT session, turn, status, applied_turn, ran_by FROM ctx_proxy_jobs ORDER BY turn"
        ).fetchall()
    return [tuple(r) for r in rows]


def _job_process(proxy: Proxy) -> JobProcess:
    shared = proxy.shared
    assert shared is not None and shared.jobs is not None
    elsewhere = shared.jobs.worker.elsewhere  # type: ignore[attr-defined]
    assert isinstance(elsewhere, JobProcess)
    return elsewhere


def _drive(base: str, messages: list[Message], calls: range, until: Any = None) -> int:
    """The recorded session's calls numbered in ``calls`` (from 0), each request the whole
    history so far, as Claude Code sends it; stops early once ``until()`` is true. Returns the
    number of the next call."""
    http = httpx.Client(base_url=base, headers={"x-api-key": "sk-job-process"}, timeout=60)
    history: list[Message] = []
    call = 0
    for msg in messages:
        if msg.role == "assistant":
            if call == calls.stop or (until is not None and until()):
                break
            if call in calls:
                msgs = to_anthropic(history, model=MODEL, cache_breakpoints=False)["messages"]
                r = http.post("/v1/messages", json={"model": MODEL, "max_tokens": 1024, "messages": msgs})
                assert r.status_code == 200, r.text
                time.sleep(0.05)  # a moment between calls, as an agent's tools take
            call += 1
        history.append(msg)
    return call


def _wait_done(store: Path, n: int) -> list[tuple[str, int, str, int | None, str]]:
    for _ in range(600):
        jobs = _jobs(store)
        if sum(j[2] == DONE for j in jobs) >= n:
            return jobs
        time.sleep(0.05)
    raise AssertionError(f"fewer than {n} jobs done: {_jobs(store)}")


def test_notes_jobs_run_in_a_child_process_and_apply_at_a_later_request(
    rig: tuple[Upstream, str, Proxy, Path], transcripts: Path
) -> None:
    upstream, base, proxy, store = rig
    (session,) = load(CC_FILE)
    assert _drive(base, session.messages, range(len(session.calls))) == len(session.calls)
    jobs = _wait_done(store, 2)
    done = [j for j in jobs if j[2] == DONE]
    process = _job_process(proxy)
    assert process.ran >= len(done)  # each job went to the process, which wrote its outcome
    pid = process.start().result(timeout=60)
    assert pid != os.getpid() and parent(pid) == os.getpid()  # a child of the node
    assert {j[4] for j in done} == {proxy.shared.jobs.worker.name}  # type: ignore[union-attr]
    applied = [j for j in done if j[3] is not None]
    assert applied and all(j[3] > j[1] for j in applied)  # applied at a later request
    assert all(not s.problems for s in upstream.seen)
    totals = httpx.get(base + "/ctxengine/sessions").json()["totals"]
    assert totals["jobs_failed"] == 0 and totals["jobs_run"] == len(done)


def test_a_job_process_killed_between_jobs_is_replaced(
    rig: tuple[Upstream, str, Proxy, Path], transcripts: Path
) -> None:
    _, base, proxy, store = rig
    (session,) = load(CC_FILE)
    n = len(session.calls)
    stopped = _drive(base, session.messages, range(n), until=lambda: bool(_jobs(store)))
    assert stopped < n
    first = _wait_done(store, 1)
    process = _job_process(proxy)
    pid = process.start().result(timeout=60)
    kill(pid)
    ran = process.ran
    _drive(base, session.messages, range(stopped, n))
    _wait_done(store, len(first) + 1)
    assert process.ran > ran  # the jobs after the kill ran, in a new process
    assert process.start().result(timeout=60) not in (pid, os.getpid())
    assert process.restarts == 1
    totals = httpx.get(base + "/ctxengine/sessions").json()["totals"]
    assert totals["jobs_failed"] == 0 and totals["job_process_restarts"] == 1


def test_closing_cancels_the_queued_calls_quietly_and_starts_no_process_again(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """``close`` with calls queued behind the one the process runs: they are cancelled, and the
    watch on each call (``fold``'s) takes a cancelled call for what it is, logging no error.
    After ``close`` no process is started: a call fails with ``StoreError``, a start too."""
    process = JobProcess(None, None)
    process.start().result(timeout=60)
    before = set(multiprocessing.active_children())
    calls = [process.fold(b"not a snapshot") for _ in range(200)]
    process.close()
    assert any(c.cancelled() for c in calls)  # queued behind the running one when it closed
    assert all(c.done() for c in calls)
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR], caplog.text
    late = process.fold(b"not a snapshot")
    with pytest.raises(StoreError, match="closed"):
        late.result(timeout=5)
    with pytest.raises(StoreError, match="closed"):
        process.start().result(timeout=5)
    with pytest.raises(StoreError, match="closed"):
        process.run(JobKey("s", 1))
    assert not set(multiprocessing.active_children()) - before  # no process started after close
    assert process.restarts == 0


def test_a_job_process_that_cannot_start_fails_each_call_with_store_error(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """The system refuses the process (``EAGAIN`` from its start): each call fails with a
    ``StoreError`` saying why (a job's worker counts it and the job stays queued; a notes update
    is a failed update), the refusal is logged, and nothing raises out of the call."""
    spawn = multiprocessing.get_context("spawn")

    def refused(self: object) -> None:
        raise OSError(errno.EAGAIN, "Resource temporarily unavailable")

    monkeypatch.setattr(spawn.Process, "start", refused)
    process = JobProcess(None, None)
    try:
        with pytest.raises(StoreError, match="temporarily unavailable"):
            process.fold(b"not a snapshot").result(timeout=5)
        with pytest.raises(StoreError, match="temporarily unavailable"):
            process.run(JobKey("s", 1))
        assert process.restarts == 2  # each failed start put its pool aside
        assert "as it started" in caplog.text
    finally:
        process.close()


def test_a_job_process_that_cannot_open_the_store_fails_each_job_saying_why(tmp_path: Path) -> None:
    """The node's store cannot be opened from the job process: each job fails with a
    ``StoreError`` giving the reason, in the one process (not a new process per job)."""
    process = JobProcess(str(tmp_path / "no such folder" / "proxy.sqlite"), None)
    try:
        for _ in range(2):
            with pytest.raises(StoreError, match="could not open the store"):
                process.run(JobKey("s", 1))
        pid = process.start().result(timeout=60)
        assert process.start().result(timeout=60) == pid and process.restarts == 0
    finally:
        process.close()


class _Counted:
    """A notes runner passed through, waited for as the one it wraps; the outcomes it gave."""

    waited = True

    def __init__(self, real: ProcessNotes) -> None:
        self.real, self.outcomes = real, list[Future[NotesOutcome]]()

    def __call__(self, job: NotesJob, updater: object = None) -> Future[NotesOutcome]:
        self.outcomes.append(self.real(job, updater))
        return self.outcomes[-1]


@pytest.fixture(scope="module")
def sonnet() -> list[Message]:
    return load(SONNET)[0].messages


def test_notes_computed_in_the_job_process_match_in_line(sonnet: list[Message]) -> None:
    """The $0 updater in the job process, each update finished before the next turn: the same
    notes, at the same turns, as in line; every update was computed in the child process."""
    process = JobProcess(None, None)
    try:
        inline = make_engine()
        background = notes_in(process, make_engine(background_notes=True), "claude-sonnet-4-5")
        real = background.compactor.notes_runner
        assert isinstance(real, ProcessNotes)
        counted = _Counted(real)
        background.compactor.notes_runner = counted
        at_inline, at_background = updates_side_by_side(inline, background, sonnet[:300])
        assert len(counted.outcomes) == len(at_background)  # each update went to the process
        pid = process.start().result(timeout=60)
        assert pid != os.getpid() and parent(pid) == os.getpid()
    finally:
        process.close()
    assert len(at_inline) >= 3 and at_background == at_inline
    assert background.compactor.notes == inline.compactor.notes
    assert background.compactor.notes_from == inline.compactor.notes_from


def test_a_proxy_without_a_store_computes_its_notes_in_its_job_process(
    transcripts: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The real session through a proxy without a store: its engine's notes updates are computed
    in the proxy's job process (a child process) and applied at its later calls; none failed."""
    outcomes: list[NotesOutcome] = []
    real_call = ProcessNotes.__call__

    def recorded(self: ProcessNotes, job: NotesJob, updater: object = None) -> Future[NotesOutcome]:
        future = real_call(self, job, updater)
        future.add_done_callback(lambda f: outcomes.append(f.result()))
        return future

    monkeypatch.setattr(ProcessNotes, "__call__", recorded)
    up = Upstream()
    with serve(up.app()) as up_url:
        cfg = ProxyConfig(anthropic_upstream=up_url, window=32_000, background_notes=True, job_process=True)
        app = create_app(cfg)
        with serve(app) as base:
            proxy: Proxy = app.state.proxy
            (session,) = load(CC_FILE)
            _drive(base, session.messages, range(len(session.calls)))
            (s,) = proxy.table.sessions.values()
            assert proxy.notes is not None and proxy.shared is None
            assert isinstance(s.engine.compactor.notes_runner, ProcessNotes)
            pid = proxy.notes.start().result(timeout=60)
            assert pid != os.getpid() and parent(pid) == os.getpid()
            # applied at the session's later calls (one may still wait for the next call)
            assert s.engine.compactor.notes.updates >= 2
    assert len(outcomes) >= 2 and all(o.state is not None for o in outcomes), outcomes
    assert all(not x.problems for x in up.seen)


def test_a_failed_update_and_a_dead_process_are_failed_updates_and_the_process_goes_on(
    sonnet: list[Message],
) -> None:
    """A snapshot the job process cannot read, then its process killed between two updates:
    each update that could not be made is an outcome without notes whose event says why; the
    process is replaced and the next update is made."""
    from ctxengine.proxy.jobs import decode_outcome, encode_input
    from ctxengine.summary.notes import NotesState

    process = JobProcess(None, None)
    try:
        bad = process.fold(b"not a snapshot")
        with pytest.raises(msgspec.ValidationError):  # raised in the process, given back
            bad.result(timeout=60)
        pid = process.start().result(timeout=60)
        assert process.restarts == 0  # a bad snapshot does not kill the process
        kill(pid)
        time.sleep(0.2)  # the pool's thread sees its process gone
        job = NotesJob("cadence", sonnet[:40], NotesState(), 40, tokens=1_000)
        outcome = ProcessNotes(process, "claude-sonnet-4-5")(job).result(timeout=60)
        if outcome.state is None:  # submitted before the pool saw the death: failed, said so
            assert "update failed" in outcome.event.reason and "error" in outcome.event.details
            outcome = ProcessNotes(process, "claude-sonnet-4-5")(job).result(timeout=60)
        assert outcome.state is not None and outcome.state.updates == 1
        assert process.restarts == 1
        again = decode_outcome(process.fold(encode_input(job, "claude-sonnet-4-5")).result(timeout=60))
        assert again.state == outcome.state  # the same update, made again in the new process
    finally:
        process.close()


def test_an_app_inside_another_program_keeps_its_notes_on_threads(tmp_path: Path) -> None:
    """``create_app`` in another program (``job_process`` off, the default): no job process is
    made, with a store or without (spawning one would import that program's main module again);
    ``ctxengine proxy`` and its workers turn it on."""
    for store in (None, tmp_path / "store"):
        proxy: Proxy = create_app(ProxyConfig(window=32_000, store=store)).state.proxy
        try:
            assert proxy.notes is None
            jobs = proxy.shared.jobs if proxy.shared is not None else None
            assert jobs is None or jobs.worker.elsewhere is None  # type: ignore[attr-defined]
        finally:
            asyncio.run(proxy.close())
