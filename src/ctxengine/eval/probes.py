"""LLM-judged probes at every compaction (issue 8, section 6), after Factory's evaluation of
context compression (Factory.ai, "Evaluating context compression", Dec 2025).

A recorded session is driven through the engine under a policy the way ``replay`` drives it (walk
``session.messages``; ingest what is not a model call; at each call ``assemble``, then ingest the
recorded response and ``after_turn``). At every projection whose events include a compaction
layer (``replay.COMPACTION_LAYERS``, failed compactions excepted) a judge model is asked Factory's
four probe questions (``PROBES``: recall, artifact, continuation, decision) twice:

1. with the policy's context: the projection's messages and system prompt, as the agent would
   have sent them at that call;
2. with the full history: every message of the session so far (made pairing-valid with
   ``layers.pairing.repair``);

then a third call has the judge grade the first answer against the second, 0-5 per dimension,
as one small JSON object parsed strictly (``parse_grade``). Three judge calls per compaction.

Both requests carry the conversation as native messages (thinking removed: its signatures belong
to the recorded model) with the tools the conversation called declared by name, and one final
user message holding the questions. When a conversation is larger than the judge's input window
(less the answer and the question), its oldest tool groups are dropped at a safe cut point
(``layers.pairing.safe_cut_points``: never a result without its call), the judge is told how
many messages were left out, and the probe record says so (``*_trimmed_messages``).

A judge call that fails, an empty answer, and a grade that is not the JSON object asked for are
failures: counted, their reason recorded, never graded 0. Units: tokens, USD.

This module drives the sessions and keeps the records; the judge (questions, requests, trimming,
grade parsing) is ``ctxengine.eval.judge``, whose names are importable from here too.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import msgspec

from ctxengine.engine.core import RECORDED_ORIGINS, ContextEngine
from ctxengine.eval.judge import (
    ANSWER_MAX_TOKENS,
    DIMENSIONS,
    GRADE_MAX_TOKENS,
    PROBES,
    TRIM_MARGIN,
    Dimension,
    Grade,
    GradeError,
    Judge,
    fit,
    parse_grade,
    questions_text,
    tools_of,
    without_thinking,
)
from ctxengine.layers.pairing import repair
from ctxengine.llm import LLMError, call_stats
from ctxengine.messages.model import Message, Session, Usage
from ctxengine.models.registry import Registry
from ctxengine.policy.registry import Policy
from ctxengine.replay import COMPACTION_LAYERS, infer_fixed_prefix, is_call
from ctxengine.tokens.counter import counter_for

__all__ = [
    "ANSWER_MAX_TOKENS",
    "DIMENSIONS",
    "GRADE_MAX_TOKENS",
    "PROBES",
    "REPLY_EXCERPT_CHARS",
    "SCHEMA_VERSION",
    "TRIM_MARGIN",
    "Dimension",
    "EvalReport",
    "Grade",
    "GradeError",
    "Judge",
    "PolicyEval",
    "ProbeRecord",
    "evaluate_policy",
    "fit",
    "parse_grade",
    "probe_session",
    "questions_text",
    "tools_of",
    "without_thinking",
]

SCHEMA_VERSION = 1
REPLY_EXCERPT_CHARS = 300  # of an unparseable grade, kept in the report


class ProbeRecord(msgspec.Struct, kw_only=True):
    """One probed compaction. ``call`` is the index of the model call among the session's calls,
    ``message`` its index in ``session.messages``; ``layers`` the compaction layers of that
    projection. Tokens (``*_tokens``) are the judge model's counter over the messages sent;
    ``*_trimmed_messages`` how many of the oldest messages were left out to fit the judge's
    window. ``grades`` is None when the probe failed (``error`` says why)."""

    session: str
    call: int
    message: int
    layers: list[str]
    context_messages: int
    context_tokens: int
    context_trimmed_messages: int = 0
    full_messages: int
    full_tokens: int
    full_trimmed_messages: int = 0
    answer_context: str = ""
    answer_full: str = ""
    grades: dict[str, int] | None = None
    mean: float | None = None
    error: str | None = None


class PolicyEval(msgspec.Struct, kw_only=True):
    """A policy's probes over every session. ``mean`` per dimension and ``overall`` (mean of
    the four) over the graded probes, None when none was graded. ``judge_*``: the judge's calls
    for this policy (``judge_failed_calls`` of them failed), their tokens (input + output) and
    cost in USD at the registry's prices for the judge model. ``failures``: probes that produced
    no grade. ``context_trimmed`` / ``full_history_trimmed``: probes whose conversation was cut
    to fit the judge's window."""

    policy: str
    sessions: int
    compactions_probed: int
    graded: int
    failures: int
    mean: dict[str, float | None]
    overall: float | None
    judge_calls: int
    judge_failed_calls: int
    judge_tokens: int
    judge_cost_usd: float
    context_trimmed: int
    full_history_trimmed: int
    probes: list[ProbeRecord]


class EvalReport(msgspec.Struct, kw_only=True):
    """The evaluation (the JSON ``ctxengine eval --json`` writes). ``window_tokens`` is the
    policies' window (None: each session's model's); ``judge_window_tokens`` the judge's input
    window; ``max_compactions`` the probes per session and policy (None: all)."""

    schema_version: int = SCHEMA_VERSION
    judge: str
    judge_window_tokens: int
    window_tokens: int | None
    max_compactions: int | None
    policies: list[PolicyEval]
    warnings: list[str] = msgspec.field(default_factory=list)


# ------------------------------------------------------------------ the driver


