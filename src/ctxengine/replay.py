"""Replay: feed a recorded session through the engine exactly as a live agent would, and measure.

At every recorded model call the replay asks the engine for its projection (``assemble``), prices
it with the prompt-cache model, checks the real request body it would send against the provider's
rules, and measures reference recall; then it ingests the recorded response and reports usage
(``after_turn``). Only the engine's public lifecycle is used. Replay is counterfactual (after a
compaction the real model would have said other things) and deterministic.

Two tracks run side by side:
- the *engine* track: what the policy sends. Its size at call k is the fixed prefix plus the
  projection's estimate in the recorded call's own units:
  ``fixed + estimate(projection) x (recorded_total - fixed) / estimate(recorded context)``, so the
  recorded context replays at exactly its recorded size and a smaller projection shrinks in
  proportion (never below the fixed prefix). When the recorded total disagrees with the
  transcript's estimate by more than ``ANCHOR_TOLERANCE`` of it (the harness cleared or added
  content the transcript does not log, e.g. Claude Code's time-based clearing), the learned scale
  is used instead: the policy does not inherit the recorded harness's unlogged trimming;
- the *recorded* track: what the recorded session actually sent (the full history, restarting at
  each recorded compaction). The ledger's figures (``prediction_error``, ``delta_error``) and the
  cache model's error are measured here, online: at call k the ledger has seen calls before k.
"""

from __future__ import annotations

import statistics
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any

import msgspec

from ctxengine import identifiers
from ctxengine.cache import CacheModel
from ctxengine.fidelity import PROBE_KINDS, FidelityTracker, ProbeStat, probe_score
from ctxengine.formats.anthropic_writer import breakpoint_indices, to_anthropic
from ctxengine.formats.openai_writer import to_openai_chat
from ctxengine.formats.validate import validate_anthropic, validate_openai_chat
from ctxengine.messages import Message, Session, Text, Thinking, ToolCall, ToolResult, Usage
from ctxengine.models import (
    MIN_WINDOW_TOKENS,
    ModelInfo,
    Registry,
    WindowTooSmallError,
    resolve_window,
    window_above_model,
)
from ctxengine.plugins import EngineRegistry
from ctxengine.policy import Policy
from ctxengine.subagents.linking import SubagentSummary, subagent_summary
from ctxengine.tokens.counter import TokenCounter, counter_for
from ctxengine.tokens.ledger import Ledger
from ctxengine.tools.limits import ToolLimitReport, tool_limit_report

if TYPE_CHECKING:
    from ctxengine.llm import LLMClient

SCHEMA_VERSION = 1
COMPACTION_LAYERS = frozenset(
    {
        "idle_clear",
        "cache_clear",
        "cache_ttl_prune",
        "session_memory_compact",
        "summary_compact",
        "overflow_guard",
        "recorded_compaction",
        "history_limit",
        "evict",
    }
)  # layers that change what is already in the context (the prompt cache's expected misses)
CACHE_BREAK_SHARE = 0.5  # a warm request reading less than this share of the previous one broke
DELTA_MIN_TOKENS = 200  # delta_error only on calls whose recorded growth exceeds this
ONE_HOUR_TTL_S = 3600.0
ANCHOR_TOLERANCE = 0.15  # the recorded call anchors the engine track when the transcript explains it
# within this share of its total


class PrefixTooLargeError(WindowTooSmallError):
    """The session's fixed prefix (system prompt and tool definitions, which no layer can shrink)
    is at least the window: every call would overflow whatever the policy does. A
    ``WindowTooSmallError`` for this session, whose message says which window would do."""

    def __init__(self, source: str, window: int, prefix: int) -> None:
        ValueError.__init__(
            self,
            f"{source}: the fixed prefix (system prompt and tool definitions) is {prefix:,} tokens, "
            f"more than the {window:,}-token window: no policy can fit a single call; give a window "
            f"above it, e.g. --window {-(-(prefix + MIN_WINDOW_TOKENS) // 1000) * 1000}",
        )
        self.tokens = window
        self.prefix = prefix


