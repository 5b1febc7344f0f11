"""The settings of compaction: when it runs, where it cuts, the summary, the notes, the restore.

One record per step, with the reference defaults (Claude Code's unless the record names another
source), validated at construction (``ctxengine.policy.settings_base``). Units are in the field
comments: tokens are model tokens, chars Python characters, a share a fraction 0 to 1 of the
window (of the *free* window, window minus system prompt and tools, under
``Policy.shares_of_free_window``). A ``Policy`` composes them (``Policy.compose``); a policy file
has one table per record (``[compaction]``, ``[summary]``, ...). The records of the layers before
compaction are in ``ctxengine.policy.layer_settings``.
"""

from __future__ import annotations

from typing import ClassVar, Literal

from ctxengine.policy.settings_base import Settings

CompactionMode = Literal["summary", "recorded", "none"]
SummarizerKind = Literal["auto", "structured", "llm"]
# Where a summary compaction cuts (``ctxengine.layers.cut_plans``): "tail" keeps the newest
# ``keep_recent_tokens`` (ours); "all" summarizes everything (Claude Code's full compaction);
# "pi" keeps at most ``keep_recent_tokens``, cutting only at a user or assistant message, with a
# split-turn prefix (pi, OpenClaw); "sliding-window" evicts a growing share of the messages
# (Letta), falling back to "all".
CutStrategy = Literal["tail", "all", "pi", "sliding-window"]
# How the $0 structured summary (and the LLM summary's headings) look (``ctxengine.summary.structured``).
SummaryStyle = Literal["ctxengine", "claude-code", "openclaw", "pi", "letta"]


