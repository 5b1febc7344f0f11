"""The query side of ``search``: the FTS5 match expression, the ``path`` filter, reciprocal rank
fusion, snippets, the call that opens a hit, and the text the model sees.

Pure functions of their arguments (no index access; ``tools.search`` runs the queries). Numbers:
``k`` results, default ``DEFAULT_K`` = 10, at most ``MAX_K`` = 50 (Letta's cap); fusion
``1 / (RRF_K + rank)`` with ``RRF_K`` = 60 (Cormack et al. 2009); snippet lines cut at
``SNIPPET_LINE_CHARS`` = 200 chars; BM25 column weights ``WEIGHTS`` (path 4.0, text 1.0,
camelCase-split words 0.5).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from ctxengine.tools.base import ToolError
from ctxengine.tools.workspace import Workspace

DEFAULT_K = 10
MAX_K = 50
RRF_K = 60
SNIPPET_LINE_CHARS = 200
WEIGHTS = (4.0, 1.0, 0.5)  # bm25 column weights: name (path), body, camelCase-split words

Scope = Literal["all", "files", "artifacts"]
KINDS: dict[str, tuple[str, ...]] = {
    "all": ("file", "artifact"),
    "files": ("file",),
    "artifacts": ("artifact",),
}

_TERM = re.compile(r'"([^"]+)"|(\w+)')


@dataclass(frozen=True)
class Hit:
    """One ranked file or artifact: its best window ``start``-``end`` (1-based lines), ``score``
    (higher is better), ``snippet`` (line number, text), other matching windows, and ``call``,
    the exact tool call that opens the window."""

    kind: Literal["file", "artifact"]
    name: str  # path relative to the root, or the artifact id
    start: int
    end: int
    score: float
    snippet: tuple[tuple[int, str], ...]
    also: tuple[tuple[int, int], ...]
    call: str

    @property
    def location(self) -> str:
        return f"{self.name}:{self.start}-{self.end}"


def fts_query(query: str) -> str:
    """A safe FTS5 MATCH expression for free text: quoted phrases stay phrases, every other word is
    a quoted term, all joined with OR (BM25 then ranks windows with more and rarer terms first).
    Empty when the query has no word."""
    parts: list[str] = []
    for phrase, word in _TERM.findall(query):
        term = (phrase or word).replace('"', " ").strip()
        if term:
            parts.append(f'"{term}"')
    return " OR ".join(dict.fromkeys(parts))


def _query_words(query: str) -> list[str]:
    words = [w.lower() for w in re.findall(r"[A-Za-z0-9]+", query)]
    return [w[: max(4, len(w) - 2)] if len(w) > 5 else w for w in dict.fromkeys(words)]


def _confine(workspace: Workspace, path: str | None) -> None:
    """Refuse a ``path`` filter that leaves the workspace (``../..``, an absolute path outside
    it), as ``read`` refuses such a path, with ``Workspace.resolve``'s ``ToolError``; a glob is
    checked up to its first wildcard. A path inside the root passes unchanged."""
    if not path or not path.strip():
        return
    p = path.strip()
    wild = min((i for i, ch in enumerate(p) if ch in "*?["), default=len(p))
    literal = p if wild == len(p) else p[:wild].rpartition("/")[0]
    workspace.resolve(literal or ".")


def _path_glob(path: str | None) -> tuple[str, str] | None:
    """Two SQLite GLOB patterns for a ``path`` filter (``*`` crosses ``/`` in GLOB): a glob as
    given (``**/`` folded), or a directory or file name and everything under it."""
    if not path:
        return None
    p = path.strip().removeprefix("./").rstrip("/")
    if p in ("", "."):
        return None
    if any(ch in p for ch in "*?["):
        g = p.replace("**/", "*").replace("/**", "/*")
        return g, g
    return p, p + "/*"


def _snippet(body: str, start: int, words: Sequence[str]) -> tuple[tuple[int, str], ...]:
    lines = body.split("\n")
    best, best_score = 0, -1
    for i, line in enumerate(lines):
        low = line.lower()
        score = sum(1 for w in words if w in low)
        if score > best_score:
            best, best_score = i, score
    lo = max(0, best - 1)
    hi = min(len(lines), best + 2)
    out: list[tuple[int, str]] = []
    for i in range(lo, hi):
        text = lines[i].rstrip()
        if len(text) > SNIPPET_LINE_CHARS:
            text = text[:SNIPPET_LINE_CHARS] + " …"
        out.append((start + i, text))
    return tuple(out)


def _open_call(kind: str, name: str, start: int, end: int) -> str:
    limit = end - start + 1
    if kind == "file":
        return f'read(path="{name}", offset={start}, limit={limit})'
    return f'retrieve(id="{name}", offset={start}, limit={limit})'


def render_hits(query: str, hits: Sequence[Hit], k: int = DEFAULT_K, ranking: str = "BM25") -> str:
    """The text the model sees for a search."""
    if not hits:
        return f"No matches for {query!r}. Try other words, fewer words, or grep for an exact pattern."
    lines = [f"Top {len(hits)} results for {query!r} ({ranking}; best window per file or artifact):"]
    for i, h in enumerate(hits, 1):
        label = h.location if h.kind == "file" else f"artifact {h.name} lines {h.start}-{h.end}"
        lines.append("")
        lines.append(f"{i}. {label}  score {h.score:g}")
        for n, text in h.snippet:
            lines.append(f"{n:>6}\t{text}")
        lines.append(f"   open: {h.call}")
        if h.also:
            lines.append("   also matches lines " + ", ".join(f"{a}-{b}" for a, b in h.also))
    if len(hits) >= k and k < MAX_K:
        lines.append("")
        lines.append(f"More may match: search(query={query!r}, k={min(MAX_K, k * 2)}).")
    return "\n".join(lines)


def check_query(
    workspace: Workspace, query: str, k: int, scope: Scope, path: str | None
) -> tuple[int, str, tuple[str, ...]]:
    """Validate a search's arguments, in this order: ``query`` a string, ``k`` a number (clamped
    to 1..``MAX_K``), ``path`` a string inside the workspace (``_confine``), a query with a
    searchable word, a known ``scope``.

    Returns:
        ``(k, match, kinds)``: the clamped ``k``, the FTS5 MATCH expression, the source kinds.

    Raises:
        ToolError: naming the argument that is wrong.
    """
    if not isinstance(query, str):
        raise ToolError("query must be a string of words")
    try:
        k = max(1, min(int(k), MAX_K))
    except (TypeError, ValueError):
        raise ToolError(f"k must be a number of results (1-{MAX_K}), got {k!r}") from None
    if path is not None and not isinstance(path, str):
        raise ToolError("path must be a directory or glob string")
    _confine(workspace, path)
    match = fts_query(query)
    if not match:
        raise ToolError("the query has no searchable word; give words or a quoted phrase")
    kinds = KINDS.get(scope)
    if kinds is None:
        raise ToolError(f"scope must be one of all, files, artifacts (got {scope!r})")
    return k, match, kinds


def rrf_fuse(rankings: Sequence[Sequence[int]]) -> dict[int, float]:
    """Reciprocal rank fusion: each chunk id's ``1 / (RRF_K + rank)`` (rank 1-based) summed over
    ``rankings``, in their order."""
    fused: dict[int, float] = {}
    for ranking in rankings:
        for i, cid in enumerate(ranking):
            fused[cid] = fused.get(cid, 0.0) + 1.0 / (RRF_K + i + 1)
    return fused
