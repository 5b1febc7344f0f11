"""Encode a projection as an Anthropic Messages API request body (``POST /v1/messages``).

Pure functions: neutral ``Message`` list in, JSON-ready ``dict`` out; no I/O, no SDK. The body
follows the API's rules (``formats.validate.validate_anthropic`` checks them):

- roles are ``user`` / ``assistant`` only and alternate, starting with ``user``: consecutive
  same-role messages are merged into one (Claude Code records one response as several assistant
  records; attachments follow tool results as separate user records). When the first message is
  an assistant message (a projection cut before it), a one-line placeholder user message
  (``LEADING_PLACEHOLDER``) is put first; an empty projection becomes one placeholder message;
- ``tool_result`` blocks come first in a user message's content (the API rejects results after
  other blocks), in their original order; the rest follows in order;
- no empty content: text blocks that are empty or whitespace only are dropped (the API rejects
  them), as are images and documents without data, thinking without a signature (from another
  provider, or stripped by a proxy: the API rejects unsigned thinking), and messages left with no
  blocks. A tool result with no content left gets ``EMPTY_RESULT_TEXT`` so that the model sees that
  the tool produced nothing (as Claude Code does) — the only placeholders the writer adds;
- ``system``-role messages (our notices) are hoisted: their text is appended to the top-level
  ``system`` prompt as further text blocks, in order (the brief's choice). Note for the cache
  model: a new system message then changes the system prompt, i.e. the start of the cached prefix.
  ``system_messages="inline"`` instead keeps them in place as user text wrapped in
  ``<system-reminder>`` tags (Claude Code's way of injecting context without touching the prefix);
- thinking: ``{"type": "thinking", "thinking", "signature"}`` with the signature passed back
  unmodified; redacted thinking: ``{"type": "redacted_thinking", "data"}`` where ``data`` is
  ``Thinking.encrypted`` (or ``Thinking.thinking`` when a reader stored it there);
- tool calls: ``tool_use`` ``{id, name, input}``; a free-form (string) input is wrapped as
  ``{"input": <string>}`` because the API requires an object. Unanswered calls of aborted assistant
  messages are left out (``layers.pairing.aborted_unanswered``);
- tool results: ``{"type": "tool_result", "tool_use_id", "content": [text/image/document blocks],
  "is_error"}``;
- images: base64 source ``{"type": "base64", "media_type", "data"}`` or ``{"type": "url", "url"}``;
  documents: PDF (any non-text media type) as a base64 source, ``text/*`` as a plain-text source
  (``Document.data`` holds the text itself), with ``title`` when known;
- prompt-cache breakpoints (``cache_control: {"type": "ephemeral"}``) where Claude Code puts them:
  the last system block, the last tool definition, the last block of the final message and of the
  second-to-last user message (which is where the previous request's final breakpoint sat, so the
  whole previous prefix is read from the cache), and ours: the end of the last user message
  marked ``CACHE_ANCHOR`` (the transcript skeleton after a compaction, the same from one
  compaction to the next), where the tools' breakpoint gives way when the system has one (the
  system's caches the tools too). At most 4, the API's limit. ``breakpoint_indices``
  tells the cache model which neutral messages those message breakpoints end at.

Tool blocks a role cannot carry are encoded as they are (a tool call in a user message stays a
``tool_use``), so that the validator reports the problem instead of the writer hiding it;
``layers.pairing.repair`` removes such blocks before encoding. Thinking in a user message and
images or documents in an assistant message have no encoding and are dropped.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from typing import Any, Literal, Protocol

from ctxengine.messages.model import (
    CACHE_ANCHOR,
    Document,
    Image,
    Message,
    ResultPart,
    Text,
    Thinking,
    ToolCall,
    ToolResult,
)
from ctxengine.messages.tool_turns import aborted_unanswered, is_aborted

CACHE_CONTROL: dict[str, str] = {"type": "ephemeral"}
MAX_BREAKPOINTS = 4  # the API's limit on cache_control blocks per request

# Placeholders (the only text the writer adds).
LEADING_PLACEHOLDER = "(conversation continues)"  # before a projection that opens with the assistant
EMPTY_CONVERSATION = "(no messages)"  # the whole body when the projection is empty
EMPTY_RESULT_TEXT = "(no output)"  # a tool result with no content left
SYSTEM_REMINDER = "<system-reminder>\n{text}\n</system-reminder>"  # inline system messages

SystemMessages = Literal["hoist", "inline"]

# Block types that cannot carry cache_control.
_NO_CACHE_TYPES = frozenset({"thinking", "redacted_thinking"})


def to_anthropic(
    messages: Sequence[Message],
    *,
    system: str = "",
    model: str,
    max_tokens: int = 8192,
    tools: list[dict[str, Any]] | None = None,
    cache_breakpoints: bool = True,
    system_messages: SystemMessages = "hoist",
    memo: EncodeMemo | None = None,
) -> dict[str, Any]:
    """Build an Anthropic Messages API request body from neutral messages.

    See the module docstring for every encoding rule. Never raises on odd input: problems show
    in ``validate_anthropic``.

    Args:
        messages: the conversation (a ``Projection``'s messages).
        system: the system prompt (omitted from the body when there is no system text).
        model: the model's name.
        max_tokens: the output cap, tokens.
        tools: Anthropic tool definitions (``{"name", "description", "input_schema"}``), passed
            through; the last one is copied to carry a cache breakpoint (the caller's dicts are
            not modified).
        cache_breakpoints: whether to place prompt-cache breakpoints where Claude Code puts them.
        system_messages: "hoist" appends ``system``-role messages (our notices) to the top-level
            system; "inline" keeps them in place as user text in ``<system-reminder>`` tags.
        memo: the previous bodies' encoding (``anthropic_memo.BlockMemo``), for a caller that
            encodes projection after projection of one conversation and never changes a body:
            the blocks of a message already encoded are the same dict objects (the same body).

    Returns:
        The body, ``{"model", "max_tokens", "messages", "system"?, "tools"?}``.
    """
    encoded, _, system_texts, anchor = _encode(messages, system, system_messages, memo)
    body: dict[str, Any] = {"model": model, "max_tokens": max_tokens, "messages": encoded}
    system_blocks: list[dict[str, Any]] = [{"type": "text", "text": t} for t in system_texts]
    if system_blocks:
        if cache_breakpoints:
            system_blocks[-1]["cache_control"] = dict(CACHE_CONTROL)
        body["system"] = system_blocks
    if tools:
        body["tools"] = list(tools)
        # the system breakpoint caches the tools too (tools come first in the cached prefix): with
        # a cache anchor to mark as well, the tools' own breakpoint gives way (4 at most)
        if cache_breakpoints and not (anchor is not None and system_blocks):
            body["tools"][-1] = {**tools[-1], "cache_control": dict(CACHE_CONTROL)}
    if cache_breakpoints:
        # a marked block is copied (blocks may be shared with a memo), the anchor's first, and so
        # is the message holding it (a memo may share message dicts between bodies)
        if anchor is not None:
            _mark(_own(encoded, anchor[0]), anchor[1])
        for k in _message_breakpoints(encoded):
            content = _own(encoded, k)
            for j in range(len(content) - 1, -1, -1):
                if content[j]["type"] not in _NO_CACHE_TYPES:
                    content[j] = {**content[j], "cache_control": dict(CACHE_CONTROL)}
                    break
    return body


def _own(encoded: list[dict[str, Any]], k: int) -> list[dict[str, Any]]:
    """The content list of ``encoded[k]``, after replacing that message by a copy with a copy of
    its list (so that what is changed in it is this body's alone)."""
    msg = encoded[k] = {**encoded[k], "content": list(encoded[k]["content"])}
    content: list[dict[str, Any]] = msg["content"]
    return content


def _mark(content: list[dict[str, Any]], block: dict[str, Any]) -> None:
    """Replace the last occurrence of ``block`` (by identity) in ``content`` with a copy carrying
    a breakpoint."""
    for j in range(len(content) - 1, -1, -1):
        if content[j] is block:
            content[j] = {**block, "cache_control": dict(CACHE_CONTROL)}
            return


def breakpoint_indices(
    messages: Sequence[Message], *, system_messages: SystemMessages = "hoist"
) -> list[int]:
    """Indices into ``messages`` of the messages whose end is a cache breakpoint in
    ``to_anthropic(messages, ...)``: the cached prefix reaches through that message (for a merged
    provider message, through the last neutral message merged into it). Ascending, at most 3 (the
    final message, the second-to-last user message and the cache anchor; the system and tools
    breakpoints are not messages). A breakpoint on the leading placeholder, or on
    a message that has no block able to carry one, is not listed.

    Works from each message's *shape* (the role it is encoded under, or none, and whether a
    block can carry a breakpoint), remembered per message: the replay asks at every call, for
    projections that mostly repeat the previous one."""
    skip = aborted_unanswered(messages)
    roles: list[str] = []
    last_src: list[int] = []
    cacheable: list[bool] = []
    anchor = -1  # the last user message marked CACHE_ANCHOR that can carry a breakpoint
    for i, m in enumerate(messages):
        role, can = _shape(m, skip, system_messages)
        if m.role == "user" and role == "user" and can and m.meta.get(CACHE_ANCHOR):
            anchor = i
        if role is None:
            continue
        if roles and roles[-1] == role:
            last_src[-1] = i
            cacheable[-1] = cacheable[-1] or can
        else:
            roles.append(role)
            last_src.append(i)
            cacheable.append(can)
    if not roles or roles[0] != "user":
        roles.insert(0, "user")
        last_src.insert(0, -1)
        cacheable.insert(0, True)
    marks = [last_src[k] for k in _breakpoints_by_role(roles) if last_src[k] >= 0 and cacheable[k]]
    if anchor >= 0 and anchor not in marks:
        marks = sorted([*marks, anchor])
    return marks


_SHAPES: dict[tuple[int, str], tuple[Message, str | None, bool]] = {}  # by id(message), mode
_SHAPES_MAX = 20_000  # messages remembered (oldest forgotten first; a projection holds fewer)
_SHAPES_LOCK = threading.Lock()


def _shape(m: Message, skip: set[str], system_messages: SystemMessages) -> tuple[str | None, bool]:
    """The role ``m`` is encoded under (None: it sends nothing) and whether one of its blocks can
    carry a breakpoint, as ``_encode`` decides. Remembered by identity (messages are treated as
    immutable) except for aborted messages, whose encoding depends on ``skip``."""
    key = (id(m), system_messages)
    hit = _SHAPES.get(key)
    if hit is not None and hit[0] is m:
        return hit[1], hit[2]
    role: str | None = m.role
    can = True
    if m.role == "system":
        role = None if not m.text().strip() or system_messages == "hoist" else "user"
    else:
        content = _blocks(m, skip)
        can = any(b["type"] not in _NO_CACHE_TYPES for b in content)
        role = role if content else None
    if not is_aborted(m):
        with _SHAPES_LOCK:
            if len(_SHAPES) >= _SHAPES_MAX:
                del _SHAPES[next(iter(_SHAPES))]
            _SHAPES[key] = (m, role, can)
    return role, can


def _message_breakpoints(encoded: list[dict[str, Any]]) -> list[int]:
    """Encoded message indices that get a breakpoint: the final message and the second-to-last
    user message."""
    return _breakpoints_by_role([m["role"] for m in encoded])


def _breakpoints_by_role(roles: list[str]) -> list[int]:
    if not roles:
        return []
    marks = {len(roles) - 1}
    users = [k for k, r in enumerate(roles) if r == "user"]
    if len(users) >= 2:
        marks.add(users[-2])
    return sorted(marks)


Encoded = tuple[list[dict[str, Any]], list[int], list[str], tuple[int, dict[str, Any]] | None]


class EncodeMemo(Protocol):
    """What ``to_anthropic`` asks of a ``memo`` (``anthropic_memo.BlockMemo``): ``_encode``'s
    result for a projection, reusing what the previous projection's encoding shares with it."""

    def encode(
        self, messages: Sequence[Message], system: str, system_messages: SystemMessages
    ) -> Encoded: ...


class Groups:
    """A projection's encoding before the final copy (``finish``): the provider messages as
    groups of merged neutral messages (role, blocks, first and last neutral message index), each
    user group's blocks with the tool results first (computed once, ``ordered``), each group's
    message dict once ``finish`` made it (``encoded``: kept only with ``finish``'s ``share``), the
    hoisted system texts and the ``CACHE_ANCHOR`` candidates, each with its neutral message index.
    A group's lists are never changed once a later group exists (``BlockMemo`` keeps them)."""

    __slots__ = ("anchors", "contents", "encoded", "first_src", "last_src", "ordered", "roles", "system")

    def __init__(self) -> None:
        self.roles: list[str] = []
        self.contents: list[list[dict[str, Any]]] = []
        self.first_src: list[int] = []
        self.last_src: list[int] = []
        self.ordered: list[list[dict[str, Any]] | None] = []
        self.encoded: list[dict[str, Any] | None] = []
        self.system: list[tuple[int, str]] = []
        self.anchors: list[tuple[int, int, dict[str, Any]]] = []  # (message index, group, block)

    def cut(self, k: int) -> int:
        """Keep the groups before group ``k`` and what the messages before it gave; returns the
        neutral message index where group ``k`` started (where the encoding resumes)."""
        start = self.first_src[k]
        for lst in (self.roles, self.contents, self.first_src, self.last_src, self.ordered, self.encoded):
            del lst[k:]
        self.system = [t for t in self.system if t[0] < start]
        self.anchors = [a for a in self.anchors if a[0] < start]
        return start


def group(
    g: Groups,
    messages: Sequence[Message],
    start: int,
    skip: set[str],
    system_messages: SystemMessages,
    blocks_of: Callable[[Message], list[dict[str, Any]]],
) -> None:
    """Add ``messages[start:]`` to ``g`` (``blocks_of``: a message's blocks, not changed here)."""
    roles, contents = g.roles, g.contents
    for i in range(start, len(messages)):
        m = messages[i]
        role: str = m.role
        if role == "system":
            text = m.text()
            if not text.strip():
                continue
            if system_messages == "hoist":
                g.system.append((i, text))
                continue
            role = "user"
            content = [{"type": "text", "text": SYSTEM_REMINDER.format(text=text)}]
        else:
            content = blocks_of(m)
        if not content:
            continue
        if roles and roles[-1] == role:
            contents[-1].extend(content)
            g.last_src[-1] = i
            g.ordered[-1] = g.encoded[-1] = None
        else:
            roles.append(role)
            contents.append(list(content))
            g.first_src.append(i)
            g.last_src.append(i)
            g.ordered.append(None)
            g.encoded.append(None)
        if m.role == "user" and m.meta.get(CACHE_ANCHOR):
            last = next((b for b in reversed(content) if b["type"] not in _NO_CACHE_TYPES), None)
            if last is not None:
                g.anchors.append((i, len(roles) - 1, last))


def finish(g: Groups, system: str, *, share: bool = False) -> Encoded:
    """``_encode``'s result from ``g``: the message dicts and content lists (new ones, which the
    caller may change; with ``share``, each group's own from the previous call when the group is
    unchanged, for a caller that never changes a body: ``to_anthropic`` copies a message before
    it marks a breakpoint in it), tool results first in user messages, the leading placeholder."""
    encoded: list[dict[str, Any]] = []
    for k, role in enumerate(g.roles):
        made = g.encoded[k] if share else None
        if made is None:
            content = g.contents[k]
            if role == "user":
                ordered = g.ordered[k]
                if ordered is None:
                    ordered = [b for b in content if b["type"] == "tool_result"] + [
                        b for b in content if b["type"] != "tool_result"
                    ]
                    g.ordered[k] = ordered
                content = ordered
            made = {"role": role, "content": list(content)}
            if share:
                g.encoded[k] = made
        encoded.append(made)
    last_src = list(g.last_src)
    anchor = (g.anchors[-1][1], g.anchors[-1][2]) if g.anchors else None
    if not encoded or encoded[0]["role"] != "user":
        text = LEADING_PLACEHOLDER if encoded else EMPTY_CONVERSATION
        encoded.insert(0, {"role": "user", "content": [{"type": "text", "text": text}]})
        last_src.insert(0, -1)
        anchor = None if anchor is None else (anchor[0] + 1, anchor[1])
    system_texts = ([system] if system.strip() else []) + [t for _, t in g.system]
    return encoded, last_src, system_texts, anchor


def _encode(
    messages: Sequence[Message], system: str, system_messages: SystemMessages, memo: EncodeMemo | None = None
) -> Encoded:
    """Encoded messages, for each the index of the last neutral message merged into it (-1 for
    the placeholder), the system texts, and the block that ends the last user message marked
    ``CACHE_ANCHOR`` (its last block able to carry a breakpoint; None when there is none), with
    the index of the encoded message holding it. With ``memo``, what ``memo.encode`` gives (the
    same)."""
    if memo is not None:
        return memo.encode(messages, system, system_messages)
    skip = aborted_unanswered(messages)
    g = Groups()
    group(g, messages, 0, skip, system_messages, lambda m: _blocks(m, skip))
    return finish(g, system)


def _blocks(m: Message, skip: set[str]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for block in m.blocks:
        if isinstance(block, Thinking):
            if m.role != "assistant":
                continue
            if block.redacted:
                data = block.encrypted or block.thinking
                if data:
                    out.append({"type": "redacted_thinking", "data": data})
            elif block.signature:
                out.append({"type": "thinking", "thinking": block.thinking, "signature": block.signature})
        elif isinstance(block, ToolCall):
            if block.id in skip and is_aborted(m):
                continue
            out.append({"type": "tool_use", "id": block.id, "name": block.name, "input": tool_input(block)})
        elif isinstance(block, ToolResult):
            parts = [p for p in (_part(c) for c in block.content) if p is not None]
            if not parts:
                parts = [{"type": "text", "text": EMPTY_RESULT_TEXT}]
            out.append(
                {
                    "type": "tool_result",
                    "tool_use_id": block.call_id,
                    "content": parts,
                    "is_error": block.is_error,
                }
            )
        elif isinstance(block, Text) or m.role != "assistant":
            part = _part(block)
            if part is not None:
                out.append(part)
    return out


def tool_input(call: ToolCall) -> dict[str, Any]:
    """The ``input`` object of a ``tool_use`` block: the parsed arguments, or ``{"input": s}`` for
    a free-form (string) input."""
    return call.input if isinstance(call.input, dict) else {"input": call.input}


def _part(block: ResultPart) -> dict[str, Any] | None:
    """A text, image or document block, or None when it has nothing to send."""
    if isinstance(block, Text):
        return {"type": "text", "text": block.text} if block.text.strip() else None
    if isinstance(block, Image):
        if block.data:
            return {
                "type": "image",
                "source": {"type": "base64", "media_type": block.media_type, "data": block.data},
            }
        if block.url:
            return {"type": "image", "source": {"type": "url", "url": block.url}}
        return None
    if isinstance(block, Document):
        if not block.data.strip():
            return None
        if block.media_type.startswith("text/"):
            source = {"type": "text", "media_type": "text/plain", "data": block.data}
        else:
            source = {"type": "base64", "media_type": block.media_type, "data": block.data}
        doc: dict[str, Any] = {"type": "document", "source": source}
        if block.title:
            doc["title"] = block.title
        return doc
    return None
