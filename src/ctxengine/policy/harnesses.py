"""Presets: Claude Code, OpenClaw, pi and Letta, each rebuilt from ctxengine's own layers.

A preset is a ``Policy`` composed of settings records (``Policy.compose``): the cascade is the
same engine for every harness; what differs is which layers run (a layer with an on/off switch
runs only when its record is listed), with which constants, where a compaction cuts
(``CompactionSettings.cut``) and how its summary looks (``SummarySettings.style``). The constants
are the ones recorded in ``../shared/reference/`` (``pi_letta_claudecode.md``, ``openclaw.md``);
each is named below so the tests can pin it. Without an LLM configured, a preset's summary is
ctxengine's $0 structured summary rendered in that harness's format and size limits
(``ctxengine.summary.structured.render_style``); with ``--llm`` the LLM summarizer writes it under that
harness's headings.

Every preset keeps two things of the engine that the harness itself does differently:
- the overflow guard (``OverflowGuard``: drop the oldest whole rounds when a request cannot fit)
  stands in for the harness's overflow recovery (compact and retry on the provider's "prompt is
  too long"), which a replay cannot model as an error;
- the loop guard (``CompactionSettings.min_gain``: a compaction must free 10% of the window)
  applies to every policy, so a harness that would compact on every call (Claude Code #2283,
  #6541) compacts when it gains something instead of re-summarizing the same history each call.
None of them lists identifiers in its cleared or offloaded results
(``ClearedResults.keep_identifiers`` is ours).

What each preset follows and leaves out is in its constant's docstring.
"""

from __future__ import annotations

from ctxengine.policy.compaction_settings import (
    CompactionSettings,
    HistoryShare,
    MemoryFlush,
    MemoryWarning,
    Restore,
    SessionMemory,
    SlidingWindow,
    SummarySettings,
)
from ctxengine.policy.layer_settings import (
    ClearedResults,
    IdleClear,
    OverflowGuard,
    ToolResultBudget,
    TtlPrune,
)
from ctxengine.policy.record import Policy

NO_LIMIT = 10**12  # a cap that never binds (the harness has none)

# ---------------------------------------------------------------- Claude Code

CC_MAX_OUTPUT_FOR_SUMMARY = 20_000  # MAX_OUTPUT_TOKENS_FOR_SUMMARY: reserved for the output
CC_AUTOCOMPACT_BUFFER = 13_000  # AUTOCOMPACT_BUFFER_TOKENS: threshold = effective window - this
CC_TOOL_RESULT_CHARS = 50_000  # per tool result
CC_MESSAGE_RESULTS_CHARS = 200_000  # per message
CC_PREVIEW_CHARS = 2_000  # the <persisted-output> 2 KB preview
CC_IDLE_GAP_S = 3_600.0  # time-based microcompact: 60 min gap ...
CC_IDLE_KEEP = 5  # ... keeping the newest 5 results
CC_SM_KEEP_MIN_TOKENS = 10_000  # session-memory compaction keeps 10,000 ...
CC_SM_KEEP_MAX_TOKENS = 40_000  # ... to 40,000 tokens ...
CC_SM_KEEP_MIN_MESSAGES = 5  # ... and at least 5 text messages
CC_RESTORE_FILES = 5  # post-compaction file attachments: 5 files ...
CC_RESTORE_FILE_TOKENS = 5_000  # ... 5,000 tokens each ...
CC_RESTORE_TOTAL_TOKENS = 50_000  # ... 50,000 in all
CC_BREAKER_FAILURES = 3  # MAX_CONSECUTIVE_AUTOCOMPACT_FAILURES

