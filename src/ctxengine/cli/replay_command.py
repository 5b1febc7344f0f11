"""What ``ctxengine replay`` runs (``run_replay``), apart from the typer application
(``cli.commands``, whose ``replay`` command calls it with its parsed options) so that a plain
command line can run it without importing typer (``cli.launch_replay``).

Errors a user can fix (a missing path, an unknown format, a bad policy file) print one line and
raise ``typer.Exit(2)`` (``cli.stderr.fail``); a malformed record is a warning naming file and
line, and the rest still loads.
"""

from __future__ import annotations

import os
import sys
import warnings
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

from ctxengine.cli.common import (
    check_distinct_outputs,
    check_model,
    check_not_an_input,
    check_output,
    check_window_option,
    fail,
    finish_llm,
    load_for_replay,
    load_policy,
    load_registry,
    make_llm,
    progress_bar,
    report_layer_failures,
    require_paths,
    say,
    sessions_bar,
    stdout_console,
    window_error,
    window_message,
)
from ctxengine.cli.policies import baseline_engine, demo_path
from ctxengine.messages.model import Session
from ctxengine.models.registry import WindowTooSmallError
from ctxengine.policy.registry import Policy, get_policy

if TYPE_CHECKING:
    from ctxengine.engine.plugins import EngineRegistry
    from ctxengine.llm import LLMClient
    from ctxengine.models.registry import Registry
    from ctxengine.replay import SessionReport

__all__ = ["USER_SESSION_DIRS", "newest_user_session", "run_replay", "show_warning"]

USER_SESSION_DIRS = ("~/.claude/projects", "~/.codex/sessions")


_LAZY_COMMANDS = ("tool", "mcp", "bench", "eval")


def _command_asked() -> str | None:
    """The one command the ``ctxengine`` script was started for, when it is ``replay`` or one
    of ``_LAZY_COMMANDS``; None otherwise (help, an unknown command, imported as a library)."""
    if Path(sys.argv[0]).name != "ctxengine" or len(sys.argv) < 2:
        return None
    return sys.argv[1] if sys.argv[1] in ("replay", *_LAZY_COMMANDS) else None


def newest_user_session() -> Path | None:
    """The newest session file under ``~/.claude/projects`` or ``~/.codex/sessions``."""
    best: tuple[float, Path] | None = None
    for d in USER_SESSION_DIRS:
        root = Path(os.path.expanduser(d))
        if not root.is_dir():
            continue
        for p in root.rglob("*.jsonl"):
            try:
                mtime = p.stat().st_mtime
            except OSError:
                continue
            if best is None or mtime > best[0]:
                best = (mtime, p)
    return best[1] if best else None


def run_replay(
    path: Path | None,
    *,
    policy: str = "default",
    policy_file: Path | None = None,
    window: int | None = None,
    json_out: Path | None = None,
    plot_out: Path | None = None,
    html_out: Path | None = None,
    models: Path | None = None,
    model: str | None = None,
    engine: str = "ctxengine",
    llm: str | None = None,
    llm_base_url: str | None = None,
    llm_timeout: float = 120.0,
    quiet: bool = False,
    jobs: int | None = None,
    demo: bool = False,
) -> None:
    """``ctxengine replay`` with its options as parsed (the defaults are the command's; each
    option's meaning is in its ``--help``): the table or ``--quiet``, and the files asked for.
    Raises ``typer.Exit(2)`` after one ``error:`` line for what a user can fix."""
    baseline = baseline_engine(policy, policy_file, engine)
    pol, engine = baseline if baseline is not None else (load_policy(policy, policy_file), engine)
    engines = _check_replay_options(window, [json_out, plot_out, html_out], quiet, engine)
    if jobs is not None and jobs < 1:  # before the folder is scanned
        raise fail(f"--jobs must be at least 1, not {jobs}")
    client = make_llm(llm, llm_base_url, llm_timeout)
    if demo:
        path = demo_path(path)
    if path is None:
        path = newest_user_session()
        if path is None:
            raise fail(
                "no transcript given and no session found in " + " or ".join(USER_SESSION_DIRS)
                + ": give a transcript file or folder (ctxengine replay PATH), or try the shipped"
                " sessions (ctxengine replay --demo)"
            )  # fmt: skip
        say("replaying your newest session:", str(path))
    require_paths([path])
    check_not_an_input(json_out, "--json", [path])
    check_not_an_input(plot_out, "--plot", [path])
    check_not_an_input(html_out, "--html", [path])
    registry = load_registry(models)
    check_model(model, registry)
    # ``settle``: this process is ``ctxengine replay``, not a test's runner
    sessions = load_for_replay(path, model, settle=_command_asked() == "replay")
    reports, recorded_reports = _replay_sessions(
        sessions,
        pol,
        window,
        registry,
        engine,
        engines,
        client,
        with_recorded=bool(plot_out or html_out),
        jobs=_jobs(jobs, len(sessions), client),
    )
    _show_reports(
        reports, recorded_reports, pol.name, path, quiet=quiet, json_out=json_out, plot_out=plot_out
    )
    if html_out:
        from ctxengine.dashboard.cli_html import write_replay

        write_replay(html_out, reports, recorded_reports, pol, registry, path)
    finish_llm(client)


