"""How ``tool grep`` reads one file: its text in blocks that end at a newline (``text_blocks``),
and the scan that counts every matching line and renders those of one page of matches with their
context (``LineScan``). Lines longer than ``GREP_MAX_LINE_CHARS`` are cut (``cut_line``)."""

from __future__ import annotations

import re
from collections import deque
from collections.abc import Iterator
from pathlib import Path

from ctxengine.tools.budgets import GREP_MAX_LINE_CHARS, GREP_PAGE_MATCHES
from ctxengine.tools.file_screen import BLOCK_BYTES, Large, Loaded
from ctxengine.tools.workspace import ENCODING_SAMPLE_BYTES, Sniff, decode, sniff, sniff_decode


def cut_line(text: str, limit: int = GREP_MAX_LINE_CHARS) -> str:
    """``text`` cut at ``limit`` characters with ``... [line truncated, N chars]``."""
    return text if len(text) <= limit else f"{text[:limit]}... [line truncated, {len(text):,} chars]"


def text_blocks(path: str | Path, loaded: Loaded) -> Iterator[str | Sniff]:
    """The file's sniff result, then its decoded text in blocks that end at a newline, from what
    ``read_screened`` gave (nothing when it screened the file out)."""
    if isinstance(loaded, OSError):
        raise loaded
    if loaded is None:
        return
    if not isinstance(loaded, Large):
        info, text = sniff_decode(loaded)
        yield info
        if text:
            yield text
        return
    with open(path, "rb") as f:
        sample = f.read(ENCODING_SAMPLE_BYTES)
        info = sniff(sample, complete=False)
        yield info
        if info.kind != "text":
            return
        pending = sample
        while True:
            chunk = f.read(BLOCK_BYTES)
            if not chunk:
                if pending:
                    yield decode(pending, info)
                return
            pending += chunk
            cut = pending.rfind(b"\n") + 1
            if cut:
                yield decode(pending[:cut], info)
                pending = pending[cut:]


class LineScan:
    """Counts every matching line; renders the ones in ``[lo, hi)`` with their context."""

    def __init__(
        self,
        rx: re.Pattern[str],
        prefilter: re.Pattern[str] | None,
        context: int,
        lo: int,
        needle: bytes | None = None,
    ) -> None:
        self.rx = rx
        self.prefilter = prefilter
        self.needle = needle
        self.context = context
        self.lo = lo
        self.hi = lo + GREP_PAGE_MATCHES
        self.total = 0
        self.files = 0
        self.out: list[str] = []
        self._last: tuple[str, int] | None = None  # last emitted (file, line)

    def _emit(self, rel: str, no: int, text: str, match: bool) -> None:
        if self.context and self.out and self._last != (rel, no - 1):
            self.out.append("--")
        sep = ":" if match else "-"
        self.out.append(f"{rel}{sep}{no}{sep} {cut_line(text)}")
        self._last = (rel, no)

    def file(self, rel: str, path: str | Path, loaded: Loaded) -> None:
        blocks = text_blocks(path, loaded)
        info = next(blocks, None)
        if not isinstance(info, Sniff) or info.kind != "text":
            return
        rx, ctx = self.rx, self.context
        before: deque[tuple[int, str]] = deque(maxlen=ctx or 1)
        after = 0
        lineno = 0
        emitted = 0  # last line number emitted from this file
        found = self.total
        for block in blocks:
            assert isinstance(block, str)
            if "\r" in block:  # a line's \r\n or final \r is not part of the line
                block = block.replace("\r\n", "\n").removesuffix("\r")
            if self.total >= self.hi and after == 0:  # page full: only count
                if self.prefilter is None or self.prefilter.search(block):
                    rest = block.removesuffix("\n").split("\n")
                    self.total += sum(1 for ln in rest if rx.search(ln.removesuffix("\r")))
                continue
            if after == 0 and self.prefilter is not None and not self.prefilter.search(block):
                n = block.count("\n") + (0 if block.endswith("\n") else 1)
                if ctx:
                    tail = block.removesuffix("\n").rsplit("\n", ctx)[-ctx:]
                    before.extend((lineno + n - len(tail) + 1 + k, t) for k, t in enumerate(tail))
                lineno += n
                continue
            lines = block.split("\n")
            if block.endswith("\n"):
                lines.pop()
            for raw in lines:
                lineno += 1
                line = raw[:-1] if raw.endswith("\r") else raw
                if rx.search(line):
                    idx = self.total
                    self.total += 1
                    if self.lo <= idx < self.hi:
                        for no, text in before:
                            if no > emitted:
                                self._emit(rel, no, text.removesuffix("\r"), False)
                        before.clear()
                        self._emit(rel, lineno, line, True)
                        emitted = lineno
                        after = ctx
                        continue
                    if after:
                        self._emit(rel, lineno, line, True)
                        emitted = lineno
                        after -= 1
                        continue
                elif after:
                    self._emit(rel, lineno, line, False)
                    emitted = lineno
                    after -= 1
                    continue
                if ctx:
                    before.append((lineno, line))
        if self.total > found:
            self.files += 1