CLAUDE_CODE = Policy.compose(
    ToolResultBudget(
        max_chars=CC_TOOL_RESULT_CHARS,
        message_max_chars=CC_MESSAGE_RESULTS_CHARS,
        preview_chars=CC_PREVIEW_CHARS,
        exempt_tools=("read",),
    ),
    IdleClear(gap_s=CC_IDLE_GAP_S, keep_recent=CC_IDLE_KEEP),
    ClearedResults(keep_identifiers=False),
    OverflowGuard(),
    CompactionSettings(
        reserve_output=CC_MAX_OUTPUT_FOR_SUMMARY,
        buffer=CC_AUTOCOMPACT_BUFFER,
        at_share=1.0,
        cut="all",
        keep_recent_min_messages=CC_SM_KEEP_MIN_MESSAGES,
        breaker_failures=CC_BREAKER_FAILURES,
    ),
    SummarySettings(
        style="claude-code",
        max_tokens=CC_MAX_OUTPUT_FOR_SUMMARY,
        max_share=1.0,
        llm_max_output=CC_MAX_OUTPUT_FOR_SUMMARY,
    ),
    SessionMemory(
        keep_min_tokens=CC_SM_KEEP_MIN_TOKENS, keep_max_tokens=CC_SM_KEEP_MAX_TOKENS, identifier_index=False
    ),
    Restore(
        files=CC_RESTORE_FILES,
        file_tokens=CC_RESTORE_FILE_TOKENS,
        total_tokens=CC_RESTORE_TOTAL_TOKENS,
        todos=True,
    ),
    name="claude-code",
    description="Claude Code: auto-compact at window - min(max output, 20,000) - 13,000, "
    "session-memory compaction first, then the nine-section summary.",
)
"""Claude Code (reference C1).

Follows: the tool-result budget (50,000 chars per tool, Read opted out; 200,000 per message; over
the cap the result goes to the artifact store behind a 2 KB ``<persisted-output>`` preview,
decided once per call id); the time-based microcompact, on as the seed describes (60 min gap, the
newest 5 results kept; Claude Code ships it gated off); auto-compact above
window - min(max output, 20,000) - 13,000 (167,000 of 200,000); session-memory compaction first
(the notes as the summary, keeping 10,000-40,000 tokens and at least 5 text messages), else the full
compaction: everything is summarized into the nine sections (Primary Request and Intent ... Optional
Next Step) within 20,000 tokens and no message is kept; then the post-compaction attachments: up
to 5 recently read files (5,000 tokens each, 50,000 in all, skipping those in the kept tail), the
todo list / plan, the instruction files; 3 consecutive failures open the breaker.

Leaves out: the cached microcompact (Anthropic-internal ``cache_edits``), the ``clear_tool_uses``
API edit, skills and deferred-tool attachments, the PreCompact/SessionStart hooks, the
prompt-too-long retry of the summarizer only where it runs with an LLM (the LLM path has it), and
the warning/error buffers (they inform the user, they change nothing sent).
"""

# ---------------------------------------------------------------- pi, and OpenClaw (which embeds pi)

PI_RESERVE_TOKENS = 16_384  # pi DEFAULT_COMPACTION_SETTINGS.reserveTokens
PI_KEEP_RECENT_TOKENS = 20_000  # pi keepRecentTokens
OPENCLAW_RESERVE_FLOOR = 20_000  # reserveTokensFloor: reserveTokens is raised to at least this
OPENCLAW_RESERVE = max(PI_RESERVE_TOKENS, OPENCLAW_RESERVE_FLOOR)
OPENCLAW_MAX_HISTORY_SHARE = 0.5  # maxHistoryShare
OPENCLAW_TOOL_RESULT_CHARS = 16_000  # DEFAULT_MAX_LIVE_TOOL_RESULT_CHARS
OPENCLAW_TOOL_RESULT_SHARE = 0.3  # MAX_TOOL_RESULT_CONTEXT_SHARE: cap <= floor(window x 0.3) x 4
OPENCLAW_IMPORTANT_TAIL_CHARS = 4_000  # tail = min(30% of the budget, 4,000) when it matters
OPENCLAW_SUMMARY_MAX_TOKENS = int(0.8 * OPENCLAW_RESERVE)  # pi generateSummary: 0.8 x reserve
OPENCLAW_FLUSH_SOFT_TOKENS = 4_000  # memory flush softThresholdTokens (docs)
OPENCLAW_SUMMARY_PARTS = 2  # summarizeInStages DEFAULT_PARTS: summarized apart, then merged
OPENCLAW_PRUNE_TTL_S = 300.0  # context pruning ttl "5m"
OPENCLAW_PRUNE_KEEP_LAST_ASSISTANTS = 3
OPENCLAW_PRUNE_SOFT_RATIO = 0.3
OPENCLAW_PRUNE_HARD_RATIO = 0.5
OPENCLAW_PRUNE_MIN_PRUNABLE_CHARS = 50_000
OPENCLAW_SOFT_TRIM_MAX_CHARS = 4_000
OPENCLAW_SOFT_TRIM_HEAD_CHARS = 1_500
OPENCLAW_SOFT_TRIM_TAIL_CHARS = 1_500

