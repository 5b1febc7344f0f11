"""Sum a replay up: the session's figures from its call records and layer events.

Compactions (by layer, $0 ones, failures), LLM calls and cost, cache hit ratio, reference and
content recall, the probes, the costs (with re-fetches; the recorded usage priced, else the
transcript's own figure), the ledger's and the cache model's errors, what our tool limits would
have kept out (``tool_limits``) and the sub-agent runs (``subagents.linking``). Pure functions
over the records. Tokens; USD.
"""

from __future__ import annotations

import statistics
from collections import Counter
from collections.abc import Sequence
from typing import Any

from ctxengine.eval.fidelity import PROBE_KINDS, ProbeStat, probe_score
from ctxengine.messages.model import Session
from ctxengine.models.registry import ModelInfo
from ctxengine.replay.measure_set import FidelityTotals
from ctxengine.replay.measures import FidelityMeter
from ctxengine.replay.pricing import RecordedTrack
from ctxengine.replay.records import COMPACTION_LAYERS, CallRecord, ErrorStats, SessionSummary
from ctxengine.subagents.linking import subagent_summary
from ctxengine.tokens.counter import TokenCounter
from ctxengine.tools.limits import tool_limit_report


def _pct(errors: Sequence[float]) -> ErrorStats:
    if not errors:
        return ErrorStats()
    xs = sorted(errors)
    p95 = xs[min(len(xs) - 1, round(0.95 * (len(xs) - 1)))]
    return ErrorStats(round(statistics.median(xs), 4), round(p95, 4), len(xs))


def _transcript_cost(session: Session) -> float | None:
    """The cost (USD) the harness itself recorded for the session, when the transcript has one
    (SWE-agent: ``info.model_stats.instance_cost``); None otherwise."""
    stats = session.meta.get("model_stats")
    cost = stats.get("instance_cost") if isinstance(stats, dict) else None
    if isinstance(cost, bool) or not isinstance(cost, (int, float)) or not cost >= 0:
        return None
    return round(float(cost), 6)


def _quality_summary(events: list[dict[str, Any]]) -> dict[str, float | int | None]:
    """Seed 002's figures over a session's compactions: mean compression ratio (tokens after /
    before), tokens saved in all, mean identifier retention, share where the latest user request
    survived verbatim."""
    qs = [e["details"]["quality"] for e in events if isinstance(e["details"].get("quality"), dict)]

    def mean(xs: list[float]) -> float | None:
        return round(sum(xs) / len(xs), 4) if xs else None

    verbatim = [q["latest_request_verbatim"] is True for q in qs if "latest_request_verbatim" in q]
    return {
        "compactions": len(qs),
        "compression_ratio": mean([q["compression_ratio"] for q in qs]),
        "tokens_saved": sum(q["tokens_saved"] for q in qs),
        "identifier_retention": mean(
            [q["identifier_retention"] for q in qs if q.get("identifier_retention") is not None]
        ),
        "latest_request_verbatim": mean([1.0 if v else 0.0 for v in verbatim]),  # "partial" counts 0
    }


def engine_failures(engine: object) -> int:
    """The layer exceptions the engine caught and went on without (0 when a plugin engine does
    not count them)."""
    layer_failures = getattr(engine, "failures", 0)  # a plugin engine may not count them
    if isinstance(layer_failures, bool) or not isinstance(layer_failures, int):
        layer_failures = 0
    return layer_failures


def event_figures(all_events: list[dict[str, Any]]) -> dict[str, Any]:
    """The figures of the session's layer events (as dicts): compactions by layer, the $0 ones,
    failed ones, offloads, notes updates, compaction quality, and the LLM calls and tokens."""
    ok = [e for e in all_events if e["layer"] in COMPACTION_LAYERS and "error" not in e["details"]]
    comp: Counter[str] = Counter(e["layer"] for e in ok)
    return {
        "compactions": dict(sorted(comp.items())),
        "compactions_free": sum(1 for e in ok if e["llm_cost_usd"] == 0),
        "compaction_failures": sum(
            1 for e in all_events if e["layer"] in COMPACTION_LAYERS and "error" in e["details"]
        ),
        "offloads": sum(1 for e in all_events if e["layer"] == "tool_result_budget"),
        "notes_updates": sum(
            1 for e in all_events if e["layer"] == "session_notes" and "error" not in e["details"]
        ),
        "compaction_quality": _quality_summary(ok),
        "llm_calls": sum(e["llm_calls"] for e in all_events),
        "llm_tokens": sum(e["llm_input_tokens"] + e["llm_output_tokens"] for e in all_events),
    }


