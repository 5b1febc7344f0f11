"""The replay's stages, each alone (``ctxengine.replay.sizing``, ``.pricing``, ``.measures``,
``.summary``), on real shared transcripts: a Claude Code session of Opus 4.5 (Anthropic, explicit
prompt cache, known prices, 38 calls each with recorded usage, no recorded compaction) and, for
content fidelity, a Claude Code sub-agent session of MiMo (19 calls reusing earlier content).

The engine runs under the ``none`` policy unless said otherwise, so every projection is the whole
history so far: the figures each stage gives can be checked against the transcript's own usage.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import NamedTuple

import msgspec
import pytest

from conftest import CLAUDE_CODE
from ctxengine.engine.core import Projection
from ctxengine.eval.fidelity import CallFidelity
from ctxengine.formats import load
from ctxengine.messages.model import Message, Session, ToolResult, Usage
from ctxengine.models.registry import ModelInfo, Registry, resolve_window
from ctxengine.policy.registry import get_policy
from ctxengine.replay import (
    CallPricer,
    FidelityMeter,
    PrefixTooLargeError,
    RecallTracker,
    RecordedTrack,
    SessionSize,
    cache_ttl,
    call_figures,
    is_call,
    open_engine,
    recorded_input,
    replay_session,
    request_violations,
    size_call,
    size_session,
)
from ctxengine.replay.sizing import _Counts
from ctxengine.replay.summary import _pct
from ctxengine.tokens.counter import TokenCounter, counter_for

OPUS_THINKING = CLAUDE_CODE / "cc_opus-4.5_thinking_redacted_43391f62.jsonl"
MIMO_SIDECHAIN = CLAUDE_CODE / "cc_mimo-v2.5-pro_subagent-sidechain_of-4530697c_agent-aee292b61a7ab9367.jsonl"


class Setup(NamedTuple):
    session: Session
    registry: Registry
    model: ModelInfo
    counter: TokenCounter
    count: _Counts
    size: SessionSize


def _setup(path: Path, window: int | None) -> Setup:
    (session,) = load(path)
    registry = Registry.default()
    model = registry.get(session.model or "unknown")
    counter = counter_for(model)
    count = _Counts(counter)
    size = size_session(session, model, registry, window, count, counter.count_text)
    return Setup(session, registry, model, counter, count, size)


@pytest.fixture(scope="module")
def setup(transcripts: Path) -> Setup:
    """The Opus session at its model's window."""
    return _setup(OPUS_THINKING, None)


@pytest.fixture(scope="module")
def mimo(transcripts: Path) -> Setup:
    """The MiMo sub-agent session at a 64,000-token window."""
    return _setup(MIMO_SIDECHAIN, 64_000)


def calls(st: Setup, policy: str = "none") -> Iterator[tuple[Message, Projection, list[Message]]]:
    """Each recorded call with the engine's projection under ``policy`` and the history before
    it; the response is ingested when the consumer asks for the next call."""
    engine = open_engine(
        st.session, get_policy(policy), st.size, st.counter,
        registry=st.registry, engine_id="ctxengine", engines=None, llm=None,
    )  # fmt: skip
    history: list[Message] = []
    for msg in st.session.messages:
        if not is_call(msg):
            engine.ingest(msg)
            history.append(msg)
            continue
        proj = engine.assemble(now=msg.timestamp)
        yield msg, proj, list(history)
        engine.ingest(msg)
        engine.after_turn(Usage(input_tokens=proj.tokens, output_tokens=0))
        history.append(msg)
    engine.dispose()


# ------------------------------------------------------------------ size the session and the call


def test_size_session_infers_the_fixed_prefix_from_the_first_recorded_usage(setup: Setup) -> None:
    s, count = setup.session, setup.count
    first = next(i for i, m in enumerate(s.messages) if is_call(m))
    usage = s.messages[first].usage
    assert usage is not None
    before = sum(count(m) for m in s.messages[:first])
    assert setup.size.fixed == usage.total_input - before > 20_000  # system prompt + tools
    assert setup.size.window == resolve_window(setup.model, user_override=None) == 200_000
    assert setup.size.warnings == []  # a known price, the model's own window


def test_size_session_refuses_a_window_under_the_fixed_prefix(setup: Setup) -> None:
    st = setup
    with pytest.raises(PrefixTooLargeError) as err:
        size_session(st.session, st.model, st.registry, 20_000, st.count, st.counter.count_text)
    assert err.value.prefix == st.size.fixed
    assert err.value.tokens == 20_000
    assert "e.g. --window 42000" in str(err.value)  # the fixed prefix plus 16,000, rounded up