def _check_replay_options(
    window: int | None, outputs: list[Path | None], quiet: bool, engine: str
) -> EngineRegistry:
    """The engines (core and entry-point plugins), after checking ``replay``'s options: one
    ``error:`` line and exit 2 for a bad window, an output path that cannot be written, --quiet
    with nothing to write, or an unknown engine id."""
    from ctxengine import peers
    from ctxengine.engine.plugins import EngineRegistry

    check_window_option(window)
    json_out, plot_out, html = outputs  # --json, --plot, --html
    check_output(json_out, "--json")
    check_output(plot_out, "--plot")
    check_output(html, "--html")
    check_distinct_outputs(json_out, plot_out, html)
    if quiet and not (json_out or plot_out or html):
        raise fail("--quiet leaves the table out and nothing else is written: add --json, --plot or --html")
    engines = EngineRegistry()
    engines.load_for(engine)
    if engine in peers.PEERS:
        peers.register(engines)
    if engine not in engines.ids():
        raise fail(f"unknown engine {engine!r}; known: {', '.join(engines.ids())}")
    return engines


def _jobs(jobs: int | None, sessions: int, client: LLMClient | None) -> int:
    """Worker processes for the replay: ``--jobs`` (at least 1), else one per core
    (``replay.pool.auto_jobs``); always 1 with a model (one client, breaker and spend per run)."""
    if jobs is not None and jobs < 1:
        raise fail(f"--jobs must be at least 1, not {jobs}")
    if client is not None or sessions < 2:
        return 1
    if jobs is not None:
        return jobs
    from ctxengine.replay.pool import auto_jobs

    return auto_jobs(sessions)


def _replay_sessions(
    sessions: list[Session],
    pol: Policy,
    window: int | None,
    registry: Registry,
    engine: str,
    engines: EngineRegistry,
    client: LLMClient | None,
    *,
    with_recorded: bool,
    jobs: int = 1,
) -> tuple[list[SessionReport], list[SessionReport] | None]:
    """Every session replayed under ``pol`` (a progress bar for two or more; in ``jobs`` worker
    processes when more than 1: ``replay.pool``) and, with ``with_recorded`` (for the plot),
    under ``recorded`` too. A window too small for a session stops the replay with one
    ``error:`` line (exit 2) once the bar is gone."""
    from ctxengine.replay import replay_session

    if jobs > 1:
        return _replay_in_pool(
            sessions, pol, window, registry, engine, with_recorded=with_recorded, jobs=jobs
        )
    reports: list[SessionReport] = []
    recorded_reports: list[SessionReport] | None = [] if with_recorded else None
    rec_policy = get_policy("recorded")
    refused: list[tuple[WindowTooSmallError, Session]] = []
    with sessions_bar(len(sessions)) as progress:
        task = progress.add_task(f"replay ({pol.name})", total=len(sessions))
        for s in sessions:
            try:
                reports.append(
                    replay_session(
                        s,
                        pol,
                        window=window,
                        registry=registry,
                        engine_id=engine,
                        engines=engines,
                        llm=client,
                        measure_worker=client is None,  # the measures beside, on another core
                    )
                )
            except WindowTooSmallError as exc:
                refused.append((exc, s))  # said once the progress bar is gone
                progress.advance(task)
                continue
            if recorded_reports is not None:
                recorded_reports.append(
                    reports[-1]
                    if pol.name == "recorded"
                    else replay_session(s, rec_policy, window=window, registry=registry, validate=False)
                )
            progress.advance(task)
    _say_refused(refused, replayed=len(reports))
    return reports, recorded_reports


