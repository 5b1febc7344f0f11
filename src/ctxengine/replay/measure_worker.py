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
in this process; ``results`` waits for them at the end. A worker that fails raises
``MeasureWorkerError`` here with its traceback; nothing is silently measured in-process instead.

Only where a fork is safe and pays (``can_fork``): ``fork`` is available, this process may use two
cores or more, and no other thread runs (a lock another thread held at the fork would stay held
in the worker).
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import pickle
import threading
import traceback
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ctxengine.messages.model import Message, Session
from ctxengine.replay.measure_set import LocalMeasures, MeasureResults

if TYPE_CHECKING:
    from multiprocessing.connection import Connection

    from ctxengine.engine.core import Projection

__all__ = ["ForkedMeasures", "MeasureWorkerError", "can_fork"]

_OBSERVE, _MEASURE = 0, 1
JOIN_TIMEOUT_S = 10.0  # waited for a worker told to stop before it is terminated


class MeasureWorkerError(RuntimeError):
    """The measure worker failed (its traceback in the message) or ended without its figures."""


def can_fork() -> bool:
    """Whether the measures may run in a forked worker here (see the module docstring)."""
    if "fork" not in multiprocessing.get_all_start_methods():
        return False
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return cores >= 2 and threading.active_count() == 1


class ForkedMeasures:
    """``LocalMeasures(system, provider, model_name, count_text, validate=validate)`` of
    ``session`` in a forked worker (``measure_set.Measures``). ``observe`` and ``measure`` take
    the session's own message objects as calls and observed messages. Forks at construction:
    check ``can_fork`` first; ``close`` ends the worker (``results`` does too)."""

    def __init__(
        self,
        session: Session,
        provider: str,
        model_name: str,
        count_text: Callable[[str], int],
        *,
        validate: bool,
    ) -> None:
        self.messages = session.messages
        self._index = {id(m): i for i, m in enumerate(session.messages)}
        self._made: dict[int, tuple[Message, int]] = {}  # engine-made messages sent: id -> (it, number)
        self._batch: list[tuple[Any, ...]] = []
        self._system: str | None = None
        ctx = multiprocessing.get_context("fork")
        here, there = ctx.Pipe()
        args = (there, here, session, provider, model_name, count_text, validate)
        self._proc = ctx.Process(target=_serve, args=args, name="ctxengine-measures", daemon=True)
        self._proc.start()
        there.close()
        self._conn: Connection | None = here

    def _session_index(self, msg: Message) -> int:
        """The index of ``msg`` in the session, or -1 when it is not one of its messages."""
        i = self._index.get(id(msg), -1)
        return i if i >= 0 and self.messages[i] is msg else -1

    def observe(self, msg: Message) -> None:
        i = self._session_index(msg)
        if i < 0:
            raise ValueError("ForkedMeasures.observe takes the session's own messages")
        self._batch.append((_OBSERVE, i))

    def measure(self, call: Message, proj: Projection) -> None:
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
        assert self._conn is not None
        try:
            status, payload = pickle.loads(self._conn.recv_bytes())
        except (EOFError, OSError):
            self._proc.join(timeout=JOIN_TIMEOUT_S)
            ended = f"exit code {self._proc.exitcode}"
            raise MeasureWorkerError(f"the measure worker ended without its figures ({ended})") from None
        finally:
            self.close()
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
        if self._conn is None:
            return
        self._conn.close()  # the worker reads the end of its input and stops
        self._conn = None
        self._proc.join(timeout=JOIN_TIMEOUT_S)
        if self._proc.is_alive():  # pragma: no cover
            self._proc.terminate()
            self._proc.join()


def _serve(
    conn: Connection,
    other_end: Connection,
    session: Session,
    provider: str,
    model_name: str,
    count_text: Callable[[str], int],
    validate: bool,
) -> None:
    """The worker: ``LocalMeasures`` fed from ``conn`` until ``None`` arrives; then its results,
    or ``("error", traceback)``, sent back."""
    from ctxengine.engine.view import Projection

    other_end.close()  # the parent's end, inherited: closed, so the parent's close is an end of input
    reply: tuple[str, Any]
    try:
        measures = LocalMeasures(session.system, provider, model_name, count_text, validate=validate)
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
