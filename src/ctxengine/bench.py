"""``ctxengine bench``: every session under every policy, one row per policy.

Replays each session (files or folders, recursively, as ``ctxengine replay`` reads them) under each
policy named, our own (``default``, ``none``, ``recorded``), the presets (``claude-code``,
``openclaw``, ``pi``, ``letta``) and the Python peers (``langchain-trim``, ``langchain-clear``,
plugin engines from the ``peers`` extra), at one window, and prints one table: per policy the
figures summed over the sessions and per session (mean), recall pooled (hits over all sessions /
uses over all sessions), the cache hit ratio pooled (tokens read from the cache / tokens sent).
``--json`` writes every figure, per policy and per session; ``--plot`` puts recall against cost.

The comparison the issue asks for (``default`` against the four presets) is stated under the
table and in the JSON (``comparison``); ``none``, ``recorded`` and the peers are shown for context.
A peer that cannot run (LangChain not installed) is reported as unavailable with the install hint.
"""

from __future__ import annotations

import hashlib
import time
import warnings
from collections import Counter
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import msgspec
import typer
from rich.progress import Progress
from rich.table import Table

from ctxengine import baselines, peers
from ctxengine import cli_common as common
from ctxengine.fidelity import ProbeStat, pooled, probe_score
from ctxengine.messages import Session
from ctxengine.models import Registry, WindowTooSmallError, WindowWarning
from ctxengine.policy import Policy, get_policy, presets
from ctxengine.replay import COMPACTION_LAYERS, SessionReport, replay_session

if TYPE_CHECKING:
    from ctxengine.llm import LLMClient
    from ctxengine.plugins import EngineRegistry

PRESETS = ("claude-code", "openclaw", "pi", "letta")
DEFAULT_POLICIES = ("default", *PRESETS, "none", "recorded", *baselines.BASELINES, *peers.PEERS)
BENCH_COMPACTION_LAYERS = COMPACTION_LAYERS | {"cache_ttl_prune"} | peers.PEER_LAYERS
"""Events that change what is already in the context (the peers' trims and clears included)."""


class SessionRow(msgspec.Struct, kw_only=True):
    """One session under one policy. Tokens; USD; seconds."""

    policy: str
    source: str
    name: str
    format: str
    model: str | None
    calls: int
    peak_sent_tokens: int
    overflows: int
    compactions: int
    compactions_free: int
    compactions_by_layer: dict[str, int]
    llm_calls: int
    llm_tokens: int
    llm_cost_usd: float
    cost_usd: float
    cache_read_tokens: int
    sent_tokens: int
    cache_hit_ratio: float | None
    reference_recall: float | None
    recall_hits: int
    recall_uses: int
    content_recall: float | None
    content_hits: int
    content_grounded: int
    probes: dict[str, ProbeStat]
    probe_score: float | None
    requests_whole: int
    requests_probed: int
    refetch_tokens: int
    refetch_cost_usd: float
    cost_with_refetch_usd: float
    pairing_violations: int
    wall_time_s: float
    held_out: bool  # in the held-out half of the documented split (``held_out``)
    layer_failures: int = 0  # layer exceptions the engine caught and went on without
    subagents_spawned: int = 0  # sub-agent runs tied to this session's calls (``subagents.linking``)
    subagent_tokens: int = 0  # the input tokens of their calls (recorded usage)
    subagent_tokens_kept_out: int = 0  # ... minus the reports that came back


class PolicyRow(msgspec.Struct, kw_only=True):
    """One policy over every session: sums, maxima, pooled ratios and per-session means."""

    policy: str
    description: str
    engine: str
    sessions: int = 0
    unavailable: str | None = None
    errors: list[str] = msgspec.field(default_factory=list)
    calls: int = 0
    peak_sent_tokens: int = 0  # the largest request of any session
    mean_peak_sent_tokens: float = 0.0  # per session
    overflows: int = 0
    compactions: int = 0
    compactions_free: int = 0
    compactions_by_layer: dict[str, int] = msgspec.field(default_factory=dict)
    llm_calls: int = 0
    llm_tokens: int = 0
    llm_cost_usd: float = 0.0
    cost_usd: float = 0.0
    cost_usd_per_session: float = 0.0
    sent_tokens: int = 0
    cache_read_tokens: int = 0
    cache_hit_ratio: float | None = None  # pooled: read / sent over every call
    reference_recall: float | None = None  # pooled: hits / uses over every call of every session
    recall_hits: int = 0
    recall_uses: int = 0
    content_recall: float | None = None  # pooled: content hits / grounded shingles over every call
    content_hits: int = 0
    content_grounded: int = 0
    probes: dict[str, ProbeStat] = msgspec.field(default_factory=dict)  # pooled over compactions
    probe_score: float | None = None  # mean of the probe kinds' pooled means; None: no compaction
    latest_request_kept: float | None = None  # share of compactions with the latest request whole
    requests_whole: int = 0
    requests_probed: int = 0
    refetch_tokens: int = 0
    refetch_cost_usd: float = 0.0
    cost_with_refetch_usd: float = 0.0  # cost_usd + refetch_cost_usd: what the bench ranks on
    pairing_violations: int = 0
    wall_time_s: float = 0.0
    wall_time_s_per_session: float = 0.0
    layer_failures: int = 0
    subagents_spawned: int = 0
    subagent_tokens: int = 0
    subagent_tokens_kept_out: int = 0


