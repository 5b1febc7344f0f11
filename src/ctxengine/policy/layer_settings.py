"""The settings of the layers that run before compaction: one record per layer.

Each record is one layer's constants with the reference defaults (Claude Code's unless the record
names another source), validated at construction (``ctxengine.policy.settings_base``). Units are in the
field comments: tokens are model tokens, chars Python characters, seconds wall-clock seconds
between model calls, a share a fraction 0 to 1 of the window (of the *free* window, window minus
system prompt and tools, under ``Policy.shares_of_free_window``). A ``Policy`` composes them
(``Policy.compose``); a policy file has one table per record (``[tool_result_budget]``).
The compaction records are in ``ctxengine.policy.compaction_settings``.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import ClassVar, Literal

import msgspec

from ctxengine.policy.session_keys import HistoryLimits
from ctxengine.policy.settings_base import Settings

# Which units eviction takes first (``ctxengine.layers.history_limit``): the oldest, or the least
# important by seed 002's score (``ctxengine.layers.importance``).
EvictOrder = Literal["oldest", "importance"]


class ToolResultBudget(Settings, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """Tool-result budget (``layers.tool_result_budget``): a result over the cap is offloaded.

    Every call, a result over the cap goes to the artifact store behind a preview. Claude Code:
    50,000 chars per tool, 200,000 per message, a 2 KB ``<persisted-output>`` preview, Read opted
    out. OpenClaw also caps at floor(window x ``window_share``) x 4 chars.

    Attributes:
        enabled: whether the layer runs.
        max_chars: cap per tool result, chars.
        message_max_chars: cap on all the results of one message together, chars.
        preview_chars: preview kept in place of an offloaded result, chars (Claude Code's 2 KB
            ``<persisted-output>`` preview).
        exempt_tools: tools with their own limits, never offloaded (Claude Code: Read).
        tail_chars: tail kept when the tail looks important (errors, summaries), chars.
        window_share: OpenClaw's cap, floor(window x share) x 4 chars; a share of the window
            (0: no share cap).
        preview_share: ours: caps ``preview_chars`` the same way, at floor(window x share) x 4
            chars (0: no share cap); a 2 KB preview is a large part of a small window.
        weigh_tokens: ours: text denser than 4 chars a token (Chinese, tables, base64) counts 4
            chars a token of the engine's counter against the caps, and its preview is cut to
            the tokens an English one takes (off: chars alone, as the reference harnesses count).
        defer_unseen: ours: a result over the cap reaches the model whole once, and is offloaded
            when the model has answered it (the next assistant message), unless the context with it
            whole would pass the compaction threshold (then it is offloaded on arrival, as
            without it). The model reads what it asked for; later calls carry the preview.
    """

    table: ClassVar[str] = "tool_result_budget"
    flat: ClassVar[dict[str, str]] = {
        "enabled": "tool_result_budget",
        "max_chars": "tool_result_max_chars",
        "message_max_chars": "message_results_max_chars",
        "preview_chars": "preview_chars",
        "exempt_tools": "budget_exempt_tools",
        "tail_chars": "tail_chars",
        "window_share": "tool_result_window_share",
        "preview_share": "preview_share",
        "weigh_tokens": "tool_result_weigh_tokens",
        "defer_unseen": "tool_result_defer_unseen",
    }
    at_least_one: ClassVar[frozenset[str]] = frozenset({"max_chars", "message_max_chars"})
    shares: ClassVar[frozenset[str]] = frozenset({"window_share", "preview_share"})

    enabled: bool = True
    max_chars: int = 50_000
    message_max_chars: int = 200_000
    preview_chars: int = 2_000
    exempt_tools: tuple[str, ...] = ("read",)
    tail_chars: int = 600
    window_share: float = 0.0
    preview_share: float = 0.0
    weigh_tokens: bool = False
    defer_unseen: bool = False


class ClearedResults(Settings, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """What a cleared or offloaded tool result keeps: a line of its identifiers.

    Used by ``layers.base.cleared_result``: every clearing layer and the tool-result budget's
    preview. Ours; none of the reference harnesses keeps one.

    Attributes:
        keep_identifiers: whether the identifiers line is kept.
        identifiers_max: identifiers listed per cleared result, a count.
        name_retrieve: whether the placeholder names ctxengine's ``retrieve`` tool as the way back
            (off where the agent has no such tool: ``ctxengine proxy`` without ``--retrieve-tool``).
    """

    table: ClassVar[str] = "cleared_results"
    flat: ClassVar[dict[str, str]] = {
        "keep_identifiers": "keep_identifiers",
        "identifiers_max": "identifiers_max",
        "name_retrieve": "cleared_name_retrieve",
    }

    keep_identifiers: bool = True
    identifiers_max: int = 40
    name_retrieve: bool = True


class IdleClear(Settings, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """Idle clear (``layers.idle_clear``): after an idle gap, all but the newest tool results are cleared.

    Claude Code's time-based microcompact: after an idle gap the prompt cache is cold anyway.
    Claude Code: gap 60 min, keep 5.

    Attributes:
        enabled: whether the layer runs.
        gap_s: idle gap without a model call, seconds.
        keep_recent: newest tool results kept, a count.
    """

    table: ClassVar[str] = "idle_clear"
    flat: ClassVar[dict[str, str]] = {
        "enabled": "idle_clear",
        "gap_s": "idle_gap_s",
        "keep_recent": "idle_keep_recent",
    }

    enabled: bool = True
    gap_s: float = 3600.0
    keep_recent: int = 5


class TtlPrune(Settings, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """Cache-TTL pruning (``layers.cache_ttl_prune``): soft-trim, then hard-clear old tool results.

    OpenClaw's context-pruning extension, mode ``cache-ttl``, off by default (a ``Policy`` that
    does not list the record has it off): once the prompt cache has expired, old tool results are
    soft-trimmed, then hard-cleared. Ratios are context chars / (window x 4). OpenClaw: ttl "5m",
    3 assistant messages kept, soft at 0.3, hard at 0.5 with 50,000 prunable chars, results over
    4,000 chars trimmed to 1,500 head + 1,500 tail.

    Attributes:
        enabled: whether the layer runs once listed.
        ttl_s: prompt-cache lifetime, seconds (OpenClaw: "5m").
        keep_last_assistants: results after the n-th last assistant message are kept, a count.
        soft_ratio: context chars / (window x 4) at which the soft trim starts.
        hard_ratio: context chars / (window x 4) at which the hard clear starts.
        min_prunable_chars: the hard clear runs only with this many prunable chars.
        soft_max_chars: results longer than this are soft-trimmed, chars ...
        head_chars: ... to this head, chars ...
        tail_chars: ... and this tail, chars.
    """

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
    ttl_s: float = 300.0
    keep_last_assistants: int = 3
    soft_ratio: float = 0.3
    hard_ratio: float = 0.5
    min_prunable_chars: int = 50_000
    soft_max_chars: int = 4_000
    head_chars: int = 1_500
    tail_chars: int = 1_500

    def problems(self) -> Iterator[tuple[str, str]]:
        """Each field out of range, and the soft trim starting above the hard clear.

        Returns:
            ``(field, phrase)`` pairs, as ``Settings.problems``; empty when the record is sound.
        """
        yield from super().problems()
        if self.soft_ratio > self.hard_ratio:
            yield "soft_ratio", f"({self.soft_ratio}) must not exceed hard_ratio ({self.hard_ratio})"


class CacheClear(Settings, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """Cache-aware clearing of old tool results under pressure (``layers.cache_clear``).

    After Anthropic's ``clear_tool_uses`` edit (trigger, keep 3, ``clear_at_least``): one batch
    worth the cache miss it costs. ``target`` must not exceed ``trigger`` (``ValueError``).

    Attributes:
        enabled: whether the layer runs.
        trigger: share of the window at which clearing starts.
        target: share of the window clearing brings the context down to.
        keep_recent: newest tool results never cleared, a count.
        at_least: tokens; a batch smaller than this is not worth a cache miss.
        min_result_tokens: tokens; results smaller than this are not worth clearing.
        reach_target: ours: a batch that cannot bring the context down to ``target`` is not made
            (what fills the context is then the cleared results' placeholders and the calls,
            and each clearing would buy a few turns for a cache miss: compaction frees more).
    """

    table: ClassVar[str] = "cache_clear"
    flat: ClassVar[dict[str, str]] = {
        "enabled": "cache_clear",
        "trigger": "cache_clear_trigger",
        "target": "cache_clear_target",
        "keep_recent": "cache_clear_keep_recent",
        "at_least": "cache_clear_at_least",
        "min_result_tokens": "cache_clear_min_result_tokens",
        "reach_target": "cache_clear_reach_target",
    }
    shares: ClassVar[frozenset[str]] = frozenset({"trigger", "target"})

    enabled: bool = True
    trigger: float = 0.5
    target: float = 0.35
    keep_recent: int = 5
    at_least: int = 10_000
    min_result_tokens: int = 200
    reach_target: bool = False

    def problems(self) -> Iterator[tuple[str, str]]:
        """Each field out of range, and the target above the trigger.

        Returns:
            ``(field, phrase)`` pairs, as ``Settings.problems``; empty when the record is sound.
        """
        yield from super().problems()
        if self.target > self.trigger:
            yield "target", f"({self.target}) must not exceed trigger ({self.trigger})"


class EvictionSettings(Settings, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """Eviction without a summary (``layers.history_limit``), off by default.

    A gateway's per-kind user-turn limits (OpenClaw's ``historyLimit``, batched), and whole API
    rounds evicted above the compaction threshold down to ``target_share`` of the free window,
    oldest first or by seed 002's importance score.

    Attributes:
        limits: user turns kept per session kind (``HistoryLimits``).
        at_pressure: whether whole rounds are evicted above the compaction threshold.
        target_share: share of the free window pressure eviction brings the context down to.
        order: which rounds go first: "oldest", or "importance" (``ctxengine.layers.importance``).
    """

    table: ClassVar[str] = "eviction"
    flat: ClassVar[dict[str, str]] = {
        "limits": "history_limits",
        "at_pressure": "evict_at_pressure",
        "target_share": "evict_target_share",
        "order": "evict_order",
    }
    shares: ClassVar[frozenset[str]] = frozenset({"target_share"})

    limits: HistoryLimits = msgspec.field(default_factory=HistoryLimits)
    at_pressure: bool = False
    target_share: float = 0.45
    order: EvictOrder = "oldest"


class OverflowGuard(Settings, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """Overflow guard (``layers.overflow_guard``): the last resort before a call that cannot fit.

    Drops the oldest whole rounds until the request fits window - ``reserve`` tokens. It stands in
    for every harness's compact-and-retry on "prompt is too long".

    Attributes:
        enabled: whether the layer runs.
        reserve: tokens kept free for the response at the very least.
    """

    table: ClassVar[str] = "overflow_guard"
    flat: ClassVar[dict[str, str]] = {"enabled": "overflow_guard", "reserve": "overflow_reserve"}

    enabled: bool = True
    reserve: int = 4_000


class PromptCache(Settings, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """The prompt-cache model: how long a cached prefix lives.

    Read by ``ctxengine.models.prompt_cache``, the replay's pricing and the cold-cache compaction. Anthropic's
    ephemeral cache: 5 min (3,600 s for the 1-hour cache).

    Attributes:
        ttl_s: lifetime of a cached prefix since the last call, seconds.
    """

    table: ClassVar[str] = "prompt_cache"
    flat: ClassVar[dict[str, str]] = {"ttl_s": "cache_ttl_s"}

    ttl_s: float = 300.0


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
