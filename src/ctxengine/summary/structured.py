"""The structured summary without an LLM: the embedded default summarizer ($0).

It follows the content of Claude Code's nine-section compaction summary where it can be computed
without a model: the primary request and every user message verbatim (each cut to a cap), files
read and modified, errors and what followed them, pending todos from todo/plan tool calls, the
current plan (the latest plan proposed with Claude Code's ``ExitPlanMode``, and whether the user
approved it: ``current_plan``), the current work (the latest assistant text), and the exact
identifiers (paths, URLs, ids) of the span, newest first. State accumulates across compactions
(pi's cumulative file lists), so a second compaction extends the first summary rather than
summarising a summary.

Pure: it reads messages and returns text; the engine decides where it goes. The size is bounded by
``max_tokens`` (counted with the caller's counter): sections are cut from the least valuable end.

The presets render the same facts in their harness's format and size limit
(``render_style``): Claude Code's nine sections; OpenClaw's required headings (Decisions, Open
TODOs, Constraints/Rules, Pending user asks, Exact identifiers: at most 12, from the last 10
messages) with tool failures, preserved recent turns and file lists; pi's Goal / Constraints &
Preferences / Progress / Key Decisions / Next Steps / Critical Context in a ``<summary>`` user
message with the split-turn context and the cumulative ``<read-files>`` / ``<modified-files>``;
Letta's sections within its word limit in a ``system_alert``. Sections a model would write from
judgement are stated as not extracted. ``STYLE_PROMPTS`` / ``STYLE_SECTIONS`` are the LLM
prompts and audited headings of the same formats; ``style_envelope`` wraps an LLM summary as the
harness delivers it.

The parts, one job each: ``summary_state`` (``SummaryState`` and ``update``, which folds a span
into it), ``summary_render`` (ctxengine's own format within a token budget), ``summary_formats``
(the presets' headings, limits and prompts) and ``summary_styles`` (rendering in a preset's
format). This module re-exports the names its callers use.
"""

from __future__ import annotations

from ctxengine.summary.formats import (
    CC_CONTINUE,
    CC_RESUME,
    LETTA_SECTIONS,
    OPENCLAW_HEADINGS,
    PI_INTRO,
    PI_SECTIONS,
    STYLE_PROMPTS,
    STYLE_SECTIONS,
    StyleInput,
)
from ctxengine.summary.render import identifier_index, render
from ctxengine.summary.state import (
    PLAN_APPROVED,
    PLAN_PROPOSED,
    READ_TOOLS,
    SummaryState,
    current_plan,
    update,
)
from ctxengine.summary.styles import ordered_identifiers, render_style, style_envelope

__all__ = [
    "CC_CONTINUE",
    "CC_RESUME",
    "LETTA_SECTIONS",
    "OPENCLAW_HEADINGS",
    "PI_INTRO",
    "PI_SECTIONS",
    "PLAN_APPROVED",
    "PLAN_PROPOSED",
    "READ_TOOLS",
    "STYLE_PROMPTS",
    "STYLE_SECTIONS",
    "StyleInput",
    "SummaryState",
    "current_plan",
    "identifier_index",
    "ordered_identifiers",
    "render",
    "render_style",
    "style_envelope",
    "update",
]
