"""Names shortened from the middle so that they stay distinct: session file names in a table
column (``cc_mimo-v2.5-pro_vscode_2x-autocompact_4530697c.jsonl`` and
``cc_mimo-v2.5-pro_2x-autocompact_db3f6604.jsonl`` share their start and their end, so a fixed
cut made them one name), and split over the two lines a stacked table row has.
"""

from __future__ import annotations

from collections.abc import Sequence

__all__ = ["cut_middle", "short_names", "two_lines"]

ELLIPSIS = "…"


def cut_middle(name: str, limit: int, head: int | None = None) -> str:
    """``name`` within ``limit`` characters: its first ``head`` (default two thirds of the
    room; fewer where the cut would follow a digit) and its last characters around one
    ellipsis."""
    if len(name) <= limit:
        return name
    keep = max(limit - 1, 1)
    first = keep * 2 // 3 if head is None else max(0, min(head, keep))
    while first and _ends_in_a_figure(name[:first]):  # "v2…" would read as a number cut short
        first -= 1
    return name[:first] + ELLIPSIS + name[len(name) - (keep - first) :]


def _ends_in_a_figure(text: str) -> bool:
    """Whether ``text`` ends in a digit, or a digit and a ``.`` or ``,``: an ellipsis after it
    would look like a figure cut by the table."""
    return text[-1:].isdigit() or (text[-1:] in (".", ",") and text[-2:-1].isdigit())


def short_names(names: Sequence[str], limit: int) -> list[str]:
    """``names`` each within ``limit`` characters, cut in the middle at one place for all of
    them: two thirds head when that keeps distinct names distinct, else the split nearest to it
    that does (the start names a session, the end often tells similar ones apart). When no single
    split does, the names cut at two thirds (still within ``limit``)."""
    default = [cut_middle(n, limit) for n in names]
    if len(set(default)) == len(set(names)):
        return default
    keep = max(limit - 1, 1)
    preferred = keep * 2 // 3
    for head in sorted(range(keep + 1), key=lambda h: (abs(h - preferred), h)):
        cut = [cut_middle(n, limit, head) for n in names]
        if len(set(cut)) == len(set(names)):
            return cut
    return default


def two_lines(name: str, width: int) -> str:
    """``name`` (at most ``2 * width`` characters) over two lines of at most ``width``."""
    return name if len(name) <= width else name[:width] + "\n" + name[width:]
