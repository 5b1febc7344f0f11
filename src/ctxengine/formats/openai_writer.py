"""Encode a projection as an OpenAI Chat Completions request body (``POST /v1/chat/completions``).

Pure functions: neutral ``Message`` list in, JSON-ready ``dict`` out; no I/O, no SDK. The body
follows the API's rules (``formats.validate.validate_openai_chat`` checks them):

- the system prompt comes first as one ``system`` message; ``system``-role messages (our notices)
  are hoisted into it, joined by blank lines (the brief's choice; it changes the cached prefix,
  see the Anthropic writer). ``system_messages="inline"`` keeps them in place as ``system``
  messages instead (Chat Completions accepts system messages anywhere);
- consecutive messages of the same role are merged (Claude Code records one response as several
  assistant messages; a tool-call message must be followed directly by its ``tool`` messages);
- an assistant turn is ``{"role": "assistant", "content": text or null, "tool_calls": [...]}``;
  ``content`` is the turn's text blocks joined by newlines (``Message.text`` semantics), null when
  there is none and the turn has tool calls; ``tool_calls`` items are ``{"id", "type": "function",
  "function": {"name", "arguments"}}`` with ``arguments`` the JSON-encoded input. A free-form
  (string) input, e.g. Codex's ``apply_patch``, is wrapped as ``{"input": <string>}`` like in the
  Anthropic writer, so that ``arguments`` is always a JSON object. Unanswered calls of aborted
  assistant messages are left out (``layers.pairing.aborted_unanswered``);
- thinking blocks are dropped: Chat Completions has no field to send reasoning back (reasoning
  items exist only in the Responses API). Images and documents in assistant messages are dropped
  too (assistant content is text only);
- each ``ToolResult`` of a run of user messages becomes ``{"role": "tool", "tool_call_id",
  "content": text}``, right after the assistant message, in order; ``is_error`` has no field and
  is dropped (the result's text says what failed). Tool messages carry text only, so a result's
  images (and PDF documents) follow in one user message, each result's media preceded by a short
  label naming its call (``MEDIA_LABEL``), and the tool message says so (``MEDIA_NOTE``); the run's
  own user content (text, images as ``image_url`` parts with ``data:`` URLs, PDFs as ``file``
  parts, text documents as text) comes after in the same user message. A user message whose
  content is text only is sent as a plain string;
- no empty content: empty or whitespace-only text is dropped, messages left with nothing are
  skipped; a tool result with no text gets ``EMPTY_RESULT_TEXT`` (or ``MEDIA_NOTE``).

Like the Anthropic writer it encodes what it is given (a result without a call still becomes a
``tool`` message) so that ``validate_openai_chat`` reports the problem; run
``layers.pairing.repair`` first.
"""

from __future__ import annotations

import bisect
import itertools
import json
import operator
import threading
from collections.abc import Sequence
from typing import Any, Literal

from ctxengine.messages.model import (
    Document,
    Image,
    Message,
    ResultPart,
    Text,
    ToolCall,
    ToolResult,
    shared_prefix,
)
from ctxengine.messages.tool_turns import aborted_unanswered, is_aborted

EMPTY_RESULT_TEXT = "(no output)"  # a tool result with no text and no media
MEDIA_NOTE = "(the tool returned images or documents; they follow in the next user message)"
MEDIA_LABEL = "[attachments from tool result {call_id}]"

SystemMessages = Literal["hoist", "inline"]


def to_openai_chat(
    messages: Sequence[Message],
    *,
    system: str = "",
    model: str,
    tools: list[dict[str, Any]] | None = None,
    system_messages: SystemMessages = "hoist",
    memo: RunMemo | None = None,
) -> dict[str, Any]:
    """Build a Chat Completions request body from neutral messages.

    See the module docstring for every encoding rule. Never raises on odd input: problems show
    in ``validate_openai_chat``.

    Args:
        messages: the conversation (a ``Projection``'s messages).
        system: the system prompt, the first ``system`` message.
        model: the model's name.
        tools: Chat Completions tool definitions (``{"type": "function", "function": {...}}``),
            passed through.
        system_messages: "hoist" joins ``system``-role messages (our notices) into the system
            prompt; "inline" keeps them in place as ``system`` messages.
        memo: the previous bodies' runs (``RunMemo``), for a caller that encodes
            projection after projection of one conversation and never changes a body: a run of
            messages already encoded gives the same dict objects (the same body).

    Returns:
        The body, ``{"model", "messages", "tools"?}``.
    """
    if memo is not None:
        texts, encoded = memo.encode(messages, system_messages)
    else:
        skip = aborted_unanswered(messages)
        items: list[_Item] = []
        system_at: list[tuple[int, str]] = []
        _group_runs(messages, 0, skip, system_messages, items, system_at)
        texts = [t for _, t in system_at]
        encoded = [_encode_item(role, run, skip) for role, run, _ in items]
    system_texts = ([system] if system.strip() else []) + texts
    out: list[dict[str, Any]] = []
    if system_texts:
        out.append({"role": "system", "content": "\n\n".join(system_texts)})
    out.extend(itertools.chain.from_iterable(encoded))
    body: dict[str, Any] = {"model": model, "messages": out}
    if tools:
        body["tools"] = list(tools)
    return body


