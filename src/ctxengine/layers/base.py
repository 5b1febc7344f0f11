"""What every layer gets and returns.

A layer is a pure function of a ``LayerContext`` (the current projection, its token estimates, the
budget and the policy) that returns a decision or None. It never touches the store, a reader or a
writer; the engine applies decisions, stores artifacts and records the ``LayerEvent``. Two kinds of
decision exist:
- ``Replacements``: tool results to show differently (offloaded preview, cleared placeholder),
  keyed by ``result_key(message id, call id)`` and frozen once made (DESIGN principle 4: same
  history, same bytes); the message id is part of the key because some agents reuse call ids.
  Images and documents attached to a user message itself (not to a tool result) are replaced
  the same way, one part at a time, keyed by ``user_part_key`` (their artifact id in the call id's
  place) and shown as a ``Text`` line after the message's own blocks;
- ``Cut``: the projection restarts at a view index, behind new prefix messages (a summary, a
  notice). Cut indices are always safe cut points, so pairs are never split.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import msgspec

from ctxengine.messages import identifiers
from ctxengine.messages.model import Block, Document, Image, Message, Text, ToolCall, ToolResult
from ctxengine.policy.layer_settings import ClearedResults
from ctxengine.policy.registry import Policy
from ctxengine.summary.audit import harness_text


class LayerEvent(msgspec.Struct, kw_only=True):
    """One decision of one layer. Tokens are predicted input tokens of the whole request."""

    layer: str
    reason: str
    tokens_before: int
    tokens_after: int
    llm_calls: int = 0
    llm_input_tokens: int = 0
    llm_output_tokens: int = 0
    llm_cost_usd: float = 0.0
    details: dict[str, Any] = msgspec.field(default_factory=dict)

    @property
    def tokens_saved(self) -> int:
        return self.tokens_before - self.tokens_after


@dataclass
class LayerContext:
    """The projection as a layer sees it. ``tokens[i]`` is the calibrated token estimate of
    ``view[i]``; ``predicted`` the predicted input tokens of the whole request (fixed prefix
    included); ``src[i]`` the history index of ``view[i]`` (-1 for messages the engine made)."""

    view: Sequence[Message]
    tokens: Sequence[int]
    src: Sequence[int]
    predicted: int
    window: int
    max_output: int
    policy: Policy
    now: float | None = None
    last_call: float | None = None
    frozen: Mapping[str, ToolResult] = field(default_factory=dict)  # result_key -> replacement shown
    count_text: Callable[[str], int] = len  # the engine's token counter (tokens of a text)
    scale: float = 1.0  # the ledger's calibration: ``tokens`` are counter tokens times this


@dataclass
class Replacements:
    """Tool results to replace (``result_key`` -> new result), images and documents of user
    messages to replace (``user_part_key`` -> the line shown instead), a user's text cut in
    place (``request_key`` -> the text shown instead) or tool calls of assistant messages whose
    input was cut in place (``result_key`` of the assistant message and the call -> the call
    shown instead), and the event that explains it."""

    results: dict[str, ToolResult]
    event: LayerEvent
    parts: dict[str, Text] = field(default_factory=dict)
    calls: dict[str, ToolCall] = field(default_factory=dict)


@dataclass
class Cut:
    """Restart the projection at ``keep_from`` (a view index) behind ``prefix`` messages."""

    keep_from: int
    prefix: list[Message]
    event: LayerEvent
    summarized: list[Message] = field(default_factory=list)  # the span that left the context


def result_key(message_id: str, call_id: str) -> str:
    """The key of one tool result in one message (decisions are frozen under it)."""
    return f"{message_id}\x00{call_id}"


def result_text(result: ToolResult) -> str:
    """The text parts of a tool result, joined."""
    return "\n".join(p.text for p in result.content if isinstance(p, Text))


def result_chars(result: ToolResult) -> int:
    """Characters of text in a tool result (images and documents are not counted here)."""
    return sum(len(p.text) for p in result.content if isinstance(p, Text))


def artifact_id(call_id: str) -> str:
    """The artifact id under which a tool result's original content is kept."""
    return f"tool-result/{call_id}"


def call_artifact_id(call_id: str) -> str:
    """The artifact id under which a tool call's whole input is kept when it was cut in place."""
    return f"tool-call/{call_id}"


def part_artifact_id(call_id: str, part: int) -> str:
    """The artifact id under which image or document ``part`` (1-based index in the result's
    content) of a tool result is kept."""
    return f"{artifact_id(call_id)}/part-{part}"


USER_MEDIA = "user-media"  # the artifact namespace of user messages' images and documents


def media_owner(msg: Message) -> str:
    """The name a user message's images and documents are kept under: its id, or for a message
    without one ``sha-`` and 12 hex digits of the SHA-256 of its parts' data and urls."""
    if msg.id:
        return msg.id
    digest = hashlib.sha256()
    for b in msg.blocks:
        if isinstance(b, Image | Document):
            digest.update(f"{b.media_type}\x00{b.data}\x00{getattr(b, 'url', '')}\x00".encode())
    return f"sha-{digest.hexdigest()[:12]}"