class Comparison(msgspec.Struct, kw_only=True):
    """``default`` against the presets on the fidelity figures: content recall and probe score
    (higher is better) and the cost with re-fetches (lower is better; what the bench ranks on)."""

    among: list[str]
    best_preset_content_recall: float | None
    best_preset_probe_score: float | None
    cheapest_preset_cost_with_refetch_usd: float | None
    default_content_recall: float | None
    default_probe_score: float | None
    default_cost_with_refetch_usd: float | None
    default_content_recall_highest: bool
    default_probe_score_highest: bool
    default_cost_with_refetch_lowest: bool


class BenchResult(msgspec.Struct, kw_only=True):
    """What ``--json`` writes."""

    window_tokens: int | None
    paths: list[str]
    policies: dict[str, PolicyRow]
    sessions: list[SessionRow]
    comparison: Comparison | None = None
    halves: dict[str, dict[str, PolicyRow]] = msgspec.field(default_factory=dict)
    """``tuning`` and ``held_out``: each policy over one half of the sessions (``held_out``)."""


def held_out(source: str, name: str) -> bool:
    """The documented split for tuning policies: a session is *held out* when the SHA-1 of
    ``"<file name>#<session name>"`` is odd. The default policy's thresholds were tuned on the
    other half (``tuning``); the bench reports both halves beside the whole. On the shared corpus
    each half holds 3 Claude Code, 1 Codex and 1 SWE-agent session, and about half of tau-bench."""
    key = f"{Path(source).name}#{name}".encode()
    return int(hashlib.sha1(key).hexdigest(), 16) % 2 == 1


# ------------------------------------------------------------------ resolving policies


class Runner(msgspec.Struct, kw_only=True):
    """A policy to run: its record, the engine id, and why it cannot run (if so)."""

    name: str
    policy: Policy
    engine: str = "ctxengine"
    unavailable: str | None = None


def resolve(names: list[str]) -> list[Runner]:
    """Runners for policy/peer names. Raises ``KeyError`` naming the known ones."""
    out = []
    missing = peers.available()
    for name in names:
        if name in peers.PEERS:
            out.append(Runner(name=name, policy=peers.policy_for(name), engine=name, unavailable=missing))
            continue
        if name in baselines.BASELINES:
            out.append(Runner(name=name, policy=baselines.policy_for(name), engine=name))
            continue
        try:
            out.append(Runner(name=name, policy=get_policy(name)))
        except KeyError:
            known = sorted({"default", "none", "recorded", *presets(), *baselines.BASELINES, *peers.PEERS})
            raise KeyError(f"unknown policy {name!r}; known: {', '.join(known)}") from None
    return out


def engine_registry() -> EngineRegistry:
    """The engines: core, entry-point plugins, and the peers when LangChain is installed."""
    from ctxengine.plugins import EngineRegistry

    engines = EngineRegistry()
    engines.load_entry_points()
    peers.register(engines)
    return engines


# ------------------------------------------------------------------ running