def _compaction_layers(events: Sequence[object]) -> list[str]:
    out: list[str] = []
    for e in events:
        layer = getattr(e, "layer", "")
        details = getattr(e, "details", {})
        if layer in COMPACTION_LAYERS and "error" not in details and layer not in out:
            out.append(layer)
    return out


def probe_session(
    session: Session,
    policy: Policy,
    judge: Judge,
    *,
    window: int | None = None,
    registry: Registry | None = None,
    max_compactions: int | None = None,
) -> list[ProbeRecord]:
    """Drive ``session`` through the engine under ``policy`` at ``window`` tokens (default: the
    model's) and probe the first ``max_compactions`` compactions (None: all) with ``judge``.

    The engine's ledger is anchored on its own prediction after each call (the recorded usage
    measured the recorded context, not the policy's). Raises ``WindowTooSmallError`` for a
    window under 16,000 tokens; a failing judge call is recorded in its probe, never raised.
    """
    registry = registry or Registry.default()
    counter = counter_for(registry.get(session.model or "unknown"))
    engine = ContextEngine(
        policy,
        model=session.model,
        window=window,
        registry=registry,
        counter=counter,
        session_id=f"{session.source}#{session.name}",
        restore_from_transcript=True,
    )
    engine.bootstrap(
        system=session.system,
        fixed_prefix_tokens=infer_fixed_prefix(session, counter.count_message, counter.count_text),
        recorded_compactions=session.compactions,
    )
    label = f"{session.source}#{session.name}" if session.name else session.source
    history: list[Message] = []  # every message so far (a recorded compaction's own ones excepted)
    records: list[ProbeRecord] = []
    calls = 0
    try:
        for i, msg in enumerate(session.messages):
            if not is_call(msg):
                engine.ingest(msg)
                if msg.origin not in RECORDED_ORIGINS:
                    history.append(msg)
                continue
            proj = engine.assemble(now=msg.timestamp)
            layers = _compaction_layers(proj.events)
            if layers:
                records.append(_probe(judge, label, calls, i, layers, proj.messages, proj.system, history))
                if max_compactions is not None and len(records) >= max_compactions:
                    break
            engine.ingest(msg)
            out = msg.usage.output_tokens if msg.usage is not None else 0
            engine.after_turn(Usage(input_tokens=proj.tokens, output_tokens=out))
            history.append(msg)
            calls += 1
    finally:
        engine.dispose()
    return records


def _probe(
    judge: Judge,
    label: str,
    call: int,
    index: int,
    layers: list[str],
    context: Sequence[Message],
    system: str,
    history: Sequence[Message],
) -> ProbeRecord:
    ctx, ctx_dropped, ctx_tokens = judge.prepare(context, system)
    full, full_dropped, full_tokens = judge.prepare(repair(history)[0], system)
    rec = ProbeRecord(
        session=label,
        call=call,
        message=index,
        layers=layers,
        context_messages=len(ctx),
        context_tokens=ctx_tokens,
        context_trimmed_messages=ctx_dropped,
        full_messages=len(full),
        full_tokens=full_tokens,
        full_trimmed_messages=full_dropped,
    )
    try:
        rec.answer_context = judge.answer(ctx, system, ctx_dropped)
        rec.answer_full = judge.answer(full, system, full_dropped)
        grade, reply = judge.grade(rec.answer_context, rec.answer_full)
    except (LLMError, ValueError) as exc:
        rec.error = str(exc)
        return rec
    if grade is None:
        rec.error = f"unparseable grade: {reply[:REPLY_EXCERPT_CHARS]!r}"
        return rec
    rec.grades = grade.as_dict()
    rec.mean = round(sum(rec.grades.values()) / len(DIMENSIONS), 4)
    return rec


def _mean(xs: Sequence[float]) -> float | None:
    return round(sum(xs) / len(xs), 4) if xs else None


def evaluate_policy(
    sessions: Sequence[Session],
    policy: Policy,
    judge: Judge,
    *,
    window: int | None = None,
    registry: Registry | None = None,
    max_compactions: int | None = None,
    on_session: Callable[[], None] | None = None,
) -> PolicyEval:
    """``probe_session`` over ``sessions`` under ``policy``, summed into a ``PolicyEval`` (the
    judge's calls counted from ``judge.client.calls`` while this policy ran). ``on_session`` is
    called after each session (progress)."""
    start = len(judge.client.calls)
    probes: list[ProbeRecord] = []
    for s in sessions:
        probes.extend(
            probe_session(s, policy, judge, window=window, registry=registry, max_compactions=max_compactions)
        )
        if on_session is not None:
            on_session()
    stats = call_stats(judge.client.calls[start:])
    graded = [p for p in probes if p.grades is not None]
    means: dict[str, float | None] = {
        d: _mean([p.grades[d] for p in graded if p.grades is not None]) for d in DIMENSIONS
    }
    known = [m for m in means.values() if m is not None]
    return PolicyEval(
        policy=policy.name,
        sessions=len(sessions),
        compactions_probed=len(probes),
        graded=len(graded),
        failures=len(probes) - len(graded),
        mean=means,
        overall=_mean(known) if len(known) == len(DIMENSIONS) else None,
        judge_calls=stats.calls,
        judge_failed_calls=stats.calls - stats.ok,
        judge_tokens=stats.usage.total_input + stats.usage.output_tokens,
        judge_cost_usd=round(stats.cost_usd, 6),
        context_trimmed=sum(1 for p in probes if p.context_trimmed_messages),
        full_history_trimmed=sum(1 for p in probes if p.full_trimmed_messages),
        probes=probes,
    )
