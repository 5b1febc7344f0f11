"""Presenting replay results: the rich summary table, the JSON file and the plot.

Pure presentation: it reads ``SessionReport`` objects and writes; it computes no figures of its own
except sums over sessions (recall is pooled: hits over all sessions / uses over all sessions).
"""

from __future__ import annotations

import os
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path

import msgspec
from rich.console import Console
from rich.table import Table

from ctxengine.replay import SessionReport

GROUP_ABOVE = 5  # a file with more sessions than this is shown as one row


def _fmt_pct(x: float | None) -> str:
    return "–" if x is None else f"{x:.2f}%"


def _fmt_ratio(x: float | None) -> str:
    return "–" if x is None else f"{x:.3f}"


def write_json(reports: Sequence[SessionReport], path: Path, *, as_list: bool) -> None:
    """Write one JSON object (``as_list`` False and one report) or a list of them."""
    data = list(reports) if as_list or len(reports) != 1 else reports[0]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(msgspec.json.format(msgspec.json.encode(data), indent=1))


def summary_table(reports: Sequence[SessionReport], title: str) -> Table:
    """One row per session (sessions of a many-session file pooled into one row) and a total."""
    table = Table(title=title, show_lines=False)
    for col, just in (
        ("session", "left"),
        ("fmt", "left"),
        ("calls", "right"),
        ("peak tok", "right"),
        ("overflows", "right"),
        ("compactions", "left"),
        ("cost $", "right"),
        ("recorded $", "right"),
        ("cache hit", "right"),
        ("recall", "right"),
        ("pairing", "right"),
        ("pred err", "right"),
        ("delta err", "right"),
    ):
        table.add_column(col, justify=just)  # type: ignore[arg-type]
    groups: dict[str, list[SessionReport]] = defaultdict(list)
    for r in reports:
        groups[r.session.source].append(r)
    rows: list[tuple[str, list[SessionReport]]] = []
    for source, rs in groups.items():
        if len(rs) > GROUP_ABOVE:
            rows.append((f"{os.path.basename(source)} ({len(rs)} sessions)", rs))
        else:
            rows.extend(
                (os.path.basename(source) + (f" [{r.session.name}]" if r.session.name else ""), [r])
                for r in rs
            )
    for label, rs in rows:
        table.add_row(label[:48], *_cells(rs))
    if len(rows) > 1:
        table.add_section()
        table.add_row(f"all ({len(reports)} sessions)", *_cells(list(reports)))
    return table


def _cells(rs: Sequence[SessionReport]) -> list[str]:
    s = [r.summary for r in rs]
    comp: dict[str, int] = defaultdict(int)
    for x in s:
        for k, v in x.compactions.items():
            comp[k] += v
    uses = sum(x.recall_uses for x in s)
    hits = sum(x.recall_hits for x in s)
    rec = [x.recorded_cost_usd for x in s if x.recorded_cost_usd is not None]
    one = len(rs) == 1
    return [
        rs[0].session.format,
        str(sum(r.session.calls for r in rs)),
        f"{max(x.peak_sent_tokens for x in s):,}",
        str(sum(x.overflows for x in s)),
        ", ".join(f"{k} {v}" for k, v in sorted(comp.items())) or "–",
        f"{sum(x.cost_usd for x in s):.2f}",
        f"{sum(rec):.2f}" if rec else "–",
        _fmt_ratio(s[0].cache_hit_ratio) if one else "",
        _fmt_ratio(hits / uses if uses else None),
        str(sum(x.pairing_violations for x in s)),
        _fmt_pct(s[0].prediction_error.median_abs_pct) if one else "",
        _fmt_pct(s[0].delta_error.median_abs_pct) if one else "",
    ]


def print_table(reports: Sequence[SessionReport], title: str, console: Console | None = None) -> None:
    (console or Console()).print(summary_table(reports, title))


def plot(reports: Sequence[SessionReport], recorded: Sequence[SessionReport] | None, path: Path) -> None:
    """Tokens sent per call for the policy and for the recorded run, compactions marked, the
    window as a line; one panel per session (the 12 sessions with the most calls).

    Raises ``RuntimeError`` when matplotlib (extra ``plot``) is not installed.
    """
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise RuntimeError("--plot needs matplotlib: pip install 'ctxengine[plot]'") from exc
    chosen = sorted(range(len(reports)), key=lambda i: -reports[i].session.calls)[:12]
    n = len(chosen)
    cols = 1 if n == 1 else 2
    rows = (n + cols - 1) // cols
    fig, axes = plt.subplots(rows, cols, figsize=(7 * cols, 3.2 * rows), squeeze=False)
    for ax, i in zip(axes.flat, chosen, strict=False):
        r = reports[i]
        xs = [c.index for c in r.calls]
        ax.plot(xs, [c.sent_tokens for c in r.calls], label=f"sent ({r.policy})", lw=1.4)
        if recorded is not None and i < len(recorded):
            rc = recorded[i]
            ax.plot(
                [c.index for c in rc.calls],
                [c.sent_tokens for c in rc.calls],
                label="recorded policy",
                lw=1,
                alpha=0.7,
            )
        rec_in = [(c.index, c.recorded_input_tokens) for c in r.calls if c.recorded_input_tokens]
        if rec_in:
            ax.plot(*zip(*rec_in, strict=True), ".", ms=2, color="gray", label="recorded usage")
        for c in r.calls:
            for e in c.events:
                if e["layer"] in ("summary_compact", "overflow_guard", "recorded_compaction", "cache_clear"):
                    ax.axvline(
                        c.index, color="red" if "compact" in e["layer"] else "orange", lw=0.6, alpha=0.6
                    )
        ax.axhline(r.window_tokens, color="black", ls="--", lw=0.8, label="window")
        ax.set_title(
            os.path.basename(r.session.source)[:60] + (f" {r.session.name}" if r.session.name else ""),
            fontsize=8,
        )
        ax.set_xlabel("model call")
        ax.set_ylabel("input tokens")
        ax.legend(fontsize=6)
    for ax in list(axes.flat)[n:]:
        ax.axis("off")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
