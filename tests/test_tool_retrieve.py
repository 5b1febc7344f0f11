"""retrieve: paging offloaded artifacts from a SessionStore, JSON structure previews, JMESPath."""

from __future__ import annotations

import json

import pytest

from ctxengine.layers.base import artifact_id
from ctxengine.messages.model import ToolCall
from ctxengine.store import SQLiteStore
from ctxengine.tools.base import ToolError, ToolExecutor
from ctxengine.tools.retrieve import QUERY_MAX_CHARS, retrieve, specs, structure

SESSION = "s1"


@pytest.fixture
def store() -> SQLiteStore:
    db = SQLiteStore()
    data = {
        "results": [
            {"id": i, "name": f"test_{i}", "status": "failed" if i % 50 == 0 else "passed", "tags": ["unit"]}
            for i in range(300)
        ],
        "meta": {"total": 300, "next": None, "run-id": "x" * 100},
    }
    data["results"][3]["extra"] = True
    db.put_artifact(SESSION, artifact_id("call_json"), json.dumps(data), {"layer": "tool_result_budget"})
    log = "\n".join(f"log line {i}" for i in range(1, 5001)) + "\n"
    db.put_artifact(SESSION, artifact_id("call_log"), log, {})
    db.put_artifact(SESSION, artifact_id("call_wide"), "w" * 3000 + "\nend\n", {})
    db.put_artifact(SESSION, artifact_id("call_arr"), json.dumps([1, "two", None, {"k": 1}]), {})
    return db


def test_text_artifact_paged_like_read(store: SQLiteStore) -> None:
    out = retrieve(store, SESSION, "tool-result/call_log")
    lines = out.split("\n")
    assert lines[0] == "     1\tlog line 1"
    assert lines[-1] == "[Showing lines 1-2000 of 5000. Use offset=2001 to continue.]"
    tail = retrieve(store, SESSION, "tool-result/call_log", offset=4999)
    assert tail == "  4999\tlog line 4999\n  5000\tlog line 5000"
    mid = retrieve(store, SESSION, "call_log", offset=10, limit=2)  # the prefix is optional
    assert mid == (
        "    10\tlog line 10\n    11\tlog line 11\n\n"
        "[Showing lines 10-11 of 5000. Use offset=12 to continue.]"
    )
    wide = retrieve(store, SESSION, "call_wide")
    assert wide.split("\n")[0].endswith("... [line truncated, 3,000 chars]")


def test_json_structure_preview(store: SQLiteStore) -> None:
    out = retrieve(store, SESSION, "call_json")
    lines = out.split("\n")
    assert lines[0].startswith("JSON artifact tool-result/call_json (")
    assert "results: array [300 items] of object" in lines
    assert "results[*]: keys vary across items; union: id, name, status, tags, extra" in lines
    assert "results[0].id: number = 0" in lines
    assert 'results[0].name: string = "test_0"' in lines
    assert "results[0].tags: array [1 items] of string" in lines
    assert "meta.next: null" in lines
    assert any(ln.startswith('meta."run-id": string = "xxx') and ln.endswith("(100 chars)") for ln in lines)
    assert lines[-1].startswith(
        '[Query it with retrieve(id="tool-result/call_json", query="results[0:5].id")'
    )
    # the suggested query works
    assert json.loads(retrieve(store, SESSION, "call_json", query="results[0:5].id")) == [0, 1, 2, 3, 4]


def test_structure_depth_and_mixed_arrays() -> None:
    deep: dict[str, object] = {"a": {"b": {"c": {"d": {"e": {"f": 1}}}}}}
    out = structure(deep)
    assert out[-1] == "a.b.c.d: keys e"
    assert structure([1, "two", None]) == [
        "@: array [3 items] of mixed (number×1, string×1, null×1)",
        "[0]: number = 1",
    ]
    assert structure({"x": []}) == ["@: object {1 keys}", "x: array [0 items]"]
    wide = structure({f"k{i}": i for i in range(40)})
    assert wide[-1] == "@: ... and 10 more keys"


def test_jmespath_query(store: SQLiteStore) -> None:
    failed = json.loads(retrieve(store, SESSION, "call_json", query="results[?status=='failed'].name"))
    assert failed == [f"test_{i}" for i in range(0, 300, 50)]
    assert retrieve(store, SESSION, "call_json", query="meta.total") == "300"
    big = retrieve(store, SESSION, "call_json", query="results")
    assert len(big) < QUERY_MAX_CHARS + 300
    assert big.split("\n")[-1].startswith("[Result cut at ")
    assert "Narrow the query" in big
    paged = retrieve(store, SESSION, "call_json", query="results[0]", offset=2, limit=2)
    assert paged.split("\n")[:3] == [
        "[Query 'results[0]' on tool-result/call_json, pretty-printed JSON]",
        '     2\t  "id": 0,',
        '     3\t  "name": "test_0",',
    ]


def test_json_pages_pretty_printed(store: SQLiteStore) -> None:
    out = retrieve(store, SESSION, "call_json", offset=1, limit=3)
    assert out.split("\n")[:4] == [
        "[JSON artifact tool-result/call_json, pretty-printed]",
        "     1\t{",
        '     2\t  "results": [',
        "     3\t    {",
    ]
    assert out.endswith("Use offset=4 to continue.]")
    assert structure(json.loads(store.get_artifact(SESSION, "tool-result/call_arr")[0]))[0].startswith(
        "@: array [4 items]"
    )


def test_refusals(store: SQLiteStore) -> None:
    with pytest.raises(ToolError, match="no artifact 'nope'"):
        retrieve(store, SESSION, "nope")
    with pytest.raises(ToolError, match="no artifact"):
        retrieve(store, "other-session", "call_log")
    with pytest.raises(ToolError, match="not JSON"):
        retrieve(store, SESSION, "call_log", query="a")
    with pytest.raises(ToolError, match="invalid JMESPath"):
        retrieve(store, SESSION, "call_json", query="results[[[")
    with pytest.raises(ToolError, match="past the end"):
        retrieve(store, SESSION, "call_log", offset=6000)
    with pytest.raises(ToolError, match="1-based"):
        retrieve(store, SESSION, "call_log", offset=0)


def test_spec_with_current_session(store: SQLiteStore) -> None:
    current = {"id": "none"}
    ex = ToolExecutor()
    for spec in specs(store, lambda: current["id"]):
        ex.register(spec)
    assert ex.definitions()[0]["input_schema"]["required"] == ["id"]
    assert ex.execute(ToolCall("c1", "retrieve", {"id": "call_log"})).is_error
    current["id"] = SESSION
    ok = ex.execute(ToolCall("c2", "retrieve", {"id": "call_log", "offset": 1, "limit": 1}))
    assert not ok.is_error and ok.content[0].text.startswith("     1\tlog line 1")  # type: ignore[union-attr]