class CallRecord(msgspec.Struct, kw_only=True):
    """One model call of the replay. Tokens; USD."""

    index: int
    timestamp: float | None
    sent_tokens: int
    recorded_input_tokens: int | None
    predicted_input_tokens: int | None
    cache_read_tokens: int
    cache_write_tokens: int
    uncached_tokens: int
    output_tokens: int
    cost_usd: float
    overflow: bool
    cache_break: bool  # the prompt cache missed with no compaction to explain it
    recall_hits: int
    recall_uses: int
    forgotten: list[str]  # identifiers used at this call, seen earlier, absent from what was sent
    content_hits: int  # grounded shingles of this call's output present in what was sent
    content_grounded: int  # shingles of this call's output that occurred earlier in the session
    refetch_tokens: int  # sources charged at this call for the grounded shingles missing
    probes: dict[str, float] | None  # after a compaction: kind -> score (``fidelity``)
    events: list[dict[str, Any]]


class ErrorStats(msgspec.Struct):
    """Absolute percentage errors (median, p95); None when nothing was measured."""

    median_abs_pct: float | None = None
    p95_abs_pct: float | None = None
    n: int = 0


class SessionSummary(msgspec.Struct, kw_only=True):
    peak_sent_tokens: int
    overflows: int
    compactions: dict[str, int]
    compactions_free: int
    compaction_failures: int
    offloads: int
    notes_updates: int
    cache_breaks: int
    compaction_quality: dict[str, float | int | None]
    tool_limits: ToolLimitReport  # what our read/grep limits would have kept out of the recording
    llm_calls: int
    llm_tokens: int
    llm_cost_usd: float
    cost_usd: float
    recorded_cost_usd: float | None  # the recorded usage priced, else the transcript's own figure
    cache_hit_ratio: float | None
    reference_recall: float | None
    recall_hits: int
    recall_uses: int
    content_recall: float | None  # pooled over calls: content_hits / content_grounded
    content_hits: int
    content_grounded: int
    refetch_tokens: int
    refetch_cost_usd: float  # refetch_tokens at the model's uncached input price
    cost_with_refetch_usd: float  # cost_usd + refetch_cost_usd
    probes: dict[str, ProbeStat]  # per probe kind over the compactions (``fidelity.PROBE_KINDS``)
    probe_score: float | None  # mean of the probe kinds' means; None when nothing compacted
    probe_compactions: int  # calls whose projection carried a compaction (probed)
    latest_request_kept: float | None  # share of those with the latest user request whole
    requests_whole: int
    requests_probed: int
    pairing_violations: int
    malformed_records: int
    skipped_records: dict[str, int]
    price_known: bool
    prediction_error: ErrorStats
    delta_error: ErrorStats
    cache_model_error: ErrorStats
    # where ``recorded_cost_usd`` comes from: "usage" (the recorded usage at our prices),
    # "transcript" (the harness's own figure, SWE-agent's ``info.model_stats.instance_cost``)
    recorded_cost_from: str | None = None
    layer_failures: int = 0  # layer exceptions the engine caught and went on without (never silent)
    # sub-agent runs tied to this session's Task/Agent calls, and what they kept out of its context
    # (``subagents.linking``; None for a session that spawned none)
    subagents: SubagentSummary | None = None


class SessionInfo(msgspec.Struct, kw_only=True):
    source: str
    name: str
    format: str
    model: str | None
    calls: int
    messages: int
    parent: str | None
    sidechain: bool


class SessionReport(msgspec.Struct, kw_only=True):
    """The replay of one session under one policy (the JSON ``--json`` writes)."""

    schema_version: int = SCHEMA_VERSION
    session: SessionInfo
    policy: str
    window_tokens: int
    fixed_prefix_tokens: int
    calls: list[CallRecord]
    summary: SessionSummary
    warnings: list[str] = msgspec.field(default_factory=list)
    events_after_last_call: list[dict[str, Any]] = msgspec.field(default_factory=list)


# ------------------------------------------------------------------ helpers


class _Ids:
    """Identifier sets per message, cached by object identity (messages outlive the replay)."""

    def __init__(self) -> None:
        self._seen: dict[int, tuple[Message, frozenset[str]]] = {}
        self._used: dict[int, tuple[Message, frozenset[str]]] = {}

    def of(self, msg: Message) -> frozenset[str]:
        hit = self._seen.get(id(msg))
        if hit is not None and hit[0] is msg:
            return hit[1]
        ids = frozenset(identifiers.extract_all(_texts(msg, include_thinking=True)))
        self._seen[id(msg)] = (msg, ids)
        return ids

    def used(self, msg: Message) -> frozenset[str]:
        hit = self._used.get(id(msg))
        if hit is not None and hit[0] is msg:
            return hit[1]
        ids = frozenset(identifiers.extract_all(_texts(msg, include_thinking=False)))
        self._used[id(msg)] = (msg, ids)
        return ids


