"""What a replay reports: one record per model call, the session's summary, and the constants
its figures use (the layers that count as compactions, the cache-break share, the 1-hour TTL).

Plain records (``msgspec`` structs), constants and the layer-event-to-dict conversion; the stages
that fill the records live beside this module (``replay.sizing``, ``replay.pricing``,
``replay.measures``, ``replay.summary``). Tokens; USD.
"""

from __future__ import annotations

from typing import Any

import msgspec

from ctxengine.eval.fidelity import ProbeStat
from ctxengine.models.registry import MIN_WINDOW_TOKENS, WindowTooSmallError
from ctxengine.subagents.linking import SubagentSummary
from ctxengine.tools.limits import ToolLimitReport

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


RESPONSE_ROOM_TOKENS = 4_000  # the least a window must leave beside the fixed prefix (the overflow
# guard's reserve: one response), else every call overflows or is cut whatever the policy does


class PrefixTooLargeError(WindowTooSmallError):
    """The session's fixed prefix (system prompt and tool definitions, which no layer can shrink)
    leaves less than ``RESPONSE_ROOM_TOKENS`` of the window: every call would overflow (or be cut
    to nothing) whatever the policy does. A ``WindowTooSmallError`` for this session, whose
    message says which window would do."""

    def __init__(self, source: str, window: int, prefix: int) -> None:
        what = "more than" if prefix >= window else f"leaving less than {RESPONSE_ROOM_TOKENS:,} tokens of"
        ValueError.__init__(
            self,
            f"{source}: the fixed prefix (system prompt and tool definitions) is {prefix:,} tokens, "
            f"{what} the {window:,}-token window: no policy can fit a single call; give a window "
            f"above it, e.g. --window {-(-(prefix + MIN_WINDOW_TOKENS) // 1000) * 1000}",
        )
        self.tokens = window
        self.prefix = prefix
        self.source = source

    def __reduce__(self) -> tuple[type, tuple[str, int, int]]:  # type: ignore[override]
        """Pickled by its arguments (a worker process hands it back to the parent whole)."""
        return (type(self), (self.source, self.tokens, self.prefix))


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
    read_hits: int  # read-grounded shingles of this call's output present in what was sent
    read_grounded: int  # shingles of its output that occurred earlier in what the agent read
    content_hits: int  # grounded shingles of this call's output present in what was sent
    content_grounded: int  # shingles of this call's output that occurred earlier in the session
    refetch_tokens: int  # sources charged at this call for the read-grounded shingles missing
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
    read_recall: float | None  # pooled over calls: read_hits / read_grounded (the headline)
    read_hits: int
    read_grounded: int
    content_recall: float | None  # pooled over calls: content_hits / content_grounded
    content_hits: int
    content_grounded: int
    grounded_by_source: dict[str, int]  # grounded shingles by the kind of their latest source
    read_hits_by_source: dict[str, int]  # read recall's hits by the same kinds
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


def _event_dict(e: Any) -> dict[str, Any]:
    """A layer event as the report carries it (plain builtins)."""
    d: dict[str, Any] = msgspec.to_builtins(e)
    return d
