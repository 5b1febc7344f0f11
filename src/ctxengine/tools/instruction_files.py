"""Bootstrap loader: the workspace's instruction files (``AGENTS.md``, ``CLAUDE.md`` and a configured
list), capped per file and in total, ready to put in front of the model.

Reference behaviour (OpenClaw, ``bootstrap.ts`` and its docs, newest defaults):

- files are handled in order against one shared total budget: **20,000 chars per file**,
  **60,000 chars in total**; when fewer than **64** chars of budget remain, the remaining files are
  skipped with a warning;
- a file over its cap keeps its **head (75 %)** and **tail (25 %)** of the budget left after the
  truncation marker; the marker tells the model how to read the rest, here with the exact
  ``read(path=..., offset=..., limit=...)`` call (offset is a 1-based line, as in the read tool);
- a configured file that does not exist injects ``[MISSING] Expected at: <path>``.

``AGENTS.md`` and ``CLAUDE.md`` are looked for by default and are silently left out when absent
(most repositories have one of them, and a marker for the other would only cost tokens); every name
in ``files`` is *configured*, so its absence is reported with the MISSING marker. The same file met
twice (a configured repeat, or ``CLAUDE.md`` a symlink to ``AGENTS.md``) is shown once. A name that
resolves outside the root is refused (``status="refused"``), never read.

``load_bootstrap_files(root, names, include_missing=...)`` takes exactly ``names`` (no defaults);
with ``include_missing=False`` absent files are left out (what restore-after-compaction wants).

``load_bootstrap`` is a pure function of (root, names, caps): it reads the files and returns
structured results plus the rendered text; it keeps no state, so the restore-after-compaction
feature can call it again and get the same text for the same files.

The agent tool over it (``instructions``) is in ``ctxengine.tools.bootstrap``; this module sits below
the tools and the restore after compaction, which both call it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

DEFAULT_NAMES: tuple[str, ...] = ("AGENTS.md", "CLAUDE.md")
PER_FILE_CHARS = 20_000
TOTAL_CHARS = 60_000
HEAD_RATIO = 0.75  # the tail gets the rest (25 %)
MIN_REMAINING = 64  # below this many chars of total budget, the remaining files are skipped
MAX_READ_BYTES = 2 * 1024 * 1024  # never read more than 2 MiB of an instruction file

Status = Literal["loaded", "truncated", "missing", "skipped", "refused", "unreadable"]


@dataclass(frozen=True)
class BootstrapFile:
    """One instruction file. ``path`` is relative to the root (as written to the model);
    ``chars_original`` the file's length in chars (0 when missing), ``chars_shown`` the chars of
    ``text`` (content, marker included); ``text`` is what the model sees for this file."""

    name: str
    path: str
    status: Status
    chars_original: int
    chars_shown: int
    text: str

    @property
    def truncated(self) -> bool:
        return self.status == "truncated"

    @property
    def missing(self) -> bool:
        return self.status == "missing"


@dataclass(frozen=True)
class Bootstrap:
    """The loaded files in order, the rendered text, and warnings (skipped or refused files)."""

    files: tuple[BootstrapFile, ...]
    text: str
    warnings: tuple[str, ...]

    @property
    def chars(self) -> int:
        """Chars of file content shown (markers included, section headers not)."""
        return sum(f.chars_shown for f in self.files)


def truncation_marker(path: str, first_omitted: int, last_omitted: int, total_chars: int, shown: int) -> str:
    """The marker put between head and tail of a cut file: what was cut and the read call for it."""
    count = last_omitted - first_omitted + 1
    return (
        f"\n\n[...truncated: {path} has {total_chars:,} chars; this shows its head and tail "
        f"({shown:,} chars). Lines {first_omitted}-{last_omitted} are omitted; read them with "
        f'read(path="{path}", offset={first_omitted}, limit={count})]\n\n'
    )


def cut_head_tail(text: str, path: str, cap: int, head_ratio: float = HEAD_RATIO) -> str:
    """``text`` cut to at most ``cap`` chars: head ``head_ratio`` and tail the rest of the budget
    left after the marker. The cut snaps to line boundaries when one is near (within a quarter of
    each part), so the marker's line numbers are exact. ``text`` within ``cap`` is returned as is."""
    if len(text) <= cap:
        return text
    # The marker's length depends on the numbers in it; size the budget with a generous estimate.
    probe = truncation_marker(path, 10**9, 10**9, len(text), cap)
    budget = cap - len(probe)
    if budget < MIN_REMAINING:  # no room for a useful head and tail: only say where the file is
        return f'[truncated: {path} has {len(text):,} chars; read it with read(path="{path}", offset=1)]'
    head_n = int(budget * head_ratio)
    tail_n = budget - head_n
    head = text[:head_n]
    nl = head.rfind("\n")
    if nl >= 0 and nl >= head_n - head_n // 4:
        head = head[: nl + 1]
    tail_start = len(text) - tail_n
    if tail_n > 0:
        nl = text.find("\n", tail_start - 1)
        if 0 <= nl < tail_start + tail_n // 4 and nl < len(text) - 1:
            tail_start = nl + 1
    tail = text[tail_start:] if tail_n > 0 else ""
    if not tail:
        tail_start = len(text)
    first_omitted = head.count("\n") + 1
    last_omitted = max(first_omitted, text.count("\n", 0, max(0, tail_start - 1)) + 1)
    shown = len(head) + len(tail)
    marker = truncation_marker(path, first_omitted, last_omitted, len(text), shown)
    return head + marker + tail


