"""``Policy``: every threshold of the cascade as one record with the reference defaults.

A policy is data. The engine reads it; layers read only their own fields. Field defaults are the
reference values (Claude Code's unless a comment names another source). The built-in policies
(``default``, ``none``, ``recorded``, ...) and the registry that finds them and the presets by name
are in ``ctxengine.policy``, which re-exports everything here; import from there.

Policies load from TOML (``Policy.from_toml``): the file's keys are the field names below, an
optional ``base`` key names the policy to start from (looked up through ``ctxengine.policy``'s
registry, which hands itself in with ``set_base_lookup`` when it is imported: this module stays
below the registry and the presets, so neither import cycles back).

Window-relative sizes: ``Policy.for_window(window, fixed)`` resolves the ``*_share`` fields into
the absolute ones for one window (and, with ``shares_of_free_window``, for the window minus the
fixed prefix); the engine hands layers the resolved policy.
"""

from __future__ import annotations

import tomllib
from collections.abc import Callable
from pathlib import Path
from typing import Literal

import msgspec

from ctxengine.session_keys import HistoryLimits

# Shares of the free window (window - fixed prefix) that the reserves and sizes of a policy may
# take at most (``Policy.for_window``). At 200,000 tokens with a 25,000-token prefix none binds
# (Claude Code's 33,000 of reserves is 19% of the free window, its 40,000 kept 23%, its 50,000
# restored 29%); they bind only where the reference constants would leave no room.
RESERVE_MAX_SHARE = 0.5  # output reserve + head-room buffer: the threshold keeps half of the room
KEEP_MAX_SHARE = 0.5  # the tail a compaction keeps verbatim
SUMMARY_MAX_SHARE = 0.15  # the summary, the notes as a summary, the split-turn prefix summary
RESTORE_MAX_SHARE = 0.3  # files restored after a compaction (each and in all)

CompactionMode = Literal["summary", "recorded", "none"]
SummarizerKind = Literal["auto", "structured", "llm"]
# Where a summary compaction cuts (``ctxengine.layers.cut_plans``): "tail" keeps the newest
# ``keep_recent_tokens`` (ours); "all" summarizes everything (Claude Code's full compaction);
# "pi" keeps at most ``keep_recent_tokens``, cutting only at a user or assistant message, with a
# split-turn prefix (pi, OpenClaw); "sliding-window" evicts a growing share of the messages
# (Letta), falling back to "all".
CutStrategy = Literal["tail", "all", "pi", "sliding-window"]
# Which units eviction takes first (``ctxengine.layers.history_limit``): the oldest, or the least
# important by seed 002's score (``ctxengine.layers.importance``).
EvictOrder = Literal["oldest", "importance"]
# How the $0 structured summary (and the LLM summary's headings) look (``ctxengine.summarize``).
SummaryStyle = Literal["ctxengine", "claude-code", "openclaw", "pi", "letta"]


