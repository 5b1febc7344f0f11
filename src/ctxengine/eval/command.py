"""``ctxengine eval``: LLM-judged probes at every compaction (issue 8, section 6; ``ctxengine.eval.probes``).

Errors a user can fix (a bad ``--judge`` spec, no key, an unknown policy, a bad window, a missing
path) print one ``error:`` line and exit 2, as ``replay`` and ``bench`` do. The judge's key comes
from ``ANTHROPIC_API_KEY`` / ``OPENAI_API_KEY`` and is never printed or written.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import msgspec
import typer
from rich.table import Table

from ctxengine.cli import common

if TYPE_CHECKING:
    from ctxengine.eval.probes import EvalReport, Judge, PolicyEval
    from ctxengine.llm import ProviderClient
    from ctxengine.models.registry import Registry
    from ctxengine.policy.registry import Policy

DEFAULT_MAX_COMPACTIONS = 3


def make_judge_client(
    spec: str, base_url: str | None, timeout: float, registry: Registry | None = None
) -> ProviderClient:
    """The judge's client for ``PROVIDER:MODEL`` (``timeout`` in seconds per request), its calls
    priced from ``registry`` (USD); a bad spec, an unknown provider, a missing SDK or key prints
    ``error: --judge SPEC: why`` and raises ``typer.Exit(2)``."""
    from ctxengine.llm import LLMError, make_client

    try:
        return make_client(spec, base_url=base_url, timeout=timeout, registry=registry)
    except (ValueError, LLMError, ImportError) as exc:
        raise common.fail(f"--judge {spec}: {exc}") from None


def _score(x: float | None) -> str:
    return "–" if x is None else f"{x:.2f}"


def eval_table(report: EvalReport, title: str) -> Table:
    """One row per policy: compactions probed, mean grade (0-5) per dimension and overall, the
    judge's calls, tokens and cost, failures."""
    from ctxengine.eval.probes import DIMENSIONS

    table = Table(title=title)
    columns = ("policy", "sessions", "probed", *DIMENSIONS, "overall")
    for col in (*columns, "judge calls", "judge tokens", "judge $", "failures"):
        table.add_column(col, justify="left" if col == "policy" else "right")
    for p in report.policies:
        table.add_row(
            p.policy,
            str(p.sessions),
            str(p.compactions_probed),
            *(_score(p.mean[d]) for d in DIMENSIONS),
            _score(p.overall),
            f"{p.judge_calls:,}",
            f"{p.judge_tokens:,}",
            f"{p.judge_cost_usd:,.4f}",
            str(p.failures),
        )
    notes = [f"judge {report.judge}, grades 0-5 (policy's context against the full history)"]
    trimmed = [
        f"{p.policy}: full history {p.full_history_trimmed}, context {p.context_trimmed}"
        for p in report.policies
        if p.full_history_trimmed or p.context_trimmed
    ]
    if trimmed:
        notes.append(
            f"trimmed to the judge's window ({report.judge_window_tokens:,} tokens) at: " + "; ".join(trimmed)
        )
    table.caption = "\n".join(notes)
    return table


def eval_command(
    paths: Annotated[list[Path], typer.Argument(help="Transcript files or folders (read recursively).")],
    judge: Annotated[
        str,
        typer.Option(
            help="PROVIDER:MODEL of the judge (anthropic or openai), e.g. anthropic:claude-sonnet-4-5."
        ),
    ],
    judge_base_url: Annotated[
        str | None, typer.Option(help="Base URL of the judge's server (OpenAI-compatible servers too).")
    ] = None,
    judge_timeout: Annotated[float, typer.Option(help="Seconds per judge request.")] = 120.0,
    judge_window: Annotated[
        int | None,
        typer.Option(
            help="The judge's input window in tokens (default: the judge model's, from the registry)."
        ),
    ] = None,
    policies: Annotated[
        str,
        typer.Option(
            help="Comma-separated policies: default, none, recorded, claude-code, openclaw, pi, letta."
        ),
    ] = "default",
    window: Annotated[
        int | None, typer.Option(help="The policies' context window in tokens (default: each model's).")
    ] = None,
    max_compactions: Annotated[
        int, typer.Option(help="Compactions probed per session and policy (3 judge calls each); 0: all.")
    ] = DEFAULT_MAX_COMPACTIONS,
    json_out: Annotated[
        Path | None, typer.Option("--json", help="Write every probe and figure as JSON.")
    ] = None,
    models: common.ModelsOption = None,
    model: common.ModelOption = None,
    quiet: Annotated[bool, typer.Option(help="No table.")] = False,
) -> None:
    """At each compaction, ask a judge model Factory's four probes with the policy's context and with
    the full history, and grade the first answers against the second (0-5 per dimension)."""
    run_eval(
        EvalOptions(
            paths=paths,
            judge=judge,
            judge_base_url=judge_base_url,
            judge_timeout=judge_timeout,
            judge_window=judge_window,
            policies=policies,
            window=window,
            max_compactions=max_compactions,
            json_out=json_out,
            models=models,
            model=model,
            quiet=quiet,
        )
    )


