"""Replaying many sessions on several cores: each session in a worker process, the reports in order.

The sessions of a folder are independent (each replay builds its own engine, ledger and store), so
``replay_many`` hands them to ``jobs`` worker processes (``concurrent.futures``) and yields the
reports in the sessions' order, the same reports a replay in this process gives (the replay is
deterministic). Where workers are forked (``multiprocessing``'s start method is ``fork``: Linux up
to Python 3.13) they inherit the loaded sessions and are sent each session's index; elsewhere a
session travels pickled (the shared corpus: 8.5 MB of sessions, 0.1-0.15 s to pickle in this
process, as long again to unpickle in the workers). A report travels pickled. Sessions replayed
with a model (``llm``) stay in this process: the client, its breaker and its spend are one per run.

``auto_jobs`` says how many workers a run gets by default: one per core, at most one per session,
none for a single session.
"""

from __future__ import annotations

import functools
import gc
import multiprocessing
import os
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING

from ctxengine.models.window import WindowTooSmallError
from ctxengine.replay.driver import replay_session

if TYPE_CHECKING:
    from concurrent.futures import Future

    from ctxengine.engine.plugins import EngineRegistry
    from ctxengine.messages.model import Session
    from ctxengine.models.registry import Registry
    from ctxengine.policy.registry import Policy
    from ctxengine.replay.records import SessionReport

MAX_AUTO_JOBS = 8  # more workers than this cost more memory than the replay gains


GC_YOUNG_ALLOCATIONS = 10_000  # allocations between two collections of the youngest generation


def settle_collector() -> None:
    """Tune the cyclic garbage collector for the rest of this process and the replay's forked
    workers, which inherit it; call it once the sessions are loaded, in a process that replays and
    ends (``ctxengine replay``: the frozen objects are never collected). ``gc.freeze`` takes
    the loaded sessions (and everything imported) out of the collector's sight, where each full
    collection walked all of them (~0.05 s for the largest shared session, each time), and the
    youngest generation is collected every ``GC_YOUNG_ALLOCATIONS`` allocations instead of 700
    (the replay allocates much and frees nearly all of it by reference counting). The reports
    do not change."""
    gc.freeze()
    young, older, oldest = gc.get_threshold()
    gc.set_threshold(max(GC_YOUNG_ALLOCATIONS, young), older, oldest)


def auto_jobs(sessions: int) -> int:
    """Worker processes for ``sessions`` sessions by default: the cores this process may use
    (``os.sched_getaffinity`` where the platform has it), at most ``MAX_AUTO_JOBS`` and at most
    one per session; 1 (this process) for a single session."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return max(1, min(cores, MAX_AUTO_JOBS, sessions))


Outcome = tuple["SessionReport", "SessionReport | None"]


_INHERITED: Sequence[Session] = ()  # the sessions forked workers find in their copy of this process


def _replay_at(
    index: int,
    policy: Policy,
    recorded: Policy | None,
    window: int | None,
    registry: Registry,
    engine: str,
) -> Outcome | WindowTooSmallError:
    """``_replay_one`` of the inherited session ``index``, in a forked worker."""
    return _replay_one(_INHERITED[index], policy, recorded, window, registry, engine)


def _replay_one(
    session: Session,
    policy: Policy,
    recorded: Policy | None,
    window: int | None,
    registry: Registry,
    engine: str,
) -> Outcome | WindowTooSmallError:
    """One session under ``policy`` and, when given, ``recorded`` (for the plot), in a worker; a
    window too small for it is returned, not raised (the caller raises it in order)."""
    engines = _engines(engine)
    try:
        report = replay_session(
            session, policy, window=window, registry=registry, engine_id=engine, engines=engines
        )
    except WindowTooSmallError as exc:
        return exc
    rec = None
    if recorded is not None:
        rec = (
            report
            if policy.name == "recorded"
            else replay_session(session, recorded, window=window, registry=registry, validate=False)
        )
    return report, rec


@functools.lru_cache(maxsize=1)
def _engines(engine: str) -> EngineRegistry:
    """The engines (core; the entry-point plugins unless ``engine`` is a core engine; the peers
    when ``engine`` is one), loaded once per worker process."""
    from ctxengine import peers
    from ctxengine.engine.plugins import EngineRegistry

    engines = EngineRegistry()
    engines.load_for(engine)
    if engine in peers.PEERS:
        peers.register(engines)
    return engines


def replay_many(
    sessions: Sequence[Session],
    policy: Policy,
    *,
    jobs: int,
    window: int | None,
    registry: Registry,
    engine: str,
    recorded: Policy | None = None,
) -> Iterator[Outcome | WindowTooSmallError]:
    """The reports of ``sessions`` under ``policy`` (and ``recorded``, for the plot), in order,
    replayed in ``jobs`` worker processes; a session whose window is too small for it yields the
    ``WindowTooSmallError`` in its place (the caller says so and goes on, or stops).

    Args:
        sessions: the sessions to replay.
        policy: the policy to replay them under.
        jobs: worker processes (2 or more).
        window: the window, tokens (None: each model's).
        registry: the model registry.
        engine: the engine id (core or an entry-point plugin, loaded in each worker).
        recorded: the ``recorded`` policy when the caller also wants the recorded run's reports.

    Yields:
        ``(report, recorded report or None)`` per session, in the sessions' order, or the
        session's ``WindowTooSmallError``.
    """
    from concurrent.futures import ProcessPoolExecutor  # not for a replay of one file

    global _INHERITED
    forked = multiprocessing.get_start_method() == "fork"
    _INHERITED = sessions if forked else ()  # set before the workers fork (at the first submit)
    try:
        with ProcessPoolExecutor(jobs) as pool:
            futures: list[Future[Outcome | WindowTooSmallError] | None] = [None] * len(sessions)
            for i in largest_first(sessions):
                args = (policy, recorded, window, registry, engine)
                futures[i] = (
                    pool.submit(_replay_at, i, *args)
                    if forked
                    else pool.submit(_replay_one, sessions[i], *args)
                )
            try:
                for future in futures:
                    assert future is not None  # every index was submitted
                    yield future.result()
            finally:  # the caller stopped early: the rest are not replayed
                for f in futures:
                    if f is not None:
                        f.cancel()
    finally:
        _INHERITED = ()


def largest_first(sessions: Sequence[Session]) -> list[int]:
    """The indexes of ``sessions``, the longest (most messages) first, ties in their order: the
    order in which the workers take them, so that a long session does not start last and keep
    one worker busy after the others are done (the wall time of a folder is that of the busiest
    worker)."""
    return sorted(range(len(sessions)), key=lambda i: -len(sessions[i].messages))
