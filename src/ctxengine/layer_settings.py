"""The settings of the layers that run before compaction: one record per layer.

Each record is one layer's constants with the reference defaults (Claude Code's unless the record
names another source), validated at construction (``ctxengine.settings_base``). Units are in the
field comments: tokens are model tokens, chars Python characters, seconds wall-clock seconds
between model calls, a share a fraction 0 to 1 of the window (of the *free* window, window minus
system prompt and tools, under ``Policy.shares_of_free_window``). A ``Policy`` composes them
(``Policy.compose``); a policy file has one table per record (``[tool_result_budget]``).
The compaction records are in ``ctxengine.compaction_settings``.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import ClassVar, Literal

import msgspec

from ctxengine.session_keys import HistoryLimits
from ctxengine.settings_base import Settings

# Which units eviction takes first (``ctxengine.layers.history_limit``): the oldest, or the least
# important by seed 002's score (``ctxengine.layers.importance``).
EvictOrder = Literal["oldest", "importance"]


class ToolResultBudget(Settings, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """Tool-result budget (``layers.tool_result_budget``), every call: a result over the cap goes
    to the artifact store behind a preview. Claude Code: 50,000 chars per tool, 200,000 per
    message, a 2 KB ``<persisted-output>`` preview, Read opted out. OpenClaw also caps at
    floor(window x ``window_share``) x 4 chars."""

    table: ClassVar[str] = "tool_result_budget"
    flat: ClassVar[dict[str, str]] = {
        "enabled": "tool_result_budget",
        "max_chars": "tool_result_max_chars",
        "message_max_chars": "message_results_max_chars",
        "preview_chars": "preview_chars",
        "exempt_tools": "budget_exempt_tools",
        "tail_chars": "tail_chars",
        "window_share": "tool_result_window_share",
    }
    at_least_one: ClassVar[frozenset[str]] = frozenset({"max_chars", "message_max_chars"})
    shares: ClassVar[frozenset[str]] = frozenset({"window_share"})

    enabled: bool = True
    max_chars: int = 50_000  # chars per tool result
    message_max_chars: int = 200_000  # chars of all results of one message
    preview_chars: int = 2_000  # chars: Claude Code's 2 KB <persisted-output> preview
    exempt_tools: tuple[str, ...] = ("read",)  # tools with their own limits (Claude Code: Read)
    tail_chars: int = 600  # chars of tail kept when the tail looks important (errors, summaries)
    window_share: float = 0.0  # OpenClaw: cap <= floor(window x share) x 4 chars (0: no share)


class ClearedResults(Settings, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """What a cleared or offloaded tool result keeps (``layers.base.cleared_result``; every
    clearing layer and the tool-result budget's preview): a line of its identifiers (ours; none
    of the reference harnesses keeps one)."""

    table: ClassVar[str] = "cleared_results"
    flat: ClassVar[dict[str, str]] = {
        "keep_identifiers": "keep_identifiers",
        "identifiers_max": "identifiers_max",
    }

    keep_identifiers: bool = True
    identifiers_max: int = 40  # identifiers listed per cleared result


class IdleClear(Settings, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """Idle clear (``layers.idle_clear``; Claude Code's time-based microcompact): after an idle
    gap the prompt cache is cold anyway, so all but the newest tool results are cleared. Claude
    Code: gap 60 min, keep 5."""

    table: ClassVar[str] = "idle_clear"
    flat: ClassVar[dict[str, str]] = {
        "enabled": "idle_clear",
        "gap_s": "idle_gap_s",
        "keep_recent": "idle_keep_recent",
    }

    enabled: bool = True
    gap_s: float = 3600.0  # seconds without a model call
    keep_recent: int = 5  # newest tool results kept


class TtlPrune(Settings, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """Cache-TTL pruning (``layers.cache_ttl_prune``; OpenClaw's context-pruning extension, mode
    ``cache-ttl``, off by default): once the prompt cache has expired, soft-trim then hard-clear
    old tool results. Ratios are context chars / (window x 4). OpenClaw: ttl "5m", 3 assistant
    messages kept, soft at 0.3, hard at 0.5 with 50,000 prunable chars, results over 4,000 chars
    trimmed to 1,500 head + 1,500 tail."""

    table: ClassVar[str] = "ttl_prune"
    flat: ClassVar[dict[str, str]] = {
        "enabled": "ttl_prune",
        "ttl_s": "ttl_prune_ttl_s",
        "keep_last_assistants": "ttl_prune_keep_last_assistants",
        "soft_ratio": "ttl_prune_soft_ratio",
        "hard_ratio": "ttl_prune_hard_ratio",
        "min_prunable_chars": "ttl_prune_min_prunable_chars",
        "soft_max_chars": "ttl_prune_soft_max_chars",
        "head_chars": "ttl_prune_head_chars",
        "tail_chars": "ttl_prune_tail_chars",
    }

    enabled: bool = True
    ttl_s: float = 300.0  # seconds: "5m"
    keep_last_assistants: int = 3  # results after the 3rd-last assistant message are kept
    soft_ratio: float = 0.3  # context chars / (window x 4) at which soft trim starts
    hard_ratio: float = 0.5  # ... and hard clear
    min_prunable_chars: int = 50_000  # hard clear only with this many prunable chars
    soft_max_chars: int = 4_000  # results longer than this (chars) are soft-trimmed ...
    head_chars: int = 1_500  # ... to this head ...
    tail_chars: int = 1_500  # ... and this tail


class CacheClear(Settings, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """Cache-aware clearing of old tool results under pressure (``layers.cache_clear``; after
    Anthropic's ``clear_tool_uses`` edit: trigger, keep 3, ``clear_at_least``), in one batch worth
    the cache miss it costs."""

    table: ClassVar[str] = "cache_clear"
    flat: ClassVar[dict[str, str]] = {
        "enabled": "cache_clear",
        "trigger": "cache_clear_trigger",
        "target": "cache_clear_target",
        "keep_recent": "cache_clear_keep_recent",
        "at_least": "cache_clear_at_least",
        "min_result_tokens": "cache_clear_min_result_tokens",
    }
    shares: ClassVar[frozenset[str]] = frozenset({"trigger", "target"})

    enabled: bool = True
    trigger: float = 0.5  # share of the window at which clearing starts
    target: float = 0.35  # share of the window clearing brings the context down to
    keep_recent: int = 5  # newest tool results never cleared
    at_least: int = 10_000  # tokens: a batch smaller than this is not worth a cache miss
    min_result_tokens: int = 200  # tokens: results smaller than this are not worth clearing

    def problems(self) -> Iterator[tuple[str, str]]:
        """Every field's range, and the target not above the trigger."""
        yield from super().problems()
        if self.target > self.trigger:
            yield "target", f"({self.target}) must not exceed trigger ({self.trigger})"


class EvictionSettings(Settings, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """Eviction without a summary (``layers.history_limit``; off by default): a gateway's
    per-kind user-turn limits (OpenClaw's ``historyLimit``, batched), and whole API rounds
    evicted above the compaction threshold down to ``target_share`` of the free window, oldest
    first or by seed 002's importance score."""

    table: ClassVar[str] = "eviction"
    flat: ClassVar[dict[str, str]] = {
        "limits": "history_limits",
        "at_pressure": "evict_at_pressure",
        "target_share": "evict_target_share",
        "order": "evict_order",
    }
    shares: ClassVar[frozenset[str]] = frozenset({"target_share"})

    limits: HistoryLimits = msgspec.field(default_factory=HistoryLimits)  # user turns per kind
    at_pressure: bool = False
    target_share: float = 0.45  # share of the free window pressure eviction brings it down to
    order: EvictOrder = "oldest"


class OverflowGuard(Settings, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """Overflow guard (``layers.overflow_guard``): the last resort before a call that cannot fit;
    drops the oldest whole rounds until the request fits window - ``reserve`` tokens. It stands
    in for every harness's compact-and-retry on "prompt is too long"."""

    table: ClassVar[str] = "overflow_guard"
    flat: ClassVar[dict[str, str]] = {"enabled": "overflow_guard", "reserve": "overflow_reserve"}

    enabled: bool = True
    reserve: int = 4_000  # tokens kept free for the response at the very least


class PromptCache(Settings, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """The prompt-cache model (``ctxengine.cache``, the replay's pricing and the cold-cache
    compaction): how long a cached prefix lives. Anthropic's ephemeral cache: 5 min (3,600 s
    for the 1-hour cache)."""

    table: ClassVar[str] = "prompt_cache"
    flat: ClassVar[dict[str, str]] = {"ttl_s": "cache_ttl_s"}

    ttl_s: float = 300.0  # seconds since the last call


LAYER_SETTINGS: tuple[type[Settings], ...] = (
    ToolResultBudget,
    ClearedResults,
    IdleClear,
    TtlPrune,
    CacheClear,
    EvictionSettings,
    OverflowGuard,
    PromptCache,
)
"""The records of this module, in the order the cascade runs them."""
