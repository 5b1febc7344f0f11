"""Presenting replay results: the rich summary table, the JSON file and the plot.

Pure presentation: it reads ``SessionReport`` objects and writes; it computes no figures of its own
except sums over sessions (recall is pooled: hits over all sessions / uses over all sessions).
"""

from __future__ import annotations

import os
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import msgspec

from ctxengine.replay import COMPACTION_LAYERS, SessionReport
from ctxengine.replay.short_names import short_names, two_lines
from ctxengine.replay.table_fit import Column
from ctxengine.subagents.linking import SubagentSummary

if TYPE_CHECKING:  # rich is imported by what prints a table: ``--quiet --json`` does not
    from rich.console import Console
    from rich.table import Table

GROUP_ABOVE = 5  # a file with more sessions than this is shown as one row


def _fmt_pct(x: float | None) -> str:
    return "–" if x is None else f"{x:.1f}%"


def write_json(reports: Sequence[SessionReport], path: Path, *, as_list: bool) -> None:
    """Write one JSON object (``as_list`` False and one report) or a list of them."""
    data = list(reports) if as_list or len(reports) != 1 else reports[0]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(msgspec.json.format(msgspec.json.encode(data), indent=1))


FORMAT_SHORT = {"claude-code": "cc", "codex": "codex", "swe-agent": "swe", "openai-chat": "chat"}
NAME_CHARS = 44
LABEL_MIN = 16  # the session column never gets narrower than this (names are cut in the middle)


COLUMNS = {
    c.key: c
    for c in (
        Column("fmt", "fmt", "fmt: transcript format"),
        Column("calls", "calls", "calls: model calls"),
        Column("peak", "peak\ntokens", "peak: largest request"),
        Column("ovf", "ovf", "ovf: calls over the window"),
        Column("compact", "compact\n($0)", "compact: compactions (of them $0)"),
        Column("cost", "cost $", "cost $: ours, with prompt caching"),
        Column(
            "rec", "rec. $", "rec. $: the recorded run's cost (a total: on the sessions that recorded one)"
        ),
        Column("read", "read", "read: read recall (what the agent read, still in what was sent)"),
        Column("content", "content", "content: content recall (its own words counted too)"),
        Column("refs", "refs", "refs: reference recall (identifiers used that were still in context)"),
        Column("hit", "hit", "hit: prompt-cache hit ratio"),
        Column("pair", "pair", "pair: tool-call pairing violations"),
        Column("pred", "pred", "pred: the ledger's median error on the recorded input tokens"),
        Column("delta", "Δ err", "Δ err: the same on their growth since the previous call"),
        Column("fail", "layer\nfail", "layer fail: layer exceptions the engine caught"),
        Column(
            "sub",
            "sub-\nagents",
            "sub-agents: sub-agent runs tied to the session's Task/Agent calls (the input tokens of "
            "their calls that stayed out of its context)",
        ),
    )
}
Slot = tuple[str, ...]  # the figures one table column holds, one per line
WIDE: tuple[Slot, ...] = tuple((k,) for k in COLUMNS)
"""One figure per column, one line per row: a wide terminal or a log."""
STACKED: tuple[Slot, ...] = (
    ("fmt", "calls"),
    ("peak", "ovf"),
    ("compact", "fail"),
    ("cost", "rec"),
    ("read", "content"),
    ("refs", "hit"),
    ("pair", "pred"),
    ("delta", "sub"),
)
"""Two figures per column, two lines per row: a normal terminal (80 columns) shows every one."""
DROP_ORDER = ("sub", "fmt", "delta", "pred", "hit", "content", "pair", "compact")
"""Figures left out, in this order, when even the stacked table does not fit (``--json`` has them)."""


def table_title(policy: str, reports: Sequence[SessionReport]) -> str:
    """``ctxengine replay — policy NAME, window N tokens`` (or the windows' range)."""
    windows = sorted({r.window_tokens for r in reports})
    if not windows:
        return f"ctxengine replay — policy {policy}"
    where = (
        f"window {windows[0]:,} tokens"
        if len(windows) == 1
        else f"windows {windows[0]:,}–{windows[-1]:,} tokens"
    )
    return f"ctxengine replay — policy {policy}, {where}"


