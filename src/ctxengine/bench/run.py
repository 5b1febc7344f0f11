"""Run the bench: resolve the policy names to runners, replay every session under each (in this
process or, with ``jobs`` > 1, in a pool of processes that load the sessions once), and sum the
rows per policy and per half of the documented split.

A session whose replay raises is reported as an error of its policy and the others still run;
``WindowTooSmallError`` stops the bench (the window is wrong for every session). Seconds.
"""

from __future__ import annotations

import time
import warnings
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich.progress import Progress

from ctxengine import peers
from ctxengine.bench.figures import compare, session_row, summarize_rows
from ctxengine.bench.records import BenchResult, PolicyRow, Runner, SessionRow
from ctxengine.cli import common
from ctxengine.cli.policy_names import known_policies, unknown_policy_message
from ctxengine.engine import baselines
from ctxengine.messages.model import Session
from ctxengine.models.registry import Registry, WindowTooSmallError, WindowWarning
from ctxengine.policy.registry import get_policy
from ctxengine.replay import replay_session

if TYPE_CHECKING:
    from ctxengine.engine.plugins import EngineRegistry
    from ctxengine.llm import LLMClient

Outcome = tuple[int, SessionRow | str]  # a session's index and its row, or the error it raised


def resolve(names: list[str]) -> list[Runner]:
    """Runners for policy/peer names. Raises ``KeyError`` naming the known ones, at the first
    unknown name before any runner is made (LangChain is imported only when a peer is asked)."""
    for name in names:
        if name not in known_policies():
            raise KeyError(unknown_policy_message(name))
    out = []
    missing = peers.available() if any(n in peers.PEERS for n in names) else None
    for name in names:
        if name in peers.PEERS:
            out.append(Runner(name=name, policy=peers.policy_for(name), engine=name, unavailable=missing))
        elif name in baselines.BASELINES:
            out.append(Runner(name=name, policy=baselines.policy_for(name), engine=name))
        else:
            out.append(Runner(name=name, policy=get_policy(name)))
    return out


def engine_registry() -> EngineRegistry:
    """The engines: core, entry-point plugins, and the peers when LangChain is installed."""
    from ctxengine.engine.plugins import EngineRegistry

    engines = EngineRegistry()
    engines.load_entry_points()
    peers.register(engines)
    return engines


def run_one(
    session: Session,
    runner: Runner,
    *,
    window: int | None,
    registry: Registry,
    engines: EngineRegistry,
    llm: LLMClient | None = None,
) -> SessionRow:
    """Replay one session under one runner (raises what the replay raises)."""
    t0 = time.perf_counter()
    report = replay_session(
        session,
        runner.policy,
        window=window,
        registry=registry,
        engine_id=runner.engine,
        engines=engines,
        llm=llm,
    )
    return session_row(report, time.perf_counter() - t0)


# worker state for --jobs (each process loads the sessions once)
_W: dict[str, Any] = {}


def _worker_init(paths: list[str], window: int | None, models: str | None, model: str | None) -> None:
    sessions, _ = common.collect_all(Path(p) for p in paths)
    common.assume_model(sessions, model)
    warnings.filterwarnings("ignore", category=WindowWarning)  # the parent said it once
    registry = Registry.default().with_overrides(Path(models)) if models else Registry.default()
    _W.update(sessions=sessions, window=window, registry=registry, engines=engine_registry())


def _worker_run(task: tuple[int, Runner]) -> tuple[int, SessionRow | str]:
    index, runner = task
    try:
        row = run_one(
            _W["sessions"][index],
            runner,
            window=_W["window"],
            registry=_W["registry"],
            engines=_W["engines"],
        )
    except WindowTooSmallError:
        raise
    except Exception as exc:  # reported as an error of this session, the others still run
        return index, f"{type(exc).__name__}: {exc}"
    return index, row


class _Bar:
    """The bench's task on the progress bar (nothing without a bar)."""

    def __init__(self, progress: Progress | None, total: int) -> None:
        self.progress = progress
        self.task = progress.add_task("bench", total=total) if progress else None

    def policy(self, name: str) -> None:
        if self.progress is not None and self.task is not None:
            self.progress.update(self.task, description=f"bench ({name})")

    def advance(self, sessions: int = 1) -> None:
        if self.progress is not None and self.task is not None:
            self.progress.advance(self.task, sessions)


