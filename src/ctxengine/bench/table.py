"""The ``ctxengine bench`` table: one row per policy (ours and the baselines, the presets, the
peers, a rule between the groups), fitted to the terminal (``table_fit``: one figure per column
on a wide terminal, two stacked per column at 80, figures left out last to first) so that no
figure is cut, and a caption that explains each figure shown once.
"""

from __future__ import annotations

from collections.abc import Mapping

from rich.table import Table

from ctxengine import peers
from ctxengine.bench.records import PRESETS, PolicyRow
from ctxengine.engine import baselines
from ctxengine.eval.fidelity import PROBE_KINDS
from ctxengine.replay.table_fit import Column, Row, fit_table

__all__ = ["COLUMNS", "fitted_bench_table", "policy_cells"]

COLUMNS: dict[str, Column] = {
    c.key: c
    for c in (
        Column(
            "read",
            "read\nrecall",
            "read: read recall, the share of the 8-word runs the agent reused "
            "from what it read (user messages, tool results, attachments) that were in what was sent "
            "(pooled)",
        ),
        Column(
            "content", "content\nrecall", "content: the same with its own earlier output counted as a source"
        ),
        Column(
            "files",
            "files\nrecall",
            "files: the same for runs found only in the current text of files it wrote (file-state recall)",
        ),
        Column(
            "refs",
            "refs\nrecall",
            "refs: reference recall, identifiers used that were still sent (a "
            "name list scores 1 here, see identifiers-only)",
        ),
        Column(
            "probe",
            "probe\nscore",
            "probe: mean of the request / artifact / error / continuation probes at each compaction",
        ),
        Column("probes", "probes req/art/err/\ncont/rules/files", "probes: each probe's pooled mean"),
        Column(
            "req", "request\nkept", "request: share of compactions that kept the latest user request whole"
        ),
        Column("cost", "cost $\n", "cost $: with prompt caching"),
        Column(
            "refetch",
            "+refetch\n$",
            "+refetch: cost plus re-reading what was missing, once per source per compaction epoch, $",
        ),
        Column("hit", "cache\nhit", "cache: prompt-cache hit ratio"),
        Column("sessions", "sess.\n", "sess.: sessions"),
        Column("peak", "peak\ntokens", "peak: largest request, tokens"),
        Column("ovf", "ovf\n", "ovf: calls over the window"),
        Column("compact", "compact\n($0)", "compact: compactions (of them $0)"),
        Column("llm", "LLM calls\n/ tokens", "LLM calls: calls and tokens of LLM summaries and notes"),
        Column(
            "pair",
            "pair\n",
            "pair: tool-call pairing violations in what was sent (the peers' output "
            "is sent as it comes, not repaired)",
        ),
        Column(
            "wall",
            "wall s\n",
            "wall s: replay seconds summed over the sessions (with --jobs above 1 "
            "more than the time elapsed)",
        ),
        Column("fail", "layer\nfailures", "layer: layer exceptions the engine caught"),
    )
}
WIDE: tuple[str, ...] = (
    "sessions",
    "peak",
    "ovf",
    "compact",
    "llm",
    "cost",
    "refetch",
    "hit",
    "read",
    "files",
)
WIDE += ("content", "probe", "probes", "req", "refs", "pair", "wall", "fail")
"""The figures in order, one per column: a wide terminal or a log."""
STACKED: tuple[str, ...] = (
    "read",
    "content",
    "files",
    "refs",
    "probe",
    "req",
    "cost",
    "refetch",
    "hit",
    "pair",
)
STACKED += ("peak", "ovf", "compact", "llm", "sessions", "wall", "fail")
"""The figures in order, two per column (two lines per row): 80 columns."""
DROP_ORDER = ("probes", "llm", "wall", "files", "hit", "sessions", "req", "ovf")
"""Figures left out, in this order, while the table is still too wide (``--json`` has them)."""


def _share(x: float | None, digits: int = 3) -> str:
    return "–" if x is None else f"{x:.{digits}f}"


def policy_cells(r: PolicyRow) -> dict[str, str]:
    """A policy's figures as the table shows them, by column key."""
    return {
        "sessions": str(r.sessions),
        "peak": f"{r.peak_sent_tokens:,}",
        "ovf": str(r.overflows),
        "compact": f"{r.compactions:,} ({r.compactions_free:,})",
        "llm": f"{r.llm_calls:,} / {r.llm_tokens:,}",
        "cost": f"{r.cost_usd:,.2f}",
        "refetch": f"{r.cost_with_refetch_usd:,.2f}",
        "hit": _share(r.cache_hit_ratio),
        "read": _share(r.read_recall),
        "files": _share(r.file_state_recall),
        "content": _share(r.content_recall),
        "probe": _share(r.probe_score),
        "probes": "/".join(_share(r.probes[k].mean, 2) if k in r.probes else "–" for k in PROBE_KINDS),
        "req": _share(r.latest_request_kept),
        "refs": _share(r.reference_recall),
        "pair": str(r.pairing_violations),
        "wall": f"{r.wall_time_s:,.1f}",
        "fail": str(r.layer_failures),
    }


def fitted_bench_table(
    title: str, rows: Mapping[str, PolicyRow], width: int, notes: tuple[str, ...] = ()
) -> Table:
    """The bench table of ``rows`` (one per policy) fitted to ``width`` columns; the caption
    explains the figures shown, then says which policies were unavailable or had sessions fail,
    then ``notes``."""
    ours = ("default", "none", "recorded", *baselines.BASELINES)
    known = (*ours, *PRESETS, *peers.PEERS)
    groups = (
        [n for n in rows if n in ours or n not in known],
        [n for n in rows if n in PRESETS],
        [n for n in rows if n in peers.PEERS],
    )
    sections: list[list[Row]] = [
        [(n, {} if rows[n].unavailable else policy_cells(rows[n])) for n in names] for names in groups
    ]
    columns = dict(COLUMNS)
    if not any(r.layer_failures for r in rows.values()):
        del columns["fail"]
    said = [f"{n}: unavailable ({r.unavailable})" for n, r in rows.items() if r.unavailable]
    said += [f"{n}: {len(r.errors)} session(s) failed (below)" for n, r in rows.items() if r.errors]
    return fit_table(
        title,
        "policy",
        columns,
        sections,
        wide=WIDE,
        stacked=STACKED,
        drop_order=DROP_ORDER,
        width=width,
        notes=(*said, *notes),
    )