def test_size_call_replays_the_recorded_context_at_its_recorded_size(setup: Setup) -> None:
    st = setup
    checked = 0
    for msg, proj, history in calls(st):
        recorded = recorded_input(msg)
        assert recorded is not None
        assert [id(m) for m in proj.messages] == [id(m) for m in history]  # ``none`` keeps it all
        estimate = sum(st.count(m) for m in history)
        tokens, sent = size_call(
            proj, st.count, fixed=st.size.fixed, recorded=recorded, recorded_estimate=estimate, scale=1.0
        )
        assert tokens == [st.count(m) for m in proj.messages]
        assert sent == recorded
        # a projection of half the messages shrinks in proportion, never below the fixed prefix
        half = msgspec.structs.replace(proj, messages=proj.messages[len(proj.messages) // 2 :])
        _, smaller = size_call(
            half, st.count, fixed=st.size.fixed, recorded=recorded, recorded_estimate=estimate, scale=1.0
        )
        assert st.size.fixed <= smaller <= recorded
        # without recorded usage the call is the engine's own prediction
        _, own = size_call(proj, st.count, fixed=st.size.fixed, recorded=None, recorded_estimate=0, scale=1.0)
        assert own == proj.tokens
        checked += 1
    assert checked == 38


# ------------------------------------------------------------------ price with the cache model


def test_call_pricer_reads_the_growing_history_from_the_cache(setup: Setup) -> None:
    st = setup
    ttl = cache_ttl(st.session, get_policy("none"))
    assert ttl == 300.0  # the recording wrote to the 5-minute cache only
    pricer = CallPricer(st.model, ttl, st.size.fixed)
    outcomes = []
    for msg, proj, _ in calls(st):
        tokens = [st.count(m) for m in proj.messages]
        sent = recorded_input(msg) or proj.tokens
        outcome, cache_break = pricer.request(proj, tokens, sent, msg.timestamp)
        assert outcome.cache_read + outcome.cache_write + outcome.uncached == sent
        assert outcome.uncached == 0  # explicit style: every input token is read or written
        assert not cache_break  # the history only grows: nothing breaks the cache
        cost = pricer.cost(outcome, 100)
        assert cost == st.model.cost_usd(
            cache_read_tokens=outcome.cache_read, cache_write_5m_tokens=outcome.cache_write, output_tokens=100
        )
        outcomes.append(outcome)
    assert outcomes[0].cache_read == 0 and outcomes[0].cache_write == outcomes[0].total  # cold start
    assert all(o.cache_read > 0 for o in outcomes[1:])  # warm: each call reads the one before
    assert sum(o.cache_read for o in outcomes) > 0.9 * sum(o.total for o in outcomes)


def test_recorded_track_measures_the_ledger_and_prices_the_recorded_usage(setup: Setup) -> None:
    st = setup
    track = RecordedTrack(st.model, 300.0, st.size.fixed, st.count)
    expected_cost = 0.0
    predictions = 0
    for msg in st.session.messages:
        if not is_call(msg):
            track.add(msg)
            continue
        recorded = recorded_input(msg)
        predicted = track.predict(recorded)
        assert (predicted is None) == (predictions == 0)  # the first call has nothing to learn from
        predictions += 1
        track.price(msg.usage, recorded, msg.timestamp)
        u = msg.usage
        assert u is not None
        expected_cost += st.model.cost_usd(
            input_tokens=u.input_tokens,
            cache_read_tokens=u.cache_read_tokens,
            cache_write_5m_tokens=u.cache_write_tokens,
            cache_write_1h_tokens=u.cache_write_1h_tokens,
            output_tokens=u.output_tokens,
        )
        track.respond(msg, recorded)
    assert track.cost_known and track.cost == expected_cost > 1.0  # USD
    assert len(track.cache_errors) == 38 and len(track.prediction_errors) == 37
    assert 0 < len(track.delta_errors) <= 37
    assert track.estimate == sum(st.count(m) for m in st.session.messages)
    # the same errors the replay reports for the session under any policy
    summary = replay_session(st.session, get_policy("none"), registry=st.registry).summary
    assert summary.prediction_error == _pct(track.prediction_errors)
    assert summary.delta_error == _pct(track.delta_errors)
    assert summary.cache_model_error == _pct(track.cache_errors)
    assert summary.recorded_cost_usd == round(expected_cost, 6)


# ------------------------------------------------------------------ measure and validate


def test_recall_tracker_finds_what_the_projection_forgot(setup: Setup) -> None:
    st = setup
    recall = RecallTracker()
    uses = hits = observed = 0
    for msg, proj, history in calls(st):
        for m in history[observed:]:  # what the agent has seen: messages, attachments, its outputs
            if m.origin in ("message", "attachment") or is_call(m):
                recall.observe(m)
        observed = len(history)
        whole = recall.measure(msg, proj)
        assert whole.forgotten == [] and whole.hits == whole.uses  # everything seen is in view
        empty = recall.measure(msg, msgspec.structs.replace(proj, messages=[], system=""))
        assert empty.hits == 0 and empty.uses == whole.uses
        assert empty.forgotten == sorted(empty.forgotten) and len(empty.forgotten) == whole.uses
        uses += whole.uses
        hits += whole.hits
    assert uses == hits > 10


def _fidelity(st: Setup, policy: str) -> tuple[FidelityMeter, list[CallFidelity]]:
    """The fidelity meter fed as the replay feeds it, and its figures at each call."""
    meter = FidelityMeter(st.session.system, st.counter.count_text)
    figures = []
    observed = 0
    for msg, proj, history in calls(st, policy):
        for m in history[observed:]:  # what the agent has seen: messages, attachments, its outputs
            if m.origin in ("message", "attachment") or is_call(m):
                meter.observe(m)
        observed = len(history)
        figures.append(meter.measure(msg, proj))
    return meter, figures


def test_fidelity_meter_finds_all_reused_content_in_the_whole_history(mimo: Setup) -> None:
    meter, figures = _fidelity(mimo, "none")
    assert len(figures) == 19
    assert all(f.probes is None and f.request_whole is None for f in figures)  # nothing compacted
    assert all(f.hits == f.grounded and f.refetch_tokens == 0 for f in figures)
    assert sum(f.grounded for f in figures) > 100  # 8-word runs the agent reused
    assert meter.requests_probed == meter.requests_whole == 0


def test_fidelity_meter_probes_after_a_compaction(mimo: Setup) -> None:
    meter, figures = _fidelity(mimo, "default")
    probed = [f for f in figures if f.probes is not None]
    assert probed  # the default policy compacts this session at 64,000 tokens
    assert meter.requests_probed == sum(1 for f in figures if f.request_whole is not None) >= 1
    assert 0 <= meter.requests_whole <= meter.requests_probed
    assert all(0.0 <= score <= 1.0 for f in probed for score in (f.probes or {}).values())
    assert sum(f.hits for f in figures) < sum(f.grounded for f in figures)  # the compaction lost some


def test_request_violations_checks_the_real_request_body(setup: Setup) -> None:
    st = setup
    checked = 0
    for _, proj, history in calls(st):
        assert request_violations("anthropic", proj, st.model.name) == 0
        assert request_violations("openai", proj, st.model.name) == 0
        results = [i for i, m in enumerate(history) if any(isinstance(b, ToolResult) for b in m.blocks)]
        if results:  # a tool result whose call was dropped breaks the pairing rules
            orphan = msgspec.structs.replace(proj, messages=proj.messages[results[0] :])
            assert request_violations("anthropic", orphan, st.model.name) > 0
            checked += 1
    assert checked > 30


# ------------------------------------------------------------------ sum up


def test_call_figures_sum_the_call_records(setup: Setup) -> None:
    st = setup
    report = replay_session(st.session, get_policy("default"), window=40_000, registry=st.registry)
    figures = call_figures(report.calls)
    s = report.summary
    assert figures["peak_sent_tokens"] == s.peak_sent_tokens == max(c.sent_tokens for c in report.calls)
    read = sum(c.cache_read_tokens for c in report.calls)
    sent = sum(c.sent_tokens for c in report.calls)
    assert figures["cache_hit_ratio"] == s.cache_hit_ratio == round(read / sent, 4)
    assert figures["recall_uses"] == s.recall_uses == sum(c.recall_uses for c in report.calls) > 0
    probed = sum(c.probes is not None for c in report.calls)
    assert figures["probe_compactions"] == s.probe_compactions == probed >= 1  # from the output
    assert figures["read_grounded"] == s.read_grounded == sum(c.read_grounded for c in report.calls)
    assert figures["read_hits"] == s.read_hits == sum(c.read_hits for c in report.calls)
    assert s.read_recall == (round(s.read_hits / s.read_grounded, 4) if s.read_grounded else None)
    # 0 here (the peak stays under the window): the count itself is the sum of the calls' flags
    assert figures["overflows"] == s.overflows == sum(c.overflow for c in report.calls) == 0