class Policy(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """Thresholds of the cascade. Tokens are model tokens, chars are Python characters,
    seconds are wall-clock seconds between model calls."""

    name: str = "custom"
    description: str = "ctxengine's own policy: cheap layers first, structured summary last."

    # tool-result budget (every call; Claude Code 50,000 chars per tool, 200,000 per message)
    tool_result_budget: bool = True
    tool_result_max_chars: int = 50_000
    message_results_max_chars: int = 200_000
    preview_chars: int = 2_000  # Claude Code's 2 KB <persisted-output> preview
    budget_exempt_tools: tuple[str, ...] = ("read",)  # tools with their own limits (Claude Code: Read)
    tail_chars: int = 600  # tail kept when the tail looks important (errors, summaries)
    # OpenClaw: the cap is also at most floor(window x share) x 4 chars (0: no window share)
    tool_result_window_share: float = 0.0

    # idle clear (time-based microcompact; Claude Code: gap 60 min, keep 5)
    idle_clear: bool = True
    idle_gap_s: float = 3600.0
    idle_keep_recent: int = 5

    # cache-TTL pruning (OpenClaw's context-pruning extension, mode "cache-ttl"; off by default):
    # once the prompt cache has expired, soft-trim then hard-clear old tool results
    ttl_prune: bool = False
    ttl_prune_ttl_s: float = 300.0  # "5m"
    ttl_prune_keep_last_assistants: int = 3  # results after the 3rd-last assistant message are kept
    ttl_prune_soft_ratio: float = 0.3  # context chars / (window x 4) at which soft trim starts
    ttl_prune_hard_ratio: float = 0.5  # ... and hard clear
    ttl_prune_min_prunable_chars: int = 50_000  # hard clear only with this many prunable chars
    ttl_prune_soft_max_chars: int = 4_000  # results longer than this are soft-trimmed ...
    ttl_prune_head_chars: int = 1_500  # ... to this head ...
    ttl_prune_tail_chars: int = 1_500  # ... and this tail

    # cache-aware clearing of old tool results (Anthropic clear_tool_uses: keep 3, clear_at_least)
    cache_clear: bool = True
    cache_clear_trigger: float = 0.5  # share of the window at which clearing starts
    cache_clear_target: float = 0.35  # share of the window clearing brings the context down to
    cache_clear_keep_recent: int = 5  # newest tool results never cleared
    cache_clear_at_least: int = 10_000  # tokens: a batch smaller than this is not worth a cache miss
    cache_clear_min_result_tokens: int = 200  # results smaller than this are not worth clearing
    keep_identifiers: bool = True  # cleared/offloaded results keep a line of their identifiers
    identifiers_max: int = 40  # per cleared result

    # summary compaction (Claude Code auto-compact: window - min(max_output, 20,000) - 13,000)
    compaction: CompactionMode = "summary"
    summarizer: SummarizerKind = "auto"  # auto: the LLM when one is configured, else structured
    summary_llm_max_output: int = 8_192  # tokens the LLM summary may take
    breaker_failures: int = 3  # Claude Code MAX_CONSECUTIVE_AUTOCOMPACT_FAILURES
    compact_reserve_output: int = 20_000  # tokens kept for the model's output
    compact_buffer: int = 13_000  # tokens of head-room below the effective window
    compact_at_share: float = 1.0  # also compact above this share of the window (earlier = cheaper)
    keep_recent_tokens: int = 30_000  # tail kept verbatim after a compaction
    keep_recent_min_messages: int = 5
    summary_max_tokens: int = 12_000
    summary_max_share: float = 0.06  # and at most this share of the window
    compact_min_gain: float = 0.1  # share of the window a compaction must free, else it is not made
    # when the prompt cache has expired (no call for ``cache_ttl_s``) the next request is written in
    # full anyway, so a compaction then costs no extra cache miss: compact above this lower share
    # of the window (0: off)
    cold_compact_at_share: float = 0.0
    cold_compact_min_gain: float = 0.02  # ... freeing at least this share of the window
    summary_user_message_chars: int = 2_000  # per user message kept verbatim in the summary
    summary_identifiers_max: int = 400
    compact_cut: CutStrategy = "tail"
    summary_style: SummaryStyle = "ctxengine"
    sm_identifier_index: bool = True  # session-memory compaction lists the exact identifiers (ours)
    sm_index_max_share: float = 0.0  # ... within this share of the window (0: the summary budget)
    sm_index_segments: bool = False  # ... in append-only segments the prompt cache keeps serving
    # OpenClaw maxHistoryShare: the span to summarize is pruned to this share of the window by
    # dropping its oldest token-share chunk (pairs repaired); the dropped part is summarized first
    # (0: off)
    history_max_share: float = 0.0
    history_share_margin: float = 1.2  # OpenClaw SAFETY_MARGIN on the "new content" test
    # OpenClaw summarizeInStages (LLM summaries only): a span over the chunk budget is split into
    # this many parts by token share, summarized apart, then merged in one more call (1: off)
    summary_stages: int = 1
    turn_prefix_max_tokens: int = 8_192  # pi: the split-turn prefix summary (0.5 x reserve)
    # Letta sliding window: evict round(share x N) messages, the share starting at
    # ``sliding_start_share`` and growing by ``sliding_step_share`` before each try, until the rest
    # fits ``sliding_goal_share`` of the window
    sliding_start_share: float = 0.3
    sliding_step_share: float = 0.1
    sliding_goal_share: float = 0.7
    summary_max_words: int = 0  # Letta: 300 words (sliding window) ... (0: no word limit)
    summary_all_max_words: int = 0  # ... 500 words (summarize-all fallback)
    # Letta's summarizer-input fallbacks: tool returns clamped to this many chars (0: off), then the
    # transcript middle-truncated (``summary_middle_keep`` head + tail) to window x share x 4 chars
    summary_tool_return_chars: int = 0
    summary_input_share: float = 0.0
    summary_middle_keep: float = 0.3
    # OpenClaw pre-compaction memory flush: once per compaction, when the context passes
    # threshold - ``memory_flush_soft_tokens``, the session notes are brought up to date (durable
    # memory, outside the context)
    memory_flush: bool = False
    memory_flush_soft_tokens: int = 4_000
    warn_at_share: float = 0.0  # Letta memory warning at 75% of the window: an event (0: off)

    # session notes and session-memory compaction (Claude Code session memory; gated off there)
    session_memory: bool = False
    notes_first_tokens: int = 10_000  # conversation tokens before the first notes update
    notes_every_tokens: int = 5_000  # then each time this many more tokens ...
    notes_every_tool_calls: int = 3  # ... and this many tool calls have accrued
    sm_keep_min_tokens: int = 10_000
    sm_keep_min_messages: int | None = None  # text messages kept (None: ``keep_recent_min_messages``)
    sm_gain_factor: float = 1.0  # it must free ``compact_min_gain`` x this of the window
    sm_keep_max_tokens: int = 40_000
    notes_max_tokens: int = 12_000  # the notes as a summary: at most this (Claude Code: 12,000)

    # restore after compaction (Claude Code post-compaction attachments)
    restore_files: int = 5
    restore_file_tokens: int = 5_000
    restore_total_tokens: int = 50_000
    restore_todos: bool = True
    restore_from_history: bool = False  # ours: restore files read anywhere before the cut, not
    # only in the span just summarized (a second compaction otherwise forgets the first's files)
    restore_changes: int = 0  # ours: the last change (new text) of this many modified files
    restore_change_tokens: int = 4_000  # ... each at most this
    restore_error_tokens: int = 0  # ours: the latest error with its call, at most this (0: off)
    restore_shell_reads: bool = False  # ours: files printed by cat / sed -n / nl count as read
    # ours: the transcript skeleton (``ctxengine.skeleton``): the user's and the agent's own words
    # from before the cut, newest first within this many tokens (0: off), as append-only segments
    # that lead the prefix, each block at most
    # ``restore_skeleton_block_tokens``
    restore_skeleton_tokens: int = 0
    restore_skeleton_block_tokens: int = 1_000
    instruction_files: tuple[str, ...] = ("CLAUDE.md", "AGENTS.md")

    # overflow guard (last resort before a call that cannot fit)
    overflow_guard: bool = True
    overflow_reserve: int = 4_000  # tokens kept free for the response at the very least

    # cache model
    cache_ttl_s: float = 300.0  # Anthropic ephemeral 5 min; 3600 for the 1-hour cache

    # window-relative sizes: each absolute size above is capped at this share of the window when
    # the share is set (0: the absolute number alone), see ``for_window``
    shares_of_free_window: bool = False  # shares apply to the window minus system prompt + tools
    notes_max_share: float = 0.0  # caps ``notes_max_tokens``
    keep_recent_share: float = 0.0
    sm_keep_min_share: float = 0.0
    sm_keep_max_share: float = 0.0
    restore_file_share: float = 0.0
    restore_total_share: float = 0.0
    restore_change_share: float = 0.0
    restore_skeleton_share: float = 0.0

    # eviction without a summary (``layers.history_limit``; off by default, so no other policy
    # changes): a gateway's per-kind user-turn limits (OpenClaw's historyLimit, batched), and
    # whole API rounds evicted above the compaction threshold down to ``evict_target_share`` of
    # the free window; ``evict_order`` picks oldest first or seed 002's importance score
    history_limits: HistoryLimits = msgspec.field(default_factory=HistoryLimits)
    evict_at_pressure: bool = False
    evict_target_share: float = 0.45
    evict_order: EvictOrder = "oldest"

    def compact_threshold(self, window: int, max_output: int) -> int:
        """Tokens above which summary compaction runs: Claude Code's auto-compact threshold, or
        ``compact_at_share`` of the window when that is lower, and never above the overflow
        guard's limit (``window - overflow_reserve``: compaction comes before the guard). The
        reserves are taken as they are; ``for_window`` derives them for a small window, so the
        threshold of the resolved policy is above the fixed prefix for any window of 16,000
        tokens or more."""
        claude_code = window - min(max_output, self.compact_reserve_output) - self.compact_buffer
        return min(claude_code, int(window * self.compact_at_share), window - self.overflow_reserve)

    def reserve_threshold(self, window: int, max_output: int) -> int:
        """The threshold the reserves alone set (tokens): ``compact_threshold`` without
        ``compact_at_share``. Above it a compaction is due; between ``compact_threshold`` and it
        a compaction is early (cheaper, optional), and is made only when it leaves room
        (``ctxengine.compaction``)."""
        claude_code = window - min(max_output, self.compact_reserve_output) - self.compact_buffer
        return min(claude_code, window - self.overflow_reserve)

    def for_window(self, window: int, fixed: int = 0) -> Policy:
        """This policy with its window-relative sizes resolved for ``window`` tokens: each absolute
        size capped at its share of the window (``keep_recent_share`` -> ``keep_recent_tokens``,
        ``sm_keep_*_share``, ``restore_*_share``; ``tool_result_window_share`` caps
        ``tool_result_max_chars`` at floor(window x share) x 4 chars, OpenClaw's formula), and
        its reserves derived for a small window (``_derived_reserves``). Layers see the resolved
        policy; a policy that needs no change is returned as is.

        With ``shares_of_free_window``, every share (sizes, the compaction and clearing
        thresholds, the summary budget) is a share of the *free* window, ``window - fixed``
        (``fixed``: tokens of system prompt + tool definitions, which no layer can shrink): a
        share s of the window becomes the threshold fixed + s x (window - fixed). At 200,000 tokens
        with a 25,000-token prefix that changes little; at 64,000 it is the difference between
        compacting on every call and compacting when there is something to gain."""
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
        changes.update(self._derived_reserves(window, fixed, changes))
        return self.with_(**changes) if changes else self

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
          split-turn prefix) at most its ``*_MAX_SHARE`` of the free window;
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
        ):
            out[name] = min(self._resolved(changes, name), max(1, int(free * share)))
        preview = min(self.preview_chars, self._resolved(changes, "tool_result_max_chars"))
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
        """Tokens the identifier index after the session notes may take at this window."""
        if self.sm_index_max_share > 0:
            return min(self.summary_max_tokens, int(window * self.sm_index_max_share))
        return self.summary_budget(window)

    def summary_budget(self, window: int) -> int:
        """Tokens the summary may take at this window."""
        return min(self.summary_max_tokens, int(window * self.summary_max_share))

    def with_(self, **changes: object) -> Policy:
        """A copy with ``changes`` applied."""
        return msgspec.structs.replace(self, **changes)

    @classmethod
    def from_toml(cls, path: Path | str) -> Policy:
        """Load a policy from TOML. ``base = "NAME"`` starts from a built-in policy.

        Raises ``ValueError`` naming the file for unknown keys or wrong types.
        """
        p = Path(path)
        try:
            data = tomllib.loads(p.read_text(encoding="utf-8"))
        except (OSError, tomllib.TOMLDecodeError) as exc:
            raise ValueError(f"{p}: cannot read policy: {exc}") from None
        base_name = str(data.pop("base", "default"))
        if _base_lookup is None:
            raise RuntimeError("Policy.from_toml needs the policy registry: import ctxengine.policy")
        try:
            base = _base_lookup(base_name)
        except KeyError as exc:
            raise ValueError(f"{p}: {exc.args[0]}") from None
        data.setdefault("name", p.stem)  # a file's policy is not reported as its base
        merged = msgspec.structs.asdict(base) | data
        try:
            policy = msgspec.convert(merged, cls)
        except msgspec.ValidationError as exc:
            raise ValueError(f"{p}: invalid policy: {exc}") from None
        problems = range_problems(policy)
        if problems:
            raise ValueError(f"{p}: invalid policy: {'; '.join(problems)}")
        return policy


