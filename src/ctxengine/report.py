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

from ctxengine.replay import COMPACTION_LAYERS, SessionReport

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


FORMAT_SHORT = {"claude-code": "cc", "codex": "codex", "swe-agent": "swe", "openai-chat": "chat"}
NAME_CHARS = 44


def _short(name: str, limit: int = NAME_CHARS) -> str:
    """``name`` cut in the middle so both ends stay readable."""
    if len(name) <= limit:
        return name
    keep = limit - 1
    head = keep * 2 // 3  # the start names the session; the end tells similar ones apart
    return name[:head] + "…" + name[-(keep - head) :]


def summary_table(reports: Sequence[SessionReport], title: str) -> Table:
    """One row per session (sessions of a many-session file pooled into one row) and a total.
    Narrow enough for a 120-column terminal; the JSON has every figure."""
    table = Table(title=title, show_lines=False, caption=_caption(reports))
    for col, just in (
        ("session", "left"),
        ("fmt", "left"),
        ("calls", "right"),
        ("peak tok", "right"),
        ("ovf", "right"),
        ("compact ($0)", "right"),
        ("cost $", "right"),
        ("rec. $", "right"),
        ("hit", "right"),
        ("recall", "right"),
        ("pair", "right"),
        ("pred", "right"),
        ("Δ err", "right"),
    ):
        table.add_column(col, justify=just, no_wrap=True)  # type: ignore[arg-type]
    groups: dict[str, list[SessionReport]] = defaultdict(list)
    for r in reports:
        groups[r.session.source].append(r)
    rows: list[tuple[str, list[SessionReport]]] = []
    for source, rs in groups.items():
        if len(rs) > GROUP_ABOVE:
            rows.append((f"{_short(os.path.basename(source), NAME_CHARS - 8)} ({len(rs)})", rs))
        else:
            rows.extend(
                (_short(os.path.basename(source) + (f" {r.session.name}" if r.session.name else "")), [r])
                for r in rs
            )
    for label, rs in rows:
        table.add_row(label, *_cells(rs))
    if len(rows) > 1:
        table.add_section()
        table.add_row(f"all ({len(reports)} sessions)", *_cells(list(reports)))
    return table


def _caption(reports: Sequence[SessionReport]) -> str:
    unpriced = sorted({r.session.model or "unknown" for r in reports if not r.summary.price_known})
    notes = ["compact = compactions (of which $0); rec. $ = the recorded usage priced, where recorded"]
    if unpriced:
        notes.append("no known price, fallback rates: " + ", ".join(unpriced))
    return "; ".join(notes)


def _cells(rs: Sequence[SessionReport]) -> list[str]:
    s = [r.summary for r in rs]
    uses = sum(x.recall_uses for x in s)
    hits = sum(x.recall_hits for x in s)
    with_rec = [x for x in s if x.recorded_cost_usd is not None]
    one = len(rs) == 1
    sent = sum(sum(c.sent_tokens for c in r.calls) for r in rs)
    read = sum(sum(c.cache_read_tokens for c in r.calls) for r in rs)
    formats = {FORMAT_SHORT.get(r.session.format, r.session.format) for r in rs}
    return [
        formats.pop() if len(formats) == 1 else "mixed",
        str(sum(r.session.calls for r in rs)),
        f"{max(x.peak_sent_tokens for x in s):,}",
        str(sum(x.overflows for x in s)),
        f"{sum(sum(x.compactions.values()) for x in s)} ({sum(x.compactions_free for x in s)})",
        f"{sum(x.cost_usd for x in s):.2f}",
        # the recorded cost is compared on the same sessions: those that recorded usage
        f"{sum(x.recorded_cost_usd or 0.0 for x in with_rec):.2f}" if with_rec else "–",
        _fmt_ratio(read / sent if sent else None),
        _fmt_ratio(hits / uses if uses else None),
        str(sum(x.pairing_violations for x in s)),
        _fmt_pct(s[0].prediction_error.median_abs_pct) if one else "–",
        _fmt_pct(s[0].delta_error.median_abs_pct) if one else "–",
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
        marked: set[str] = set()
        runs = [(r, "C3", "compaction")]
        if recorded is not None and i < len(recorded) and recorded[i] is not r:
            runs.append((recorded[i], "C1", "recorded compaction"))
        for run, color, label in runs:
            for c in run.calls:
                for e in c.events:
                    if e["layer"] in COMPACTION_LAYERS and "error" not in e["details"]:
                        heavy = e["layer"] not in ("idle_clear", "cache_clear")
                        ax.axvline(
                            c.index,
                            color=color,
                            lw=0.8 if heavy else 0.5,
                            ls="-" if heavy else ":",
                            alpha=0.7,
                            label=None if label in marked else label,
                        )
                        marked.add(label)
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