_Item = tuple[str, list[Message], int]  # a run: its role, its messages, the index of its first


def _group_runs(
    messages: Sequence[Message],
    start: int,
    skip: set[str],
    system_messages: SystemMessages,
    items: list[_Item],
    system_at: list[tuple[int, str]],
) -> None:
    """Add the runs of ``messages[start:]`` to ``items`` (same-role messages merged; an inline
    system message a run of its own) and the hoisted system texts to ``system_at``."""
    for i in range(start, len(messages)):
        m = messages[i]
        if m.role == "system":
            text = m.text()
            if not text.strip():
                continue
            if system_messages == "hoist":
                system_at.append((i, text))
            else:
                items.append(("system", [m], i))
            continue
        if not _has_content(m, skip):
            continue
        if items and items[-1][0] == m.role:
            items[-1][1].append(m)
        else:
            items.append((m.role, [m], i))


def _encode_item(role: str, run: list[Message], skip: set[str]) -> list[dict[str, Any]]:
    """The messages a run encodes to (an inline system message: one ``system`` message)."""
    if role == "system":
        return [{"role": "system", "content": run[0].text()}]
    return _encode_run(role, run, skip)


class RunMemo:
    """The runs of the previous body and their encoded messages, for call after call of one
    conversation: when a projection starts with the previous one's messages (by identity;
    messages are treated as immutable) and leaves out the same aborted calls, the runs those
    messages close are kept as they were (the same dict objects) and the rest is grouped again;
    a run met before is encoded once (one holding an aborted message, whose encoding depends on
    the projection, every time)."""

    def __init__(self) -> None:
        self._runs: dict[tuple[int, ...], tuple[list[Message], list[dict[str, Any]]]] = {}
        self._messages: list[Message] = []
        self._items: list[_Item] = []
        self._encoded: list[list[dict[str, Any]]] = []
        self._system_at: list[tuple[int, str]] = []
        self._skip: set[str] | None = None
        self._mode: SystemMessages = "hoist"
        self.regrouped = 0  # messages grouped in all (the rest was kept from a previous body)

    def encode(
        self, messages: Sequence[Message], system_messages: SystemMessages
    ) -> tuple[list[str], list[list[dict[str, Any]]]]:
        """The hoisted system texts and each run's encoded messages, in order."""
        skip = aborted_unanswered(messages)
        k = -1
        if skip == self._skip and system_messages == self._mode:
            shared = shared_prefix(self._messages, messages)
            k = bisect.bisect_left([first for _, _, first in self._items], shared) - 1
        start = self._items[k][2] if k >= 0 else 0
        items, encoded = self._items[: max(k, 0)], self._encoded[: max(k, 0)]
        system_at = [t for t in self._system_at if t[0] < start]
        fresh: list[_Item] = []
        _group_runs(messages, start, skip, system_messages, fresh, system_at)
        items += fresh
        encoded += [self.run(role, run, skip) for role, run, _ in fresh]
        self.regrouped += len(messages) - start
        self._messages, self._items, self._encoded = list(messages), items, encoded
        self._system_at, self._skip, self._mode = system_at, skip, system_messages
        return [t for _, t in system_at], encoded

    def run(self, role: str, run: list[Message], skip: set[str]) -> list[dict[str, Any]]:
        """``_encode_item(role, run, skip)``, or what it gave for the same run before."""
        key = tuple(map(id, run))
        hit = self._runs.get(key)
        if hit is not None and all(map(operator.is_, hit[0], run)):
            return hit[1]
        out = _encode_item(role, run, skip)
        if not any(is_aborted(m) for m in run):
            if len(self._runs) >= _RUNS_MAX:
                del self._runs[next(iter(self._runs))]
            self._runs[key] = (run, out)
        return out


_RUNS_MAX = 20_000  # runs remembered by a RunMemo (the oldest forgotten first)



