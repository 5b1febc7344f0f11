"""The built-in policies and the registry that finds them (and the presets) by name.

``Policy`` (the record that composes every layer's settings, ``from_toml``, ``for_window``) lives
in ``ctxengine.policy.record`` and is re-exported here with its constants; the settings records
(``ToolResultBudget``, ``CompactionSettings``, ...) live in ``ctxengine.policy.layer_settings`` and
``ctxengine.policy.compaction_settings``. Each built-in policy below is a composition of records
(``Policy.compose``): a layer with an on/off switch runs only when its record is listed.

Built-in policies (``BUILTIN``):
- ``default``: ours (all $0 layers, session notes + the transcript skeleton, tuned; see ``DEFAULT``).
- ``none``: send everything; overflows are counted, nothing is changed.
- ``recorded``: what the recorded session did: compactions where the transcript has them, with the
  recorded summary and restore attachments, and the summarization call priced.
- ``evict-oldest``, ``evict-importance``: the default's $0 layers, then eviction without a summary.

Presets of other harnesses (``ctxengine.policy.harnesses``; ``get_policy`` finds them too):
``claude-code``, ``openclaw``, ``pi``, ``letta``. Mechanisms only a preset uses are off by default
(``CompactionSettings.cut``, ``SummarySettings.style``, ``TtlPrune``, ``HistoryShare``,
``MemoryFlush``, ``SlidingWindow``, ``SummarySettings.max_words``, ``MemoryWarning``), so every
other policy is unchanged by them.

Window-relative sizes: ``Policy.for_window(window, fixed)`` resolves the ``*_share`` fields into
the absolute ones for one window (and, with ``shares_of_free_window``, for the window minus the
fixed prefix); the engine hands layers the resolved policy.
"""

from __future__ import annotations

from ctxengine.policy.compaction_settings import (
    CompactionMode,
    CompactionSettings,
    CutStrategy,
    HistoryShare,
    MemoryFlush,
    MemoryWarning,
    Restore,
    SessionMemory,
    SessionNotes,
    SlidingWindow,
    SummarizerKind,
    SummarySettings,
    SummaryStyle,
)
from ctxengine.policy.fields import SETTINGS
from ctxengine.policy.harnesses import PRESETS
from ctxengine.policy.layer_settings import (
    CacheClear,
    ClearedResults,
    EvictionSettings,
    EvictOrder,
    IdleClear,
    OverflowGuard,
    PromptCache,
    ToolResultBudget,
    TtlPrune,
)
from ctxengine.policy.record import (
    AT_LEAST_ONE,
    KEEP_MAX_SHARE,
    RESERVE_MAX_SHARE,
    RESTORE_MAX_SHARE,
    SHARES,
    SUMMARY_MAX_SHARE,
    Policy,
    range_problems,
    set_base_lookup,
)
from ctxengine.policy.settings_base import Settings

NONE = Policy.compose(
    CompactionSettings(mode="none"),
    name="none",
    description="Send everything; count overflows.",
)

RECORDED = Policy.compose(
    CompactionSettings(mode="recorded"),
    name="recorded",
    description="What the recorded session did: its compactions, summaries and restores.",
)

