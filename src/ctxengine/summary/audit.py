"""Auditing a summary, and the quality figures every compaction event carries.

The audit follows OpenClaw's compaction quality guard: required sections present; the exact
identifiers that still matter present (those of the summarized span that the kept messages, the
open tasks or the latest request mention; when none do, up to 12 from the span's last 10
messages, as OpenClaw); the latest user request reflected (at least 2 shared keywords when it has
3 or more, else 1; stop-words ignored).

The quality figures (seed 002): compression ratio (tokens after / before), tokens saved,
identifier retention (identifiers of the summarized span present in the summary), and whether the
latest user request survived verbatim.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

import msgspec

from ctxengine.messages import identifiers
from ctxengine.messages.model import Message, Text, ToolCall, ToolResult

MAX_AUDIT_IDENTIFIERS = 12  # OpenClaw: up to 12 identifiers ...
AUDIT_TAIL_MESSAGES = 10  # ... taken from the last 10 messages
_WORD = re.compile(r"[A-Za-z][A-Za-z0-9_\-]{2,}|[\u4e00-\u9fff]{2,}")
STOP_WORDS = frozenset(
    {
        "the",
        "and",
        "for",
        "that",
        "this",
        "with",
        "you",
        "your",
        "are",
        "was",
        "were",
        "have",
        "has",
        "had",
        "not",
        "but",
        "can",
        "will",
        "would",
        "should",
        "could",
        "please",
        "from",
        "into",
        "onto",
        "then",
        "than",
        "them",
        "they",
        "their",
        "there",
        "here",
        "what",
        "when",
        "where",
        "which",
        "who",
        "why",
        "how",
        "all",
        "any",
        "some",
        "also",
        "just",
        "like",
        "make",
        "sure",
        "let",
        "lets",
        "use",
        "using",
        "need",
        "want",
        "about",
        "more",
        "most",
        "very",
        "its",
        "it's",
    }
)


def span_text(messages: Sequence[Message]) -> str:
    """All text a summarizer sees of ``messages`` (text, tool inputs, tool result text)."""
    parts: list[str] = []
    for m in messages:
        for b in m.blocks:
            if isinstance(b, Text):
                parts.append(b.text)
            elif isinstance(b, ToolCall):
                parts.append(b.input if isinstance(b.input, str) else msgspec.json.encode(b.input).decode())
            elif isinstance(b, ToolResult):
                parts.extend(p.text for p in b.content if isinstance(p, Text))
    return "\n".join(parts)


def span_identifiers(messages: Sequence[Message]) -> set[str]:
    """Identifiers of ``messages``, extracted block by block (cached per text)."""
    out: set[str] = set()
    for m in messages:
        for b in m.blocks:
            if isinstance(b, Text):
                out |= identifiers.extract(b.text)
            elif isinstance(b, ToolCall):
                raw = b.input if isinstance(b.input, str) else msgspec.json.encode(b.input).decode()
                out |= identifiers.extract(raw)
            elif isinstance(b, ToolResult):
                for p in b.content:
                    if isinstance(p, Text):
                        out |= identifiers.extract(p.text)
    return out


# Text a harness puts in a user message that the user did not type: Claude Code's
# <system-reminder> context, IDE notices, background-task notifications, local command output
# and caveats, and its interruption markers (the request stays the one the user typed before).
HARNESS_TAGS = (
    "system-reminder",
    "ide_opened_file",
    "ide_selection",
    "task-notification",
    "local-command-stdout",
    "local-command-stderr",
    "local-command-caveat",
)
_TAGS = "|".join(HARNESS_TAGS)
_HARNESS_TEXT = re.compile(
    rf"\s*(?:(?:<({_TAGS})>.*?</\1>\s*)+|\[Request interrupted by user(?: for tool use)?\]\s*)", re.S
)


def harness_text(text: str) -> bool:
    """Whether ``text`` is only what a harness adds to a user message (``HARNESS_TAGS`` blocks,
    an interruption marker), none of it typed by the user."""
    return _HARNESS_TEXT.fullmatch(text) is not None


def user_request(msg: Message) -> str:
    """The user-typed text of ``msg`` (its ``Text`` blocks, those a harness added left out:
    ``harness_text``; verbatim, its spacing kept, so that a quote of it is the request as typed)
    when it is a user message of the conversation (or a prompt queued while the agent worked,
    ``_queued_prompt``; not another harness attachment, not a message the reader tagged as
    injected, ``_injected``, not an engine-made message) and it is not blank; else "". A message
    that also carries tool results counts by its text: an API request puts the user's words after
    the tool results in one user message (the roles must alternate), and a text typed while tools
    ran is the newest request all the same."""
    if msg.role != "user" or _injected(msg):
        return ""
    if msg.origin != "message" and not (msg.origin == "attachment" and _queued_prompt(msg)):
        return ""
    texts = [b.text for b in msg.blocks if isinstance(b, Text)]
    typed = "\n".join(t for t in texts if not harness_text(t) and not _MEDIA_LINE.fullmatch(t))
    return typed if typed.strip() else ""


REQUEST_QUOTE_LABEL = "\n\nThe user's latest request (verbatim):\n"  # before the quote in a summary
REQUEST_ANYWHERE_MIN_CHARS = 200  # a request this long found in a summary is no coincidence


def request_kept(latest: str, messages: Sequence[Message]) -> bool:
    """Whether the user's latest request ``latest`` is in ``messages`` whole, where a model reads
    it as what the user asked: its own message (a user message of the conversation whose typed
    text, ``user_request``, is it), or an engine-made user message (a summary, the notes) that
    holds it as the user's words (``request_in_summary``). Assistant text, tool results, harness
    blocks (a ``<system-reminder>`` beside a tool result) and other typed messages never count: a
    short request ("run the tests", "continue") is often in them among other words, and is then
    not the request the model must answer."""
    for m in messages:
        if m.role != "user":
            continue
        if m.origin == "message" or (m.origin == "attachment" and _queued_prompt(m)):
            if user_request(m) == latest:
                return True
        elif m.origin != "attachment" and request_in_summary(latest, m.text()):
            return True
    return False


def request_in_summary(latest: str, text: str) -> bool:
    """Whether a summary's (or the notes') ``text`` holds the request ``latest`` as the user's
    words: quoted after ``REQUEST_QUOTE_LABEL``, as lines of their own (a bullet of "All user
    messages", the notes' Task specification), or anywhere when it is at least
    ``REQUEST_ANYWHERE_MIN_CHARS`` characters long (no coincidence then)."""
    if latest not in text:
        return False
    if len(latest) >= REQUEST_ANYWHERE_MIN_CHARS or REQUEST_QUOTE_LABEL + latest in text:
        return True
    return re.search(r"(?:\A|\n)(?:[-*>] )?" + re.escape(latest) + r"(?=\n|\Z)", text) is not None


# the line the tool-result budget shows for an image or document of a user message it offloaded
# (``layers.tool_result_budget.media_line``, artifact ``user-media/<message id>/part-<k>``): the
# engine's, not the user's, so a request shown with it is the request all the same
_MEDIA_LINE = re.compile(
    r"\[(?:image|document)\b[^\n]*\boffloaded: too large for the context;[^\n]* user-media/[^\n]*\]"
)


def _queued_prompt(msg: Message) -> bool:
    """A prompt the user typed while the agent was working, which Claude Code records as an
    attachment (``queued_command``) and sends as the user's text at the next call."""
    return msg.meta.get("attachment_type") == "queued_command"


def _injected(msg: Message) -> bool:
    """A user message a harness injected rather than the user typed, as its reader tagged it:
    Codex's context messages (``meta["context"]``: ``<environment_context>``, ``<turn_aborted>``,
    ``# AGENTS.md instructions``...) and its developer / system messages (``meta["role"]``)."""
    meta = msg.meta
    return bool(meta) and (bool(meta.get("context")) or meta.get("role") in ("developer", "system"))


def latest_request_index(messages: Sequence[Message]) -> int | None:
    """Index of the newest user-typed request (``user_request``) in ``messages``; None when none."""
    for i in range(len(messages) - 1, -1, -1):
        if user_request(messages[i]):
            return i
    return None


def latest_user_request(messages: Sequence[Message]) -> str:
    """The newest user-typed text (``user_request``) of ``messages``; "" when none."""
    for m in reversed(messages):
        if t := user_request(m):
            return t
    return ""


def keywords(text: str) -> set[str]:
    return {w.lower() for w in _WORD.findall(text)} - STOP_WORDS


class Audit(msgspec.Struct, kw_only=True):
    """The result of auditing one summary."""

    missing_sections: list[str]
    missing_identifiers: list[str]
    request_reflected: bool
    identifiers_checked: int

    @property
    def passed(self) -> bool:
        return not self.missing_sections and not self.missing_identifiers and self.request_reflected

    @property
    def failures(self) -> int:
        return (
            len(self.missing_sections) + len(self.missing_identifiers) + (0 if self.request_reflected else 1)
        )

    def reasons(self) -> str:
        """The failure reasons, phrased for a retry prompt."""
        out = []
        if self.missing_sections:
            out.append("Missing required sections: " + ", ".join(self.missing_sections) + ".")
        if self.missing_identifiers:
            out.append(
                "These exact identifiers must appear verbatim: " + ", ".join(self.missing_identifiers) + "."
            )
        if not self.request_reflected:
            out.append(
                "The user's latest request is not reflected; state it and what is being done about it."
            )
        return " ".join(out)


def identifiers_that_matter(
    span: Sequence[Message], kept: Sequence[Message], extra_text: str = ""
) -> list[str]:
    """Identifiers of the summarized ``span`` that the ``kept`` messages or ``extra_text`` (open
    tasks, the latest request) mention; when none, the newest ones of the span's last messages."""
    span_ids = span_identifiers(span)
    later = span_identifiers(kept) | identifiers.extract(extra_text)
    matter = sorted(span_ids & later)
    if not matter:
        tail = span_identifiers(span[-AUDIT_TAIL_MESSAGES:])
        matter = sorted(tail)
    return matter[:MAX_AUDIT_IDENTIFIERS]


def audit_summary(
    summary: str,
    *,
    required_sections: Sequence[str],
    span: Sequence[Message],
    kept: Sequence[Message],
    latest_request: str,
    extra_text: str = "",
) -> Audit:
    """Audit ``summary`` (see the module docstring)."""
    low = summary.lower()
    missing_sections = [s for s in required_sections if s.lower() not in low]
    summary_ids = identifiers.extract(summary)
    wanted = identifiers_that_matter(span, kept, latest_request + "\n" + extra_text)
    missing_ids = [i for i in wanted if i not in summary_ids and i not in summary]
    req = keywords(latest_request)
    if not req:
        reflected = True
    else:
        need = 2 if len(req) >= 3 else 1
        reflected = len(req & keywords(summary)) >= need
    return Audit(
        missing_sections=missing_sections,
        missing_identifiers=missing_ids,
        request_reflected=reflected,
        identifiers_checked=len(wanted),
    )


class Quality(msgspec.Struct, kw_only=True):
    """Quality figures of one compaction (seed 002). Tokens."""

    tokens_before: int
    tokens_after: int
    compression_ratio: float  # after / before
    tokens_saved: int
    identifier_retention: float | None  # share of the span's identifiers present in the summary
    # None when the span had no user request; the engine replaces it by its check of the projection
    # after the compaction (``ContextEngine.latest_request_verbatim``: True, "partial" or False)
    latest_request_verbatim: bool | None


def quality(
    *, tokens_before: int, tokens_after: int, span: Sequence[Message], summary: str, kept: Sequence[Message]
) -> Quality:
    """The quality figures of a compaction that replaced ``span`` by ``summary``."""
    span_ids = span_identifiers(span)
    retention = None
    if span_ids:
        in_summary = identifiers.extract(summary)
        retention = round(sum(1 for i in span_ids if i in in_summary or i in summary) / len(span_ids), 4)
    latest = latest_user_request([*span, *kept])
    verbatim: bool | None = None
    if latest:
        verbatim = request_in_summary(latest, summary) or request_kept(latest, kept)
    return Quality(
        tokens_before=tokens_before,
        tokens_after=tokens_after,
        compression_ratio=round(tokens_after / tokens_before, 4) if tokens_before else 1.0,
        tokens_saved=tokens_before - tokens_after,
        identifier_retention=retention,
        latest_request_verbatim=verbatim,
    )