PI_SUMMARY_MAX_TOKENS = int(0.8 * PI_RESERVE_TOKENS)  # 13,107
PI_TURN_PREFIX_MAX_TOKENS = PI_RESERVE_TOKENS // 2  # 8,192

PI_COMPACTION = CompactionSettings(
    reserve_output=0,
    buffer=PI_RESERVE_TOKENS,
    at_share=1.0,
    cut="pi",
    keep_recent_tokens=PI_KEEP_RECENT_TOKENS,
)
"""pi's trigger (window - 16,384) and cut (``findCutPoint``, 20,000 tokens kept); OpenClaw's
with its reserve floor."""
NO_RESTORE = Restore(files=0, todos=False)  # pi, OpenClaw and Letta re-attach nothing

PI = Policy.compose(
    ClearedResults(keep_identifiers=False),
    OverflowGuard(),
    PI_COMPACTION,
    SummarySettings(
        style="pi",
        max_tokens=PI_SUMMARY_MAX_TOKENS,
        max_share=1.0,
        llm_max_output=PI_SUMMARY_MAX_TOKENS,
        turn_prefix_max_tokens=PI_TURN_PREFIX_MAX_TOKENS,
    ),
    NO_RESTORE,
    name="pi",
    description="pi: compact above window - 16,384, keep the newest 20,000 tokens, summary as a "
    "user message with cumulative file lists.",
)
"""pi (reference A).

Follows: compaction when the context exceeds window - 16,384; ``findCutPoint``: walk back from the
newest message to 20,000 tokens, then cut at the first user or assistant message at or after that
message (never at a tool result: about 20,000 tokens are kept); a cut inside a turn summarizes
the turn's prefix apart (Original Request / Early Progress / Context for Suffix, within 8,192
tokens) under "Turn Context (split turn)"; the summary (Goal, Constraints & Preferences, Progress
(Done / In Progress / Blocked), Key Decisions, Next Steps, Critical Context; within 0.8 x 16,384 =
13,107 tokens) goes in as one user message, "The conversation history before this point was
compacted into the following summary:" + ``<summary>``; a later compaction extends the earlier
one; the ``<read-files>`` / ``<modified-files>`` lists accumulate across compactions.

Leaves out: pi's read/bash/grep output limits (they live in pi's tools, outside the context
engine: the recorded results are taken as they were), the overflow auto-retry (the overflow guard
stands in), branch summaries. No tool-result budget, no clearing, no restore: pi has none.
"""


