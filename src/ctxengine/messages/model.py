"""The neutral message model: what every reader produces and every layer and writer consumes.

Provider-agnostic (DESIGN principle 5): a ``Message`` is a role plus a tuple of content blocks.
Tool results live in ``user`` messages as ``ToolResult`` blocks (the Anthropic Messages shape);
the OpenAI writer splits them into ``role: "tool"`` messages. Structs are ``msgspec`` structs:
cheap to build by the hundred thousand, and frozen where a layer must never edit in place (a
layer that changes a block builds a new one, so the original stays in the transcript).

Data flows one way: reader -> ``Session`` -> engine (layers) -> projection -> writer.
"""

from __future__ import annotations

import operator
from collections.abc import Sequence
from typing import Any, Literal, get_args

import msgspec

Role = Literal["system", "user", "assistant"]
ROLES: frozenset[str] = frozenset(get_args(Role))
"""The roles a ``Message`` takes (``Message`` refuses any other)."""

# Where a message came from. ``message`` is an ordinary turn; ``attachment`` is harness-injected
# context (Claude Code attachment records: file contents, todo reminders, skill listings);
# ``compact_summary`` / ``compact_restore`` belong to a *recorded* compaction and are only kept by
# policy ``recorded``; ``summary`` / ``restore`` / ``notice`` are produced by our own layers.
Origin = Literal[
    "message", "attachment", "compact_summary", "compact_restore", "summary", "restore", "notice"
]


class Text(msgspec.Struct, frozen=True, tag="text"):
    """Plain text content.

    Attributes:
        text: the text.
    """

    text: str


class Thinking(msgspec.Struct, frozen=True, tag="thinking"):
    """Model reasoning.

    ``signature`` and ``encrypted`` must be passed back unmodified where the provider needs them.

    Attributes:
        thinking: the reasoning text.
        signature: Anthropic's signature of the thinking block.
        redacted: whether this is redacted thinking.
        encrypted: OpenAI reasoning items' encrypted content.
    """

    thinking: str
    signature: str = ""
    redacted: bool = False
    encrypted: str = ""


class ToolCall(msgspec.Struct, frozen=True, tag="tool_call"):
    """A tool call by the assistant.

    Attributes:
        id: the call's id, which its ``ToolResult`` names.
        name: the tool's name.
        input: the parsed JSON arguments, or a raw string for free-form (custom) tools such as
            Codex's ``apply_patch``.
    """

    id: str
    name: str
    input: dict[str, Any] | str


class Image(msgspec.Struct, frozen=True, tag="image"):
    """An image.

    Tokens are counted from the pixel size (Anthropic: width x height / 750), never from the
    base64 length.

    Attributes:
        media_type: the MIME type (``image/png``, ...).
        data: the image, base64 (never cut by a character cap); empty when given by ``url``.
        url: where the image is, when it is not inline.
        width: width in pixels when known (read from the image header by the reader:
            ``ctxengine.messages.media.image_size``).
        height: height in pixels when known.
    """

    media_type: str
    data: str = ""
    url: str = ""
    width: int | None = None
    height: int | None = None


class Document(msgspec.Struct, frozen=True, tag="document"):
    """A document (PDF or plain text source) attached to a message.

    Attributes:
        media_type: the MIME type (``application/pdf``, ``text/plain``).
        data: the content (base64 for a PDF).
        title: the document's title, when known.
    """

    media_type: str
    data: str = ""
    title: str = ""


ResultPart = Text | Image | Document


class ToolResult(msgspec.Struct, frozen=True, tag="tool_result"):
    """The result of a tool call.

    Attributes:
        call_id: the id of the ``ToolCall`` it answers.
        content: text and/or images/documents.
        is_error: whether the tool reported an error.
        name: the tool's name, when the format records it (helps layers and writers).
    """

    call_id: str
    content: tuple[ResultPart, ...]
    is_error: bool = False
    name: str = ""


Block = Text | Thinking | ToolCall | ToolResult | Image | Document


class Usage(msgspec.Struct, frozen=True):
    """Provider-reported token usage of one model call, normalised to Anthropic's semantics.

    The four input fields are disjoint, so ``total_input`` is their sum. Readers of OpenAI-style
    usage (where ``prompt_tokens`` already includes cached tokens) subtract the cached part into
    ``cache_read_tokens``. All fields in tokens.

    Attributes:
        input_tokens: input tokens neither read from nor written to the cache.
        cache_read_tokens: input tokens read from the prompt cache.
        cache_write_tokens: input tokens written to the cache, 5-minute (or unspecified TTL).
        cache_write_1h_tokens: input tokens written to the 1-hour cache.
        output_tokens: tokens the model wrote.
    """

    input_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0
    cache_write_1h_tokens: int = 0
    output_tokens: int = 0

    @property
    def total_input(self) -> int:
        """Everything the model read at this call, in tokens."""
        return (
            self.input_tokens + self.cache_read_tokens + self.cache_write_tokens + self.cache_write_1h_tokens
        )

    @property
    def is_zero(self) -> bool:
        """Whether nothing was reported: no input and no output tokens."""
        return self.total_input == 0 and self.output_tokens == 0


CACHE_ANCHOR = "cache_anchor"
"""``Message.meta`` key: the message ends a stretch that stays the same from request to request
(the transcript skeleton's segments, ``ctxengine.summary.skeleton``). The Anthropic writer puts a prompt-cache
breakpoint at the end of the last such message, so the next compaction reads the stretch from the
cache instead of writing it again."""


