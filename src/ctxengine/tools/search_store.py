"""The search index's build and storage: an SQLite FTS5 file of 60-line windows, kept up to date
incrementally by mtime (the ``search`` tool's half that writes; ``tools.search`` queries it).

Numbers: windows of ``CHUNK_LINES`` = 60 lines; files over ``MAX_FILE_BYTES`` = 2 MiB are listed
without content; the schema is ``SCHEMA_VERSION`` 2 (contentless FTS5 with the tokenizer
``porter unicode61``, each window's text stored once, zlib-compressed). The reference behaviour
(what is indexed, when it is re-read, where the file lives) is described in ``tools.search``.
"""

from __future__ import annotations

import importlib
import os
import re
import sqlite3
import time
import zlib
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ctxengine.store.base import SessionStore, StoreError
from ctxengine.tools.base import ToolError
from ctxengine.tools.retrieve import parse_json, pretty
from ctxengine.tools.workspace import Workspace, decode, sniff

CHUNK_LINES = 60
MAX_FILE_BYTES = 2 * 1024 * 1024  # larger files are listed, not indexed (grep still sees them)
INDEX_DIR = ".ctxengine"
INDEX_FILE = "search.sqlite"
SCHEMA_VERSION = "2"  # 2: contentless FTS5, each window's text once, compressed

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


def artifact_ids(store: SessionStore, session: str) -> list[str]:
    """Ids of the artifacts of ``session`` (``SessionStore.artifact_ids``)."""
    return [str(a) for a in store.artifact_ids(session)]


class IndexStore:
    """The storage half of ``SearchIndex``: opens (or rebuilds) the SQLite file, brings it up to
    date with the workspace and the session's artifacts, and embeds new windows when an
    ``embedder`` is given. Queries are ``SearchIndex``'s (``tools.search``).

    ``db`` is the index location (default ``<root>/.ctxengine/search.sqlite``; ``":memory:"``
    keeps it in memory). ``store``/``session`` add the session's artifacts.
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