DEFAULT = Policy.compose(
    ToolResultBudget(max_chars=20_000, window_share=0.05, exempt_tools=(), weigh_tokens=True),
    IdleClear(),
    CacheClear(trigger=0.7, target=0.6, reach_target=True),
    OverflowGuard(),
    CompactionSettings(
        reserve_output=8_000,
        buffer=3_000,
        at_share=0.9,
        cold_at_share=0.5,
        min_gain=0.1,
        keep_recent_tokens=10_000,
    ),
    SessionNotes(max_share=0.01),
    SessionMemory(
        keep_min_tokens=3_000,
        keep_min_messages=0,
        keep_min_share=0.04,
        keep_max_share=0.08,
        gain_factor=2.0,
        identifier_index=False,
    ),
    Restore(
        files=5,
        file_share=0.05,
        total_share=0.25,
        from_history=True,
        shell_reads=True,
        changes=5,
        change_share=0.03,
        error_tokens=1_000,
        rules_tokens=2_000,
        ledger_tokens=2_500,
        skeleton_tokens=100_000,
        skeleton_share=0.15,
        skeleton_block_tokens=6_000,
        skeleton_user_tokens=300,
        room_tokens=6_000,
    ),
    name="default",
    shares_of_free_window=True,
)
"""Ours, tuned for *read recall* (what the agent read: user messages, tool results, attachments;
``ctxengine.eval.fidelity``), the probes and cost on the tuning half of the shared transcripts
(``bench.held_out``) at 64,000 and 200,000 tokens.

Every share is a share of the *free* window (the window minus system prompt and tool
definitions, which nothing can shrink; ``shares_of_free_window``), the cache-aware clearing's
trigger and target included, so the policy behaves alike whether the prefix takes an eighth of
the window or two fifths of it:

- tool results over min(20,000 chars, 5% of the free window x 4) go to the artifact store behind
  a 2 KB preview that lists their identifiers, unless that preview would be longer (the agent
  pages them back with ``retrieve``); dense text (Chinese) is weighed by its tokens, not its
  chars (at 2%, read recall on the tuning half at 64,000 was 0.786 against 0.881);
- session notes are kept in the background ($0); above 90% of the free window, and always above
  window - min(max output, 8,000) - 3,000 (room for a response the size models really write, and
  for the token estimate's error: the ledger's predictions are within 0.2% at the median and 4.5%
  at the 95th percentile of the shared sessions), and when it frees at least 20% of it, the notes
  (cut to 1% of the free window) become the summary (session-memory compaction, $0);
- that compaction keeps the newest 4-8% of the free window verbatim (at least 3,000 tokens where
  a safe cut allows) and re-attaches what the agent read and re-uses: the latest read of the 5
  most recently read files, shell reads (``cat``, ``sed -n``, ``nl``) included (5% each, 25% in
  all); the pinned rules, file ledger and latest failure; the last change of the 5 most recently
  modified files (3% each); the *transcript skeleton* (``ctxengine.summary.skeleton``: the user's and the
  agent's own words, every tool-call input verbatim, tool results left out; 15% of the free window,
  newest first, each block at most 6,000 tokens, an earlier user message at most 300) as
  append-only segments that lead the prefix (the next compaction reads them from the prompt cache);
  then the plan and todos;
- what is restored leaves 6,000 tokens of room under the threshold (the skeleton's oldest
  segments give way first), so the next compaction is not due a turn or two later;
- the latest user request is quoted whole after the summary when the kept part lost it;
- when the prompt cache has expired (no call for 5 minutes) the threshold drops to 50% of the free
  window: the request is written in full anyway, but what the agent read in the half before it is
  kept (at 10%, read recall on the tuning half at 200,000 was 0.957 against 0.999);
- no identifier lists (they buy no content; a cleared result keeps its line of identifiers);
- idle clear, cache-aware clearing of old results only once the context passes 70% of the free
  window (down to 60%, in batches worth a cache miss; before ``reach_target``, clearing from 40%
  cleared results the agent went on to quote while half the window was free: 0.970 against 0.999
  at 200,000), and only when the batch
  reaches that target (``reach_target``: otherwise what fills the context is what clearing leaves,
  and clearing again every few turns, a cache miss each, kept compaction from ever running: the
  L23 fault's kind), and the overflow guard.

Measured with ``ctxengine bench`` (read recall, probe score, cost with re-fetch; docs/bench.md has the
tables, each half and what was looked at while choosing). The read-recall figures quoted above
were measured before line-number gutters stopped counting as words (``fidelity.GUTTER_RE``);
with the rule, default leads read recall at 64,000 on the whole corpus (0.952 against pi 0.913
and letta 0.916) and on the held-out half (0.945 against 0.902), letta leads the tuning half
(0.966 against 0.960).
"""

EVICT_OLDEST = DEFAULT.with_(
    DEFAULT.settings(CompactionSettings).with_(mode="none"),
    DEFAULT.settings(SessionMemory).with_(enabled=False),
    EvictionSettings(at_pressure=True, order="oldest"),
    name="evict-oldest",
    description="Default's $0 layers, then whole rounds evicted oldest first (no summary).",
)
EVICT_IMPORTANCE = EVICT_OLDEST.with_(
    EvictionSettings(at_pressure=True, order="importance"),
    name="evict-importance",
    description="Default's $0 layers, then whole rounds evicted least important first (seed 002).",
)
"""Two policies that compare eviction orders on the same footing (``ctxengine bench --policies
evict-oldest,evict-importance``): the default's cheap layers, then, above its compaction
threshold, whole API rounds leave the context with no summary, down to 45% of the free window;
oldest first, or by seed 002's importance score (``layers.importance``)."""

BUILTIN: dict[str, Policy] = {p.name: p for p in (DEFAULT, NONE, RECORDED, EVICT_OLDEST, EVICT_IMPORTANCE)}


def presets() -> dict[str, Policy]:
    """The presets of other harnesses (``ctxengine.policy.harnesses``: claude-code, openclaw, pi, letta),
    by name. Kept apart from ``BUILTIN`` (ours)."""
    return PRESETS


def get_policy(name: str) -> Policy:
    """The built-in policy or preset called ``name``.

    Args:
        name: "default", "none", "recorded", "evict-oldest", "evict-importance", or a preset of
            another harness ("claude-code", "openclaw", "pi", "letta").

    Returns:
        The policy.

    Raises:
        KeyError: for an unknown name, listing the known ones.
    """
    found = BUILTIN.get(name) or presets().get(name)
    if found is None:
        raise KeyError(
            f"unknown policy {name!r}; known: {', '.join(sorted(BUILTIN))}; "
            f"presets: {', '.join(sorted(presets()))}"
        )
    return found


set_base_lookup(get_policy)

__all__ = [
    "AT_LEAST_ONE",
    "BUILTIN",
    "DEFAULT",
    "EVICT_IMPORTANCE",
    "EVICT_OLDEST",
    "KEEP_MAX_SHARE",
    "NONE",
    "RECORDED",
    "RESERVE_MAX_SHARE",
    "RESTORE_MAX_SHARE",
    "SETTINGS",
    "SHARES",
    "SUMMARY_MAX_SHARE",
    "CacheClear",
    "ClearedResults",
    "CompactionMode",
    "CompactionSettings",
    "CutStrategy",
    "EvictOrder",
    "EvictionSettings",
    "HistoryShare",
    "IdleClear",
    "MemoryFlush",
    "MemoryWarning",
    "OverflowGuard",
    "Policy",
    "PromptCache",
    "Restore",
    "SessionMemory",
    "SessionNotes",
    "Settings",
    "SlidingWindow",
    "SummarizerKind",
    "SummarySettings",
    "SummaryStyle",
    "ToolResultBudget",
    "TtlPrune",
    "get_policy",
    "presets",
    "range_problems",
]