def summary_table(reports: Sequence[SessionReport], title: str, width: int = 200) -> Table:
    """One row per session (sessions of a many-session file pooled into one row) and the totals,
    fitted to ``width`` columns so that no number is cut: one figure per column when that fits,
    else two stacked in each column (two lines per row), then figures left out (``DROP_ORDER``)
    if even that is too wide; the session name is cut in the middle to the room left. The
    caption says what each figure is and which were left out; the JSON has every figure."""
    groups: dict[str, list[SessionReport]] = defaultdict(list)
    for r in reports:
        groups[r.session.source].append(r)
    rows: list[tuple[str, list[SessionReport]]] = []
    for source, rs in groups.items():
        if len(rs) > GROUP_ABOVE:
            rows.append((f"{os.path.basename(source)} ({len(rs)})", rs))
        else:
            rows.extend(
                (os.path.basename(source) + (f" {r.session.name}" if r.session.name else ""), [r]) for r in rs
            )
    with_rec = [r for r in reports if r.summary.recorded_cost_usd is not None]
    totals: list[tuple[str, list[SessionReport]]] = []
    if len(rows) > 1:
        totals.append((f"all ({len(reports)})", list(reports)))
        if with_rec and len(with_rec) < len(reports):  # like with like: both costs on the same sessions
            totals.append((f"with rec. $ ({len(with_rec)})", with_rec))
    cells = [(label, _cells(rs)) for label, rs in rows]
    total_cells = [(label, _cells(rs)) for label, rs in totals]
    shown = {k for k in COLUMNS if k != "fail" or any(r.summary.layer_failures for r in reports)}
    if not any(r.summary.subagents and r.summary.subagents.spawned for r in reports):
        shown.discard("sub")  # shown only where a sub-agent run was linked
    from rich.console import Console

    console = Console(width=10 * width)  # measures the table's natural width, not clamped to ``width``

    def fit(layout: tuple[Slot, ...]) -> tuple[tuple[Slot, ...], int]:
        slots = tuple(t for t in (tuple(k for k in slot if k in shown) for slot in layout) if t)
        return slots, _measure(console, _build(title, slots, cells, total_cells, LABEL_MIN))

    layout, need = fit(WIDE)
    if need > width:
        layout, need = fit(STACKED)
    for key in DROP_ORDER:
        if need <= width:
            break
        shown.discard(key)
        layout, need = fit(layout)
    label_chars = max(LABEL_MIN, min(NAME_CHARS, LABEL_MIN + width - need))
    table = _build(title, layout, cells, total_cells, label_chars)
    keys = [k for slot in layout for k in slot]
    left_out = [k for k in COLUMNS if k not in keys and k not in ("fail", "sub")]
    dashes = any(row[k] == "–" for _, row in (*cells, *total_cells) for k in keys)
    table.caption = _caption(reports, keys, left_out, dashes)
    return table


def _measure(console: Console, table: Table) -> int:
    from rich.measure import Measurement

    return Measurement.get(console, console.options, table).maximum


def _build(
    title: str,
    layout: Sequence[Slot],
    cells: Sequence[tuple[str, dict[str, str]]],
    totals: Sequence[tuple[str, dict[str, str]]],
    label_chars: int,
) -> Table:
    from rich import box
    from rich.table import Table

    stacked = any(len(slot) > 1 for slot in layout)
    table = Table(
        title=title,
        box=box.SIMPLE_HEAD,
        padding=(0, 1, 0, 0),  # one space after each column, then the divider's
        pad_edge=False,
        caption_justify="left",
        show_lines=stacked,  # two lines per row: a rule between rows keeps them apart
    )
    table.add_column("session", justify="left", no_wrap=True)
    for slot in layout:
        # stacked, each figure's header is one line, its first (the caption says the rest)
        header = "\n".join(COLUMNS[k].header.split("\n")[0] if stacked else COLUMNS[k].header for k in slot)
        table.add_column(header, justify="right", no_wrap=True)
    # names cut in the middle so that they stay distinct; on the two lines of a stacked row
    lines = 2 if stacked else 1
    labels = short_names([label for label, _ in (*cells, *totals)], label_chars * lines)
    for i, (_, row) in enumerate((*cells, *totals)):
        if i == len(cells) and totals:
            table.add_section()
        label = two_lines(labels[i], label_chars) if stacked else labels[i]
        table.add_row(label, *("\n".join(row[k] for k in slot) for slot in layout))
    return table


def _caption(
    reports: Sequence[SessionReport], shown: Sequence[str], left_out: Sequence[str], dashes: bool
) -> str:
    notes = [COLUMNS[k].explain for k in shown]
    if dashes:
        notes.append(
            "–: nothing to count there (e.g. no later words drew on what was read; no recorded "
            "usage or cost), or a per-session figure in a total row"
        )
    if left_out:
        names = ", ".join(COLUMNS[k].header.replace("\n", " ") for k in left_out)
        notes.append(f"left out at this width: {names} (--json has every figure)")
    unpriced = sorted(
        {
            r.session.model or "a model the transcript does not name"
            for r in reports
            if not r.summary.price_known
        }
    )
    if unpriced:  # the rows' cost $ is then not comparable with a recorded bill (marked *)
        notes.append(
            "*: cost $ at fallback rates (Sonnet-class list prices), for "
            + ", ".join(unpriced)
            + " (no known price)"
        )
    return "; ".join(notes) + "."