OPENCLAW = Policy.compose(
    ToolResultBudget(
        max_chars=OPENCLAW_TOOL_RESULT_CHARS,
        window_share=OPENCLAW_TOOL_RESULT_SHARE,
        message_max_chars=NO_LIMIT,
        preview_chars=OPENCLAW_TOOL_RESULT_CHARS,
        tail_chars=OPENCLAW_IMPORTANT_TAIL_CHARS,
        exempt_tools=(),
    ),
    TtlPrune(
        ttl_s=OPENCLAW_PRUNE_TTL_S,
        keep_last_assistants=OPENCLAW_PRUNE_KEEP_LAST_ASSISTANTS,
        soft_ratio=OPENCLAW_PRUNE_SOFT_RATIO,
        hard_ratio=OPENCLAW_PRUNE_HARD_RATIO,
        min_prunable_chars=OPENCLAW_PRUNE_MIN_PRUNABLE_CHARS,
        soft_max_chars=OPENCLAW_SOFT_TRIM_MAX_CHARS,
        head_chars=OPENCLAW_SOFT_TRIM_HEAD_CHARS,
        tail_chars=OPENCLAW_SOFT_TRIM_TAIL_CHARS,
    ),
    ClearedResults(keep_identifiers=False),
    OverflowGuard(),
    PI_COMPACTION.with_(buffer=OPENCLAW_RESERVE),
    HistoryShare(max_share=OPENCLAW_MAX_HISTORY_SHARE),
    SummarySettings(
        style="openclaw",
        max_tokens=OPENCLAW_SUMMARY_MAX_TOKENS,
        max_share=1.0,
        llm_max_output=OPENCLAW_SUMMARY_MAX_TOKENS,
        turn_prefix_max_tokens=PI_TURN_PREFIX_MAX_TOKENS,
        stages=OPENCLAW_SUMMARY_PARTS,
    ),
    MemoryFlush(soft_tokens=OPENCLAW_FLUSH_SOFT_TOKENS),
    NO_RESTORE,
    name="openclaw",
    description="OpenClaw: compact above window - max(16,384, 20,000), keep 20,000 tokens, "
    "required headings and identifier audit; cache-TTL pruning; tool results capped at 16,000 chars.",
)
"""OpenClaw (reference openclaw.md, sections 2, 4, 5): pi, which OpenClaw embeds, with OpenClaw's
settings and extensions.

Follows: compaction when the context exceeds window - max(16,384, 20,000) (pi's trigger with
OpenClaw's reserve floor: 180,000 of 200,000); pi's cut keeping the newest 20,000 tokens, only at a
user or assistant message, the prefix of a split turn summarized apart; the span to summarize
pruned to 50% of the window (``maxHistoryShare``) when the new content exceeds
window x 0.5 x 1.2, by dropping the oldest of two token-share chunks with pairing repair, the
dropped part summarized first; the safeguard summary with the required headings (Decisions, Open
TODOs, Constraints/Rules, Pending user asks, Exact identifiers: at most 12, from the last 10
messages), the tool failures (8, 240 chars each), the 3 preserved recent turns (600 chars per
message) and the ``<read-files>`` / ``<modified-files>`` lists, within floor(0.8 x 20,000) tokens;
with an LLM, the staged summary (``summarizeInStages``: a span over window x adaptive ratio -
4,096 tokens, of at least 4 messages, split into 2 parts by token share on tool-group boundaries,
each summarized apart, then one merge call over the partial summaries labelled oldest to most
recent with their UTC ranges; a part that fails keeps the parts done, marked partial), the
identifier audit and one retry; the live tool-result cap
min(16,000 chars, floor(30% of the window) x 4) keeping head + the important tail (4,000 chars);
the cache-TTL pruning extension (after 5 min without a call: soft-trim results over 4,000 chars
to 1,500 head + 1,500 tail above 30% of the window, hard-clear oldest-first to the placeholder
above 50% when the prunable results hold 50,000 chars or more; the 3 last assistant messages and
everything before the first user message protected); the pre-compaction memory flush (notes
brought up to date once per compaction, 4,000 tokens before the threshold; kept out of the context
as OpenClaw's ``memory/`` files are).

Without an LLM the summary is the $0 structured one, which needs no stages. Leaves out: the
pre-prompt precheck routes
(truncate-only vs compact), bootstrap-file caps (the replay has no workspace), AGENTS.md excerpts,
and pi's overflow retry (the overflow guard stands in). The pruned results are frozen per call id
(principle 4), where OpenClaw prunes only the request in flight.
"""


# ---------------------------------------------------------------- Letta