class Message(msgspec.Struct):
    """One message of a conversation.

    An assistant message is one model call.

    Attributes:
        role: "system", "user" or "assistant" (tool results ride in user messages).
        blocks: the content blocks, in order.
        id: unique within a session.
        timestamp: seconds since the epoch (UTC), or None.
        origin: where the message came from: "message" (an ordinary turn), "attachment"
            (harness-injected context), "compact_summary" / "compact_restore" (a recorded
            compaction's), "summary" / "restore" / "notice" (our own layers').
        usage: what the provider reported for an assistant message's call (None when the format
            does not record it).
        model: the model that answered.
        compaction: the index of the recorded compaction this message belongs to, if any.
        meta: format-specific extras (e.g. ``attachment_type``, ``sidechain``; ``CACHE_ANCHOR``).
    """

    role: Role
    blocks: tuple[Block, ...]
    id: str
    timestamp: float | None = None
    origin: Origin = "message"
    usage: Usage | None = None
    model: str | None = None
    compaction: int | None = None
    meta: dict[str, Any] = msgspec.field(default_factory=dict)

    def __post_init__(self) -> None:
        """Refuse a role no provider accepts (Anthropic and OpenAI alike take only these three
        here; a ``"human"`` or ``"tool"`` message would be written out and refused by the API)."""
        if self.role not in ROLES:
            raise ValueError(
                f"Message role {self.role!r} is not one a provider accepts: use 'system', 'user' or "
                "'assistant' (tool results ride in user messages as ToolResult blocks)"
            )

    @property
    def tool_calls(self) -> list[ToolCall]:
        """The message's ``ToolCall`` blocks, in order."""
        return [b for b in self.blocks if isinstance(b, ToolCall)]

    @property
    def tool_results(self) -> list[ToolResult]:
        """The message's ``ToolResult`` blocks, in order."""
        return [b for b in self.blocks if isinstance(b, ToolResult)]

    def text(self) -> str:
        """The message's text: its ``Text`` blocks (not thinking, not tool payloads).

        Returns:
            The blocks' texts joined by newlines; empty when there are none.
        """
        return "\n".join(b.text for b in self.blocks if isinstance(b, Text))


class RecordedCompaction(msgspec.Struct, frozen=True):
    """A compaction the recorded session performed (Claude Code ``compact_boundary``).

    ``at`` is the index in ``Session.messages`` of the first message after the boundary: the
    recorded context after it is the compaction's summary/restore messages plus what follows.
    ``pre_tokens``/``post_tokens`` are the boundary metadata (tokens), None when absent.
    """

    index: int
    at: int
    trigger: str = "auto"
    pre_tokens: int | None = None
    post_tokens: int | None = None
    timestamp: float | None = None


class Malformed(msgspec.Struct, frozen=True):
    """A record that could not be read: file, 1-based line (or record index), and why."""

    path: str
    line: int
    error: str

    def __str__(self) -> str:
        return f"{self.path}:{self.line}: {self.error}"


SessionFormat = Literal["claude-code", "codex", "swe-agent", "openai-chat"]


class Session(msgspec.Struct):
    """One recorded agent session, as read from a transcript.

    Attributes:
        source: where it was read from (the transcript's path).
        format: the transcript's format ("claude-code", "codex", "swe-agent", "openai-chat").
        messages: the full history in order (everything ever sent, including what a recorded
            compaction later dropped).
        model: the model of the session, when recorded.
        session_id: the session's id, when recorded.
        system: the system prompt when the format records it (Codex base instructions, OpenAI
            system messages); Claude Code does not record it.
        compactions: the compactions the recorded session performed.
        malformed: the records that could not be read.
        skipped: counts records that are neither messages nor context, by record type.
        parent: the source of the parent session for a sidechain (subagent) file, when that
            parent was found beside it.
        sidechain: whether this is a sidechain (subagent) session.
        name: distinguishes several sessions in one file (tau-bench: "task 3 trial 1").
        meta: format-specific extras.
    """

    source: str
    format: SessionFormat
    messages: list[Message]
    model: str | None = None
    session_id: str | None = None
    system: str = ""
    compactions: list[RecordedCompaction] = msgspec.field(default_factory=list)
    malformed: list[Malformed] = msgspec.field(default_factory=list)
    skipped: dict[str, int] = msgspec.field(default_factory=dict)
    parent: str | None = None
    sidechain: bool = False
    name: str = ""
    meta: dict[str, Any] = msgspec.field(default_factory=dict)

    @property
    def calls(self) -> list[int]:
        """Indices of assistant messages, i.e. the recorded model calls."""
        return [i for i, m in enumerate(self.messages) if m.role == "assistant"]


class TranscriptError(Exception):
    """A transcript cannot be read at all: missing path, unknown format, empty or binary file.
    The message is one line that names the path."""


def shared_prefix(prev: Sequence[Message], messages: Sequence[Message]) -> int:
    """How many leading messages ``messages`` shares with ``prev``, by identity (the same objects:
    a projection that only grew shares all of ``prev``). For the request writers' memos."""
    if len(messages) >= len(prev) and all(map(operator.is_, prev, messages)):
        return len(prev)
    n = 0
    for a, b in zip(prev, messages, strict=False):
        if a is not b:
            break
        n += 1
    return n
