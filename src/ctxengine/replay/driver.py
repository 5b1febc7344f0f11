"""The replay's driver: walk a recorded session through the engine and run the stages at each call.

``replay_session`` sizes the session (``sizing.size_session``), opens the engine, then for every
message either ingests it or, at a recorded model call, runs the stages in order: assemble, size
the call, price with the cache model (engine track, then recorded track), measure reference recall
and fidelity, validate the request, record the call; then the response arrives (``ingest``,
``after_turn``). After the last call the engine's upkeep runs and the session is summed up
(``summary.summarize_session``). Only the engine's public lifecycle is used.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ctxengine.engine.plugins import Engine, EngineRegistry
from ctxengine.messages.model import Message, Session, Usage
from ctxengine.models.registry import ModelInfo, Registry
from ctxengine.policy.registry import Policy
from ctxengine.replay.measure_set import FidelityTotals, LocalMeasures, Measures
from ctxengine.replay.measure_worker import ForkedMeasures, can_fork
from ctxengine.replay.measures import _provider
from ctxengine.replay.pricing import CallPricer, RecordedTrack, cache_ttl
from ctxengine.replay.records import CallRecord, SessionInfo, SessionReport, _event_dict
from ctxengine.replay.sizing import (
    SessionSize,
    _Counts,
    is_call,
    output_tokens,
    recorded_input,
    size_call,
    size_session,
)
from ctxengine.replay.summary import engine_failures, summarize_session
from ctxengine.tokens.counter import TokenCounter, counter_for

if TYPE_CHECKING:
    from ctxengine.llm import LLMClient


def open_engine(
    session: Session,
    policy: Policy,
    size: SessionSize,
    counter: TokenCounter,
    *,
    registry: Registry,
    engine_id: str,
    engines: EngineRegistry | None,
    llm: LLMClient | None,
) -> Engine:
    """Engine ``engine_id`` of ``engines`` (default: the core engine) for ``session`` under
    ``policy`` at ``size.window`` tokens, bootstrapped with the system prompt, the fixed prefix
    and the recorded compactions. Raises ``KeyError`` for an unknown engine id."""
    engine = (engines or EngineRegistry()).create(
        engine_id,
        policy=policy,
        model=session.model,
        window=size.window,
        registry=registry,
        counter=counter,
        session_id=f"{session.source}#{session.name}",
        restore_from_transcript=True,
        llm=llm,
    )
    engine.bootstrap(
        system=session.system, fixed_prefix_tokens=size.fixed, recorded_compactions=session.compactions
    )
    gaps = getattr(engine, "usage_gaps", None)  # the core engine's check of reported usage
    if gaps is not None:
        gaps.warn = False  # the usage fed back is simulated from the recording: counted, not said
    return engine


class _Replay:
    """One replay in progress: the engine, the two tracks and the measures, fed in transcript
    order (``ingest`` for what is not a model call, ``call`` for a recorded call). A call's
    record is completed in ``finish``, with its measures (``measure_set``: they may run in a
    worker process)."""

    def __init__(
        self,
        session: Session,
        policy: Policy,
        model: ModelInfo,
        counter: TokenCounter,
        size: SessionSize,
        engine: Engine,
        *,
        validate: bool,
        count: _Counts | None = None,
        measures: Measures | None = None,
    ) -> None:
        self.session, self.policy, self.model, self.counter = session, policy, model, counter
        self.count = count if count is not None else _Counts(counter)  # tokens of a message, cached
        self.size = size
        self.engine = engine
        self.validate = validate
        self.provider = _provider(session, model)
        ttl = cache_ttl(session, policy)
        self.pricer = CallPricer(model, ttl, size.fixed)
        self.recorded = RecordedTrack(model, ttl, size.fixed, self.count)
        self.measures: Measures = measures or LocalMeasures(
            session.system, self.provider, model.name, counter.count_text, validate=validate
        )
        self.pending: list[dict[str, Any]] = []  # each call's record but its measures

    def ingest(self, msg: Message) -> None:
        """A message that is not a model call joins both tracks (and what the agent has seen)."""
        self.engine.ingest(msg)
        self.recorded.add(msg)
        if msg.origin in ("message", "attachment"):
            self.measures.observe(msg)

    def call(self, msg: Message) -> None:
        """A recorded model call: assemble, size, price, measure, validate and record it; then
        its response arrives."""
        proj = self.engine.assemble(now=msg.timestamp)
        recorded = recorded_input(msg)
        predicted = self.recorded.predict(recorded)
        p_tok, sent = size_call(
            proj,
            self.count,
            fixed=self.size.fixed,
            recorded=recorded,
            recorded_estimate=self.recorded.estimate,
            scale=self.recorded.ledger.scale,
        )
        outcome, cache_break = self.pricer.request(proj, p_tok, sent, msg.timestamp)
        out_tokens = output_tokens(msg, self.count)
        cost = self.pricer.cost(outcome, out_tokens)
        self.recorded.price(msg.usage, recorded, msg.timestamp)
        self.measures.measure(msg, proj)
        self.pending.append(
            {
                "index": len(self.pending),
                "timestamp": msg.timestamp,
                "sent_tokens": sent,
                "recorded_input_tokens": recorded,
                "predicted_input_tokens": predicted,
                "cache_read_tokens": outcome.cache_read,
                "cache_write_tokens": outcome.cache_write,
                "uncached_tokens": outcome.uncached,
                "output_tokens": out_tokens,
                "cost_usd": cost,
                "overflow": sent > proj.window,
                "cache_break": cache_break,
                "events": [_event_dict(e) for e in proj.events],
            }
        )
        # the response arrives
        self.engine.ingest(msg)
        self.engine.after_turn(Usage(input_tokens=sent, output_tokens=out_tokens))
        self.recorded.respond(msg, recorded)
        self.measures.observe(msg)

    def _records(self) -> tuple[list[CallRecord], int, FidelityTotals]:
        """Every call's record with its measures, the request violations in all, and the
        fidelity totals (waiting for a worker process's figures)."""
        measured = self.measures.results()
        calls = [
            CallRecord(
                **fields,
                recall_hits=m.recall.hits,
                recall_uses=m.recall.uses,
                forgotten=m.recall.forgotten,
                read_hits=m.fidelity.read_hits,
                read_grounded=m.fidelity.read_grounded,
                content_hits=m.fidelity.hits,
                content_grounded=m.fidelity.grounded,
                refetch_tokens=m.fidelity.refetch_tokens,
                probes=m.fidelity.probes,
            )
            for fields, m in zip(self.pending, measured.calls, strict=True)
        ]
        return calls, sum(m.violations for m in measured.calls), measured.totals

    def finish(self, warnings: list[str]) -> SessionReport:
        """The engine's upkeep after the last call (a notes update in its after_turn: no call
        reports it, the session's figures do), the engine disposed, and the report."""
        s = self.session
        after_last = [_event_dict(e) for e in self.engine.maintain()]
        layer_failures = engine_failures(self.engine)
        self.engine.dispose()
        calls, violations, totals = self._records()
        summary = summarize_session(
            s,
            self.model,
            self.counter,
            calls,
            after_last,
            recorded=self.recorded,
            fidelity=totals,
            violations=violations,
            layer_failures=layer_failures,
        )
        info = SessionInfo(
            source=s.source,
            name=s.name,
            format=s.format,
            model=s.model,
            calls=len(calls),
            messages=len(s.messages),
            parent=s.parent,
            sidechain=s.sidechain,
        )
        return SessionReport(
            session=info,
            policy=self.policy.name,
            window_tokens=self.size.window,
            fixed_prefix_tokens=self.size.fixed,
            calls=calls,
            summary=summary,
            warnings=warnings + [str(m) for m in s.malformed],
            events_after_last_call=after_last,
        )


def replay_session(
    session: Session,
    policy: Policy,
    *,
    window: int | None = None,
    registry: Registry | None = None,
    validate: bool = True,
    engine_id: str = "ctxengine",
    engines: EngineRegistry | None = None,
    llm: LLMClient | None = None,
    measure_worker: bool = False,
) -> SessionReport:
    """Replay a recorded session under a policy and window.

    Raises nothing for odd sessions: a session with no calls gives an empty report.

    Args:
        session: the recorded session (``load``).
        policy: the policy to replay it under.
        window: the window, tokens (None: the model's window).
        registry: the model registry (None: the shipped one).
        validate: whether to check every request body against the provider's rules
            (``summary.pairing_violations``).
        engine_id: the engine to run, from ``engines`` (default: the core engine).
        engines: the engine registry (None: the built-in one).
        llm: the model for notes and summaries, when given (None: the $0 structured summary).
        measure_worker: run the measures in a forked worker process beside the engine
            (``replay.measure_worker``) where ``can_fork`` allows it (two cores, no other
            thread), else here; the same report either way. For a process that replays one
            session at a time (``ctxengine replay`` of a file).

    Returns:
        The full ``SessionReport``.

    Raises:
        WindowTooSmallError: for a window under 16,000 tokens (its subclass
            ``PrefixTooLargeError`` when the session's fixed prefix does not fit the window).
        KeyError: for an unknown engine id.
        MeasureWorkerError: the measure worker failed (its traceback in the message).
    """
    registry = registry or Registry.default()
    model = registry.get(session.model or "unknown")
    counter = counter_for(model)
    count = _Counts(counter)
    size = size_session(session, model, registry, window, count, counter.count_text)
    provider = _provider(session, model)
    measures: Measures = (
        ForkedMeasures(session, provider, model.name, counter, validate=validate)
        if measure_worker and can_fork()
        else LocalMeasures(session.system, provider, model.name, counter.count_text, validate=validate)
    )
    try:
        engine = open_engine(
            session, policy, size, counter, registry=registry, engine_id=engine_id, engines=engines, llm=llm
        )
        run = _Replay(
            session, policy, model, counter, size, engine, validate=validate, count=count, measures=measures
        )
        compaction_starts = {c.at for c in session.compactions}
        for i, msg in enumerate(session.messages):
            if i in compaction_starts:
                run.recorded.restart()
            if is_call(msg):
                run.call(msg)
            else:
                run.ingest(msg)
        return run.finish(size.warnings)
    finally:
        measures.close()
