"""A terminal table that fits its width without cutting a figure: one figure per column when
that fits, else two figures stacked in each column (two lines per row), then figures left out in
a given order (the caller's ``--json`` has them all) until it fits. Every figure shown is
explained once in the caption, which wraps at the table's width. Used by ``ctxengine bench``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

import msgspec

if TYPE_CHECKING:  # rich is imported when a table is made (``Column`` alone needs none of it)
    from rich.table import Table

__all__ = ["Column", "Row", "Slot", "fit_table"]

Slot = tuple[str, ...]  # the figures one table column holds, one per line
Row = tuple[str, Mapping[str, str]]  # a row's label and its figures by column key


class Column(msgspec.Struct, frozen=True):
    """One figure: its key, its header (one line, or two: the first is used when stacked) and
    what it is, for the caption (``"key: what"``)."""

    key: str
    header: str
    explain: str


def _one_per_column(order: Sequence[str], shown: set[str]) -> tuple[Slot, ...]:
    return tuple((k,) for k in order if k in shown)


def _two_per_column(order: Sequence[str], shown: set[str]) -> tuple[Slot, ...]:
    keys = [k for k in order if k in shown]
    return tuple(tuple(keys[i : i + 2]) for i in range(0, len(keys), 2))


def _build(
    title: str,
    label: str,
    columns: Mapping[str, Column],
    layout: Sequence[Slot],
    sections: Sequence[Sequence[Row]],
) -> Table:
    from rich import box
    from rich.table import Table

    stacked = any(len(slot) > 1 for slot in layout)
    table = Table(
        title=title or None,
        box=box.SIMPLE_HEAD,
        padding=(0, 1, 0, 0),  # one space after each column
        pad_edge=False,
        show_edge=False,
        caption_justify="left",
        show_lines=stacked,  # two lines per row: a rule between rows keeps them apart
    )
    table.add_column(label, justify="left", no_wrap=True)
    for slot in layout:
        header = "\n".join(columns[k].header.split("\n")[0] if stacked else columns[k].header for k in slot)
        table.add_column(header, justify="right", no_wrap=True)
    for i, rows in enumerate(sections):
        if i and rows and table.row_count:
            table.add_section()
        for name, cells in rows:
            table.add_row(name, *("\n".join(cells.get(k, "–") for k in slot) for slot in layout))
    return table


def fit_table(
    title: str,
    label: str,
    columns: Mapping[str, Column],
    sections: Sequence[Sequence[Row]],
    *,
    wide: Sequence[str],
    stacked: Sequence[str],
    drop_order: Sequence[str],
    width: int,
    notes: Sequence[str] = (),
) -> Table:
    """The table of ``sections`` (groups of rows, a rule between groups) fitted to ``width``
    columns: the figures in ``wide`` order, one per column, if that fits; else in ``stacked``
    order, two per column (consecutive figures share one), then the keys of ``drop_order`` left
    out one by one (the pairs formed again) until it fits. Its caption explains each figure
    shown, names those left out, then adds ``notes``. Keys not in ``columns`` are ignored."""
    from rich.console import Console
    from rich.measure import Measurement

    console = Console(width=10 * width)  # measures the natural width, not clamped to ``width``
    shown = set(columns)

    def need(layout: Sequence[Slot]) -> int:
        table = _build(title, label, columns, layout, sections)
        return Measurement.get(console, console.options, table).maximum

    layout = _one_per_column(wide, shown)
    arrange = _one_per_column
    if need(layout) > width:
        arrange = _two_per_column
        layout = arrange(stacked, shown)
    for key in drop_order:
        if need(layout) <= width:
            break
        shown.discard(key)
        layout = arrange(stacked if arrange is _two_per_column else wide, shown)
    table = _build(title, label, columns, layout, sections)
    keys = [k for slot in layout for k in slot]
    explained = [columns[k].explain for k in keys]
    left_out = [" ".join(columns[k].header.split()) for k in columns if k not in keys]
    if left_out:
        explained.append(f"left out at this width: {', '.join(left_out)} (--json has every figure)")
    table.caption = "; ".join([*explained, *notes]) + "."
    return table
