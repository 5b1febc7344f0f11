"""``Policy``: the settings of every layer of the cascade, composed into one record.

A policy is data. Each layer's settings are a small validated record with the reference defaults
(``ctxengine.policy.layer_settings``: ``ToolResultBudget``, ``IdleClear``, ...;
``ctxengine.policy.compaction_settings``: ``CompactionSettings``, ``SessionMemory``, ``Restore``, ...).
``Policy.compose(ToolResultBudget(max_chars=20_000), IdleClear(), ..., name="mine")`` composes
them, ``policy.settings(ToolResultBudget)`` hands one back. They are stored as the flat fields the
engine reads (``tool_result_max_chars`` is ``ToolResultBudget.max_chars``; ``PLACE`` in
``ctxengine.policy.fields``). The built-in policies and the registry (``get_policy``) are in
``ctxengine.policy.registry``, which re-exports everything here.

``Policy.from_toml``: top-level ``name``, ``description``, ``shares_of_free_window``, an optional
``base`` (found through ``ctxengine.policy.registry``'s registry, handed in with ``set_base_lookup`` at its
import, so this module stays below the registry and no import cycles back), then one table per
record (``[tool_result_budget]``, ``max_chars = 20000``). The old flat keys still work there and
in ``Policy.with_``, with a ``DeprecationWarning`` naming the new place.

``Policy.for_window(window, fixed)`` resolves the ``*_share`` fields into the absolute ones for one
window (with ``shares_of_free_window``, for the window minus the fixed prefix); layers see that.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import msgspec

from ctxengine.policy.compaction_settings import CompactionMode, CutStrategy, SummarizerKind, SummaryStyle
from ctxengine.policy.fields import (
    AT_LEAST_ONE,
    SETTINGS,
    SHARES,
    composed_fields,
    keyword_fields,
    load_file,
    range_problems,
    record_fields,
)
from ctxengine.policy.layer_settings import EvictOrder
from ctxengine.policy.session_keys import HistoryLimits
from ctxengine.policy.settings_base import Settings

S = TypeVar("S", bound=Settings)

# Shares of the free window (window - fixed prefix) that the reserves and sizes of a policy may
# take at most (``Policy.for_window``). At 200,000 tokens with a 25,000-token prefix none binds
# (Claude Code's 33,000 of reserves is 19% of the free window, its 40,000 kept 23%, its 50,000
# restored 29%); they bind only where the reference constants would leave no room.
RESERVE_MAX_SHARE = 0.5  # output reserve + head-room buffer: the threshold keeps half of the room
KEEP_MAX_SHARE = 0.5  # the tail a compaction keeps verbatim
SUMMARY_MAX_SHARE = 0.15  # the summary, the notes as a summary, the split-turn prefix summary
RESTORE_MAX_SHARE = 0.3  # files restored after a compaction (each and in all)

DEFAULT_DESCRIPTION = "ctxengine's own policy: cheap layers first, structured summary last."


class Policy(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """Every layer's settings, stored flat (the fields the engine reads).

    Build one with ``Policy.compose`` from settings records, change one with ``with_(record,
    ...)``, read a layer's record with ``settings``. The defaults below are the records' defaults
    (pinned by the tests); each group of flat fields names its record, whose ``Attributes:``
    document the fields, their units and the reference behaviour (``Settings.flat`` maps each
    record field to its flat field). Tokens are model tokens, chars are Python characters,
    seconds are wall-clock seconds between model calls.

    Attributes:
        name: the policy's name (``get_policy``, reports).
        description: one line saying what the policy does.
        shares_of_free_window: whether every ``*_share`` is a share of the free window (window
            minus system prompt and tools) rather than of the whole window (``for_window``).
    """

    name: str = "custom"
    description: str = DEFAULT_DESCRIPTION

    # ToolResultBudget (every call; Claude Code 50,000 chars per tool, 200,000 per message)
    tool_result_budget: bool = True
    tool_result_max_chars: int = 50_000
    message_results_max_chars: int = 200_000
    preview_chars: int = 2_000
    budget_exempt_tools: tuple[str, ...] = ("read",)
    tail_chars: int = 600
    tool_result_window_share: float = 0.0
    preview_share: float = 0.0
    tool_result_weigh_tokens: bool = False
    tool_result_defer_unseen: bool = False

    # IdleClear (time-based microcompact; Claude Code: gap 60 min, keep 5)
    idle_clear: bool = True
    idle_gap_s: float = 3600.0
    idle_keep_recent: int = 5

    # TtlPrune (OpenClaw's context-pruning extension, mode "cache-ttl"; off by default)
    ttl_prune: bool = False
    ttl_prune_ttl_s: float = 300.0
    ttl_prune_keep_last_assistants: int = 3
    ttl_prune_soft_ratio: float = 0.3
    ttl_prune_hard_ratio: float = 0.5
    ttl_prune_min_prunable_chars: int = 50_000
    ttl_prune_soft_max_chars: int = 4_000
    ttl_prune_head_chars: int = 1_500
    ttl_prune_tail_chars: int = 1_500

    # CacheClear (Anthropic clear_tool_uses: keep 3, clear_at_least), then ClearedResults
    cache_clear: bool = True
    cache_clear_trigger: float = 0.5
    cache_clear_target: float = 0.35
    cache_clear_keep_recent: int = 5
    cache_clear_at_least: int = 10_000
    cache_clear_min_result_tokens: int = 200
    cache_clear_reach_target: bool = False
    keep_identifiers: bool = True
    identifiers_max: int = 40
    cleared_name_retrieve: bool = True

    # CompactionSettings and SummarySettings (Claude Code auto-compact: window - min(max_output,
    # 20,000) - 13,000), with SessionMemory's identifier index, HistoryShare, SlidingWindow,
    # MemoryFlush and MemoryWarning
    compaction: CompactionMode = "summary"
    summarizer: SummarizerKind = "auto"
    summary_llm_max_output: int = 8_192
    breaker_failures: int = 3
    compact_reserve_output: int = 20_000
    compact_buffer: int = 13_000
    compact_at_share: float = 1.0
    keep_recent_tokens: int = 30_000
    keep_recent_min_messages: int = 5
    summary_max_tokens: int = 12_000
    summary_max_share: float = 0.06
    compact_min_gain: float = 0.1
    cold_compact_at_share: float = 0.0
    cold_compact_min_gain: float = 0.02
    summary_user_message_chars: int = 2_000
    summary_identifiers_max: int = 400
    compact_cut: CutStrategy = "tail"
    summary_style: SummaryStyle = "ctxengine"
    sm_identifier_index: bool = True
    sm_index_max_share: float = 0.0
    sm_index_segments: bool = False
    history_max_share: float = 0.0
    history_share_margin: float = 1.2
    summary_stages: int = 1
    turn_prefix_max_tokens: int = 8_192
    sliding_start_share: float = 0.3
    sliding_step_share: float = 0.1
    sliding_goal_share: float = 0.7
    summary_max_words: int = 0
    summary_all_max_words: int = 0
    summary_tool_return_chars: int = 0
    summary_input_share: float = 0.0
    summary_middle_keep: float = 0.3
    memory_flush: bool = False
    memory_flush_soft_tokens: int = 4_000
    warn_at_share: float = 0.0

    # SessionNotes and SessionMemory (Claude Code session memory; gated off there)
    session_memory: bool = False
    notes_first_tokens: int = 10_000
    notes_every_tokens: int = 5_000
    notes_every_tool_calls: int = 3
    sm_keep_min_tokens: int = 10_000
    sm_keep_min_messages: int | None = None
    sm_gain_factor: float = 1.0
    sm_keep_max_tokens: int = 40_000
    notes_max_tokens: int = 12_000

    # Restore (Claude Code post-compaction attachments; the changes, error, shell reads and
    # transcript skeleton are ours)
    restore_files: int = 5
    restore_file_tokens: int = 5_000
    restore_total_tokens: int = 50_000
    restore_todos: bool = True
    restore_from_history: bool = False
    restore_changes: int = 0
    restore_change_tokens: int = 4_000
    restore_error_tokens: int = 0
    restore_rules_tokens: int = 0
    restore_ledger_tokens: int = 0
    restore_shell_reads: bool = False
    restore_skeleton_tokens: int = 0
    restore_skeleton_block_tokens: int = 1_000
    restore_skeleton_user_tokens: int = 0
    restore_room_tokens: int = 0
    instruction_files: tuple[str, ...] = ("CLAUDE.md", "AGENTS.md")

    # OverflowGuard (last resort before a call that cannot fit)
    overflow_guard: bool = True
    overflow_reserve: int = 4_000

    # PromptCache (Anthropic ephemeral 5 min; 3600 for the 1-hour cache)
    cache_ttl_s: float = 300.0

    # window-relative sizes: each absolute size is capped at its share of the window when the
    # share is set (0: the absolute number alone), see ``for_window``; ``shares_of_free_window``
    # (top-level, no layer's) makes every share one of the window minus system prompt + tools
    shares_of_free_window: bool = False
    notes_max_share: float = 0.0  # SessionNotes
    keep_recent_share: float = 0.0  # CompactionSettings
    sm_keep_min_share: float = 0.0  # SessionMemory
    sm_keep_max_share: float = 0.0
    restore_file_share: float = 0.0  # Restore
    restore_total_share: float = 0.0
    restore_change_share: float = 0.0
    restore_skeleton_share: float = 0.0

    # EvictionSettings (``layers.history_limit``; off by default)
    history_limits: HistoryLimits = msgspec.field(default_factory=HistoryLimits)
    evict_at_pressure: bool = False
    evict_target_share: float = 0.45
    evict_order: EvictOrder = "oldest"

    @classmethod
    def compose(
        cls,
        *settings: Settings,
        name: str,
        description: str = DEFAULT_DESCRIPTION,
        shares_of_free_window: bool = False,
    ) -> Policy:
        """A policy made of ``settings`` records, one per kind.

        A layer with an on/off switch (``enabled``: the tool-result budget, idle clear, TTL
        pruning, cache clear, session memory, memory flush, overflow guard) runs only when listed;
        any other record not listed takes its defaults.

        Args:
            *settings: settings records (``ToolResultBudget(...)``, ``CompactionSettings(...)``,
                ...), at most one of each kind.
            name: the policy's name.
            description: one line saying what the policy does.
            shares_of_free_window: whether every ``*_share`` is a share of the free window.

        Returns:
            The new policy.

        Raises:
            TypeError: for a record given twice, or an argument that is not a settings record.
        """
        fields = composed_fields(settings)
        return cls(name=name, description=description, shares_of_free_window=shares_of_free_window, **fields)

    def settings(self, kind: type[S]) -> S:
        """The settings record of one layer (``policy.settings(ToolResultBudget)``).

        Args:
            kind: the record's class.

        Returns:
            A ``kind`` record read from this policy's flat fields.

        Raises:
            ValueError: when this policy holds a value out of its range.
        """
        return kind.read(self)

    def all_settings(self) -> tuple[Settings, ...]:
        """Every settings record of this policy, in ``SETTINGS`` order.

        ``Policy.compose(*p.all_settings(), name=p.name, description=p.description,
        shares_of_free_window=p.shares_of_free_window) == p``.

        Returns:
            A tuple with one record of each kind.

        Raises:
            ValueError: when this policy holds a value out of its range.
        """
        return tuple(kind.read(self) for kind in SETTINGS)

    def compact_threshold(self, window: int, max_output: int) -> int:
        """Tokens above which summary compaction runs.

        Claude Code's auto-compact threshold, window - min(max output,
        ``compact_reserve_output``) - ``compact_buffer``, or ``compact_at_share`` of the window
        when that is lower, and never
        above the overflow guard's limit (``window - overflow_reserve``: compaction comes before
        the guard). The reserves are taken as they are; ``for_window`` derives them for a small
        window, so the threshold of the resolved policy is above the fixed prefix for any window
        of 16,000 tokens or more.

        Args:
            window: the model's context window, tokens.
            max_output: the model's maximum output, tokens.

        Returns:
            The threshold, tokens (negative when the reserves exceed the window).
        """
        claude_code = window - min(max_output, self.compact_reserve_output) - self.compact_buffer
        return min(claude_code, int(window * self.compact_at_share), window - self.overflow_reserve)

    def reserve_threshold(self, window: int, max_output: int) -> int:
        """The threshold the reserves alone set: ``compact_threshold`` without ``compact_at_share``.

        Above it a compaction is due; between ``compact_threshold`` and it a compaction is early
        (cheaper, optional), and is made only when it leaves room (``ctxengine.compaction``).

        Args:
            window: the model's context window, tokens.
            max_output: the model's maximum output, tokens.

        Returns:
            The threshold, tokens.
        """
        claude_code = window - min(max_output, self.compact_reserve_output) - self.compact_buffer
        return min(claude_code, window - self.overflow_reserve)

    def for_window(self, window: int, fixed: int = 0) -> Policy:
        """This policy with its window-relative sizes resolved for ``window`` tokens.

        Each absolute size is capped at its share of the window (``keep_recent_share`` ->
        ``keep_recent_tokens``, ``sm_keep_*_share``, ``restore_*_share``;
        ``tool_result_window_share`` caps ``tool_result_max_chars`` at floor(window x share) x 4
        chars, OpenClaw's formula, and ``preview_share`` caps ``preview_chars`` alike), and its
        reserves are derived for a small window
        (``_derived_reserves``). Layers see the resolved policy.

        With ``shares_of_free_window``, every share (sizes, the compaction and clearing
        thresholds, the summary budget) is a share of the *free* window, ``window - fixed``: a
        share s of the window becomes the threshold fixed + s x (window - fixed). At 200,000 tokens
        with a 25,000-token prefix that changes little; at 64,000 it is the difference between
        compacting on every call and compacting when there is something to gain.

        Args:
            window: the model's context window, tokens.
            fixed: tokens of system prompt + tool definitions, which no layer can shrink (0:
                unknown).

        Returns:
            The resolved policy; this policy itself when it needs no change.
        """
        changes: dict[str, object] = {}
        free = window
        if self.shares_of_free_window and 0 < fixed < window:
            free = window - fixed

            def at(share: float) -> float:
                return share if share >= 1.0 else min(1.0, (fixed + share * free) / window)

            changes["compact_at_share"] = at(self.compact_at_share)
            changes["cache_clear_trigger"] = at(self.cache_clear_trigger)
            changes["cache_clear_target"] = at(self.cache_clear_target)
            if self.cold_compact_at_share > 0:
                changes["cold_compact_at_share"] = at(self.cold_compact_at_share)
            changes["summary_max_share"] = self.summary_max_share * free / window
            changes["sm_index_max_share"] = self.sm_index_max_share * free / window
            changes["compact_min_gain"] = self.compact_min_gain * free / window
            changes["cold_compact_min_gain"] = self.cold_compact_min_gain * free / window
        pairs = (
            ("keep_recent_tokens", self.keep_recent_share),
            ("notes_max_tokens", self.notes_max_share),
            ("sm_keep_min_tokens", self.sm_keep_min_share),
            ("sm_keep_max_tokens", self.sm_keep_max_share),
            ("restore_file_tokens", self.restore_file_share),
            ("restore_total_tokens", self.restore_total_share),
            ("restore_change_tokens", self.restore_change_share),
            ("restore_skeleton_tokens", self.restore_skeleton_share),
        )
        for name, share in pairs:
            if share > 0:
                changes[name] = min(int(getattr(self, name)), int(free * share))
        if self.tool_result_window_share > 0:
            cap = int(free * self.tool_result_window_share) * 4
            changes["tool_result_max_chars"] = min(self.tool_result_max_chars, cap)
        if self.preview_share > 0:
            changes["preview_chars"] = min(self.preview_chars, int(free * self.preview_share) * 4)
        changes.update(self._derived_reserves(window, fixed, changes))
        return msgspec.structs.replace(self, **changes) if changes else self

    def _derived_reserves(self, window: int, fixed: int, changes: dict[str, object]) -> dict[str, object]:
        """Every absolute reserve and size derived for a small window (tokens; chars for the
        preview), so that any window of 16,000 tokens or more gets a compaction threshold above
        the fixed prefix with room for a summary. The reference constants were set for a
        200,000-token window (Claude Code reserves 20,000 + 13,000 there, pi 16,384, OpenClaw
        20,000); taken as they are at a 32,000-token window they leave a negative threshold
        (window - 20,000 - 13,000), so the context is compacted on every call. Where ``free``
        (``window - fixed``, or the window when the prefix is unknown) is large enough, nothing
        changes; below that:

        - the output reserve and the head-room buffer together take at most
          ``RESERVE_MAX_SHARE`` of the free window (scaled down in proportion; the overflow
          guard's ``overflow_reserve``, the response's room at the very least, is kept);
        - what a compaction keeps or adds (kept tail, notes, summary, restored files, pi's
          split-turn prefix) and the room it leaves to grow at most its ``*_MAX_SHARE`` of the
          free window;
        - an offload preview is never larger than the cap it enforces (a 2,000-char preview
          of a result capped at 960 chars grows the context it was meant to shrink)."""
        free = window - fixed if 0 < fixed < window else window
        out: dict[str, object] = {}
        reserve = self.compact_reserve_output + self.compact_buffer
        room = int(free * RESERVE_MAX_SHARE)
        if reserve > room:
            scale = room / reserve
            out["compact_reserve_output"] = int(self.compact_reserve_output * scale)
            out["compact_buffer"] = int(self.compact_buffer * scale)
        for name, share in (
            ("keep_recent_tokens", KEEP_MAX_SHARE),
            ("sm_keep_min_tokens", KEEP_MAX_SHARE),
            ("sm_keep_max_tokens", KEEP_MAX_SHARE),
            ("summary_max_tokens", SUMMARY_MAX_SHARE),
            ("summary_llm_max_output", SUMMARY_MAX_SHARE),
            ("notes_max_tokens", SUMMARY_MAX_SHARE),
            ("turn_prefix_max_tokens", SUMMARY_MAX_SHARE),
            ("restore_file_tokens", RESTORE_MAX_SHARE),
            ("restore_total_tokens", RESTORE_MAX_SHARE),
            ("restore_skeleton_tokens", RESTORE_MAX_SHARE),
            ("restore_room_tokens", RESTORE_MAX_SHARE),
            ("restore_rules_tokens", RESTORE_MAX_SHARE / 2),
            ("restore_ledger_tokens", RESTORE_MAX_SHARE / 2),
        ):
            out[name] = min(self._resolved(changes, name), max(1, int(free * share)))
        preview = min(
            self._resolved(changes, "preview_chars"), self._resolved(changes, "tool_result_max_chars")
        )
        out["preview_chars"] = preview
        out["tail_chars"] = min(self.tail_chars, preview // 2)
        return {k: v for k, v in out.items() if v != getattr(self, k)}

    def _resolved(self, changes: dict[str, object], name: str) -> int:
        """An integer field as ``for_window`` has resolved it so far."""
        value = changes.get(name, getattr(self, name))
        if not isinstance(value, int):
            raise TypeError(f"policy field {name} is not an integer: {value!r}")
        return value

    def index_budget(self, window: int) -> int:
        """Tokens the identifier index after the session notes may take at this window.

        Args:
            window: the model's context window, tokens.

        Returns:
            The budget, tokens: ``sm_index_max_share`` of the window (at most
            ``summary_max_tokens``) when set, else ``summary_budget``.
        """
        if self.sm_index_max_share > 0:
            return min(self.summary_max_tokens, int(window * self.sm_index_max_share))
        return self.summary_budget(window)

    def summary_budget(self, window: int) -> int:
        """Tokens the summary may take at this window.

        Args:
            window: the model's context window, tokens.

        Returns:
            The budget, tokens: ``summary_max_tokens``, at most ``summary_max_share`` of the window.
        """
        return min(self.summary_max_tokens, int(window * self.summary_max_share))

    def with_(self, *settings: Settings, **changes: Any) -> Policy:
        """A copy with settings records and top-level changes applied.

        An old flat field name in ``changes`` (``tool_result_max_chars=...``) still works, with a
        ``DeprecationWarning`` naming its new place.

        Args:
            *settings: settings records, each replacing its layer's settings.
            **changes: new values of the top-level fields (``name``, ``description``,
                ``shares_of_free_window``).

        Returns:
            The new policy.

        Raises:
            TypeError: for an unknown name, a record given twice, a field given both in a record
                and as a keyword, or an argument that is not a settings record.
        """
        fields = record_fields(settings)
        twice = sorted(fields.keys() & changes.keys())
        if twice:
            raise TypeError(f"{twice[0]} is given both in a settings record and as a keyword")
        return msgspec.structs.replace(self, **fields, **keyword_fields(changes, stacklevel=2))

    @classmethod
    def from_toml(cls, path: Path | str) -> Policy:
        """Load a policy from a TOML file.

        ``base = "NAME"`` starts from a built-in policy or preset (default: ``default``), then
        top-level ``name`` / ``description`` / ``shares_of_free_window``, then one table per
        settings record (``[tool_result_budget]``, ``[compaction]``, ...; the names are
        ``ctxengine.policy.fields.BY_TABLE``). A file without ``name`` is named after itself.
        Old flat keys still load, with a ``DeprecationWarning`` naming the table they belong in.

        Args:
            path: the TOML file.

        Returns:
            The policy, its ranges checked.

        Raises:
            ValueError: naming the file, when it cannot be read or parsed, names an unknown base,
                or has unknown keys, wrong types or values out of range.
            RuntimeError: when ``ctxengine.policy.registry`` (the registry of bases) was never imported.
        """
        if _base_lookup is None:
            raise RuntimeError("Policy.from_toml needs the policy registry: import ctxengine.policy.registry")
        return load_file(Path(path), _base_lookup, cls)


_base_lookup: Callable[[str], Policy] | None = None


def set_base_lookup(lookup: Callable[[str], Policy]) -> None:
    """Hand in the registry ``Policy.from_toml`` resolves ``base = "NAME"`` with
    (``ctxengine.policy.registry`` does at import; ``lookup`` raises ``KeyError`` for an unknown name)."""
    global _base_lookup
    _base_lookup = lookup


__all__ = [
    "AT_LEAST_ONE",
    "DEFAULT_DESCRIPTION",
    "KEEP_MAX_SHARE",
    "RESERVE_MAX_SHARE",
    "RESTORE_MAX_SHARE",
    "SHARES",
    "SUMMARY_MAX_SHARE",
    "CompactionMode",
    "CutStrategy",
    "EvictOrder",
    "Policy",
    "SummarizerKind",
    "SummaryStyle",
    "range_problems",
    "set_base_lookup",
]
