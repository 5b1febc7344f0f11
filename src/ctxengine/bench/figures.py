"""The bench's figures: one replay's row (``session_row``), a policy's rows summed
(``summarize_rows``: sums, maxima, pooled ratios, per-session means) and ``default`` compared with
the presets (``compare``). Pure functions over the records. Tokens; USD; seconds.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from ctxengine.bench.records import (
    BENCH_COMPACTION_LAYERS,
    PRESETS,
    Comparison,
    PolicyRow,
    Runner,
    SessionRow,
    held_out,
)
from ctxengine.eval.fidelity import pooled, probe_score
from ctxengine.replay import SessionReport


def session_row(report: SessionReport, wall: float) -> SessionRow:
    """The bench figures of one replay."""
    s = report.summary
    events = [e for c in report.calls for e in c.events]
    done = [e for e in events if e["layer"] in BENCH_COMPACTION_LAYERS and "error" not in e["details"]]
    by_layer = Counter(e["layer"] for e in done)
    read = sum(c.cache_read_tokens for c in report.calls)
    sent = sum(c.sent_tokens for c in report.calls)
    return SessionRow(
        policy=report.policy,
        source=report.session.source,
        name=report.session.name,
        format=report.session.format,
        model=report.session.model,
        calls=report.session.calls,
        peak_sent_tokens=s.peak_sent_tokens,
        overflows=s.overflows,
        compactions=len(done),
        compactions_free=sum(1 for e in done if e["llm_cost_usd"] == 0),
        compactions_by_layer=dict(sorted(by_layer.items())),
        llm_calls=s.llm_calls,
        llm_tokens=s.llm_tokens,
        llm_cost_usd=s.llm_cost_usd,
        cost_usd=s.cost_usd,
        cache_read_tokens=read,
        sent_tokens=sent,
        cache_hit_ratio=s.cache_hit_ratio,
        reference_recall=s.reference_recall,
        recall_hits=s.recall_hits,
        recall_uses=s.recall_uses,
        read_recall=s.read_recall,
        read_hits=s.read_hits,
        read_grounded=s.read_grounded,
        content_recall=s.content_recall,
        content_hits=s.content_hits,
        content_grounded=s.content_grounded,
        grounded_by_source=s.grounded_by_source,
        read_hits_by_source=s.read_hits_by_source,
        probes=s.probes,
        probe_score=s.probe_score,
        requests_whole=s.requests_whole,
        requests_probed=s.requests_probed,
        refetch_tokens=s.refetch_tokens,
        refetch_cost_usd=s.refetch_cost_usd,
        cost_with_refetch_usd=s.cost_with_refetch_usd,
        pairing_violations=s.pairing_violations,
        wall_time_s=round(wall, 4),
        held_out=held_out(report.session.source, report.session.name),
        layer_failures=s.layer_failures,
        subagents_spawned=s.subagents.spawned if s.subagents else 0,
        subagent_tokens=s.subagents.subagent_tokens if s.subagents else 0,
        subagent_tokens_kept_out=s.subagents.tokens_kept_out if s.subagents else 0,
    )


def summarize_rows(runner: Runner, rows: list[SessionRow], errors: list[str]) -> PolicyRow:
    """Sum one policy's session rows."""
    out = PolicyRow(
        policy=runner.name,
        description=runner.policy.description,
        engine=runner.engine,
        unavailable=runner.unavailable,
        errors=errors,
    )
    if not rows:
        return out
    n = len(rows)
    by_layer: Counter[str] = Counter()
    for r in rows:
        by_layer.update(r.compactions_by_layer)
    out.sessions = n
    out.calls = sum(r.calls for r in rows)
    out.peak_sent_tokens = max(r.peak_sent_tokens for r in rows)
    out.mean_peak_sent_tokens = round(sum(r.peak_sent_tokens for r in rows) / n, 1)
    out.overflows = sum(r.overflows for r in rows)
    out.compactions = sum(r.compactions for r in rows)
    out.compactions_free = sum(r.compactions_free for r in rows)
    out.compactions_by_layer = dict(sorted(by_layer.items()))
    out.llm_calls = sum(r.llm_calls for r in rows)
    out.llm_tokens = sum(r.llm_tokens for r in rows)
    out.llm_cost_usd = round(sum(r.llm_cost_usd for r in rows), 6)
    out.cost_usd = round(sum(r.cost_usd for r in rows), 6)
    out.cost_usd_per_session = round(out.cost_usd / n, 6)
    out.sent_tokens = sum(r.sent_tokens for r in rows)
    out.cache_read_tokens = sum(r.cache_read_tokens for r in rows)
    out.cache_hit_ratio = round(out.cache_read_tokens / out.sent_tokens, 4) if out.sent_tokens else None
    out.recall_hits = sum(r.recall_hits for r in rows)
    out.recall_uses = sum(r.recall_uses for r in rows)
    out.reference_recall = round(out.recall_hits / out.recall_uses, 4) if out.recall_uses else None
    out.read_hits = sum(r.read_hits for r in rows)
    out.read_grounded = sum(r.read_grounded for r in rows)
    out.read_recall = round(out.read_hits / out.read_grounded, 4) if out.read_grounded else None
    sources: Counter[str] = Counter()
    hits: Counter[str] = Counter()
    for r in rows:
        sources.update(r.grounded_by_source)
        hits.update(r.read_hits_by_source)
    out.grounded_by_source = dict(sorted(sources.items()))
    out.read_hits_by_source = dict(sorted(hits.items()))
    if sources["file_state"]:
        out.file_state_recall = round(hits["file_state"] / sources["file_state"], 4)
    out.content_hits = sum(r.content_hits for r in rows)
    out.content_grounded = sum(r.content_grounded for r in rows)
    out.content_recall = round(out.content_hits / out.content_grounded, 4) if out.content_grounded else None
    out.probes = pooled(r.probes for r in rows)
    out.probe_score = probe_score(out.probes)
    out.requests_whole = sum(r.requests_whole for r in rows)
    out.requests_probed = sum(r.requests_probed for r in rows)
    out.latest_request_kept = (
        round(out.requests_whole / out.requests_probed, 4) if out.requests_probed else None
    )
    out.refetch_tokens = sum(r.refetch_tokens for r in rows)
    out.refetch_cost_usd = round(sum(r.refetch_cost_usd for r in rows), 6)
    out.cost_with_refetch_usd = round(sum(r.cost_with_refetch_usd for r in rows), 6)
    out.pairing_violations = sum(r.pairing_violations for r in rows)
    out.layer_failures = sum(r.layer_failures for r in rows)
    out.subagents_spawned = sum(r.subagents_spawned for r in rows)
    out.subagent_tokens = sum(r.subagent_tokens for r in rows)
    out.subagent_tokens_kept_out = sum(r.subagent_tokens_kept_out for r in rows)
    out.wall_time_s = round(sum(r.wall_time_s for r in rows), 3)
    out.wall_time_s_per_session = round(out.wall_time_s / n, 4)
    return out