def session_row(report: SessionReport, wall: float) -> SessionRow:
    """The bench figures of one replay."""
    s = report.summary
    events = [e for c in report.calls for e in c.events]
    done = [e for e in events if e["layer"] in BENCH_COMPACTION_LAYERS and "error" not in e["details"]]
    by_layer = Counter(e["layer"] for e in done)
    read = sum(c.cache_read_tokens for c in report.calls)
    sent = sum(c.sent_tokens for c in report.calls)
    return SessionRow(
        policy=report.policy,
        source=report.session.source,
        name=report.session.name,
        format=report.session.format,
        model=report.session.model,
        calls=report.session.calls,
        peak_sent_tokens=s.peak_sent_tokens,
        overflows=s.overflows,
        compactions=len(done),
        compactions_free=sum(1 for e in done if e["llm_cost_usd"] == 0),
        compactions_by_layer=dict(sorted(by_layer.items())),
        llm_calls=s.llm_calls,
        llm_tokens=s.llm_tokens,
        llm_cost_usd=s.llm_cost_usd,
        cost_usd=s.cost_usd,
        cache_read_tokens=read,
        sent_tokens=sent,
        cache_hit_ratio=s.cache_hit_ratio,
        reference_recall=s.reference_recall,
        recall_hits=s.recall_hits,
        recall_uses=s.recall_uses,
        content_recall=s.content_recall,
        content_hits=s.content_hits,
        content_grounded=s.content_grounded,
        probes=s.probes,
        probe_score=s.probe_score,
        requests_whole=s.requests_whole,
        requests_probed=s.requests_probed,
        refetch_tokens=s.refetch_tokens,
        refetch_cost_usd=s.refetch_cost_usd,
        cost_with_refetch_usd=s.cost_with_refetch_usd,
        pairing_violations=s.pairing_violations,
        wall_time_s=round(wall, 4),
        held_out=held_out(report.session.source, report.session.name),
        layer_failures=s.layer_failures,
        subagents_spawned=s.subagents.spawned if s.subagents else 0,
        subagent_tokens=s.subagents.subagent_tokens if s.subagents else 0,
        subagent_tokens_kept_out=s.subagents.tokens_kept_out if s.subagents else 0,
    )


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


def summarize_rows(runner: Runner, rows: list[SessionRow], errors: list[str]) -> PolicyRow:
    """Sum one policy's session rows."""
    out = PolicyRow(
        policy=runner.name,
        description=runner.policy.description,
        engine=runner.engine,
        unavailable=runner.unavailable,
        errors=errors,
    )
    if not rows:
        return out
    n = len(rows)
    by_layer: Counter[str] = Counter()
    for r in rows:
        by_layer.update(r.compactions_by_layer)
    out.sessions = n
    out.calls = sum(r.calls for r in rows)
    out.peak_sent_tokens = max(r.peak_sent_tokens for r in rows)
    out.mean_peak_sent_tokens = round(sum(r.peak_sent_tokens for r in rows) / n, 1)
    out.overflows = sum(r.overflows for r in rows)
    out.compactions = sum(r.compactions for r in rows)
    out.compactions_free = sum(r.compactions_free for r in rows)
    out.compactions_by_layer = dict(sorted(by_layer.items()))
    out.llm_calls = sum(r.llm_calls for r in rows)
    out.llm_tokens = sum(r.llm_tokens for r in rows)
    out.llm_cost_usd = round(sum(r.llm_cost_usd for r in rows), 6)
    out.cost_usd = round(sum(r.cost_usd for r in rows), 6)
    out.cost_usd_per_session = round(out.cost_usd / n, 6)
    out.sent_tokens = sum(r.sent_tokens for r in rows)
    out.cache_read_tokens = sum(r.cache_read_tokens for r in rows)
    out.cache_hit_ratio = round(out.cache_read_tokens / out.sent_tokens, 4) if out.sent_tokens else None
    out.recall_hits = sum(r.recall_hits for r in rows)
    out.recall_uses = sum(r.recall_uses for r in rows)
    out.reference_recall = round(out.recall_hits / out.recall_uses, 4) if out.recall_uses else None
    out.content_hits = sum(r.content_hits for r in rows)
    out.content_grounded = sum(r.content_grounded for r in rows)
    out.content_recall = round(out.content_hits / out.content_grounded, 4) if out.content_grounded else None
    out.probes = pooled(r.probes for r in rows)
    out.probe_score = probe_score(out.probes)
    out.requests_whole = sum(r.requests_whole for r in rows)
    out.requests_probed = sum(r.requests_probed for r in rows)
    out.latest_request_kept = (
        round(out.requests_whole / out.requests_probed, 4) if out.requests_probed else None
    )
    out.refetch_tokens = sum(r.refetch_tokens for r in rows)
    out.refetch_cost_usd = round(sum(r.refetch_cost_usd for r in rows), 6)
    out.cost_with_refetch_usd = round(sum(r.cost_with_refetch_usd for r in rows), 6)
    out.pairing_violations = sum(r.pairing_violations for r in rows)
    out.layer_failures = sum(r.layer_failures for r in rows)
    out.subagents_spawned = sum(r.subagents_spawned for r in rows)
    out.subagent_tokens = sum(r.subagent_tokens for r in rows)
    out.subagent_tokens_kept_out = sum(r.subagent_tokens_kept_out for r in rows)
    out.wall_time_s = round(sum(r.wall_time_s for r in rows), 3)
    out.wall_time_s_per_session = round(out.wall_time_s / n, 4)
    return out


