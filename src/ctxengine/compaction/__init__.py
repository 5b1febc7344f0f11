"""Compaction: session notes upkeep and the fallback chain of compactions, as plan + execute.

``plan_compaction`` (``plan``) decides, without side effects, whether a compaction is tried, which
path runs and where it cuts; ``Compactor`` (``chain``) runs the chain on that plan: session-memory
compaction (the notes as the summary, $0) -> summary compaction (the LLM summarizer when a model
is configured, else the structured summary, $0; a preset's cut and style) -> the latest request
quoted -> restore -> audit, and hands back a ``Compaction`` the engine commits (``commit``). The
overflow guard stays in the engine as the last resort. The circuit breaker follows Claude Code:
after ``breaker_failures`` (3) consecutive failed automatic compactions, automatic compaction
stops for the session and an event says so; a later success (a manual ``compact``) resets it.

Modules: ``plan`` (the pure plan), ``chain`` (the executor, ``Compactor``), ``notes`` (session
notes in line or in the background), ``session_memory`` (ours on the notes path: derived policy,
identifier index), ``summary`` (ours: the LLM summary, the $0 summary's focus, the latest request
quoted), ``styled`` (the presets' cut and style), ``summary_input`` (Letta's input fallbacks),
``restore``, ``audit``, ``breaker``, ``records`` (what the steps pass along).

May import: ``messages``, ``models``, ``policy``, ``layers``, ``summary``, ``llm``.
"""

from ctxengine.compaction.breaker import Breaker
from ctxengine.compaction.chain import Compactor
from ctxengine.compaction.notes import (
    MEMORY_FLUSH_LAYER,
    NOTES_LAYER,
    NotesJob,
    NotesOutcome,
    SessionNotes,
    run_notes_update,
)
from ctxengine.compaction.plan import CompactionPlan, cache_cold, plan_compaction
from ctxengine.compaction.records import Compaction, CompactionFailed, SummaryCall
from ctxengine.compaction.session_memory import REWRITE_SHARE
from ctxengine.compaction.styled import TURN_PREFIX_PROMPT, TURN_PREFIX_SECTIONS, StyledSummarizer
from ctxengine.compaction.summary_input import (
    CHARS_PER_TOKEN,
    FALLBACK_MIN_CHARS,
    FALLBACK_OVERHEAD_CHARS,
    clamp_summary_input,
)
from ctxengine.summary.llm.summarizer import CONTINUATION

__all__ = [
    "CHARS_PER_TOKEN",
    "CONTINUATION",
    "FALLBACK_MIN_CHARS",
    "FALLBACK_OVERHEAD_CHARS",
    "MEMORY_FLUSH_LAYER",
    "NOTES_LAYER",
    "REWRITE_SHARE",
    "TURN_PREFIX_PROMPT",
    "TURN_PREFIX_SECTIONS",
    "Breaker",
    "Compaction",
    "CompactionFailed",
    "CompactionPlan",
    "Compactor",
    "NotesJob",
    "NotesOutcome",
    "SessionNotes",
    "StyledSummarizer",
    "SummaryCall",
    "cache_cold",
    "clamp_summary_input",
    "plan_compaction",
    "run_notes_update",
]