AT_LEAST_ONE = frozenset(
    {
        "tool_result_max_chars",
        "message_results_max_chars",
        "summary_llm_max_output",
        "breaker_failures",
        "summary_max_tokens",
        "summary_stages",
        "notes_max_tokens",
    }
)  # sizes and counts that 0 would make meaningless (a 0-char cap offloads every result)
SHARES = frozenset({"cache_clear_trigger", "cache_clear_target", "summary_middle_keep"})
"""Fields that are shares of something (0..1) besides the ``*_share`` ones."""


def range_problems(policy: Policy) -> list[str]:
    """What is out of range in ``policy``, one phrase per field (empty when it is sound): every
    number finite and not negative; the sizes and counts in ``AT_LEAST_ONE`` at least 1; every
    share (``*_share`` and ``SHARES``) at most 1; the clearing target not above its trigger."""
    problems: list[str] = []
    for name in policy.__struct_fields__:
        value = getattr(policy, name)
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            continue
        if value != value or value in (float("inf"), float("-inf")):
            problems.append(f"{name} must be a finite number, not {value}")
        elif name in AT_LEAST_ONE and value < 1:
            problems.append(f"{name} must be at least 1, not {value}")
        elif value < 0:
            problems.append(f"{name} must not be negative, not {value}")
        elif (name.endswith("_share") or name in SHARES) and value > 1:
            problems.append(f"{name} is a share (0 to 1), not {value}")
    if not problems and policy.cache_clear_target > policy.cache_clear_trigger:
        problems.append(
            f"cache_clear_target ({policy.cache_clear_target}) must not exceed cache_clear_trigger "
            f"({policy.cache_clear_trigger})"
        )
    return problems


_base_lookup: Callable[[str], Policy] | None = None


def set_base_lookup(lookup: Callable[[str], Policy]) -> None:
    """Hand in the registry ``Policy.from_toml`` resolves ``base = "NAME"`` with (``ctxengine.policy``
    does at import; ``lookup`` raises ``KeyError`` for an unknown name)."""
    global _base_lookup
    _base_lookup = lookup
