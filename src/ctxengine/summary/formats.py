"""The presets' summary formats: each harness's headings, size limits, prompts and inputs.

The same facts (``SummaryState`` plus the span of this compaction) are rendered as each harness's
summary looks (``summary_styles.render_style``): Claude Code's nine sections between its
continuation and resume lines; OpenClaw's required headings (at most 12 exact identifiers from
the last 10 messages, 8 tool failures of 240 chars, 3 preserved turns of 600 chars); pi's
sections in a ``<summary>`` user message; Letta's sections in a ``system_alert`` clipped to
50,000 chars. ``STYLE_SECTIONS`` / ``STYLE_PROMPTS`` are the audited headings and the LLM
prompts of the same formats; ``StyleInput`` is what a style needs besides the state. Data only.
"""

from __future__ import annotations

import re

import msgspec

from ctxengine.messages.model import Message

CC_CONTINUE = (
    "This session is being continued from a previous conversation that ran out of context. The "
    "summary below covers the earlier portion of the conversation."
)
CC_RESUME = (
    "Please continue the conversation from where we left it off without asking the user any "
    "further questions. Continue with the last task that you were asked to work on."
)
PI_INTRO = "The conversation history before this point was compacted into the following summary:"
NOT_EXTRACTED = "(not extracted: structured summary, no model involved)"
OPENCLAW_HEADINGS = (
    "## Decisions",
    "## Open TODOs",
    "## Constraints/Rules",
    "## Pending user asks",
    "## Exact identifiers",
)
OPENCLAW_MAX_IDENTIFIERS = 12  # extracted identifiers: at most 12 ...
OPENCLAW_IDENTIFIER_MESSAGES = 10  # ... from the last 10 messages
OPENCLAW_MAX_FAILURES = 8  # ## Tool Failures: 8 entries ...
OPENCLAW_FAILURE_CHARS = 240  # ... of 240 chars
OPENCLAW_RECENT_TURNS = 3  # recentTurnsPreserve
OPENCLAW_TURN_CHARS = 600  # per preserved message
PI_SECTIONS = (
    "## Goal",
    "## Constraints & Preferences",
    "## Progress",
    "## Key Decisions",
    "## Next Steps",
    "## Critical Context",
)
LETTA_SECTIONS = (
    "High level goals",
    "What happened",
    "Important details",
    "Errors and fixes",
    "Lookup hints",
)
LETTA_ALL_SECTIONS = (*LETTA_SECTIONS[:4], "Current state", "Optional next step", LETTA_SECTIONS[4])
LETTA_CLIP_CHARS = 50_000  # clip_chars, then "... [summary truncated to fit]"
CONSTRAINT_RE = re.compile(
    r"(?i)\b(must|never|always|do not|don't|dont|should not|shouldn't|only|avoid|without)\b"
)


class StyleInput(msgspec.Struct, kw_only=True):
    """What a style needs besides the cumulative state: the messages summarized by this
    compaction (``span``, oldest first; for pi without the split turn's prefix), the prefix of a
    split turn (pi), the number of messages hidden so far (Letta), whether everything was
    summarized (Letta's "all" mode), and word / token limits."""

    span: list[Message] = msgspec.field(default_factory=list)
    turn_prefix: list[Message] = msgspec.field(default_factory=list)
    hidden_messages: int = 0
    all_mode: bool = False
    max_words: int = 0
    turn_prefix_max_tokens: int = 8_192
    timestamp: float | None = None
    turn_text: str = ""  # the split turn's section, already cut to ``turn_prefix_max_tokens``


STYLE_SECTIONS: dict[str, tuple[str, ...]] = {
    "openclaw": tuple(h.removeprefix("## ") for h in OPENCLAW_HEADINGS),
    "pi": (
        "Goal",
        "Constraints & Preferences",
        "Progress",
        "Done",
        "In Progress",
        "Blocked",
        "Key Decisions",
        "Next Steps",
        "Critical Context",
    ),
    "letta": LETTA_SECTIONS,
}
"""The headings an LLM summary must carry in each style (audited); Claude Code's nine sections
are ``llm_summary.NINE_SECTIONS``."""

STYLE_PROMPTS: dict[str, str] = {
    "openclaw": (
        "Summarize the conversation {where} so the agent can continue the work. Use exactly these "
        "headings, in this order:\n## Decisions\n## Open TODOs\n## Constraints/Rules\n"
        "## Pending user asks\n## Exact identifiers\nPut literal values (paths, URLs, ids, hashes, "
        "hosts, ports) in the last one. Never omit unresolved user asks. Preserve active tasks with "
        "their status, batch progress, the user's last request and what was being done about it, "
        "decisions and their rationale, open questions and promised follow-ups; favour recent "
        "context. Keep every opaque identifier exactly as written, without shortening or "
        "reconstructing it. Write in the conversation's main language; do not translate code, "
        "paths, identifiers or error messages.{extra}"
    ),
    "pi": (
        "Summarize the conversation {where}. Do not continue the conversation and do not answer "
        "questions in it. Use this format:\n\n## Goal\n## Constraints & Preferences\n## Progress\n"
        "### Done\n### In Progress\n### Blocked\n## Key Decisions\n## Next Steps\n"
        "## Critical Context\n\nKeep exact file paths, function names and error messages.{extra}"
    ),
    "letta": (
        "Your job is to summarize the history of a conversation {where} between an AI agent and a "
        "user, in the first person, as the agent. Keep every identifier (file paths, ids, URLs, "
        "error codes) verbatim. Use these sections:\nHigh level goals\nWhat happened\n"
        "Important details\nErrors and fixes\nLookup hints\nStay under {words} words.{extra}"
    ),
}
"""The summary prompts of the presets (wording ours, content after the references); each takes
``{where}`` and ``{extra}`` (and Letta's ``{words}``)."""