def _best(values: list[float | None], pick: Any) -> float | None:
    known = [v for v in values if v is not None]
    return pick(known) if known else None


def compare(rows: dict[str, PolicyRow]) -> Comparison | None:
    """``default`` against the presets that ran (None when either side is missing)."""
    d = rows.get("default")
    among = [p for p in PRESETS if p in rows and rows[p].sessions]
    if d is None or not d.sessions or not among:
        return None
    best_cr = _best([rows[p].content_recall for p in among], max)
    best_ps = _best([rows[p].probe_score for p in among], max)
    cheapest = _best([rows[p].cost_with_refetch_usd for p in among], min)

    def at_least(mine: float | None, best: float | None) -> bool:
        return best is None or (mine is not None and mine >= best)

    return Comparison(
        among=among,
        best_preset_content_recall=best_cr,
        best_preset_probe_score=best_ps,
        cheapest_preset_cost_with_refetch_usd=cheapest,
        default_content_recall=d.content_recall,
        default_probe_score=d.probe_score,
        default_cost_with_refetch_usd=d.cost_with_refetch_usd,
        default_content_recall_highest=at_least(d.content_recall, best_cr),
        default_probe_score_highest=at_least(d.probe_score, best_ps),
        default_cost_with_refetch_lowest=cheapest is None or d.cost_with_refetch_usd <= cheapest,
    )


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
    rows: dict[str, PolicyRow] = {}
    halves: dict[str, dict[str, PolicyRow]] = {"tuning": {}, "held_out": {}}
    session_rows: list[SessionRow] = []
    task = progress.add_task("bench", total=len(sessions) * len(runners)) if progress else None
    pool = (
        ProcessPoolExecutor(
            jobs,
            initializer=_worker_init,
            initargs=([str(p) for p in paths], window, str(models) if models else None, model),
        )
        if jobs > 1 and paths and llm is None
        else None
    )
    try:
        for number, runner in enumerate(runners, 1):
            started = time.perf_counter()
            if progress is not None and task is not None:
                progress.update(task, description=f"bench ({runner.name})")
            mine: list[SessionRow] = []
            errors: list[str] = []
            if runner.unavailable:
                if progress is not None and task is not None:
                    progress.advance(task, len(sessions))
                rows[runner.name] = summarize_rows(runner, [], [])
                if on_policy is not None:
                    on_policy(f"{runner.name} ({number}/{len(runners)}): unavailable")
                continue
            results: list[tuple[int, SessionRow | str]]
            if pool is not None:
                results = []
                for done in pool.map(_worker_run, [(i, runner) for i in range(len(sessions))], chunksize=4):
                    results.append(done)
                    if progress is not None and task is not None:
                        progress.advance(task)
            else:
                results = []
                for i, s in enumerate(sessions):
                    try:
                        row = run_one(s, runner, window=window, registry=registry, engines=engines, llm=llm)
                        results.append((i, row))
                    except WindowTooSmallError:
                        raise
                    except Exception as exc:
                        results.append((i, f"{type(exc).__name__}: {exc}"))
                    if progress is not None and task is not None:
                        progress.advance(task)
            for i, outcome in results:
                if isinstance(outcome, str):
                    errors.append(f"{sessions[i].source}#{sessions[i].name}: {outcome}")
                else:
                    mine.append(outcome)
            session_rows.extend(mine)
            rows[runner.name] = summarize_rows(runner, mine, errors)
            halves["tuning"][runner.name] = summarize_rows(runner, [r for r in mine if not r.held_out], [])
            halves["held_out"][runner.name] = summarize_rows(runner, [r for r in mine if r.held_out], [])
            if on_policy is not None:
                failed = f", {len(errors)} failed" if errors else ""
                on_policy(
                    f"{runner.name} ({number}/{len(runners)}): {len(mine)} session(s){failed} "
                    f"in {time.perf_counter() - started:,.1f} s"
                )
    finally:
        if pool is not None:
            pool.shutdown()
    return BenchResult(
        window_tokens=window,
        paths=[str(p) for p in paths or []],
        policies=rows,
        sessions=session_rows,
        comparison=compare(rows),
        halves=halves,
    )