def _section(path: str, body: str) -> str:
    return f"## {path}\n\n{body}"


def _read(target: Path) -> tuple[bytes, str]:
    """The first ``MAX_READ_BYTES`` (+1, to tell a longer file) of ``target`` and their text.
    Raises ``OSError`` when it cannot be read."""
    with target.open("rb") as fh:
        raw = fh.read(MAX_READ_BYTES + 1)
    return raw, raw[:MAX_READ_BYTES].decode("utf-8", errors="replace")


def _budget_gone(rel: str, total_chars: int) -> str:
    return f"{rel}: skipped, total bootstrap budget of {total_chars:,} chars used up"


def _missing(name: str, rel: str, remaining: int, total_chars: int, warnings: list[str]) -> BootstrapFile:
    """A configured file that does not exist: its ``[MISSING]`` marker, or skipped (with a
    warning) when fewer than ``MIN_REMAINING`` chars of the total budget are left."""
    if remaining < MIN_REMAINING:
        warnings.append(_budget_gone(rel, total_chars))
        return BootstrapFile(name, rel, "skipped", 0, 0, "")
    marker = f"[MISSING] Expected at: {rel}"
    return BootstrapFile(name, rel, "missing", 0, len(marker), marker)


def load_bootstrap(
    root: str | Path,
    files: Sequence[str] = (),
    *,
    defaults: Sequence[str] = DEFAULT_NAMES,
    per_file_chars: int = PER_FILE_CHARS,
    total_chars: int = TOTAL_CHARS,
    head_ratio: float = HEAD_RATIO,
) -> Bootstrap:
    """Load the workspace instruction files, under OpenClaw's bootstrap caps.

    ``defaults`` (when present), then the configured ``files``, in order, each capped at
    ``per_file_chars`` (cut to head + tail) and all together at ``total_chars``. A configured file
    that is missing gets a ``[MISSING]`` marker; a file outside ``root`` is refused. Problems are
    reported as warnings, never raised.

    Args:
        root: the workspace root.
        files: configured paths, relative to ``root``.
        defaults: file names loaded when present (``AGENTS.md``, ``CLAUDE.md``).
        per_file_chars: cap per file, chars (OpenClaw: 20,000).
        total_chars: cap on all files together, chars (OpenClaw: 60,000).
        head_ratio: share of a cut file's cap kept as its head (0.75; the tail gets the rest).

    Returns:
        The ``Bootstrap``: the files in order with their status, the rendered text (one
        ``## <path>`` section per file) and the warnings.
    """
    base = Path(root).resolve()
    wanted: list[tuple[str, bool]] = [(n, False) for n in defaults] + [(n, True) for n in files]
    seen: set[Path] = set()
    out: list[BootstrapFile] = []
    warnings: list[str] = []
    remaining = total_chars
    for name, configured in wanted:
        target = (base / name).resolve()
        try:
            rel = target.relative_to(base).as_posix()
        except ValueError:
            warnings.append(f"{name}: outside the workspace root; not loaded")
            out.append(BootstrapFile(name, name, "refused", 0, 0, ""))
            continue
        if target in seen:
            continue
        if not target.is_file():
            if not configured:
                continue
            seen.add(target)
            missing = _missing(name, rel, remaining, total_chars, warnings)
            remaining -= missing.chars_shown
            out.append(missing)
            continue
        seen.add(target)
        try:
            raw, content = _read(target)
        except OSError as exc:
            warnings.append(f"{rel}: cannot read ({exc.strerror or exc})")
            out.append(BootstrapFile(name, rel, "unreadable", 0, 0, ""))
            continue
        if remaining < MIN_REMAINING:
            warnings.append(_budget_gone(rel, total_chars))
            out.append(BootstrapFile(name, rel, "skipped", len(content), 0, ""))
            continue
        cap = min(per_file_chars, remaining)
        shown = cut_head_tail(content, rel, cap, head_ratio)
        if len(shown) > cap:
            warnings.append(_budget_gone(rel, total_chars))
            out.append(BootstrapFile(name, rel, "skipped", len(content), 0, ""))
            remaining = 0
            continue
        truncated = shown != content or len(raw) > MAX_READ_BYTES
        remaining -= len(shown)
        out.append(
            BootstrapFile(name, rel, "truncated" if truncated else "loaded", len(content), len(shown), shown)
        )
    text = "\n\n".join(_section(f.path, f.text) for f in out if f.text)
    return Bootstrap(tuple(out), text, tuple(warnings))


def load_bootstrap_files(
    root: str | Path,
    names: Sequence[str],
    *,
    include_missing: bool = True,
    per_file_chars: int = PER_FILE_CHARS,
    total_chars: int = TOTAL_CHARS,
    head_ratio: float = HEAD_RATIO,
) -> Bootstrap:
    """Exactly ``names``, in order, with the same caps as ``load_bootstrap`` (no default names).
    ``include_missing=False`` leaves absent files out instead of marking them ``[MISSING]`` (the
    restore-after-compaction use: only what exists is restored)."""
    configured, optional = (names, ()) if include_missing else ((), names)
    return load_bootstrap(
        root,
        configured,
        defaults=optional,
        per_file_chars=per_file_chars,
        total_chars=total_chars,
        head_ratio=head_ratio,
    )
