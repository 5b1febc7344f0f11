"""What the LLM summarizer asks and how its answer is read: the prompts and the nine sections.

Claude Code's nine-section summary (``NINE_SECTIONS``, ``PROMPT``; wording ours): the model
drafts in an ``<analysis>`` block that ``strip_analysis`` removes before the summary enters the
context (``formatCompactSummary``). ``MERGE_INSTRUCTIONS`` is OpenClaw's merge of partial
summaries (``summarizeInStages``); ``CONTINUATION`` opens the summary message. Data and one pure
function.
"""

from __future__ import annotations

import re

NINE_SECTIONS = (
    "Primary Request and Intent",
    "Key Technical Concepts",
    "Files and Code Sections",
    "Errors and fixes",
    "Problem Solving",
    "All user messages",
    "Pending Tasks",
    "Current Work",
    "Optional Next Step",
)
MERGE_INSTRUCTIONS = (
    "\n\nThe conversation was summarized in parts, oldest first; the partial summaries are below. "
    "Merge them into one cohesive summary. MUST PRESERVE: active tasks with their status (in "
    "progress, blocked, pending), batch progress such as 5/17, the user's last request and what "
    "was being done about it, decisions and their rationale, TODOs, open questions, constraints "
    "and promised follow-ups. Favour recent context: the agent must know what it was doing."
)
CONTINUATION = (
    "This session is being continued from a previous conversation that ran out of context. "
    "The summary below covers the earlier portion of the conversation; continue from where it "
    "left off without asking the user to repeat anything.\n\n"
)

SYSTEM = (
    "You are summarizing a conversation between a user and a coding agent so that the agent can "
    "continue the work. TEXT ONLY: do not call tools, do not continue the conversation, do not "
    "answer questions in it."
)
PROMPT = """Write a detailed summary of the conversation {where}.

First think in an <analysis> block: go through it in order and note the user's explicit requests, \
the approach taken, decisions, file names, code, errors and how they were fixed, and user feedback.

Then write the summary inside <summary></summary> with exactly these numbered sections:
1. Primary Request and Intent
2. Key Technical Concepts
3. Files and Code Sections (with the important snippets)
4. Errors and fixes
5. Problem Solving
6. All user messages (every one that is not a tool result, verbatim where short)
7. Pending Tasks
8. Current Work (precisely what was being done just before this summary)
9. Optional Next Step (only if it follows directly from the latest request; quote it)

Keep every exact identifier verbatim, never shortened or reconstructed: file paths, URLs, UUIDs, \
hashes, ids, hostnames, ports, numbers, error messages. In section 6 keep verbatim every standing \
instruction or correction the user gave ("always", "never", "use X, not Y", "from now on"); when \
a later one corrects an earlier one, keep the later and say which it replaced.{extra}"""


def strip_analysis(text: str) -> str:
    """The summary without its ``<analysis>`` scratchpad; the ``<summary>`` body when tagged."""
    text = re.sub(r"(?s)<analysis>.*?</analysis>", "", text)
    m = re.search(r"(?s)<summary>(.*?)(?:</summary>|$)", text)
    return (m.group(1) if m else text).strip()
