"""How ``ctxengine bench`` shows its result: the table (one row per policy), the caption, the
sub-agent and comparison lines, and the plot of content recall against cost.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from rich.table import Table

from ctxengine import peers
from ctxengine.bench.records import PRESETS, BenchResult, Comparison, PolicyRow
from ctxengine.engine import baselines
from ctxengine.eval.fidelity import PROBE_KINDS


def _num(x: float) -> str:
    return f"{x:,.0f}"


def _share(x: float | None, digits: int = 3) -> str:
    return "–" if x is None else f"{x:.{digits}f}"


def _probe_means(r: PolicyRow) -> str:
    """Each probe's pooled mean (request / artifact / error / continuation), two digits."""
    return "/".join(_share(r.probes[k].mean, 2) if k in r.probes else "–" for k in PROBE_KINDS)


PROBES_HEADER = "probes req/art/err/\ncont/rules/files"
_COLUMNS: dict[str, Callable[[PolicyRow], str]] = {
    "sessions": lambda r: f"{r.sessions}" + (f" ({len(r.errors)} failed)" if r.errors else ""),
    "peak tok\nmax": lambda r: _num(r.peak_sent_tokens),
    "over-\nflows": lambda r: str(r.overflows),
    "compactions\n(of them $0)": lambda r: f"{r.compactions:,} ({r.compactions_free:,})",
    "LLM calls\n/ tokens": lambda r: f"{r.llm_calls:,} / {r.llm_tokens:,}",
    "cost $": lambda r: f"{r.cost_usd:,.2f}",
    "+ re-fetch\n$": lambda r: f"{r.cost_with_refetch_usd:,.2f}",
    "cache\nhit": lambda r: _share(r.cache_hit_ratio),
    "read\nrecall": lambda r: _share(r.read_recall),
    "file-state\nrecall": lambda r: _share(r.file_state_recall),
    "content\nrecall": lambda r: _share(r.content_recall),
    "probe\nscore": lambda r: _share(r.probe_score),
    PROBES_HEADER: lambda r: _probe_means(r),
    "request\nkept": lambda r: _share(r.latest_request_kept),
    "ref.\nrecall": lambda r: _share(r.reference_recall),
    "pair-\ning": lambda r: str(r.pairing_violations),
    "wall s": lambda r: f"{r.wall_time_s:,.1f}",
    "layer\nfailures": lambda r: str(r.layer_failures),
}
# below this many columns the table is two: what was kept and what it cost, then how it ran
WIDE_TABLE_COLUMNS = 150
_FIDELITY: tuple[str, ...] = ("read\nrecall", "file-state\nrecall", "content\nrecall", "probe\nscore")
_FIDELITY += (PROBES_HEADER,)
_FIDELITY += ("request\nkept", "ref.\nrecall")
_FIDELITY += ("cost $", "+ re-fetch\n$", "cache\nhit")
_RUN: tuple[str, ...] = ("sessions", "peak tok\nmax", "over-\nflows", "compactions\n(of them $0)")
_RUN += ("LLM calls\n/ tokens",)
_RUN += ("pair-\ning", "wall s", "layer\nfailures")


def bench_tables(
    result: BenchResult,
    title: str,
    rows: dict[str, PolicyRow] | None = None,
    *,
    width: int = WIDE_TABLE_COLUMNS,
) -> list[Table]:
    """The bench's table (``bench_table``): one, or at under ``WIDE_TABLE_COLUMNS`` columns of
    terminal two (content and cost, then how the run went), so that a normal terminal shows
    every figure instead of an ellipsis."""
    if width >= WIDE_TABLE_COLUMNS:
        return [bench_table(result, title, rows)]
    # in the JSON: probes.*.mean, file_state_recall
    narrow = tuple(c for c in _FIDELITY if c not in (PROBES_HEADER, "file-state\nrecall"))
    return [bench_table(result, title, rows, columns=narrow), bench_table(result, "", rows, columns=_RUN)]


def bench_table(
    result: BenchResult,
    title: str,
    rows: dict[str, PolicyRow] | None = None,
    *,
    columns: tuple[str, ...] = (*_RUN[:5], *_FIDELITY[7:], *_FIDELITY[:7], *_RUN[5:]),
) -> Table:
    """One row per policy (of ``rows``, default: every session): totals, pooled fidelity figures
    (content recall, probe score, latest request kept, reference recall) and costs (``columns``:
    which, by header; layer failures only when there are any)."""
    rows = result.policies if rows is None else rows
    table = Table(title=title or None, show_lines=False)
    failures = any(r.layer_failures for r in rows.values())
    shown = [c for c in columns if c != "layer\nfailures" or failures]
    table.add_column("policy", justify="left", no_wrap=True, min_width=max(map(len, rows), default=6))
    for col in shown:
        table.add_column(col, justify="right")
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
                table.add_row(name, "–", f"unavailable: {r.unavailable}", *[""] * (len(shown) - 2))
                continue
            table.add_row(name, *(_COLUMNS[c](r) for c in shown))
    return table


CAPTION = (
    "read recall: share of the 8-word runs the agent reused from what it read (user messages, tool "
    "results, attachments) that were in what was sent (pooled); file-state recall: the same for runs "
    "found only in the current text of files it wrote; "
    "content recall: the same with its own earlier output counted as a source; probe score: mean "
    "of the request / artifact / error / continuation "
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
        f"default vs {', '.join(c.among)}: read recall {c.default_read_recall} "
        f"({word(c.default_read_recall_highest, 'highest')}; best preset {c.best_preset_read_recall}), "
        f"probe score {c.default_probe_score} ({word(c.default_probe_score_highest, 'highest')}; best preset "
        f"{c.best_preset_probe_score}), cost with re-fetch ${c.default_cost_with_refetch_usd:,.2f} "
        f"({word(c.default_cost_with_refetch_lowest, 'lowest')}; cheapest preset "
        f"${c.cheapest_preset_cost_with_refetch_usd:,.2f})"
    )


def plot(result: BenchResult, path: Path) -> None:
    """Read recall against the cost with re-fetches, one point per policy. Raises
    ``RuntimeError`` without matplotlib."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise RuntimeError("--plot needs matplotlib: pip install 'ctxengine[plot]'") from exc
    fig, ax = plt.subplots(figsize=(7.5, 5))
    for name, r in result.policies.items():
        if r.read_recall is None or not r.sessions:
            continue
        color = "tab:green" if name == "default" else "tab:blue" if name in PRESETS else "tab:gray"
        x, y = r.cost_with_refetch_usd, r.read_recall
        ax.scatter([x], [y], s=60, color=color, zorder=3)
        ax.annotate(name, (x, y), textcoords="offset points", xytext=(6, 4), fontsize=8)
    window = f"{result.window_tokens:,}-token window" if result.window_tokens else "model windows"
    ax.set_title(f"read recall vs cost with re-fetch, {window}", fontsize=10)
    ax.set_xlabel("cost with re-fetch (USD, prompt-cache pricing, all sessions)")
    ax.set_ylabel("read recall (pooled)")
    ax.grid(alpha=0.3)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
