"""How ``ctxengine bench`` shows its result: the table (one row per policy), the caption, the
sub-agent and comparison lines, and the plot of content recall against cost.
"""

from __future__ import annotations

from rich.table import Table

from ctxengine.bench.records import BenchResult, Comparison, PolicyRow
from ctxengine.bench.scatter import plot as plot
from ctxengine.bench.table import fitted_bench_table

WIDE_TABLE_COLUMNS = 200  # the table's width in a log or pipe without COLUMNS


def bench_tables(
    result: BenchResult,
    title: str,
    rows: dict[str, PolicyRow] | None = None,
    *,
    width: int = WIDE_TABLE_COLUMNS,
    notes: tuple[str, ...] = (),
) -> list[Table]:
    """The bench's table (``bench_table``) as a list of one, fitted to ``width`` columns so that
    a normal terminal shows every figure it holds whole (``bench.table``)."""
    return [bench_table(result, title, rows, width=width, notes=notes)]


def bench_table(
    result: BenchResult,
    title: str,
    rows: dict[str, PolicyRow] | None = None,
    *,
    width: int = WIDE_TABLE_COLUMNS,
    notes: tuple[str, ...] = (),
) -> Table:
    """One row per policy (of ``rows``, default: every session): totals, pooled fidelity figures
    (read and content recall, probe score, latest request kept, reference recall) and costs,
    fitted to ``width`` columns, with the caption that explains them (``bench.table``)."""
    return fitted_bench_table(title, result.policies if rows is None else rows, width, notes)


CAPTION = (
    "without --llm the presets summarize with our $0 structured summary in their harness's "
    "format; the real harnesses call an LLM"
)
"""The note under every bench table (the figures are explained in the table's caption)."""


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