@dataclass(frozen=True)
class EvalOptions:
    """The options of ``ctxengine eval``, as ``eval_command`` documents them (tokens; seconds)."""

    paths: list[Path]
    judge: str
    judge_base_url: str | None
    judge_timeout: float
    judge_window: int | None
    policies: str
    window: int | None
    max_compactions: int
    json_out: Path | None
    models: Path | None
    model: str | None
    quiet: bool


def _policies(o: EvalOptions) -> list[Policy]:
    """The policies named by ``--policies``, after checking the options: one ``error:`` line and
    exit 2 for an unknown policy, a bad window, a negative --max-compactions, a judge window or
    timeout that is not positive."""
    from ctxengine.policy.registry import get_policy

    names = [n.strip() for n in o.policies.split(",") if n.strip()]
    if not names:
        raise common.fail("--policies names no policy")
    try:
        pols = [get_policy(n) for n in names]
    except KeyError as exc:
        raise common.fail(str(exc.args[0])) from None
    common.check_window_option(o.window)
    if o.quiet and o.json_out is None:
        raise common.fail("--quiet leaves the table out and nothing else is written: add --json FILE")
    if o.max_compactions < 0:
        raise common.fail(f"--max-compactions must be 0 (all) or more, not {o.max_compactions}")
    if o.judge_window is not None and o.judge_window <= 0:
        raise common.fail(f"--judge-window must be a positive number of tokens, not {o.judge_window}")
    if o.judge_timeout <= 0:
        raise common.fail(f"--judge-timeout must be positive, not {o.judge_timeout}")
    return pols


def _evaluate(
    o: EvalOptions, pols: list[Policy], judge: Judge, client: ProviderClient, registry: Registry
) -> tuple[int, list[PolicyEval]]:
    """The sessions of ``o.paths`` probed under each policy (a progress bar per policy): how many
    sessions, and each policy's evaluation. The judge's client is closed whatever happens; a
    window too small prints one ``error:`` line (exit 2)."""
    from ctxengine.eval.probes import evaluate_policy
    from ctxengine.models.registry import WindowTooSmallError

    try:
        sessions = common.load_transcripts(o.paths, o.model)
        with common.progress_bar() as progress:
            results = []
            for pol in pols:
                task = progress.add_task(f"eval ({pol.name})", total=len(sessions))
                results.append(
                    evaluate_policy(
                        sessions,
                        pol,
                        judge,
                        window=o.window,
                        registry=registry,
                        max_compactions=o.max_compactions or None,
                        on_session=partial(progress.advance, task),
                    )
                )
    except WindowTooSmallError as exc:
        raise common.fail(str(exc)) from None
    finally:
        client.close()
    return len(sessions), results


def _show(report: EvalReport, o: EvalOptions, sessions: int) -> None:
    """The table (unless ``--quiet``), the notes and the first failed probes, ``--json``
    written; exit 1 when every probe failed."""
    results = report.policies
    if not o.quiet:
        where = f"window {o.window:,} tokens" if o.window else "each model's window"
        common.stdout_console().print(eval_table(report, f"ctxengine eval — {sessions} sessions, {where}"))
    for w in report.warnings:
        common.say("note:", w)
    for p in results:
        for probe in [x for x in p.probes if x.error][:5]:
            common.say("error:", f"{p.policy}: {probe.session} call {probe.call}: {probe.error}")
    if o.json_out:
        o.json_out.parent.mkdir(parents=True, exist_ok=True)
        o.json_out.write_bytes(msgspec.json.format(msgspec.json.encode(report), indent=1))
        common.say("wrote", str(o.json_out))
    probed = sum(p.compactions_probed for p in results)
    if probed and not any(p.graded for p in results):
        common.say("error:", f"all {probed} probes failed: no grade")
        raise typer.Exit(1)


def run_eval(o: EvalOptions) -> None:
    """``ctxengine eval`` with options ``o``: check them, make the judge, probe every session
    under every policy, show and write the report."""
    from ctxengine.eval.probes import EvalReport, Judge
    from ctxengine.tokens.counter import counter_for

    pols = _policies(o)
    common.require_paths(o.paths)
    registry = common.load_registry(o.models)
    common.check_model(o.model, registry)
    client = make_judge_client(o.judge, o.judge_base_url, o.judge_timeout, registry)
    info = registry.get(client.model)
    jwin = o.judge_window or info.input_window
    judge_ = Judge(client, window=jwin, counter=counter_for(info))
    warnings = (
        [] if info.price_known else [f"no known price for judge model {client.model!r}: fallback rates"]
    )
    sessions, results = _evaluate(o, pols, judge_, client, registry)
    report = EvalReport(
        judge=f"{client.provider}:{client.model}",
        judge_window_tokens=jwin,
        window_tokens=o.window,
        max_compactions=o.max_compactions or None,
        policies=results,
        warnings=warnings,
    )
    _show(report, o, sessions)