def _encode_run(role: str, run: list[Message], skip: set[str]) -> list[dict[str, Any]]:
    """The messages a run of ``role`` messages (assistant or user) encodes to."""
    return [_assistant(run, skip)] if role == "assistant" else _user(run)


def tool_arguments(call: ToolCall) -> str:
    """The ``function.arguments`` string of a tool call: the JSON-encoded input (non-ASCII kept
    as is), a string input wrapped as ``{"input": <string>}``. Remembered per call object (the
    same calls are written at every request of a conversation; a call is never edited in place)."""
    hit = _ARGUMENTS.get(id(call))
    if hit is not None and hit[0] is call:
        return hit[1]
    value = call.input if isinstance(call.input, dict) else {"input": call.input}
    text = json.dumps(value, ensure_ascii=False)
    with _ARGUMENTS_LOCK:
        if len(_ARGUMENTS) >= _ARGUMENTS_MAX:
            del _ARGUMENTS[next(iter(_ARGUMENTS))]
        _ARGUMENTS[id(call)] = (call, text)
    return text


_ARGUMENTS: dict[int, tuple[ToolCall, str]] = {}  # by id(call), the call kept alive beside its text
_ARGUMENTS_MAX = 20_000  # calls remembered (oldest forgotten first)
_ARGUMENTS_LOCK = threading.Lock()


def _has_content(m: Message, skip: set[str]) -> bool:
    """True when the message encodes to something."""
    for b in m.blocks:
        if isinstance(b, Text):
            if b.text.strip():
                return True
        elif isinstance(b, ToolCall):
            if m.role == "assistant" and not (b.id in skip and is_aborted(m)):
                return True
        elif isinstance(b, ToolResult):
            if m.role == "user":
                return True
        elif isinstance(b, Image | Document) and m.role == "user" and _part(b) is not None:
            return True
    return False


def _assistant(run: list[Message], skip: set[str]) -> dict[str, Any]:
    texts: list[str] = []
    calls: list[dict[str, Any]] = []
    for m in run:
        aborted = is_aborted(m)
        for b in m.blocks:
            if isinstance(b, Text) and b.text.strip():
                texts.append(b.text)
            elif isinstance(b, ToolCall) and not (aborted and b.id in skip):
                calls.append(
                    {
                        "id": b.id,
                        "type": "function",
                        "function": {"name": b.name, "arguments": tool_arguments(b)},
                    }
                )
    msg: dict[str, Any] = {"role": "assistant", "content": "\n".join(texts) if texts else None}
    if calls:
        msg["tool_calls"] = calls
    return msg


def _user(run: list[Message]) -> list[dict[str, Any]]:
    """Tool messages for the run's results, then one user message with the results' media and
    the run's own content."""
    out: list[dict[str, Any]] = []
    media: list[dict[str, Any]] = []
    own: list[dict[str, Any]] = []
    for m in run:
        for b in m.blocks:
            if isinstance(b, ToolResult):
                texts: list[str] = []
                parts: list[dict[str, Any]] = []
                for c in b.content:
                    part = _part(c)
                    if part is None:
                        continue
                    if part["type"] == "text":
                        texts.append(part["text"])
                    else:
                        parts.append(part)
                if parts:
                    media.append({"type": "text", "text": MEDIA_LABEL.format(call_id=b.call_id)})
                    media.extend(parts)
                text = "\n".join(texts) or (MEDIA_NOTE if parts else EMPTY_RESULT_TEXT)
                out.append({"role": "tool", "tool_call_id": b.call_id, "content": text})
            elif isinstance(b, Text | Image | Document):
                part = _part(b)
                if part is not None:
                    own.append(part)
    parts = media + own
    if parts:
        if all(p["type"] == "text" for p in parts):
            out.append({"role": "user", "content": "\n".join(p["text"] for p in parts)})
        else:
            out.append({"role": "user", "content": parts})
    return out


def _part(block: ResultPart) -> dict[str, Any] | None:
    """A Chat Completions content part, or None when the block has nothing to send."""
    if isinstance(block, Text):
        return {"type": "text", "text": block.text} if block.text.strip() else None
    if isinstance(block, Image):
        url = f"data:{block.media_type};base64,{block.data}" if block.data else block.url
        return {"type": "image_url", "image_url": {"url": url}} if url else None
    if isinstance(block, Document):
        if not block.data.strip():
            return None
        if block.media_type.startswith("text/"):
            text = f"{block.title}\n\n{block.data}" if block.title else block.data
            return {"type": "text", "text": text}
        name = block.title or "document.pdf"
        return {
            "type": "file",
            "file": {"filename": name, "file_data": f"data:{block.media_type};base64,{block.data}"},
        }
    return None