LETTA_TRIGGER_SHARE = 0.9  # SUMMARIZATION_TRIGGER_MULTIPLIER
LETTA_WARNING_SHARE = 0.75  # memory_warning_threshold
LETTA_SLIDING_SHARE = 0.3  # sliding_window_percentage: start share, also 1 - goal share
LETTA_SLIDING_STEP = 0.1  # the share grows by 0.1 before each try (first cut: 40%)
LETTA_SLIDING_WORDS = 300  # summary word limit, sliding window
LETTA_ALL_WORDS = 500  # summary word limit, summarize all
LETTA_TOOL_RETURN_CHARS = 5_000  # TOOL_RETURN_TRUNCATION_CHARS (fallback A)
LETTA_FALLBACK_B_SHARE = 0.6  # fallback B budget: window x 0.6 x 4 bytes ...
LETTA_MIDDLE_KEEP = 0.3  # ... keeping 30% head + 30% tail
LETTA_FUNCTION_RETURN_CHARS = 50_000  # FUNCTION_RETURN_CHAR_LIMIT

LETTA = Policy.compose(
    ToolResultBudget(
        max_chars=LETTA_FUNCTION_RETURN_CHARS,
        message_max_chars=NO_LIMIT,
        preview_chars=LETTA_FUNCTION_RETURN_CHARS,
        exempt_tools=(),
    ),
    ClearedResults(keep_identifiers=False),
    OverflowGuard(),
    CompactionSettings(reserve_output=0, buffer=0, at_share=LETTA_TRIGGER_SHARE, cut="sliding-window"),
    SlidingWindow(
        start_share=LETTA_SLIDING_SHARE,
        step_share=LETTA_SLIDING_STEP,
        goal_share=1.0 - LETTA_SLIDING_SHARE,
    ),
    SummarySettings(
        style="letta",
        max_words=LETTA_SLIDING_WORDS,
        all_max_words=LETTA_ALL_WORDS,
        tool_return_chars=LETTA_TOOL_RETURN_CHARS,
        input_share=LETTA_FALLBACK_B_SHARE,
        middle_keep=LETTA_MIDDLE_KEEP,
    ),
    MemoryWarning(at_share=LETTA_WARNING_SHARE),
    NO_RESTORE,
    name="letta",
    description="Letta: above 90% of the window evict the oldest 40% (then 50%, ...) of the "
    "messages behind a short summary; warning at 75%.",
)
"""Letta (reference B).

Follows: compaction above 90% of the window; the sliding window: evict round(share x N) of the N
in-context messages (system prompt counted), the share starting at 30% and growing by 10% before
each try (so the first cut is 40%), the cut searched back to an assistant message (at a point that
keeps tool pairs whole), until the system prompt + the rest fit 70% of the window; when no cut
works, or the rest is still over the trigger, summarize all (the newest round kept); the evicted
messages summarized in Letta's sections (High level goals, What happened, Important details,
Errors and fixes, Lookup hints; + Current state and Optional next step when summarizing all) within
300 words (500 for all), in Letta's ``system_alert`` wrapper; the summarizer's input clamped as
Letta's fallbacks do (tool returns to 5,000 chars, then a middle truncation keeping 30% head + 30%
tail of a window x 0.6 x 4 chars budget) when it exceeds that budget; tool returns cut at 50,000
chars (FUNCTION_RETURN_CHAR_LIMIT); the memory warning at 75% of the window (an event: the
warning message is off by default in Letta and changes nothing sent).

Leaves out: core memory blocks, archival/recall memory and the file tools (they are agent tools,
not context policy), self-compaction with the agent's own model (the LLM path uses the configured
model), the 3 compact-and-retry cycles on ContextWindowExceeded (the overflow guard stands in).
We apply the summarizer-input fallbacks up front when the input is over budget, where Letta
applies them after a failed request.
"""

PRESETS: dict[str, Policy] = {p.name: p for p in (CLAUDE_CODE, OPENCLAW, PI, LETTA)}
"""The four presets by name (``get_policy`` finds them)."""
