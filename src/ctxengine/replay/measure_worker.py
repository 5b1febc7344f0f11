"""The replay's measures in a forked worker process, beside the engine (``ForkedMeasures``).

A replay of one session runs in one process, and its measures (reference recall, fidelity, the
request body's validity: ``replay.measure_set``) took about two fifths of it, though they never
touch the engine. ``ForkedMeasures`` forks a worker before the engine is opened; the worker has
the loaded session (the fork's copy) and runs ``LocalMeasures`` on what the replay sends it, in
transcript order, while the engine goes on in this process on another core:

* ``observe(msg)``: the index of ``msg`` in ``session.messages``;
* ``measure(call, proj)``: the call's index and ``proj`` by reference: each message of the view
  is the index of a session message, or (a message the engine made: a summary, a cleared tool
  result) a number, the message itself pickled the first time it is sent (messages are never
  edited in place, so the worker's copy stays what the engine sends); the system prompt when it
  changed; the events and token figures as they are. One pickled batch per call, on a pipe.

The worker rebuilds each view from the same objects in the same order, so every measure (each a
deterministic function of what it is fed: identity caches included) gives the figures it gives
in this process; ``results`` waits for them at the end.

Before it measures, the worker counts the tokens of the session's texts (``memo_texts`` of each
block: what the engine counts as it ingests them) and sends the counts back in chunks; this
process puts them in its counter's memos (``learn``) as they arrive, read between two calls, so
the engine finds most of them counted. A count is a pure function of its text: the engine's
figures are the ones it would count itself, only sooner. A thread here reads everything the
worker sends as it comes (``_read``), so neither side waits on the other's full pipe. A worker
that fails raises ``MeasureWorkerError`` here with its traceback; nothing is silently measured
in-process instead.

Only where a fork is safe and pays (``can_fork``): ``fork`` is available, this process may use two
cores or more, and no other thread runs (a lock another thread held at the fork would stay held
in the worker).
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import pickle
import queue
import threading
import traceback
from typing import TYPE_CHECKING, Any

from ctxengine.messages.model import Message, Session
from ctxengine.replay.measure_set import LocalMeasures, MeasureResults
from ctxengine.tokens.counter import TokenCounter, _BlockCounter
from ctxengine.tokens.memo import MEMO_MIN_CHARS

if TYPE_CHECKING:
    from multiprocessing.connection import Connection

    from ctxengine.engine.core import Projection

__all__ = ["ForkedMeasures", "MeasureWorkerError", "can_fork"]

_OBSERVE, _MEASURE = 0, 1
JOIN_TIMEOUT_S = 10.0  # waited for a worker told to stop before it is terminated
COUNT_CHUNK_CHARS = 100_000  # characters of text counted ahead per chunk sent back


class MeasureWorkerError(RuntimeError):
    """The measure worker failed (its traceback in the message) or ended without its figures."""


def can_fork() -> bool:
    """Whether the measures may run in a forked worker here (see the module docstring)."""
    if "fork" not in multiprocessing.get_all_start_methods():
        return False
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return cores >= 2 and threading.active_count() == 1


class ForkedMeasures:
    """``LocalMeasures(system, provider, model_name, counter.count_text, validate=validate)`` of
    ``session`` in a forked worker (``measure_set.Measures``), which also counts the session's
    texts ahead for ``counter``. ``observe`` and ``measure`` take the session's own message
    objects as calls and observed messages. Forks at construction: check ``can_fork`` first;
    ``close`` ends the worker (``results`` does too)."""

    def __init__(
        self,
        session: Session,
        provider: str,
        model_name: str,
        counter: TokenCounter,
        *,
        validate: bool,
    ) -> None:
        self._learner = counter if isinstance(counter, _BlockCounter) else None  # what counts ahead
        self.learned = 0  # texts whose counts came from the worker
        self._reply_early: bytes | None = None  # the worker's last word, come before the end
        self.messages = session.messages
        self._index = {id(m): i for i, m in enumerate(session.messages)}
        self._made: dict[int, tuple[Message, int]] = {}  # engine-made messages sent: id -> (it, number)
        self._batch: list[tuple[Any, ...]] = []
        self._system: str | None = None
        ctx = multiprocessing.get_context("fork")
        here, there = ctx.Pipe()
        args = (there, here, session, provider, model_name, counter, validate)
        self._proc = ctx.Process(target=_serve, args=args, name="ctxengine-measures", daemon=True)
        self._proc.start()
        there.close()
        self._conn: Connection | None = here
        self._inbox: queue.SimpleQueue[bytes | None] = queue.SimpleQueue()  # None: the worker's end
        self._reader = threading.Thread(target=_read, args=(here, self._inbox), name="ctxengine-measures")
        self._reader.start()

    def _session_index(self, msg: Message) -> int:
        """The index of ``msg`` in the session, or -1 when it is not one of its messages."""
        i = self._index.get(id(msg), -1)
        return i if i >= 0 and self.messages[i] is msg else -1

    def _take_counts(self) -> None:
        """The counts the worker has sent so far, learnt (``counter.learn``)."""
        while self._reply_early is None:
            try:
                data = self._inbox.get_nowait()
            except queue.Empty:
                return
            if data is None:  # the worker ended: ``_reply`` says how when the figures are asked for
                self._inbox.put(None)
                return
            kind, payload = pickle.loads(data)
            if kind != "counts":
                self._reply_early = data
                return
            assert self._learner is not None  # the worker counts ahead only for such a counter
            learn = self._learner.learn
            for text, as_json, tokens in payload:
                learn(text, as_json, tokens)
            self.learned += len(payload)

    def observe(self, msg: Message) -> None:
        self._take_counts()
        i = self._session_index(msg)
        if i < 0:
            raise ValueError("ForkedMeasures.observe takes the session's own messages")
        self._batch.append((_OBSERVE, i))

    def measure(self, call: Message, proj: Projection) -> None:
        self._take_counts()
        at = self._session_index(call)
        if at < 0:
            raise ValueError("ForkedMeasures.measure takes the session's own message as the call")
        keys: list[int] = []
        new: list[tuple[int, Message]] = []
        for m in proj.messages:
            i = self._session_index(m)
            if i < 0:
                hit = self._made.get(id(m))
                if hit is None or hit[0] is not m:
                    hit = (m, len(self._made))  # held here: its id is not reused while sent
                    self._made[id(m)] = hit
                    new.append((hit[1], m))
                i = -hit[1] - 1
            keys.append(i)
        system = proj.system if proj.system != self._system else None
        self._system = proj.system
        view = (keys, new, system, proj.tokens, proj.content_estimate, proj.window, proj.events)
        self._batch.append((_MEASURE, at, view))
        self._send(self._batch)
        self._batch = []

    def _send(self, batch: list[tuple[Any, ...]] | None) -> None:
        if self._conn is None:
            raise MeasureWorkerError("the measure worker was closed")
        try:
            self._conn.send_bytes(pickle.dumps(batch, protocol=pickle.HIGHEST_PROTOCOL))
        except OSError:  # the worker stopped: its failure is waiting on the pipe, or it died
            self._reply()
            raise MeasureWorkerError("the measure worker stopped before the session's end") from None

    def _reply(self) -> MeasureResults:
        """The worker's reply (then the worker is closed): its results, else ``MeasureWorkerError``
        with its traceback, or saying it ended without a reply."""
        try:
            data = self._reply_early
            while data is None or pickle.loads(data)[0] == "counts":  # counts too late to use
                data = self._inbox.get()
                if data is None:
                    self._proc.join(timeout=JOIN_TIMEOUT_S)
                    ended = f"exit code {self._proc.exitcode}"
                    raise MeasureWorkerError(f"the measure worker ended without its figures ({ended})")
            status, payload = pickle.loads(data)
        finally:
            self._close(wait=True)
        if status != "ok":
            raise MeasureWorkerError(f"the measure worker failed:\n{payload}")
        results: MeasureResults = payload
        return results

    def results(self) -> MeasureResults:
        if self._batch:
            self._send(self._batch)
            self._batch = []
        self._send(None)
        return self._reply()

    def close(self) -> None:
        self._close(wait=False)

    def _close(self, *, wait: bool) -> None:
        """End the worker: ``wait`` for it (it replied and is ending), else (a replay that
        stopped early: its figures are not wanted) terminate it; then the reader and the pipe."""
        if self._conn is None:
            return
        self._proc.join(timeout=JOIN_TIMEOUT_S if wait else 0)
        if self._proc.is_alive():
            self._proc.terminate()
            self._proc.join()
        self._reader.join()  # it reads the end of the worker's output
        self._conn.close()
        self._conn = None


def _read(conn: Connection, inbox: queue.SimpleQueue[bytes | None]) -> None:
    """This process's reader thread: every message of the worker into ``inbox``, then None."""
    try:
        while True:
            inbox.put(conn.recv_bytes())
    except (EOFError, OSError):
        inbox.put(None)