# ------------------------------------------------------------------ presenting


def _num(x: float) -> str:
    return f"{x:,.0f}"


def _share(x: float | None, digits: int = 3) -> str:
    return "–" if x is None else f"{x:.{digits}f}"


def bench_table(result: BenchResult, title: str, rows: dict[str, PolicyRow] | None = None) -> Table:
    """One row per policy (of ``rows``, default: every session): totals, pooled fidelity figures
    (content recall, probe score, latest request kept, reference recall) and costs."""
    rows = result.policies if rows is None else rows
    table = Table(title=title, show_lines=False)
    for col in (
        "policy",
        "sessions",
        "peak tok\nmax",
        "over-\nflows",
        "compactions\n(of them $0)",
        "LLM calls\n/ tokens",
        "cost $",
        "+ re-fetch\n$",
        "cache\nhit",
        "content\nrecall",
        "probe\nscore",
        "request\nkept",
        "ref.\nrecall",
        "pair-\ning",
        "wall s",
    ):
        table.add_column(col, justify="left" if col == "policy" else "right")
    failures = any(r.layer_failures for r in rows.values())
    if failures:  # layer exceptions the engine caught: shown whenever there are any
        table.add_column("layer\nfailures", justify="right")
    ours = ("default", "none", "recorded", *baselines.BASELINES)
    for group in (ours, PRESETS, tuple(peers.PEERS)):
        names = [n for n in rows if n in group]
        names += [n for n in rows if n not in (*ours, *PRESETS, *peers.PEERS) and group is ours]
        if not names:
            continue
        if table.row_count:
            table.add_section()
        for name in names:
            r = rows[name]
            if r.unavailable:
                table.add_row(name, "–", f"unavailable: {r.unavailable}", *[""] * (12 + failures))
                continue
            table.add_row(
                name,
                f"{r.sessions}" + (f" ({len(r.errors)} failed)" if r.errors else ""),
                _num(r.peak_sent_tokens),
                str(r.overflows),
                f"{r.compactions:,} ({r.compactions_free:,})",
                f"{r.llm_calls:,} / {r.llm_tokens:,}",
                f"{r.cost_usd:,.2f}",
                f"{r.cost_with_refetch_usd:,.2f}",
                _share(r.cache_hit_ratio),
                _share(r.content_recall),
                _share(r.probe_score),
                _share(r.latest_request_kept),
                _share(r.reference_recall),
                str(r.pairing_violations),
                f"{r.wall_time_s:,.1f}",
                *([str(r.layer_failures)] if failures else []),
            )
    return table


CAPTION = (
    "content recall: share of the 8-word runs the agent reused from earlier content that were in "
    "what was sent (pooled); probe score: mean of the request / artifact / error / continuation "
    "probes at each compaction; request kept: share of compactions with the latest user request "
    "whole; ref. recall: identifiers (a name list scores 1 here, see identifiers-only); "
    "+ re-fetch: cost plus re-reading what was missing, once per source per compaction epoch. "
    "Without --llm the presets summarize with our $0 structured summary in their harness's "
    "format; the real harnesses call an LLM."
)


def subagent_line(row: PolicyRow) -> str:
    """The recorded sub-agent runs of the sessions (``subagents.linking``), one line."""
    return (
        f"sub-agents: {row.subagents_spawned} run(s) tied to Task/Agent calls; their calls read "
        f"{row.subagent_tokens:,} input tokens, {row.subagent_tokens_kept_out:,} of them kept out of the "
        "parents' contexts (only the reports came back)."
    )


def comparison_line(c: Comparison | None) -> str:
    """One line stating how ``default`` compares with the presets."""
    if c is None:
        return "default vs presets: not compared (run default and at least one preset)"

    def word(ok: bool, good: str) -> str:
        return good if ok else f"NOT the {good}"

    return (
        f"default vs {', '.join(c.among)}: content recall {c.default_content_recall} "
        f"({word(c.default_content_recall_highest, 'highest')}; best preset {c.best_preset_content_recall}), "
        f"probe score {c.default_probe_score} ({word(c.default_probe_score_highest, 'highest')}; best preset "
        f"{c.best_preset_probe_score}), cost with re-fetch ${c.default_cost_with_refetch_usd:,.2f} "
        f"({word(c.default_cost_with_refetch_lowest, 'lowest')}; cheapest preset "
        f"${c.cheapest_preset_cost_with_refetch_usd:,.2f})"
    )