def _pool(
    jobs: int, paths: list[Path] | None, window: int | None, models: Path | None, model: str | None
) -> ProcessPoolExecutor:
    """``jobs`` processes, each loading the sessions of ``paths`` once."""
    return ProcessPoolExecutor(
        jobs,
        initializer=_worker_init,
        initargs=([str(p) for p in paths or []], window, str(models) if models else None, model),
    )


def _replay_policy(
    sessions: list[Session],
    runner: Runner,
    pool: ProcessPoolExecutor | None,
    bar: _Bar,
    *,
    window: int | None,
    registry: Registry,
    engines: EngineRegistry,
    llm: LLMClient | None,
) -> list[Outcome]:
    """Every session replayed under ``runner``, in ``pool`` or here. Raises
    ``WindowTooSmallError``; any other exception is the session's outcome."""
    results: list[Outcome] = []
    if pool is not None:
        for done in pool.map(_worker_run, [(i, runner) for i in range(len(sessions))], chunksize=4):
            results.append(done)
            bar.advance()
        return results
    for i, s in enumerate(sessions):
        try:
            row = run_one(s, runner, window=window, registry=registry, engines=engines, llm=llm)
            results.append((i, row))
        except WindowTooSmallError:
            raise
        except Exception as exc:
            results.append((i, f"{type(exc).__name__}: {exc}"))
        bar.advance()
    return results


class _Tally:
    """The policies' rows as they are done: over every session and over each half of the split."""

    def __init__(self) -> None:
        self.rows: dict[str, PolicyRow] = {}
        self.halves: dict[str, dict[str, PolicyRow]] = {"tuning": {}, "held_out": {}}
        self.session_rows: list[SessionRow] = []

    def unavailable(self, runner: Runner) -> None:
        self.rows[runner.name] = summarize_rows(runner, [], [])

    def add(self, runner: Runner, sessions: list[Session], results: list[Outcome]) -> tuple[int, int]:
        """Sum ``runner``'s outcomes; returns how many sessions ran and how many failed."""
        mine: list[SessionRow] = []
        errors: list[str] = []
        for i, outcome in results:
            if isinstance(outcome, str):
                errors.append(f"{sessions[i].source}#{sessions[i].name}: {outcome}")
            else:
                mine.append(outcome)
        self.session_rows.extend(mine)
        self.rows[runner.name] = summarize_rows(runner, mine, errors)
        self.halves["tuning"][runner.name] = summarize_rows(runner, [r for r in mine if not r.held_out], [])
        self.halves["held_out"][runner.name] = summarize_rows(runner, [r for r in mine if r.held_out], [])
        return len(mine), len(errors)


def run_bench(
    sessions: list[Session],
    runners: list[Runner],
    *,
    window: int | None = None,
    registry: Registry | None = None,
    llm: LLMClient | None = None,
    jobs: int = 1,
    paths: list[Path] | None = None,
    models: Path | None = None,
    model: str | None = None,
    progress: Progress | None = None,
    on_policy: Callable[[str], None] | None = None,
) -> BenchResult:
    """Replay every session under every runner. With ``jobs`` > 1 (and ``paths`` to reload the
    sessions from, and ``model`` for those that name none) the replays run in that many processes.
    ``on_policy`` is given one line as each policy is done (where a progress bar is not shown).
    Raises ``WindowTooSmallError``."""
    registry = registry or Registry.default()
    engines = engine_registry()
    tally = _Tally()
    bar = _Bar(progress, len(sessions) * len(runners))
    pool = _pool(jobs, paths, window, models, model) if jobs > 1 and paths and llm is None else None
    try:
        for number, runner in enumerate(runners, 1):
            started = time.perf_counter()
            bar.policy(runner.name)
            if runner.unavailable:
                bar.advance(len(sessions))
                tally.unavailable(runner)
                if on_policy is not None:
                    on_policy(f"{runner.name} ({number}/{len(runners)}): unavailable")
                continue
            results = _replay_policy(
                sessions, runner, pool, bar, window=window, registry=registry, engines=engines, llm=llm
            )
            ran, failed = tally.add(runner, sessions, results)
            if on_policy is not None:
                failures = f", {failed} failed" if failed else ""
                on_policy(
                    f"{runner.name} ({number}/{len(runners)}): {ran} session(s){failures} "
                    f"in {time.perf_counter() - started:,.1f} s"
                )
    finally:
        if pool is not None:
            pool.shutdown()
    return BenchResult(
        window_tokens=window,
        paths=[str(p) for p in paths or []],
        policies=tally.rows,
        sessions=tally.session_rows,
        comparison=compare(tally.rows),
        halves=tally.halves,
    )