def _best(values: list[float | None], pick: Any) -> float | None:
    known = [v for v in values if v is not None]
    return pick(known) if known else None


def compare(rows: dict[str, PolicyRow]) -> Comparison | None:
    """``default`` against the presets that ran (None when either side is missing)."""
    d = rows.get("default")
    among = [p for p in PRESETS if p in rows and rows[p].sessions]
    if d is None or not d.sessions or not among:
        return None
    best_rr = _best([rows[p].read_recall for p in among], max)
    best_cr = _best([rows[p].content_recall for p in among], max)
    best_ps = _best([rows[p].probe_score for p in among], max)
    cheapest = _best([rows[p].cost_with_refetch_usd for p in among], min)

    def at_least(mine: float | None, best: float | None) -> bool:
        return best is None or (mine is not None and mine >= best)

    return Comparison(
        among=among,
        best_preset_read_recall=best_rr,
        best_preset_content_recall=best_cr,
        best_preset_probe_score=best_ps,
        cheapest_preset_cost_with_refetch_usd=cheapest,
        default_read_recall=d.read_recall,
        default_content_recall=d.content_recall,
        default_probe_score=d.probe_score,
        default_cost_with_refetch_usd=d.cost_with_refetch_usd,
        default_read_recall_highest=at_least(d.read_recall, best_rr),
        default_content_recall_highest=at_least(d.content_recall, best_cr),
        default_probe_score_highest=at_least(d.probe_score, best_ps),
        default_cost_with_refetch_lowest=cheapest is None or d.cost_with_refetch_usd <= cheapest,
    )
