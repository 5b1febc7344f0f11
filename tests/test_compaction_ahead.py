"""Compaction planned ahead (``engine.ahead``, ``compaction.rehearse``) on real recorded sessions:
an engine that rehearses its next compaction after every call once past the soft mark makes, at
every call, exactly the projection of an engine that does not (messages, tokens, events), and a
rehearsal leaves the compactor and the store as they were. The proxy's own check of the same
(the real sessions through the proxy, which rehearses, against a reference engine that does
not) is in ``test_proxy_transcripts.py``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import msgspec
import pytest

from conftest import CLAUDE_CODE
from ctxengine.compaction.rehearse import rehearse
from ctxengine.engine.ahead import CompactionAhead
from ctxengine.engine.core import ContextEngine
from ctxengine.formats import load
from ctxengine.messages.model import Usage
from ctxengine.policy.registry import get_policy

pytestmark = pytest.mark.usefixtures("clean_llm_env")

LONG = CLAUDE_CODE / "cc_sonnet-4.5_long-290-tools_redacted_3cfce0ff.jsonl"


def _event(e: Any) -> tuple[str, str, int, int, str]:
    return (e.layer, e.reason, e.tokens_before, e.tokens_after, repr(sorted(e.details.items())))


def _compactor_state(engine: ContextEngine) -> bytes:
    """What a compaction may change before its commit, and what it commits, as bytes."""
    c = engine.compactor
    return msgspec.json.encode(
        [
            c.notes_text(),
            c.summary_state,
            [(m.id, m.text(), n) for m, n in c._skeleton],
            c._skeleton_upto,
            [(m.id, m.text()) for m, n in c._pending_skeleton[0]] if c._pending_skeleton else None,
            c._skipped_at,
            [_event(e) for e in c.notes_events],
            sorted(c._restored),
            c.compactions,
            c.breaker.failures,
            c.notes_from,
            len(engine.store.entries(engine.session_id)),
        ]
    )


@pytest.mark.parametrize(("policy", "window"), [("default", 48_000), ("claude-code", 64_000), ("pi", 48_000)])
def test_rehearsed_compactions_change_no_projection(transcripts: Path, policy: str, window: int) -> None:
    (session,) = load(LONG)
    engines = [ContextEngine(get_policy(policy), model=session.model, window=window) for _ in range(2)]
    for e in engines:
        e.bootstrap(system=session.system)
    ahead = CompactionAhead()
    calls = rehearsed_then_compacted = 0
    before_rehearsal = ahead.rehearsals
    for msg in session.messages:
        if msg.role == "assistant":
            calls += 1
            plain, planned = (e.assemble(now=msg.timestamp) for e in engines)
            assert planned.messages == plain.messages, f"call {calls}"
            assert (planned.tokens, planned.content_estimate) == (plain.tokens, plain.content_estimate)
            assert [_event(x) for x in planned.events] == [_event(x) for x in plain.events]
            if any(x.layer.endswith("compact") for x in planned.events):
                rehearsed_then_compacted += ahead.rehearsals > before_rehearsal
                before_rehearsal = ahead.rehearsals
            state = _compactor_state(engines[1])  # rehearsed where the proxy does: before the usage
            if ahead.after_call(engines[1]):
                assert _compactor_state(engines[1]) == state  # the rehearsal changed nothing
            for e, p in zip(engines, (plain, planned), strict=True):
                e.after_turn(Usage(input_tokens=p.tokens, output_tokens=50))
        for e in engines:
            e.ingest(msg)
    assert engines[0].compactor.compactions == engines[1].compactor.compactions > 0
    assert rehearsed_then_compacted > 0  # a compaction came after a rehearsal: the comparison is not trivial


def test_no_rehearsal_where_a_model_would_be_called(transcripts: Path) -> None:
    """A compactor with an LLM summarizer or notes updater is never rehearsed (it would spend)."""
    (session,) = load(LONG)
    engine = ContextEngine(get_policy("default"), model=session.model, window=48_000)
    engine.compactor.llm = object()  # type: ignore[assignment]  # any model at all
    ctx = engine.view.context(engine.window, None)
    assert rehearse(engine.compactor, ctx, engine.history) == 0.0
    assert not CompactionAhead().after_call(engine)