def plot(result: BenchResult, path: Path) -> None:
    """Content recall against the cost with re-fetches, one point per policy. Raises
    ``RuntimeError`` without matplotlib."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise RuntimeError("--plot needs matplotlib: pip install 'ctxengine[plot]'") from exc
    fig, ax = plt.subplots(figsize=(7.5, 5))
    for name, r in result.policies.items():
        if r.content_recall is None or not r.sessions:
            continue
        color = "tab:green" if name == "default" else "tab:blue" if name in PRESETS else "tab:gray"
        x, y = r.cost_with_refetch_usd, r.content_recall
        ax.scatter([x], [y], s=60, color=color, zorder=3)
        ax.annotate(name, (x, y), textcoords="offset points", xytext=(6, 4), fontsize=8)
    window = f"{result.window_tokens:,}-token window" if result.window_tokens else "model windows"
    ax.set_title(f"content recall vs cost with re-fetch, {window}", fontsize=10)
    ax.set_xlabel("cost with re-fetch (USD, prompt-cache pricing, all sessions)")
    ax.set_ylabel("content recall (pooled)")
    ax.grid(alpha=0.3)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)


# ------------------------------------------------------------------ the command


def bench_command(
    paths: Annotated[list[Path], typer.Argument(help="Transcript files or folders (read recursively).")],
    policies: Annotated[
        str,
        typer.Option(
            help="Comma-separated policies: default, none, recorded, the presets claude-code, openclaw, "
            "pi, letta, and the peers langchain-trim, langchain-clear (extra 'peers')."
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
    models: common.ModelsOption = None,
    model: common.ModelOption = None,
    jobs: Annotated[int, typer.Option(help="Processes to replay in (1: this one; ignored with --llm).")] = 1,
) -> None:
    """Replay every session under every policy and compare them in one table."""
    names = [n.strip() for n in policies.split(",") if n.strip()]
    if not names:
        raise common.fail("--policies names no policy")
    common.check_window_option(window)
    common.check_output(json_out, "--json")
    common.check_output(plot_out, "--plot")
    if jobs < 1:
        raise common.fail(f"--jobs must be at least 1, not {jobs}")
    try:
        runners = resolve(names)
    except KeyError as exc:
        raise common.fail(str(exc.args[0])) from None
    for r in runners:
        if r.unavailable:
            common.say("note:", f"{r.name} unavailable: {r.unavailable}")
    client = common.make_llm(llm, llm_base_url, llm_timeout)
    common.require_paths(paths)
    registry = common.load_registry(models)
    common.check_model(model, registry)
    sessions = common.load_transcripts(paths, model)
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
    elapsed = time.perf_counter() - started
    out = common.stdout_console()
    where = f"window {window:,} tokens" if window else "each model's window"
    out.print(bench_table(result, f"ctxengine bench — {len(sessions)} sessions, {where}"))
    out.print(
        comparison_line(result.comparison),
        markup=False,
        highlight=False,
        soft_wrap=True,
    )
    for half, label in (("tuning", "tuning half"), ("held_out", "held-out half")):
        part = result.halves.get(half) or {}
        n = max((r.sessions for r in part.values()), default=0)
        if n:
            out.print(bench_table(result, f"{label} — {n} sessions (split: bench.held_out)", part))
    out.print(CAPTION + f" Wall time is replay time per policy ({elapsed:,.1f} s in all).",
              markup=False, highlight=False, soft_wrap=True)
    sub = next((r for r in result.policies.values() if r.subagents_spawned), None)
    if sub is not None:  # recorded figures: the same under every policy
        out.print(subagent_line(sub), markup=False, highlight=False, soft_wrap=True)
    for row in result.policies.values():
        for e in row.errors[:5]:
            common.say("error:", f"{row.policy}: {e}")
    common.report_layer_failures(
        sum(r.layer_failures for r in result.policies.values()), "the JSON's layer_failures per policy"
    )
    if json_out:
        json_out.parent.mkdir(parents=True, exist_ok=True)
        json_out.write_bytes(msgspec.json.format(msgspec.json.encode(result), indent=1))
        common.say("wrote", str(json_out))
    if plot_out:
        try:
            plot(result, plot_out)
        except RuntimeError as exc:
            raise common.fail(str(exc)) from None
        common.say("wrote", str(plot_out))
    common.finish_llm(client)
