"""Responses API input items <-> the engine's neutral messages, for the proxy.

Reading: one neutral message per item (``integrations.openai_agents_items.to_message``: message
items with their ``input_text`` / ``input_image`` / ``input_file`` / ``output_text`` parts,
``function_call`` / ``custom_tool_call`` and their outputs, ``reasoning`` with its
``encrypted_content``; any other item, a server-side ``compaction`` or a hosted tool call, is an
opaque text holding its JSON, so the engine counts it), id ``m<index>`` (``pinned``).

Writing (``write_items``): an item whose message the engine left as it was goes upstream as the
client sent it, byte for byte (its ids, ``status``, ``encrypted_content``, fields the engine has
no place for). A changed message keeps every key of its item but the one the engine changed: a
message's ``content`` (unchanged parts kept as sent), an output's ``output``, a call's
``arguments`` / ``input``. Reasoning, compaction and other opaque items are never rewritten:
sent whole or not at all. A message the engine made (a summary) is written fresh
(``openai_agents_items.from_message``).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from ctxengine.integrations.openai_agents_items import from_message, to_message
from ctxengine.messages.model import Message, Text, ToolCall, ToolResult
from ctxengine.proxy.pinned import client_index, message_id

Item = dict[str, Any]

CALL_TYPES = frozenset({"function_call", "custom_tool_call"})
OUTPUT_TYPES = frozenset({"function_call_output", "custom_tool_call_output"})
PINNED_TYPES = frozenset({"compaction"})  # server-side compaction: encrypted, never summarized
SYSTEM_ROLES = ("system", "developer")
MODEL_TYPES = CALL_TYPES | {"reasoning"}


def item_type(item: Any) -> str | None:
    """The item's ``type`` (a message may give only its ``role``)."""
    if not isinstance(item, dict):
        return None
    kind = item.get("type")
    if kind is None and "role" in item:
        return "message"
    return kind if isinstance(kind, str) else None


def pinned_indices(conversation: Sequence[Any]) -> list[int]:
    """The items never summarized away: every server-side ``compaction`` item, and the system /
    developer messages before the model's first item (later ones are ordinary content)."""
    out: list[int] = []
    answered = False
    for i, item in enumerate(conversation):
        kind = item_type(item)
        role = item.get("role") if kind == "message" else None
        answered = answered or role == "assistant" or kind in MODEL_TYPES
        if kind in PINNED_TYPES or (not answered and role in SYSTEM_ROLES):
            out.append(i)
    return out


def read_item(item: Any, index: int) -> Message:
    """The neutral message of the conversation's item ``index``. Raises ``TypeError`` /
    ``AttributeError`` for an item of the wrong shape."""
    if not isinstance(item, dict):
        raise TypeError(f"an item is a {type(item).__name__}, not an object")
    return to_message(item, message_id(index))


def write_items(messages: Sequence[Message], conversation: Sequence[Any]) -> list[Item]:
    """The ``input`` items for ``messages`` (see the module docstring); ``conversation`` is the
    request's items, which the messages' ids index."""
    out: list[Item] = []
    for m in messages:
        i = client_index(m)
        raw = conversation[i] if i is not None and i < len(conversation) else None
        out.extend(_items(m, raw if isinstance(raw, dict) else None))
    return out


def _items(message: Message, raw: Item | None) -> list[Item]:
    if raw is None:
        return from_message(message)
    back = to_message(raw, message.id)
    if back.role == message.role and back.blocks == message.blocks:
        return [raw]
    kind = item_type(raw)
    if kind == "message":
        return _message(message, raw, back)
    if kind in OUTPUT_TYPES and len(message.blocks) == 1 and isinstance(message.blocks[0], ToolResult):
        result = from_message(message, raw)
        return result if len(result) == 1 else [raw]
    if kind in CALL_TYPES and len(message.blocks) == 1 and isinstance(message.blocks[0], ToolCall):
        call = message.blocks[0]
        if isinstance(call.input, str):
            key, value = ("input", call.input) if kind == "custom_tool_call" else ("arguments", call.input)
        else:
            key, value = "arguments", json.dumps(call.input, ensure_ascii=False)
        return [{**raw, key: value}]
    return [raw]  # reasoning, compaction, hosted calls: whole or not at all


def _message(message: Message, raw: Item, back: Message) -> list[Item]:
    """A changed message item: its parts kept as sent where their block is unchanged."""
    content = raw.get("content")
    parts = content if isinstance(content, list) else [{"type": "input_text", "text": str(content)}]
    sent = list(zip(back.blocks, parts, strict=True)) if len(back.blocks) == len(parts) else []
    new: list[Any] = []
    for block in message.blocks:
        same = next((part for b, part in sent if b == block), None)
        if same is not None:
            new.append(same)
            continue
        fresh = from_message(Message(message.role, (block,), message.id))
        for item in fresh:
            new.extend(item.get("content") or [])
    if not new:
        return []
    if message.role == "assistant":
        new = [_as_output(p) for p in new]
    return [{**raw, "content": new}]


def _as_output(part: Any) -> Any:
    """An assistant message's text part is ``output_text``."""
    if isinstance(part, dict) and part.get("type") == "input_text":
        return {"type": "output_text", "text": part.get("text", ""), "annotations": []}
    return part


def text_of(messages: Sequence[Any]) -> str:
    """The text of system / developer message items (for the ledger's fixed prefix)."""
    out: list[str] = []
    for item in messages:
        msg = to_message(item, "prefix") if isinstance(item, dict) else None
        if msg is not None:
            out.append("\n".join(b.text for b in msg.blocks if isinstance(b, Text)))
    return "\n\n".join(out)