def call_figures(calls: list[CallRecord]) -> dict[str, Any]:
    """The figures summed over the call records: peak, overflows, cache breaks and hit ratio,
    reference, read and content recall (pooled), and the probes per kind."""
    read = sum(c.cache_read_tokens for c in calls)
    sent_total = sum(c.sent_tokens for c in calls)
    total_hits = sum(c.recall_hits for c in calls)
    total_uses = sum(c.recall_uses for c in calls)
    r_hits = sum(c.read_hits for c in calls)
    r_grounded = sum(c.read_grounded for c in calls)
    c_hits = sum(c.content_hits for c in calls)
    c_grounded = sum(c.content_grounded for c in calls)
    probes = {k: ProbeStat() for k in PROBE_KINDS}
    for c in calls:
        for kind, score in (c.probes or {}).items():
            probes[kind].add(score)
    return {
        "peak_sent_tokens": max((c.sent_tokens for c in calls), default=0),
        "overflows": sum(1 for c in calls if c.overflow),
        "cache_breaks": sum(1 for c in calls if c.cache_break),
        "cache_hit_ratio": round(read / sent_total, 4) if sent_total else None,
        "reference_recall": round(total_hits / total_uses, 4) if total_uses else None,
        "recall_hits": total_hits,
        "recall_uses": total_uses,
        "read_recall": round(r_hits / r_grounded, 4) if r_grounded else None,
        "read_hits": r_hits,
        "read_grounded": r_grounded,
        "content_recall": round(c_hits / c_grounded, 4) if c_grounded else None,
        "content_hits": c_hits,
        "content_grounded": c_grounded,
        "probes": probes,
        "probe_score": probe_score(probes),
        "probe_compactions": sum(1 for c in calls if c.probes is not None),
    }


def cost_figures(
    session: Session, model: ModelInfo, calls: list[CallRecord], llm_cost: float, recorded: RecordedTrack
) -> dict[str, Any]:
    """The costs in USD: the calls' plus the LLM's (``llm_cost``), the re-fetches at the model's
    uncached input price, and what the recorded session cost (its usage priced, else the
    transcript's own figure, with where it came from)."""
    transcript_cost = _transcript_cost(session)
    refetch = sum(c.refetch_tokens for c in calls)
    refetch_cost = model.cost_usd(input_tokens=refetch)
    cost_total = sum(c.cost_usd for c in calls) + llm_cost
    known = recorded.cost_known
    return {
        "llm_cost_usd": round(llm_cost, 6),
        "cost_usd": round(cost_total, 6),
        "recorded_cost_usd": round(recorded.cost, 6) if known else transcript_cost,
        "recorded_cost_from": "usage" if known else ("transcript" if transcript_cost is not None else None),
        "refetch_tokens": refetch,
        "refetch_cost_usd": round(refetch_cost, 6),
        "cost_with_refetch_usd": round(cost_total + refetch_cost, 6),
    }


def summarize_session(
    session: Session,
    model: ModelInfo,
    counter: TokenCounter,
    calls: list[CallRecord],
    after_last: list[dict[str, Any]],
    *,
    recorded: RecordedTrack,
    fidelity: FidelityMeter | FidelityTotals,
    violations: int,
    layer_failures: int,
) -> SessionSummary:
    """The session's summary from its ``calls``, the events after the last call
    (``after_last``), the recorded track's errors and cost, the fidelity meter's request probes
    (the meter, or its ``FidelityTotals`` when the measures ran in a worker process),
    the request ``violations`` and the engine's ``layer_failures``."""
    all_events = [e for c in calls for e in c.events] + after_last
    llm_cost = sum(e["llm_cost_usd"] for e in all_events)
    fm = fidelity if isinstance(fidelity, FidelityTotals) else FidelityTotals.of(fidelity)
    return SessionSummary(
        **event_figures(all_events),
        **call_figures(calls),
        **cost_figures(session, model, calls, llm_cost, recorded),
        tool_limits=tool_limit_report(session.messages, counter.count_text),
        layer_failures=layer_failures,
        latest_request_kept=round(fm.requests_whole / fm.requests_probed, 4) if fm.requests_probed else None,
        requests_whole=fm.requests_whole,
        requests_probed=fm.requests_probed,
        grounded_by_source=dict(sorted(fm.grounded_by_kind.items())),
        read_hits_by_source=dict(sorted(fm.read_hits_by_kind.items())),
        pairing_violations=violations,
        malformed_records=len(session.malformed),
        skipped_records=dict(session.skipped),
        price_known=model.price_known,
        prediction_error=_pct(recorded.prediction_errors),
        delta_error=_pct(recorded.delta_errors),
        cache_model_error=_pct(recorded.cache_errors),
        subagents=subagent_summary(session, counter.count_text),
    )
