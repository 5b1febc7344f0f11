"""The ``ctxengine bench`` command: its options checked (one ``error:`` line and exit 2 for what a
user can fix), the bench run with a progress bar, the tables and lines printed, ``--json`` and
``--plot`` and ``--html`` written.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Annotated

import msgspec
import typer

from ctxengine.bench.present import CAPTION, bench_tables, comparison_line, plot, subagent_line
from ctxengine.bench.records import DEFAULT_POLICIES, BenchResult, Runner
from ctxengine.bench.run import resolve, run_bench
from ctxengine.cli import common
from ctxengine.cli.policy_names import policy_groups
from ctxengine.dashboard.cli_html import HTML_HELP, write_bench
from ctxengine.models.registry import WindowTooSmallError


def _runners(
    policies: str, window: int | None, json_out: Path | None, plot_out: Path | None, jobs: int,
    html_out: Path | None = None,
) -> list[Runner]:  # fmt: skip
    """The runners for ``--policies``, after checking the options (``typer.Exit(2)`` with one
    ``error:`` line for a bad one); a note for each runner that cannot run."""
    names = [n.strip() for n in policies.split(",") if n.strip()]
    if not names:
        raise common.fail("--policies names no policy")
    common.check_window_option(window)
    common.check_output(json_out, "--json")
    common.check_output(plot_out, "--plot")
    common.check_output(html_out, "--html")
    common.check_distinct_outputs(json_out, plot_out, html_out)
    if jobs < 1:
        raise common.fail(f"--jobs must be at least 1, not {jobs}")
    try:
        runners = resolve(names)
    except KeyError as exc:
        raise common.fail(str(exc.args[0])) from None
    for r in runners:
        if r.unavailable:
            common.say("note:", f"{r.name} unavailable: {r.unavailable}")
    return runners


SPLIT_MIN_SESSIONS = 2
"""``--split`` shows the halves only when each holds at least this many sessions."""


def _print_result(
    result: BenchResult, sessions: int, window: int | None, elapsed: float, split: bool
) -> None:
    """The table over every session (its caption with the wall time, seconds), the comparison
    line, with ``split`` the tables of the two halves (when each is large enough), the
    sub-agent line and the first errors."""
    out = common.stdout_console()
    where = f"window {window:,} tokens" if window else "each model's window"
    title = f"ctxengine bench — {sessions} sessions, {where}"
    notes = (CAPTION, f"{elapsed:,.1f} s elapsed in all")
    for table in bench_tables(result, title, width=out.width, notes=notes):
        out.print(table)
    out.print(comparison_line(result.comparison), markup=False, highlight=False)
    if split:
        _print_halves(result, out.width)
    sub = next((r for r in result.policies.values() if r.subagents_spawned), None)
    if sub is not None:  # recorded figures: the same under every policy
        out.print(subagent_line(sub), markup=False, highlight=False)
    for row in result.policies.values():
        for e in row.errors[:5]:
            common.say("error:", f"{row.policy}: {e}")


def _print_halves(result: BenchResult, width: int) -> None:
    """The tables of the tuning and the held-out half (``bench.held_out``), or one note when a
    half holds fewer than ``SPLIT_MIN_SESSIONS`` sessions."""
    out = common.stdout_console()
    counts = {
        half: max((r.sessions for r in (result.halves.get(half) or {}).values()), default=0)
        for half in ("tuning", "held_out")
    }
    if min(counts.values()) < SPLIT_MIN_SESSIONS:
        common.say(
            "note:",
            f"--split: {counts['tuning']} + {counts['held_out']} sessions are too few to split (each half "
            f"needs {SPLIT_MIN_SESSIONS}); the table above is every session",
        )
        return
    for half, label in (("tuning", "tuning half"), ("held_out", "held-out half")):
        title = f"{label} — {counts[half]} sessions (split: bench.held_out)"
        for table in bench_tables(result, title, result.halves[half], width=width):
            out.print(table)


def _write(result: BenchResult, json_out: Path | None, plot_out: Path | None) -> None:
    """``--json`` (every figure) and ``--plot`` (recall against cost), each said when written."""
    if json_out:
        try:
            json_out.parent.mkdir(parents=True, exist_ok=True)
            json_out.write_bytes(msgspec.json.format(msgspec.json.encode(result), indent=1))
        except OSError as exc:  # what the early check cannot foresee (/proc, a full disk)
            raise common.fail(f"--json {json_out}: {exc.strerror or exc}") from None
        common.say("wrote", str(json_out))
    if plot_out:
        try:
            plot(result, plot_out)
        except RuntimeError as exc:
            raise common.fail(str(exc)) from None
        except OSError as exc:
            raise common.fail(f"--plot {plot_out}: {exc.strerror or exc}") from None
        common.say("wrote", str(plot_out))


def bench_command(
    paths: Annotated[list[Path], typer.Argument(help="Transcript files or folders (read recursively).")],
    policies: Annotated[
        str,
        typer.Option(
            help="Comma-separated policies, of: "
            + "; ".join(f"{kind} {', '.join(names)}" for kind, names in policy_groups().items())
            + f" (the peers need the extra 'peers'). Default: {', '.join(DEFAULT_POLICIES)}.",
            show_default=False,
        ),
    ] = ",".join(DEFAULT_POLICIES),
    window: Annotated[
        int | None, typer.Option(help="Context window in tokens (default: each model's).")
    ] = None,
    llm: common.LlmOption = None,
    llm_base_url: common.LlmBaseUrlOption = None,
    llm_timeout: common.LlmTimeoutOption = 120.0,
    json_out: Annotated[Path | None, typer.Option("--json", help="Write every figure as JSON.")] = None,
    plot_out: Annotated[
        Path | None, typer.Option("--plot", help="Write a PNG of recall against cost per policy.")
    ] = None,
    html_out: Annotated[Path | None, typer.Option("--html", help=HTML_HELP)] = None,
    models: common.ModelsOption = None,
    model: common.ModelOption = None,
    jobs: Annotated[
        int | None,
        typer.Option(help="Processes to replay in (default: one per core; 1: this one; ignored with --llm)."),
    ] = None,
    split: Annotated[
        bool,
        typer.Option(
            "--split",
            help="Also show the tuning and held-out halves of the sessions (bench.held_out), each "
            f"in a table of its own; needs {SPLIT_MIN_SESSIONS} sessions in each half.",
        ),
    ] = False,
) -> None:
    """Replay every session under every policy and compare them in one table."""
    runners = _runners(policies, window, json_out, plot_out, 1 if jobs is None else jobs, html_out)
    client = common.make_llm(llm, llm_base_url, llm_timeout)
    common.require_paths(paths)
    common.check_not_an_input(json_out, "--json", paths)
    common.check_not_an_input(plot_out, "--plot", paths)
    common.check_not_an_input(html_out, "--html", paths)
    registry = common.load_registry(models)
    common.check_model(model, registry)
    sessions = common.load_transcripts(paths, model)
    if jobs is None:
        from ctxengine.replay.pool import auto_jobs

        jobs = auto_jobs(len(sessions))
    started = time.perf_counter()
    try:
        with common.progress_bar() as progress:
            result = run_bench(
                sessions,
                runners,
                window=window,
                registry=registry,
                llm=client,
                jobs=jobs,
                paths=paths,
                models=models,
                model=model,
                progress=progress,
                # without a terminal the progress bar shows nothing: a line per policy instead
                on_policy=None if common.err.is_terminal else lambda line: common.say("bench:", line),
            )
    except WindowTooSmallError as exc:
        raise common.window_error(exc) from None
    _print_result(result, len(sessions), window, time.perf_counter() - started, split)
    common.report_layer_failures(
        sum(r.layer_failures for r in result.policies.values()), "the JSON's layer_failures per policy"
    )
    _write(result, json_out, plot_out)
    if html_out:
        where = f"window {window:,} tokens" if window else "each model's window"
        write_bench(html_out, result, f"ctxengine bench — {len(sessions)} sessions, {where}")
    common.finish_llm(client)