def _say_refused(refused: list[tuple[WindowTooSmallError, Session]], *, replayed: int) -> None:
    """The sessions whose window is too small for them: one error (exit 2) when none was
    replayed; else each is one ``warning:`` line and the others' reports stand."""
    if refused and not replayed:
        raise window_error(*refused[0]) from None
    for exc, s in refused:
        say("warning:", f"skipped: {window_message(exc, s)}")


def _replay_in_pool(
    sessions: list[Session],
    pol: Policy,
    window: int | None,
    registry: Registry,
    engine: str,
    *,
    with_recorded: bool,
    jobs: int,
) -> tuple[list[SessionReport], list[SessionReport] | None]:
    """``_replay_sessions`` in ``jobs`` worker processes (``replay.pool.replay_many``): the same
    reports, in the same order."""
    from ctxengine.replay.pool import replay_many

    reports: list[SessionReport] = []
    recorded_reports: list[SessionReport] | None = [] if with_recorded else None
    rec_policy = get_policy("recorded") if with_recorded else None
    refused: list[tuple[WindowTooSmallError, Session]] = []
    with progress_bar() as progress:
        task = progress.add_task(f"replay ({pol.name}, {jobs} processes)", total=len(sessions))
        many = replay_many(
            sessions, pol, jobs=jobs, window=window, registry=registry, engine=engine, recorded=rec_policy
        )
        for s, outcome in zip(sessions, many, strict=True):
            progress.advance(task)
            if isinstance(outcome, WindowTooSmallError):
                refused.append((outcome, s))
                continue
            report, rec = outcome
            reports.append(report)
            if recorded_reports is not None and rec is not None:
                recorded_reports.append(rec)
    _say_refused(refused, replayed=len(reports))
    return reports, recorded_reports


def _show_reports(
    reports: list[SessionReport],
    recorded_reports: list[SessionReport] | None,
    policy: str,
    path: Path,
    *,
    quiet: bool,
    json_out: Path | None,
    plot_out: Path | None,
) -> None:
    """The table (unless ``quiet``), the layer failures, and ``--json`` / ``--plot`` written."""
    from ctxengine.replay import report

    if not quiet:
        report.print_table(reports, report.table_title(policy, reports), stdout_console())
    report_layer_failures(sum(r.summary.layer_failures for r in reports), "summary.layer_failures")
    if json_out:
        try:
            report.write_json(reports, json_out, as_list=path.is_dir() or len(reports) > 1)
        except OSError as exc:  # what the early check cannot foresee (/proc, a full disk)
            raise fail(f"--json {json_out}: {exc.strerror or exc}") from None
        say("wrote", str(json_out))
    if plot_out:
        try:
            report.plot(reports, recorded_reports, plot_out)
        except RuntimeError as exc:
            raise fail(str(exc)) from None
        except OSError as exc:
            raise fail(f"--plot {plot_out}: {exc.strerror or exc}") from None
        say("wrote", str(plot_out))


def show_warning(
    message: Warning | str,
    category: type[Warning],
    filename: str,
    lineno: int,
    file: TextIO | None = None,
    line: str | None = None,
) -> None:
    """ctxengine's own warnings (a window above the model's, a malformed record) as one
    ``warning:`` line, like the command line's other notes; any other warning as Python shows it."""
    if category.__module__.startswith("ctxengine."):
        say("warning:", str(message))
    else:
        _python_show_warning(message, category, filename, lineno, file, line)


_python_show_warning = warnings.showwarning  # Python's own, kept for the others