def _texts(msg: Message, *, include_thinking: bool) -> Iterable[str]:
    for b in msg.blocks:
        if isinstance(b, Text):
            yield b.text
        elif isinstance(b, ToolCall):
            yield b.input if isinstance(b.input, str) else msgspec.json.encode(b.input).decode()
        elif isinstance(b, ToolResult):
            for p in b.content:
                if isinstance(p, Text):
                    yield p.text
        elif include_thinking and isinstance(b, Thinking):
            yield b.thinking


class _Counts:
    """Token estimates per message, cached by object identity."""

    def __init__(self, counter: TokenCounter) -> None:
        self.counter = counter
        self._cache: dict[int, tuple[Message, int]] = {}

    def __call__(self, msg: Message) -> int:
        hit = self._cache.get(id(msg))
        if hit is not None and hit[0] is msg:
            return hit[1]
        n = self.counter.count_message(msg)
        self._cache[id(msg)] = (msg, n)
        return n


def is_call(msg: Message) -> bool:
    """Whether ``msg`` is a recorded model call (an assistant message the harness did not make up)."""
    return msg.role == "assistant" and not msg.meta.get("synthetic")


def _pct(errors: Sequence[float]) -> ErrorStats:
    if not errors:
        return ErrorStats()
    xs = sorted(errors)
    p95 = xs[min(len(xs) - 1, round(0.95 * (len(xs) - 1)))]
    return ErrorStats(round(statistics.median(xs), 4), round(p95, 4), len(xs))


def _provider(session: Session, model: ModelInfo) -> str:
    if model.provider == "anthropic" or (session.format == "claude-code" and model.provider != "openai"):
        return "anthropic"
    return "openai"


def infer_fixed_prefix(
    session: Session, count: Callable[[Message], int], count_text: Callable[[str], int]
) -> int:
    """Tokens of system prompt + tool definitions: the first recorded usage minus our estimate of
    the messages before that call (``count``: tokens of a message). Falls back to counting
    ``session.system`` (``count_text``)."""
    est = 0
    for msg in session.messages:
        if is_call(msg) and msg.usage is not None and msg.usage.total_input > 0:
            return max(0, msg.usage.total_input - est)
        if msg.origin not in ("compact_summary", "compact_restore"):
            est += count(msg)
    return count_text(session.system) if session.system else 0


# ------------------------------------------------------------------ the replay


