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

The stages, one module each (every one usable alone):
- ``replay.records``: what the replay reports (``SessionReport``, ``CallRecord``, ...);
- ``replay.sizing``: size the session (fixed prefix, window) and each call;
- ``replay.pricing``: price with the cache model (``CallPricer``), the recorded track
  (``RecordedTrack``);
- ``replay.measures``: reference recall, fidelity, the request's validity;
- ``replay.summary``: the session's figures from its call records;
- ``replay.driver``: ``replay_session``, the short driver over them.

May import: ``messages``, ``formats``, ``tokens``, ``models``, ``policy``, ``llm``, ``engine``, ``subagents``,
``tools``, ``eval``.
"""

from __future__ import annotations

from ctxengine.replay.driver import open_engine, replay_session
from ctxengine.replay.measures import FidelityMeter, Recall, RecallTracker, request_violations
from ctxengine.replay.pricing import CallPricer, RecordedTrack, cache_ttl
from ctxengine.replay.records import (
    ANCHOR_TOLERANCE,
    CACHE_BREAK_SHARE,
    COMPACTION_LAYERS,
    DELTA_MIN_TOKENS,
    ONE_HOUR_TTL_S,
    SCHEMA_VERSION,
    CallRecord,
    ErrorStats,
    PrefixTooLargeError,
    SessionInfo,
    SessionReport,
    SessionSummary,
)
from ctxengine.replay.sizing import (
    SessionSize,
    infer_fixed_prefix,
    is_call,
    output_tokens,
    recorded_input,
    size_call,
    size_session,
)
from ctxengine.replay.sizing import _units as _units  # tests import it from here
from ctxengine.replay.summary import (
    call_figures,
    cost_figures,
    engine_failures,
    event_figures,
    summarize_session,
)

__all__ = [
    "ANCHOR_TOLERANCE",
    "CACHE_BREAK_SHARE",
    "COMPACTION_LAYERS",
    "DELTA_MIN_TOKENS",
    "ONE_HOUR_TTL_S",
    "SCHEMA_VERSION",
    "CallPricer",
    "CallRecord",
    "ErrorStats",
    "FidelityMeter",
    "PrefixTooLargeError",
    "Recall",
    "RecallTracker",
    "RecordedTrack",
    "SessionInfo",
    "SessionReport",
    "SessionSize",
    "SessionSummary",
    "cache_ttl",
    "call_figures",
    "cost_figures",
    "engine_failures",
    "event_figures",
    "infer_fixed_prefix",
    "is_call",
    "open_engine",
    "output_tokens",
    "recorded_input",
    "replay_session",
    "request_violations",
    "size_call",
    "size_session",
    "summarize_session",
]