def _fmt_share(x: float | None) -> str:
    return "–" if x is None else f"{x:.3f}"


def _cells(rs: Sequence[SessionReport]) -> dict[str, str]:
    """The figures of one row, by column key. ``rec. $`` only when every session of the row
    recorded a cost (else the ``with rec. $`` total row compares both costs on those that did);
    recall of references, read and content recall pooled (hits / uses, hits / grounded shingles)."""
    s = [r.summary for r in rs]
    uses = sum(x.recall_uses for x in s)
    hits = sum(x.recall_hits for x in s)
    with_rec = [x for x in s if x.recorded_cost_usd is not None]
    one = len(rs) == 1
    sent = sum(sum(c.sent_tokens for c in r.calls) for r in rs)
    read = sum(sum(c.cache_read_tokens for c in r.calls) for r in rs)
    formats = {FORMAT_SHORT.get(r.session.format, r.session.format) for r in rs}
    r_grounded = sum(x.read_grounded for x in s)
    r_hits = sum(x.read_hits for x in s)
    grounded = sum(x.content_grounded for x in s)
    c_hits = sum(x.content_hits for x in s)
    complete = bool(with_rec) and len(with_rec) == len(s)
    return {
        "fmt": formats.pop() if len(formats) == 1 else "mixed",
        "calls": str(sum(r.session.calls for r in rs)),
        "peak": f"{max(x.peak_sent_tokens for x in s):,}",
        "ovf": str(sum(x.overflows for x in s)),
        "compact": f"{sum(sum(x.compactions.values()) for x in s)} ({sum(x.compactions_free for x in s)})",
        "cost": f"{sum(x.cost_usd for x in s):.2f}" + ("" if all(x.price_known for x in s) else "*"),
        "rec": f"{sum(x.recorded_cost_usd or 0.0 for x in with_rec):.2f}" if complete else "–",
        "read": _fmt_share(r_hits / r_grounded if r_grounded else None),
        "content": _fmt_share(c_hits / grounded if grounded else None),
        "refs": _fmt_share(hits / uses if uses else None),
        "hit": _fmt_share(read / sent if sent else None),
        "pair": str(sum(x.pairing_violations for x in s)),
        "pred": _fmt_pct(s[0].prediction_error.median_abs_pct) if one else "–",
        "delta": _fmt_pct(s[0].delta_error.median_abs_pct) if one else "–",
        "fail": str(sum(x.layer_failures for x in s)),
        "sub": _subagent_cell([x.subagents for x in s if x.subagents is not None]),
    }


def _subagent_cell(subs: Sequence[SubagentSummary]) -> str:
    """``runs (tokens kept out)``, e.g. ``1 (619K)``; ``–`` with no run linked."""
    spawned = sum(x.spawned for x in subs)
    if not spawned:
        return "–"
    out = sum(x.tokens_kept_out for x in subs)
    return f"{spawned} ({out / 1e6:.1f}M)" if out >= 1e6 else f"{spawned} ({out / 1e3:.0f}K)"


def print_table(reports: Sequence[SessionReport], title: str, console: Console | None = None) -> None:
    if console is None:
        from rich.console import Console

        console = Console()
    console.print(summary_table(reports, title, console.width))


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
        _panel(ax, reports[i], recorded[i] if recorded is not None and i < len(recorded) else None)
    for ax in list(axes.flat)[n:]:
        ax.axis("off")
    fig.suptitle(f"{table_title(reports[0].policy, reports)}: input tokens per model call", fontsize=10)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _panel(ax: Any, r: SessionReport, rc: SessionReport | None) -> None:
    """One session's panel: tokens sent per call under the policy (``r``) and under the recorded
    policy (``rc``), the recorded usage, the compactions of each, the window."""
    xs = [c.index for c in r.calls]
    ax.plot(xs, [c.sent_tokens for c in r.calls], label=f"sent ({r.policy})", lw=1.4)
    if rc is not None:
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
    if rc is not None and rc is not r:
        runs.append((rc, "C1", "recorded compaction"))
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
    name = os.path.basename(r.session.source) + (f" {r.session.name}" if r.session.name else "")
    ax.set_title(
        f"{short_names([name], 60)[0]}\npolicy {r.policy}, window {r.window_tokens:,} tokens", fontsize=8
    )
    ax.set_xlabel("model call")
    ax.set_ylabel("input tokens")
    ax.legend(fontsize=6)