def user_part_artifact_id(owner: str, part: int) -> str:
    """The artifact id under which image or document ``part`` (1-based index in the message's
    blocks) of user message ``owner`` (``media_owner``) is kept."""
    return f"{USER_MEDIA}/{owner}/part-{part}"


def user_parts(msg: Message) -> list[tuple[int, str, Image | Document]]:
    """(1-based index in ``msg.blocks``, artifact id, part) of the images and documents attached
    to user message ``msg`` itself (those inside tool results are not listed); [] for a message
    of another role or without any."""
    if msg.role != "user" or not any(isinstance(b, Image | Document) for b in msg.blocks):
        return []
    owner = media_owner(msg)
    return [
        (k, user_part_artifact_id(owner, k), b)
        for k, b in enumerate(msg.blocks, 1)
        if isinstance(b, Image | Document)
    ]


REQUEST_TEXT = "request-text"  # the key's second part for a user's request cut in place


def request_key(message_id: str) -> str:
    """The key under which the text of user message ``message_id`` is replaced (the overflow
    guard's cut of a request too large for the window, ``overflow_guard.fit_request``)."""
    return result_key(message_id, REQUEST_TEXT)


def user_part_key(message_id: str, artifact: str) -> str:
    """The key of one image or document of one user message (``artifact``: its
    ``user_part_artifact_id``); decisions are frozen under it, beside ``result_key``'s."""
    return result_key(message_id, artifact)


def identifier_line(text: str, limit: int) -> str:
    """A line listing up to ``limit`` identifiers of ``text`` (empty when none)."""
    if limit <= 0:
        return ""
    ids = identifiers.extract_sorted(text)
    if not ids:
        return ""
    more = f" (+{len(ids) - limit} more)" if len(ids) > limit else ""
    return "identifiers: " + " ".join(ids[:limit]) + more


def cleared_result(result: ToolResult, policy: Policy, why: str) -> ToolResult:
    """A one-line placeholder for a cleared tool result (Claude Code's "[Old tool result content
    cleared]"), plus how to get it back and, with ``ClearedResults.keep_identifiers``, its
    identifiers."""
    c = ClearedResults.of(policy)
    text = result_text(result)
    way_back = f"; retrieve with artifact id {artifact_id(result.call_id)}" if c.name_retrieve else ""
    line = f"[Old tool result content cleared ({why}): {len(text):,} chars{way_back}]"
    if c.keep_identifiers:
        ids = identifier_line(text, c.identifiers_max)
        if ids:
            line += "\n" + ids
    return ToolResult(result.call_id, (Text(line),), result.is_error, result.name)


def message_with_results(msg: Message, replacements: Mapping[str, ToolResult | Text | ToolCall]) -> Message:
    """``msg`` with its tool results swapped for their replacements, its user-typed text swapped
    for a cut request's (``request_key``; what a harness added, ``audit.harness_text``, stays),
    and its offloaded images and documents (``user_part_key``) taken out and their lines added
    after its other blocks, in order (so the user's own text stays one piece); an assistant
    message with its tool calls swapped for those whose input was cut in place. Returns a new
    message, or ``msg`` itself when nothing applies."""
    if not replacements:
        return msg
    if msg.role == "assistant":
        return _with_calls(msg, replacements)
    if msg.role != "user":
        return msg
    changed = False
    blocks: list[Block] = []
    for b in msg.blocks:
        new = replacements.get(result_key(msg.id, b.call_id)) if isinstance(b, ToolResult) else None
        if isinstance(new, ToolResult):
            blocks.append(new)
            changed = True
        else:
            blocks.append(b)
    moved: dict[int, Text] = {}  # block index -> the line shown for it
    for k, aid, _ in user_parts(msg):
        line = replacements.get(user_part_key(msg.id, aid))
        if isinstance(line, Text):
            moved[k - 1] = line
    cut = replacements.get(request_key(msg.id))
    if isinstance(cut, Text):  # the request cut in place: one text where the user's texts were
        texts = [i for i, b in enumerate(blocks) if isinstance(b, Text) and not harness_text(b.text)]
        if texts:
            blocks = [
                cut if i == texts[0] else b
                for i, b in enumerate(blocks)
                if i == texts[0] or i not in texts[1:]
            ]
            moved = {i - sum(1 for t in texts[1:] if t < i): line for i, line in moved.items()}
            changed = True
    if moved:
        blocks = [b for i, b in enumerate(blocks) if i not in moved] + list(moved.values())
        changed = True
    if not changed:
        return msg
    return msgspec.structs.replace(msg, blocks=tuple(blocks))


def _with_calls(msg: Message, replacements: Mapping[str, ToolResult | Text | ToolCall]) -> Message:
    """Assistant message ``msg`` with the tool calls whose input was cut in place swapped in."""
    changed = False
    blocks: list[Block] = []
    for b in msg.blocks:
        new = replacements.get(result_key(msg.id, b.id)) if isinstance(b, ToolCall) else None
        if isinstance(new, ToolCall):
            blocks.append(new)
            changed = True
        else:
            blocks.append(b)
    return msgspec.structs.replace(msg, blocks=tuple(blocks)) if changed else msg