def _serve(
    conn: Connection,
    other_end: Connection,
    session: Session,
    provider: str,
    model_name: str,
    counter: TokenCounter,
    validate: bool,
) -> None:
    """The worker: the session's texts counted ahead (``_count_ahead``), then ``LocalMeasures``
    fed from ``conn`` until ``None`` arrives; then its results, or ``("error", traceback)``,
    sent back."""
    from ctxengine.engine.view import Projection

    other_end.close()  # the parent's end, inherited: closed, so the parent's close is an end of input
    reply: tuple[str, Any]
    try:
        _count_ahead(conn, session, counter)
        measures = LocalMeasures(session.system, provider, model_name, counter.count_text, validate=validate)
        messages = session.messages
        made: dict[int, Message] = {}
        system = session.system
        while True:
            batch = pickle.loads(conn.recv_bytes())
            if batch is None:
                break
            for event in batch:
                if event[0] == _OBSERVE:
                    measures.observe(messages[event[1]])
                    continue
                keys, new, changed, tokens, estimate, window, events = event[2]
                made.update(new)
                if changed is not None:
                    system = changed
                view = [messages[k] if k >= 0 else made[-k - 1] for k in keys]
                proj = Projection(
                    messages=view,
                    system=system,
                    tokens=tokens,
                    content_estimate=estimate,
                    window=window,
                    events=events,
                )
                measures.measure(messages[event[1]], proj)
        reply = ("ok", measures.results())
    except BaseException:  # sent to the parent, which raises it as MeasureWorkerError
        reply = ("error", traceback.format_exc())
    with contextlib.suppress(OSError):  # the parent is gone (an aborted replay): nobody to tell
        conn.send_bytes(pickle.dumps(reply, protocol=pickle.HIGHEST_PROTOCOL))
    conn.close()


def _count_ahead(conn: Connection, session: Session, counter: TokenCounter) -> None:
    """Send ``("counts", [(text, as_json, tokens), ...])`` for the texts of ``session``'s
    messages that ``counter`` memoizes, each once, in chunks of ``COUNT_CHUNK_CHARS``."""
    if not isinstance(counter, _BlockCounter):
        return
    seen: set[tuple[str, bool]] = set()
    chunk: list[tuple[str, bool, int]] = []
    chars = 0
    for msg in session.messages:
        for block in msg.blocks:
            for text, as_json in counter.memo_texts(block):
                if len(text) < MEMO_MIN_CHARS or (text, as_json) in seen:
                    continue
                seen.add((text, as_json))
                chunk.append((text, as_json, counter.counted(text, as_json)))
                chars += len(text)
        if chars >= COUNT_CHUNK_CHARS:
            conn.send_bytes(pickle.dumps(("counts", chunk), protocol=pickle.HIGHEST_PROTOCOL))
            chunk, chars = [], 0
    if chunk:
        conn.send_bytes(pickle.dumps(("counts", chunk), protocol=pickle.HIGHEST_PROTOCOL))