def _units(recorded: int, fixed: int, estimated_content: int, scale: float) -> float:
    """Reported tokens per estimated token of content for the engine track at one call: the
    recorded call's own ratio, ``(recorded - fixed) / estimated_content``; or ``scale`` (the
    ledger's learned ratio) when the recorded total is off ``fixed + estimated_content x scale``
    by more than ``ANCHOR_TOLERANCE`` of it (the recorded context is not the transcript's:
    something unlogged was cleared or added)."""
    expected = fixed + estimated_content * scale
    if (
        estimated_content <= 0
        or recorded <= fixed  # the fixed prefix was inferred larger than this call: no ratio
        or abs(recorded - expected) > ANCHOR_TOLERANCE * recorded
    ):
        return scale
    return (recorded - fixed) / estimated_content


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
) -> SessionReport:
    """Replay ``session`` under ``policy`` at ``window`` tokens (default: the model's window),
    with engine ``engine_id`` from ``engines`` (default: the core engine) and, when given, ``llm``
    as the model for notes and summaries.

    Returns the full report. Raises nothing for odd sessions: a session with no calls gives an
    empty report. Raises ``WindowTooSmallError`` for a window under 16,000 tokens (its subclass
    ``PrefixTooLargeError`` when the session's fixed prefix does not fit the window) and
    ``KeyError`` for an unknown engine id.
    """
    registry = registry or Registry.default()
    model = registry.get(session.model or "unknown")
    counter = counter_for(model)
    count = _Counts(counter)
    ids = _Ids()
    warnings: list[str] = []
    if not model.price_known:
        warnings.append(
            f"no known price for model {session.model!r}: priced at fallback rates"
            if session.model
            else "the transcript names no model (give one with --model): priced at fallback rates"
        )

    fixed = infer_fixed_prefix(session, count, counter.count_text)
    resolved_window = resolve_window(model, user_override=window)
    if fixed >= resolved_window:
        raise PrefixTooLargeError(session.source, resolved_window, fixed)
    above = window_above_model(resolved_window, model, known=registry.known(session.model or "unknown"))
    if above is not None:
        warnings.append(above)
    engine = (engines or EngineRegistry()).create(
        engine_id,
        policy=policy,
        model=session.model,
        window=resolved_window,
        registry=registry,
        counter=counter,
        session_id=f"{session.source}#{session.name}",
        restore_from_transcript=True,
        llm=llm,
    )
    engine.bootstrap(
        system=session.system, fixed_prefix_tokens=fixed, recorded_compactions=session.compactions
    )
    provider = _provider(session, model)
    ttl = policy.cache_ttl_s
    if any(m.usage and m.usage.cache_write_1h_tokens for m in session.messages):
        ttl = ONE_HOUR_TTL_S  # the recorded harness used the 1-hour cache
    style = model.cache_style
    engine_cache = CacheModel(style, ttl)
    rec_cache = CacheModel(style, ttl)
    rec_ledger = Ledger(fixed_prefix=fixed)

    compaction_starts = {c.at for c in session.compactions}
    rec_msgs: list[Message] = []
    rec_est = 0
    seen: set[str] = set()
    prev_rec_total: int | None = None
    compacted_since_prev = False
    view_ids: Counter[str] = Counter()
    prev_view: dict[int, Message] = {}
    fidelity = FidelityTracker(session.system, counter.count_text)

    calls: list[CallRecord] = []
    prev_sent = 0
    pred_errs: list[float] = []
    delta_errs: list[float] = []
    cache_errs: list[float] = []
    violations = 0
    recorded_cost = 0.0
    recorded_cost_known = False
    first_call_seen = False
    requests_whole = requests_probed = 0

    for i, msg in enumerate(session.messages):
        if i in compaction_starts:
            rec_msgs, rec_est = [], 0
            rec_ledger.reset()
            rec_cache.reset()
            compacted_since_prev = True
        if not is_call(msg):
            engine.ingest(msg)
            rec_msgs.append(msg)
            rec_est += count(msg)
            if msg.origin in ("message", "attachment"):
                seen |= ids.of(msg)
                fidelity.observe(msg)
            continue

        # ---- a model call happens here
        proj = engine.assemble(now=msg.timestamp)
        usage = msg.usage
        recorded = usage.total_input if usage is not None and usage.total_input > 0 else None

        # ledger, online on the recorded context
        predicted: int | None = None
        if recorded is not None:
            if first_call_seen:
                predicted = rec_ledger.predict(rec_est)
                pred_errs.append(abs(predicted - recorded) / recorded * 100)
                added = rec_ledger.added_since_anchor(rec_est)
                if (
                    added is not None
                    and prev_rec_total is not None
                    and not compacted_since_prev
                    and recorded - prev_rec_total > DELTA_MIN_TOKENS
                ):
                    real = recorded - prev_rec_total
                    delta_errs.append(abs(added - real) / real * 100)
            first_call_seen = True

        # what the policy sends
        p_tok = [count(m) for m in proj.messages]
        if recorded is not None:
            sent = fixed + max(0, round(sum(p_tok) * _units(recorded, fixed, rec_est, rec_ledger.scale)))
        else:
            sent = proj.tokens
        outcome = engine_cache.request(
            proj.messages,
            p_tok,
            fixed_prefix=fixed,
            total=sent,
            now=msg.timestamp,
            breakpoints=breakpoint_indices(proj.messages) if style == "explicit" else None,
        )
        expected_miss = any(e.layer in COMPACTION_LAYERS for e in proj.events)
        cache_break = bool(
            engine_cache.last_warm
            and not expected_miss
            and prev_sent > 0
            and outcome.cache_read < CACHE_BREAK_SHARE * min(prev_sent, sent)
        )
        prev_sent = sent
        out_tokens = usage.output_tokens if usage is not None and usage.output_tokens else count(msg)
        cost = model.cost_usd(
            input_tokens=outcome.uncached,
            cache_read_tokens=outcome.cache_read,
            cache_write_5m_tokens=outcome.cache_write if ttl < ONE_HOUR_TTL_S else 0,
            cache_write_1h_tokens=outcome.cache_write if ttl >= ONE_HOUR_TTL_S else 0,
            output_tokens=out_tokens,
        )

        # cache model error, on the recorded track
        r_tok = [count(m) for m in rec_msgs]
        r_out = rec_cache.request(
            rec_msgs,
            r_tok,
            fixed_prefix=fixed,
            total=recorded if recorded is not None else fixed + rec_est,
            now=msg.timestamp,
            breakpoints=breakpoint_indices(rec_msgs) if style == "explicit" else None,
        )
        if usage is not None and recorded:
            cache_errs.append(abs(r_out.cache_read - usage.cache_read_tokens) / recorded * 100)
            recorded_cost += model.cost_usd(
                input_tokens=usage.input_tokens,
                cache_read_tokens=usage.cache_read_tokens,
                cache_write_5m_tokens=usage.cache_write_tokens,
                cache_write_1h_tokens=usage.cache_write_1h_tokens,
                output_tokens=usage.output_tokens,
            )
            recorded_cost_known = True

        # reference recall
        cur = {id(m): m for m in proj.messages}
        for k, m in prev_view.items():
            if k not in cur or cur[k] is not m:
                view_ids.subtract(ids.of(m))
        for k, m in cur.items():
            if k not in prev_view or prev_view[k] is not m:
                view_ids.update(ids.of(m))
        prev_view = cur
        uses = [x for x in ids.used(msg) if x in seen]
        forgotten = sorted(x for x in uses if view_ids[x] <= 0 and x not in proj.system)
        hits = len(uses) - len(forgotten)
        compacted = any(e.layer in COMPACTION_LAYERS and "error" not in e.details for e in proj.events)
        fid = fidelity.measure(msg, proj.messages, proj.system, compaction=compacted)
        if fid.request_whole is not None:
            requests_probed += 1
            requests_whole += fid.request_whole

        # the real request body, validated against the provider's rules
        if validate:
            violations += len(_validate(provider, proj.messages, proj.system, model.name))

        calls.append(
            CallRecord(
                index=len(calls),
                timestamp=msg.timestamp,
                sent_tokens=sent,
                recorded_input_tokens=recorded,
                predicted_input_tokens=predicted,
                cache_read_tokens=outcome.cache_read,
                cache_write_tokens=outcome.cache_write,
                uncached_tokens=outcome.uncached,
                output_tokens=out_tokens,
                cost_usd=cost,
                overflow=sent > proj.window,
                cache_break=cache_break,
                recall_hits=hits,
                recall_uses=len(uses),
                forgotten=forgotten,
                content_hits=fid.hits,
                content_grounded=fid.grounded,
                refetch_tokens=fid.refetch_tokens,
                probes=fid.probes,
                events=[_event_dict(e) for e in proj.events],
            )
        )

        # the response arrives
        engine.ingest(msg)
        engine.after_turn(Usage(input_tokens=sent, output_tokens=out_tokens))
        if recorded is not None:
            rec_ledger.observe(recorded, rec_est)
            prev_rec_total = recorded
            compacted_since_prev = False
        rec_msgs.append(msg)
        rec_est += count(msg)
        seen |= ids.of(msg)
        fidelity.observe(msg)

    # upkeep after the last call (a notes update in its after_turn): no call reports it, the
    # session's figures (LLM calls, tokens, cost) do
    after_last = [_event_dict(e) for e in engine.maintain()]
    all_events = [e for c in calls for e in c.events] + after_last
    ok = [e for e in all_events if e["layer"] in COMPACTION_LAYERS and "error" not in e["details"]]
    comp: Counter[str] = Counter(e["layer"] for e in ok)
    free = sum(1 for e in ok if e["llm_cost_usd"] == 0)
    failures = sum(1 for e in all_events if e["layer"] in COMPACTION_LAYERS and "error" in e["details"])
    llm_calls = sum(e["llm_calls"] for e in all_events)
    llm_tokens = sum(e["llm_input_tokens"] + e["llm_output_tokens"] for e in all_events)
    llm_cost = sum(e["llm_cost_usd"] for e in all_events)
    read = sum(c.cache_read_tokens for c in calls)
    sent_total = sum(c.sent_tokens for c in calls)
    total_hits = sum(c.recall_hits for c in calls)
    total_uses = sum(c.recall_uses for c in calls)
    layer_failures = getattr(engine, "failures", 0)  # a plugin engine may not count them
    if isinstance(layer_failures, bool) or not isinstance(layer_failures, int):
        layer_failures = 0
    transcript_cost = _transcript_cost(session)
    engine.dispose()
    c_hits = sum(c.content_hits for c in calls)
    c_grounded = sum(c.content_grounded for c in calls)
    refetch = sum(c.refetch_tokens for c in calls)
    refetch_cost = model.cost_usd(input_tokens=refetch)
    cost_total = sum(c.cost_usd for c in calls) + llm_cost
    probes = {k: ProbeStat() for k in PROBE_KINDS}
    for c in calls:
        for kind, score in (c.probes or {}).items():
            probes[kind].add(score)
    summary = SessionSummary(
        peak_sent_tokens=max((c.sent_tokens for c in calls), default=0),
        overflows=sum(1 for c in calls if c.overflow),
        compactions=dict(sorted(comp.items())),
        compactions_free=free,
        compaction_failures=failures,
        offloads=sum(1 for e in all_events if e["layer"] == "tool_result_budget"),
        notes_updates=sum(
            1 for e in all_events if e["layer"] == "session_notes" and "error" not in e["details"]
        ),
        cache_breaks=sum(1 for c in calls if c.cache_break),
        compaction_quality=_quality_summary(ok),
        tool_limits=tool_limit_report(session.messages, counter.count_text),
        llm_calls=llm_calls,
        llm_tokens=llm_tokens,
        llm_cost_usd=round(llm_cost, 6),
        cost_usd=round(cost_total, 6),
        recorded_cost_usd=round(recorded_cost, 6) if recorded_cost_known else transcript_cost,
        recorded_cost_from="usage"
        if recorded_cost_known
        else ("transcript" if transcript_cost is not None else None),
        layer_failures=layer_failures,
        cache_hit_ratio=round(read / sent_total, 4) if sent_total else None,
        reference_recall=round(total_hits / total_uses, 4) if total_uses else None,
        recall_hits=total_hits,
        recall_uses=total_uses,
        content_recall=round(c_hits / c_grounded, 4) if c_grounded else None,
        content_hits=c_hits,
        content_grounded=c_grounded,
        refetch_tokens=refetch,
        refetch_cost_usd=round(refetch_cost, 6),
        cost_with_refetch_usd=round(cost_total + refetch_cost, 6),
        probes=probes,
        probe_score=probe_score(probes),
        probe_compactions=sum(1 for c in calls if c.probes is not None),
        latest_request_kept=round(requests_whole / requests_probed, 4) if requests_probed else None,
        requests_whole=requests_whole,
        requests_probed=requests_probed,
        pairing_violations=violations,
        malformed_records=len(session.malformed),
        skipped_records=dict(session.skipped),
        price_known=model.price_known,
        prediction_error=_pct(pred_errs),
        delta_error=_pct(delta_errs),
        cache_model_error=_pct(cache_errs),
        subagents=subagent_summary(session, counter.count_text),
    )
    info = SessionInfo(
        source=session.source,
        name=session.name,
        format=session.format,
        model=session.model,
        calls=len(calls),
        messages=len(session.messages),
        parent=session.parent,
        sidechain=session.sidechain,
    )
    return SessionReport(
        session=info,
        policy=policy.name,
        window_tokens=resolved_window,
        fixed_prefix_tokens=fixed,
        calls=calls,
        summary=summary,
        warnings=warnings + [str(m) for m in session.malformed],
        events_after_last_call=after_last,
    )


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


def _event_dict(e: Any) -> dict[str, Any]:
    d: dict[str, Any] = msgspec.to_builtins(e)
    return d


def _validate(provider: str, messages: list[Message], system: str, model: str) -> list[str]:
    if provider == "anthropic":
        return validate_anthropic(to_anthropic(messages, system=system, model=model))
    return validate_openai_chat(to_openai_chat(messages, system=system, model=model))
