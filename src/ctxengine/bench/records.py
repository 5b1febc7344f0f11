"""What ``ctxengine bench`` reports: a row per session and policy, a row per policy, the comparison
of ``default`` with the presets, and the documented tuning / held-out split of the sessions.

Plain records (``msgspec`` structs) and the policy sets the bench knows. Tokens; USD; seconds.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import msgspec

from ctxengine import peers
from ctxengine.engine import baselines
from ctxengine.eval.fidelity import ProbeStat
from ctxengine.policy.registry import Policy
from ctxengine.replay import COMPACTION_LAYERS

PRESETS = ("claude-code", "openclaw", "pi", "letta")
DEFAULT_POLICIES = ("default", *PRESETS, "none", "recorded", *baselines.BASELINES, *peers.PEERS)
BENCH_COMPACTION_LAYERS = COMPACTION_LAYERS | {"cache_ttl_prune"} | peers.PEER_LAYERS
"""Events that change what is already in the context (the peers' trims and clears included)."""


class SessionRow(msgspec.Struct, kw_only=True):
    """One session under one policy. Tokens; USD; seconds."""

    policy: str
    source: str
    name: str
    format: str
    model: str | None
    calls: int
    peak_sent_tokens: int
    overflows: int
    compactions: int
    compactions_free: int
    compactions_by_layer: dict[str, int]
    llm_calls: int
    llm_tokens: int
    llm_cost_usd: float
    cost_usd: float
    cache_read_tokens: int
    sent_tokens: int
    cache_hit_ratio: float | None
    reference_recall: float | None
    recall_hits: int
    recall_uses: int
    read_recall: float | None
    read_hits: int
    read_grounded: int
    content_recall: float | None
    content_hits: int
    content_grounded: int
    grounded_by_source: dict[str, int]
    read_hits_by_source: dict[str, int]
    probes: dict[str, ProbeStat]
    probe_score: float | None
    requests_whole: int
    requests_probed: int
    refetch_tokens: int
    refetch_cost_usd: float
    cost_with_refetch_usd: float
    pairing_violations: int
    wall_time_s: float
    held_out: bool  # in the held-out half of the documented split (``held_out``)
    layer_failures: int = 0  # layer exceptions the engine caught and went on without
    subagents_spawned: int = 0  # sub-agent runs tied to this session's calls (``subagents.linking``)
    subagent_tokens: int = 0  # the input tokens of their calls (recorded usage)
    subagent_tokens_kept_out: int = 0  # ... minus the reports that came back


class PolicyRow(msgspec.Struct, kw_only=True):
    """One policy over every session: sums, maxima, pooled ratios and per-session means."""

    policy: str
    description: str
    engine: str
    sessions: int = 0
    unavailable: str | None = None
    errors: list[str] = msgspec.field(default_factory=list)
    calls: int = 0
    peak_sent_tokens: int = 0  # the largest request of any session
    mean_peak_sent_tokens: float = 0.0  # per session
    overflows: int = 0
    compactions: int = 0
    compactions_free: int = 0
    compactions_by_layer: dict[str, int] = msgspec.field(default_factory=dict)
    llm_calls: int = 0
    llm_tokens: int = 0
    llm_cost_usd: float = 0.0
    cost_usd: float = 0.0
    cost_usd_per_session: float = 0.0
    sent_tokens: int = 0
    cache_read_tokens: int = 0
    cache_hit_ratio: float | None = None  # pooled: read / sent over every call
    reference_recall: float | None = None  # pooled: hits / uses over every call of every session
    recall_hits: int = 0
    recall_uses: int = 0
    read_recall: float | None = None  # the headline: pooled read hits / read-grounded shingles
    read_hits: int = 0
    read_grounded: int = 0
    file_state_recall: float | None = None  # pooled: hits / grounded of the file-state runs
    content_recall: float | None = None  # pooled: content hits / grounded shingles over every call
    content_hits: int = 0
    content_grounded: int = 0
    grounded_by_source: dict[str, int] = msgspec.field(default_factory=dict)  # shingles per source kind
    read_hits_by_source: dict[str, int] = msgspec.field(default_factory=dict)  # read hits per source kind
    probes: dict[str, ProbeStat] = msgspec.field(default_factory=dict)  # pooled over compactions
    probe_score: float | None = None  # mean of the probe kinds' pooled means; None: no compaction
    latest_request_kept: float | None = None  # share of compactions with the latest request whole
    requests_whole: int = 0
    requests_probed: int = 0
    refetch_tokens: int = 0
    refetch_cost_usd: float = 0.0
    cost_with_refetch_usd: float = 0.0  # cost_usd + refetch_cost_usd: what the bench ranks on
    pairing_violations: int = 0
    wall_time_s: float = 0.0
    wall_time_s_per_session: float = 0.0
    layer_failures: int = 0
    subagents_spawned: int = 0
    subagent_tokens: int = 0
    subagent_tokens_kept_out: int = 0


class Comparison(msgspec.Struct, kw_only=True):
    """``default`` against the presets on the fidelity figures: read recall and probe score
    (higher is better) and the cost with re-fetches (lower is better; what the bench ranks on)."""

    among: list[str]
    best_preset_read_recall: float | None
    best_preset_content_recall: float | None
    best_preset_probe_score: float | None
    cheapest_preset_cost_with_refetch_usd: float | None
    default_read_recall: float | None
    default_content_recall: float | None
    default_probe_score: float | None
    default_cost_with_refetch_usd: float | None
    default_read_recall_highest: bool
    default_content_recall_highest: bool
    default_probe_score_highest: bool
    default_cost_with_refetch_lowest: bool


class BenchResult(msgspec.Struct, kw_only=True):
    """What ``--json`` writes."""

    window_tokens: int | None
    paths: list[str]
    policies: dict[str, PolicyRow]
    sessions: list[SessionRow]
    comparison: Comparison | None = None
    halves: dict[str, dict[str, PolicyRow]] = msgspec.field(default_factory=dict)
    """``tuning`` and ``held_out``: each policy over one half of the sessions (``held_out``)."""


def held_out(source: str, name: str) -> bool:
    """The documented split for tuning policies: a session is *held out* when the SHA-1 of
    ``"<file name>#<session name>"`` is odd. The default policy's thresholds were tuned on the
    other half (``tuning``); the bench reports both halves beside the whole. On the shared corpus
    each half holds 3 Claude Code, 1 Codex and 1 SWE-agent session, and about half of tau-bench."""
    key = f"{Path(source).name}#{name}".encode()
    return int(hashlib.sha1(key).hexdigest(), 16) % 2 == 1


class Runner(msgspec.Struct, kw_only=True):
    """A policy to run: its record, the engine id, and why it cannot run (if so)."""

    name: str
    policy: Policy
    engine: str = "ctxengine"
    unavailable: str | None = None
