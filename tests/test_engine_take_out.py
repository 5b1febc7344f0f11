"""``Ingest.take_out``: messages the client moved leave the view, and come back where they now are."""

from __future__ import annotations

import pytest

from ctxengine.messages.model import Message, Text
from ctxengine.store import SQLiteStore
from test_engine import DEFAULT, filler, make_engine


def text(role: str, body: str, mid: str) -> Message:
    return Message(role, (Text(body),), mid)  # type: ignore[arg-type]


def ids(msgs: list[Message]) -> list[str]:
    return [m.id for m in msgs]


def test_moved_messages_leave_the_view_and_return_at_the_end() -> None:
    store = SQLiteStore()
    engine = make_engine(store=store, session_id="s")
    engine.bootstrap(system="sys")
    first = [
        text("user", "repo map", "m0"),
        text("assistant", "ok", "m1"),
        text("user", "files: a.py", "m2"),
        text("assistant", "ok, those files", "m3"),
        text("user", "add hello.py", "m4"),
    ]
    for m in first:
        engine.ingest(m)
    assert engine.ingestor.take_out(["m2", "m3", "m4"], "moved") == 3
    assert ids(engine.assemble().messages) == ["m0", "m1"]
    # the client's new order: prompt, reply, then the files pair
    again = [
        text("user", "add hello.py", "m2"),
        text("assistant", "done", "m3"),
        text("user", "files: a.py", "m4"),
        text("assistant", "ok, those files", "m5"),
    ]
    for m in again:
        engine.ingest(m)
    shown = engine.assemble().messages
    assert [(m.id, m.blocks) for m in shown] == [(m.id, m.blocks) for m in first[:2] + again]
    assert len(engine.history) == 9  # nothing is lost: the history and the store keep them
    events = [e.payload for e in store.entries("s", "event")]
    assert {"layer": "take_out", "reason": "moved", "ids": ["m2", "m3", "m4"]} in events


def test_unknown_or_twice_taken_out_ids_change_nothing() -> None:
    engine = make_engine()
    engine.bootstrap(system="sys")
    engine.ingest(text("user", "hi", "m0"))
    with pytest.raises(ValueError, match="never ingested"):
        engine.ingestor.take_out(["m0", "m9"], "moved")
    assert ids(engine.assemble().messages) == ["m0"]
    engine.ingestor.take_out(["m0"], "moved")
    with pytest.raises(ValueError):
        engine.ingestor.take_out(["m0"], "moved")


def test_taking_out_a_compacted_message_leaves_the_view_as_it_is() -> None:
    engine = make_engine(DEFAULT, window=20_000)
    engine.bootstrap(system="sys")
    for i in range(0, 60, 2):  # long turns, enough to compact
        engine.ingest(text("user", f"read f{i} " + filler(3_000, i), f"m{i}"))
        engine.ingest(text("assistant", filler(3_000, i + 1), f"m{i + 1}"))
        engine.assemble()
    assert engine.kept_from > 0, "the session should have compacted"
    before = engine.assemble().messages
    gone = [f"m{i}" for i in range(3)]  # below ``kept_from``: in the summary, not in the view
    assert engine.ingestor.take_out(gone, "moved") == 0
    assert ids(engine.assemble().messages) == ids(before)
    # where it stood (same id: the proxy's ids are client positions), unchanged: still summarized
    engine.ingest(text("user", "read f0 " + filler(3_000, 0), "m0"))
    assert ids(engine.assemble().messages) == ids(before)
    engine.ingest(text("assistant", filler(3_000, 1), "m61"))  # m1 moved to the end: shown again
    engine.ingest(text("user", "read f2, rewritten", "m2"))  # rewritten in place: shown
    assert ids(engine.assemble().messages)[-2:] == ["m61", "m2"]
    assert engine.ingestor.ingested("m0") is not None  # the covered copy is live: it can move again
