"""One open file of the working set rendered as the ``<file>`` element of the ``<open_files>``
block: numbered lines (``cat -n`` style) from an offset, cut at the per-file char limit with
``TRUNCATED`` and the exact ``read`` call for the rest, lines over ``LINE_CHARS`` = 2,000 chars cut
as ``read`` cuts them. Also the check that a path can be opened at all. Pure file reading; the set
itself (limits, LRU, delivery) is ``tools.working_set``.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ctxengine.tools.workspace import Sniff, decode, sniff_file

LINE_CHARS = 2_000  # a longer line is cut with a marker, as in read
TRUNCATED = "...[TRUNCATED]"


@dataclass
class _Rendered:
    key: tuple[int, int, int, int | None, int]  # mtime_ns, size, offset, length, limit
    text: str
    shown: str = "none"  # "S-E" lines shown
    total: int = 0
    truncated: bool = False

    def describe(self) -> str:
        out = f"lines {self.shown} of {self.total}"
        return out + (", cut at the char limit" if self.truncated else "")


def _check_file(path: Path) -> str:
    if not path.exists():
        return "no such file"
    if path.is_dir():
        return "is a directory; open files inside it"
    try:
        info = sniff_file(path)
    except OSError as exc:
        return f"cannot read ({exc.strerror or exc})"
    if info.kind == "binary":
        return f"{info.label} file; it cannot be shown as text"
    if info.kind == "unsupported":
        return f"{info.label} text is not supported; only UTF-8 and Latin-1 text can be shown"
    return ""


def _count_lines(path: Path) -> int:
    n = 0
    last = b"\n"
    with path.open("rb") as fh:
        while chunk := fh.read(1 << 20):
            n += chunk.count(b"\n")
            last = chunk[-1:]
    return n + (0 if last == b"\n" else 1)


def _render_range(
    key: tuple[int, int, int, int | None, int],
    rel: str,
    path: Path,
    offset: int,
    length: int | None,
    limit: int,
) -> _Rendered:
    """Numbered lines ``offset``.. of ``path`` (``cat -n`` style) within ``limit`` chars."""
    total = _count_lines(path)
    try:
        info = sniff_file(path)
    except OSError:
        info = Sniff("text")
    body: list[str] = []
    used = 0
    last = offset - 1
    truncated = False
    end_wanted = total if length is None else min(total, offset + length - 1)
    with path.open("rb") as fh:
        for n, raw in enumerate(fh, 1):
            if n < offset:
                continue
            if n > end_wanted:
                break
            line = decode(raw, info).rstrip("\r\n")
            if len(line) > LINE_CHARS:
                line = line[:LINE_CHARS] + f"... [line cut at {LINE_CHARS:,} chars]"
            numbered = f"{n:>6}\t{line}"
            if used + len(numbered) + 1 > limit:
                room = limit - used
                if room > 40 and not body:  # a single huge first line: show its start
                    body.append(numbered[:room])
                    last = n
                truncated = True
                break
            body.append(numbered)
            used += len(numbered) + 1
            last = n
    shown = f"{offset}-{last}" if last >= offset else "none"
    attrs: dict[str, Any] = {"path": rel, "lines": shown, "total_lines": total}
    if truncated:
        attrs["truncated"] = "true"
    head = "<file " + " ".join(f'{k}="{v}"' for k, v in attrs.items()) + ">"
    out = [head, *body]
    if offset > total and total > 0:
        out.append(f"[offset {offset} is past the end: the file has {total} lines]")
    if truncated:
        nxt = last + 1
        rest = "" if length is None else f", limit={end_wanted - last}"
        out.append(TRUNCATED)
        out.append(
            f"[Showing lines {shown} of {total} within the {limit:,}-char limit. "
            f'Use read(path="{rel}", offset={nxt}{rest}) to see the rest.]'
        )
    out.append("</file>")
    return _Rendered(key, "\n".join(out), shown, total, truncated)
