"""``ctxengine replay ... --html FILE`` and ``bench --html FILE``: one self-contained HTML page.

Everything is in the file (Chart.js, the page's script and style, the figures as JSON): it opens
from disk with no server and asks for nothing over the network. The replay page has, per session,
its figures, the chart of tokens per call (the policy's, the recorded policy's beside it, the
recorded usage, the window and the compaction threshold, compactions and offloads marked, the layer
events and forgotten identifiers of a call on hover), the table of its compactions (what was
summarized, kept and restored, whether the latest request stayed whole) and the identifiers and
content runs forgotten at each call. The bench page has the content recall against the cost of
every policy (a scatter) and their figures. Pure presentation: every figure is the report's
(``SessionReport``, ``BenchResult``), none computed here but counts and differences.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ctxengine.dashboard.assets import render
from ctxengine.dashboard.timeline import OFFLOAD_LAYER
from ctxengine.replay.records import COMPACTION_LAYERS, CallRecord, SessionReport

if TYPE_CHECKING:
    from ctxengine.bench.records import BenchResult
    from ctxengine.models.registry import Registry
    from ctxengine.policy.registry import Policy

SHOW_IDENTIFIERS = 12  # forgotten identifiers listed per call; the rest counted
SKIP_EVENT_LAYERS = frozenset({"session_notes"})  # upkeep, not a change of what was sent


def threshold(policy: Policy, report: SessionReport, registry: Registry) -> int | None:
    """The compaction threshold (tokens) of ``policy`` for the report's window and fixed prefix
    (``Policy.compact_threshold``, the model's maximum output from ``registry``); None when the
    policy does not compact (mode not "summary")."""
    if policy.compaction != "summary":
        return None
    window = report.window_tokens
    max_output = registry.lookup(report.session.model or "").info.max_output
    return policy.for_window(window, report.fixed_prefix_tokens).compact_threshold(window, max_output)


def _notes(c: CallRecord) -> list[str]:
    out = [
        f"{e['layer']}: {e.get('reason', '')} ({e.get('tokens_before', 0):,} → {e.get('tokens_after', 0):,})"
        for e in c.events
        if e.get("layer") not in SKIP_EVENT_LAYERS
    ]
    if c.forgotten:
        out.append(f"forgotten identifiers: {len(c.forgotten)}")
    lost = c.content_grounded - c.content_hits
    if lost:
        out.append(f"content runs forgotten: {lost:,} of {c.content_grounded:,}")
    return out


def _marked(r: SessionReport, layers: frozenset[str] | set[str]) -> dict[str, list[int]]:
    hit = [
        c
        for c in r.calls
        if any(e.get("layer") in layers and "error" not in e.get("details", {}) for e in c.events)
    ]
    return {"x": [c.index for c in hit], "y": [c.sent_tokens for c in hit]}


def chart_spec(r: SessionReport, rc: SessionReport | None, limit: int | None) -> dict[str, Any]:
    """The chart of one session (``calls_chart.js``'s spec): one point per call."""
    x = [c.index for c in r.calls]
    lines: list[dict[str, Any]] = [
        {"label": f"sent ({r.policy})", "values": [c.sent_tokens for c in r.calls], "color": "#1f6feb"}
    ]
    if rc is not None and rc is not r:
        by_index = {c.index: c.sent_tokens for c in rc.calls}
        lines.append({"label": "recorded policy", "values": [by_index.get(i) for i in x], "color": "#d4760a"})
    if any(c.recorded_input_tokens for c in r.calls):
        lines.append(
            {
                "label": "recorded usage",
                "values": [c.recorded_input_tokens for c in r.calls],
                "color": "#8c959f",
            }
        )
    lines.append({"label": "window", "values": [r.window_tokens] * len(x), "color": "#c62828", "dash": True})
    if limit is not None:
        lines.append(
            {"label": "compaction threshold", "values": [limit] * len(x), "color": "#e3a008", "dash": True}
        )
    markers = [
        {"label": "compaction", "color": "#8250df", "style": "triangle", **_marked(r, COMPACTION_LAYERS)},
        {"label": "offload", "color": "#1a7f37", "style": "rectRot", **_marked(r, {OFFLOAD_LAYER})},
    ]
    return {"x": x, "lines": lines, "markers": markers, "notes": {str(c.index): _notes(c) for c in r.calls}}


def compaction_rows(r: SessionReport) -> list[dict[str, Any]]:
    """One row per compaction event of the session: the call, the layer, why, what it summarized,
    kept and restored, the request's size before and after, the latest-request check."""
    rows = []
    for c in r.calls:
        for e in c.events:
            if e.get("layer") not in COMPACTION_LAYERS:
                continue
            d = e.get("details") or {}
            quality = d.get("quality") or {}
            restored = d.get("restored") or []
            rows.append(
                {
                    "call": c.index,
                    "layer": e["layer"],
                    "reason": e.get("reason", ""),
                    "summarized": d.get("messages_summarized"),
                    "summary_tokens": d.get("summary_tokens"),
                    "kept": d.get("kept_messages"),
                    "restored": restored if isinstance(restored, list) else [],
                    "restored_tokens": d.get("restored_tokens"),
                    "before": e.get("tokens_before"),
                    "after": e.get("tokens_after"),
                    "request_whole": quality.get("latest_request_verbatim"),
                    "error": d.get("error"),
                }
            )
    return rows


def forgotten_rows(r: SessionReport) -> list[dict[str, Any]]:
    """The calls at which something used was not in what was sent: the identifiers used that had
    been seen earlier and were absent (``forgotten``), the grounded content runs (shingles of the
    call's output seen earlier in the session) absent from what was sent."""
    rows = []
    for c in r.calls:
        lost = c.content_grounded - c.content_hits
        if c.forgotten or lost:
            rows.append(
                {
                    "call": c.index,
                    "identifiers": c.forgotten[:SHOW_IDENTIFIERS],
                    "more": max(0, len(c.forgotten) - SHOW_IDENTIFIERS),
                    "content_lost": lost,
                    "content_grounded": c.content_grounded,
                }
            )
    return rows


def _title(r: SessionReport) -> str:
    return r.session.name or Path(r.session.source).name


def replay_page(
    reports: Sequence[SessionReport],
    recorded: Sequence[SessionReport] | None,
    *,
    policy: Policy,
    registry: Registry,
    source: str,
) -> str:
    """The replay page of ``reports`` (``recorded``: the same sessions under the recorded policy,
    in the same order, or None)."""
    sessions = []
    for i, r in enumerate(reports):
        rc = recorded[i] if recorded is not None and i < len(recorded) else None
        sessions.append(
            {
                "n": i,
                "title": _title(r),
                "r": r,
                "s": r.summary,
                "compactions_total": sum(r.summary.compactions.values()),
                "compactions": compaction_rows(r),
                "forgotten": forgotten_rows(r),
                "chart": chart_spec(r, rc, threshold(policy, r, registry)),
            }
        )
    charts = {f"chart-{s['n']}": s["chart"] for s in sessions}
    return render("report.html", sessions=sessions, policy=policy.name, source=source, charts=charts)


def write_replay_html(
    path: Path,
    reports: Sequence[SessionReport],
    recorded: Sequence[SessionReport] | None,
    *,
    policy: Policy,
    registry: Registry,
    source: str,
) -> None:
    """Write ``replay_page`` to ``path`` (UTF-8). Raises ``OSError`` when it cannot be written."""
    page = replay_page(reports, recorded, policy=policy, registry=registry, source=source)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(page, encoding="utf-8")


def bench_page(result: BenchResult, *, title: str) -> str:
    """The bench page: content recall against cost per policy (a scatter) and the policies'
    figures. Policies that did not run (``unavailable``, no session) are listed, not plotted."""
    rows = list(result.policies.values())
    points = [
        {"label": p.policy, "cost_usd": p.cost_usd, "cost_with_refetch_usd": p.cost_with_refetch_usd,
         "content_recall": p.content_recall, "read_recall": p.read_recall}
        for p in rows
        if p.sessions and p.content_recall is not None
    ]  # fmt: skip
    return render("bench.html", title=title, rows=rows, scatter={"points": points})


def write_bench_html(path: Path, result: BenchResult, *, title: str) -> None:
    """Write ``bench_page`` to ``path`` (UTF-8). Raises ``OSError`` when it cannot be written."""
    page = bench_page(result, title=title)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(page, encoding="utf-8")
