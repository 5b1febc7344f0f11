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

The parts: ``bench.records`` (the rows, the comparison, the split), ``bench.figures`` (a replay's
row, a policy's rows summed, the comparison), ``bench.run`` (resolving names, running the replays,
here or in processes), ``bench.present`` (table, lines, plot), ``bench.command`` (the command).

May import: ``messages``, ``models``, ``policy``, ``llm``, ``engine``, ``replay``, ``eval``, ``cli``.
"""

from __future__ import annotations

from ctxengine.bench.command import bench_command
from ctxengine.bench.figures import compare, session_row, summarize_rows
from ctxengine.bench.present import CAPTION, bench_table, bench_tables, comparison_line, plot, subagent_line
from ctxengine.bench.records import (
    BENCH_COMPACTION_LAYERS,
    DEFAULT_POLICIES,
    PRESETS,
    BenchResult,
    Comparison,
    PolicyRow,
    Runner,
    SessionRow,
    held_out,
)
from ctxengine.bench.run import engine_registry, resolve, run_bench, run_one

__all__ = [
    "BENCH_COMPACTION_LAYERS",
    "CAPTION",
    "DEFAULT_POLICIES",
    "PRESETS",
    "BenchResult",
    "Comparison",
    "PolicyRow",
    "Runner",
    "SessionRow",
    "bench_command",
    "bench_table",
    "bench_tables",
    "compare",
    "comparison_line",
    "engine_registry",
    "held_out",
    "plot",
    "resolve",
    "run_bench",
    "run_one",
    "session_row",
    "subagent_line",
    "summarize_rows",
]