class CompactionSettings(Settings, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """When a compaction runs and what it keeps.

    Read by ``ctxengine.compaction``, ``layers.summary_compact`` and ``layers.cut_plans``. The
    threshold is Claude Code's auto-compact threshold, window - min(max output,
    ``reserve_output``) - ``buffer`` (167,000 of 200,000), or ``at_share`` of the window when that
    is lower.

    Attributes:
        mode: "summary" (compact), "recorded" (what the recorded session did), "none".
        reserve_output: tokens kept for the model's output (Claude Code's
            MAX_OUTPUT_TOKENS_FOR_SUMMARY).
        buffer: tokens of head-room below the effective window (Claude Code's
            AUTOCOMPACT_BUFFER_TOKENS).
        at_share: also compact above this share of the window (earlier = cheaper).
        min_gain: share of the window a compaction must free, else it is not made.
        cold_at_share: when the prompt cache has expired (no call for ``PromptCache.ttl_s``) the
            next request is written in full anyway, so a compaction then costs no extra cache
            miss: compact above this lower share of the window (0: off) ...
        cold_min_gain: ... freeing at least this share of the window.
        keep_recent_tokens: tokens of tail kept verbatim after a compaction ...
        keep_recent_min_messages: ... with at least this many text messages.
        keep_recent_share: caps ``keep_recent_tokens`` at this share of the window (0: off).
        cut: where a summary compaction cuts (``CutStrategy``): "tail" keeps the newest
            ``keep_recent_tokens`` (ours); "all" summarizes everything (Claude Code's full
            compaction); "pi" keeps at most ``keep_recent_tokens``, cutting only at a user or
            assistant message, with a split-turn prefix (pi, OpenClaw); "sliding-window" evicts a
            growing share of the messages (Letta), falling back to "all".
        breaker_failures: consecutive failed automatic compactions after which automatic
            compaction stops, a count (Claude Code's MAX_CONSECUTIVE_AUTOCOMPACT_FAILURES).
    """

    table: ClassVar[str] = "compaction"
    flat: ClassVar[dict[str, str]] = {
        "mode": "compaction",
        "reserve_output": "compact_reserve_output",
        "buffer": "compact_buffer",
        "at_share": "compact_at_share",
        "min_gain": "compact_min_gain",
        "cold_at_share": "cold_compact_at_share",
        "cold_min_gain": "cold_compact_min_gain",
        "keep_recent_tokens": "keep_recent_tokens",
        "keep_recent_min_messages": "keep_recent_min_messages",
        "keep_recent_share": "keep_recent_share",
        "cut": "compact_cut",
        "breaker_failures": "breaker_failures",
    }
    at_least_one: ClassVar[frozenset[str]] = frozenset({"breaker_failures"})
    shares: ClassVar[frozenset[str]] = frozenset({"at_share", "cold_at_share", "keep_recent_share"})

    mode: CompactionMode = "summary"
    reserve_output: int = 20_000
    buffer: int = 13_000
    at_share: float = 1.0
    min_gain: float = 0.1
    cold_at_share: float = 0.0
    cold_min_gain: float = 0.02
    keep_recent_tokens: int = 30_000
    keep_recent_min_messages: int = 5
    keep_recent_share: float = 0.0
    cut: CutStrategy = "tail"
    breaker_failures: int = 3


class SummarySettings(Settings, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """The summary a compaction writes: which summarizer, its size and look.

    Read by ``ctxengine.summary.structured`` and ``ctxengine.summary.llm.summarizer``.

    Attributes:
        summarizer: "auto" is the LLM when one is configured, else the $0 structured summary;
            "structured" or "llm" choose one.
        style: how the $0 structured summary (and the LLM summary's headings) look.
        max_tokens: tokens the summary may take ...
        max_share: ... and at most this share of the window.
        llm_max_output: tokens the LLM summary may take.
        user_message_chars: chars per user message kept verbatim in the summary.
        identifiers_max: identifiers listed in the summary, a count.
        stages: OpenClaw's summarizeInStages (LLM summaries only): a span over the chunk budget
            is split into this many parts by token share, summarized apart, then merged in one
            more call (1: off).
        turn_prefix_max_tokens: tokens of pi's split-turn prefix summary (0.5 x reserve).
        max_words: Letta: 300 words (sliding window) ... (0: no word limit).
        all_max_words: ... 500 words (summarize-all fallback).
        tool_return_chars: Letta's summarizer-input fallbacks, when the transcript exceeds window
            x 4 chars: tool returns clamped to this many chars (0: off), then ...
        input_share: ... the transcript middle-truncated to window x share x 4 chars (0: both
            fallbacks off) ...
        middle_keep: ... keeping this share of that budget from the head and as much from the
            tail.
    """

    table: ClassVar[str] = "summary"
    flat: ClassVar[dict[str, str]] = {
        "summarizer": "summarizer",
        "style": "summary_style",
        "max_tokens": "summary_max_tokens",
        "max_share": "summary_max_share",
        "llm_max_output": "summary_llm_max_output",
        "user_message_chars": "summary_user_message_chars",
        "identifiers_max": "summary_identifiers_max",
        "stages": "summary_stages",
        "turn_prefix_max_tokens": "turn_prefix_max_tokens",
        "max_words": "summary_max_words",
        "all_max_words": "summary_all_max_words",
        "tool_return_chars": "summary_tool_return_chars",
        "input_share": "summary_input_share",
        "middle_keep": "summary_middle_keep",
    }
    at_least_one: ClassVar[frozenset[str]] = frozenset({"max_tokens", "llm_max_output", "stages"})
    shares: ClassVar[frozenset[str]] = frozenset({"max_share", "input_share", "middle_keep"})

    summarizer: SummarizerKind = "auto"
    style: SummaryStyle = "ctxengine"
    max_tokens: int = 12_000
    max_share: float = 0.06
    llm_max_output: int = 8_192
    user_message_chars: int = 2_000
    identifiers_max: int = 400
    stages: int = 1
    turn_prefix_max_tokens: int = 8_192
    max_words: int = 0
    all_max_words: int = 0
    tool_return_chars: int = 0
    input_share: float = 0.0
    middle_keep: float = 0.3


class SlidingWindow(Settings, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """Letta's sliding window (``layers.cut_plans``, cut "sliding-window"): evict a growing share.

    Evicts round(share x N) messages, the share starting at ``start_share`` and growing by
    ``step_share`` before each try, until the rest fits ``goal_share`` of the window. Letta: 0.3,
    0.1, 0.7.

    Attributes:
        start_share: share of the messages evicted at the first try.
        step_share: share of the messages added before each further try.
        goal_share: share of the window the rest must fit.
    """

    table: ClassVar[str] = "sliding_window"
    flat: ClassVar[dict[str, str]] = {
        "start_share": "sliding_start_share",
        "step_share": "sliding_step_share",
        "goal_share": "sliding_goal_share",
    }
    shares: ClassVar[frozenset[str]] = frozenset({"start_share", "step_share", "goal_share"})

    start_share: float = 0.3
    step_share: float = 0.1
    goal_share: float = 0.7


class HistoryShare(Settings, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """OpenClaw's ``maxHistoryShare`` (``layers.history_share``): the span to summarize is pruned.

    The span is pruned to ``max_share`` of the window by dropping its oldest token-share chunk
    (pairs repaired); the dropped part is summarized first. OpenClaw: 0.5, SAFETY_MARGIN 1.2.

    Attributes:
        max_share: share of the window the span may take (0: off).
        margin: OpenClaw's SAFETY_MARGIN on the "new content" test, a factor.
    """

    table: ClassVar[str] = "history_share"
    flat: ClassVar[dict[str, str]] = {"max_share": "history_max_share", "margin": "history_share_margin"}
    shares: ClassVar[frozenset[str]] = frozenset({"max_share"})

    max_share: float = 0.0
    margin: float = 1.2


class SessionNotes(Settings, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """The session notes kept in the background (``ctxengine.summary.notes``; Claude Code session memory).

    The notes are the summary of a session-memory compaction and what the memory flush updates.

    Attributes:
        first_tokens: conversation tokens before the first notes update.
        every_tokens: then an update each time this many more tokens ...
        every_tool_calls: ... and this many tool calls have accrued.
        max_tokens: tokens of the notes as a summary (Claude Code: 12,000) ...
        max_share: ... and at most this share of the window (0: off).
    """

    table: ClassVar[str] = "session_notes"
    flat: ClassVar[dict[str, str]] = {
        "first_tokens": "notes_first_tokens",
        "every_tokens": "notes_every_tokens",
        "every_tool_calls": "notes_every_tool_calls",
        "max_tokens": "notes_max_tokens",
        "max_share": "notes_max_share",
    }
    at_least_one: ClassVar[frozenset[str]] = frozenset({"max_tokens"})
    shares: ClassVar[frozenset[str]] = frozenset({"max_share"})

    first_tokens: int = 10_000
    every_tokens: int = 5_000
    every_tool_calls: int = 3
    max_tokens: int = 12_000
    max_share: float = 0.0


class SessionMemory(Settings, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """Session-memory compaction (``layers.session_memory_compact``): the notes are the summary ($0).

    Claude Code's SM-compact, gated off there: keeps 10,000-40,000 tokens and at least 5 text
    messages (Claude Code). The identifier index after the notes is ours.

    Attributes:
        enabled: whether the layer runs once listed.
        keep_min_tokens: tokens kept at least ...
        keep_max_tokens: ... and at most, where a safe cut allows.
        keep_min_share: caps ``keep_min_tokens`` at this share of the window (0: off).
        keep_max_share: caps ``keep_max_tokens`` at this share of the window (0: off).
        keep_min_messages: text messages kept, a count (None:
            ``CompactionSettings.keep_recent_min_messages``).
        gain_factor: it must free ``CompactionSettings.min_gain`` x this of the window.
        identifier_index: whether the exact identifiers are listed after the notes (ours) ...
        index_max_share: ... within this share of the window (0: the summary budget) ...
        index_segments: ... in append-only segments the prompt cache keeps serving.
    """

    table: ClassVar[str] = "session_memory"
    flat: ClassVar[dict[str, str]] = {
        "enabled": "session_memory",
        "keep_min_tokens": "sm_keep_min_tokens",
        "keep_max_tokens": "sm_keep_max_tokens",
        "keep_min_share": "sm_keep_min_share",
        "keep_max_share": "sm_keep_max_share",
        "keep_min_messages": "sm_keep_min_messages",
        "gain_factor": "sm_gain_factor",
        "identifier_index": "sm_identifier_index",
        "index_max_share": "sm_index_max_share",
        "index_segments": "sm_index_segments",
    }
    shares: ClassVar[frozenset[str]] = frozenset({"keep_min_share", "keep_max_share", "index_max_share"})

    enabled: bool = True
    keep_min_tokens: int = 10_000
    keep_max_tokens: int = 40_000
    keep_min_share: float = 0.0
    keep_max_share: float = 0.0
    keep_min_messages: int | None = None
    gain_factor: float = 1.0
    identifier_index: bool = True
    index_max_share: float = 0.0
    index_segments: bool = False


class MemoryFlush(Settings, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """OpenClaw's pre-compaction memory flush: the session notes brought up to date before compacting.

    Once per compaction, when the context passes threshold - ``soft_tokens``, the session notes
    are brought up to date (durable memory, outside the context). OpenClaw: softThresholdTokens
    4,000. Off by default (a ``Policy`` that does not list the record has it off).

    Attributes:
        enabled: whether the flush runs once listed.
        soft_tokens: tokens before the compaction threshold at which the flush runs.
    """

    table: ClassVar[str] = "memory_flush"
    flat: ClassVar[dict[str, str]] = {"enabled": "memory_flush", "soft_tokens": "memory_flush_soft_tokens"}

    enabled: bool = True
    soft_tokens: int = 4_000


class MemoryWarning(Settings, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """Letta's memory warning (``memory_warning_threshold``, 75% of the window).

    An event only: the context is not changed.

    Attributes:
        at_share: share of the window above which the warning is emitted (0: off).
    """

    table: ClassVar[str] = "memory_warning"
    flat: ClassVar[dict[str, str]] = {"at_share": "warn_at_share"}
    shares: ClassVar[frozenset[str]] = frozenset({"at_share"})

    at_share: float = 0.0


class Restore(Settings, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """What is re-attached after a compaction (``ctxengine.summary.restore``).

    Claude Code's post-compaction attachments: 5 files, 5,000 tokens each, 50,000 in all, the
    todos, the instruction files. The changes, the error, the shell reads and the transcript
    skeleton are ours. Each ``*_share`` caps its size at that share of the window (0: the size
    alone).

    Attributes:
        files: recently read files restored, a count ...
        file_tokens: ... tokens each ...
        total_tokens: ... tokens in all.
        todos: whether the todo list is restored.
        from_history: ours: restore files read anywhere before the cut, not only in the span just
            summarized (a second compaction otherwise forgets the first's files).
        changes: ours: the last change (new text) of this many modified files ...
        change_tokens: ... tokens each at most.
        error_tokens: ours: tokens of the latest error with its call (0: off); pinned: carried by
            every compaction whatever room is left (``compaction.pinned``).
        rules_tokens: ours: tokens of the user's standing rules and corrections, verbatim, pinned
            (``rules``; 0: off).
        ledger_tokens: ours: tokens of the file ledger, pinned (``file_ledger``; 0: off).
        shell_reads: ours: whether files printed by cat / sed -n / nl count as read.
        skeleton_tokens: ours: the transcript skeleton (``ctxengine.summary.skeleton``): the user's and
            the agent's own words from before the cut, newest first within this many tokens
            (0: off), as append-only segments that lead the prefix ...
        skeleton_block_tokens: ... each block at most this many tokens ...
        skeleton_user_tokens: ... and each earlier user message at most this many (its head; the
            latest request is quoted whole apart from it; 0: the block cap alone).
        room_tokens: ours: tokens an automatic compaction leaves free under its threshold, room
            for the next turns; what it restores gives way to it (the skeleton's oldest segments
            first; 0: restores may fill up to the threshold). A compaction that leaves less is
            due again a turn or two later, and each is a cache write of all that follows the
            cached prefix.
        instruction_files: the names of the instruction files re-attached.
        file_share: caps ``file_tokens``, a share of the window.
        total_share: caps ``total_tokens``, a share of the window.
        change_share: caps ``change_tokens``, a share of the window.
        skeleton_share: caps ``skeleton_tokens``, a share of the window.
    """

    table: ClassVar[str] = "restore"
    flat: ClassVar[dict[str, str]] = {
        "files": "restore_files",
        "file_tokens": "restore_file_tokens",
        "total_tokens": "restore_total_tokens",
        "todos": "restore_todos",
        "from_history": "restore_from_history",
        "changes": "restore_changes",
        "change_tokens": "restore_change_tokens",
        "error_tokens": "restore_error_tokens",
        "rules_tokens": "restore_rules_tokens",
        "ledger_tokens": "restore_ledger_tokens",
        "shell_reads": "restore_shell_reads",
        "skeleton_tokens": "restore_skeleton_tokens",
        "skeleton_block_tokens": "restore_skeleton_block_tokens",
        "skeleton_user_tokens": "restore_skeleton_user_tokens",
        "room_tokens": "restore_room_tokens",
        "instruction_files": "instruction_files",
        "file_share": "restore_file_share",
        "total_share": "restore_total_share",
        "change_share": "restore_change_share",
        "skeleton_share": "restore_skeleton_share",
    }
    shares: ClassVar[frozenset[str]] = frozenset(
        {"file_share", "total_share", "change_share", "skeleton_share"}
    )

    files: int = 5
    file_tokens: int = 5_000
    total_tokens: int = 50_000
    todos: bool = True
    from_history: bool = False
    changes: int = 0
    change_tokens: int = 4_000
    error_tokens: int = 0
    rules_tokens: int = 0
    ledger_tokens: int = 0
    shell_reads: bool = False
    skeleton_tokens: int = 0
    skeleton_block_tokens: int = 1_000
    skeleton_user_tokens: int = 0
    room_tokens: int = 0
    instruction_files: tuple[str, ...] = ("CLAUDE.md", "AGENTS.md")
    file_share: float = 0.0
    total_share: float = 0.0
    change_share: float = 0.0
    skeleton_share: float = 0.0


COMPACTION_SETTINGS: tuple[type[Settings], ...] = (
    CompactionSettings,
    SummarySettings,
    SlidingWindow,
    HistoryShare,
    SessionNotes,
    SessionMemory,
    MemoryFlush,
    MemoryWarning,
    Restore,
)
"""The records of this module, in the order a compaction reads them."""
