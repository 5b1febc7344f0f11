"""OpenAI Responses input items (what the Agents SDK passes around) <-> neutral messages.

Pure dict shapes, no SDK import. One item is one neutral message:

- a message item (``{"role", "content"}``, ``"type": "message"`` or none): ``user`` -> a user
  message, ``system`` / ``developer`` -> a system message, ``assistant`` -> an assistant message;
  content parts ``input_text`` / ``output_text`` / ``refusal`` -> ``Text``, ``input_image`` ->
  ``Image`` (a ``data:`` URL inline, else by URL), ``input_file`` -> ``Document`` (``filename`` as
  its title); a string content is one text;
- ``function_call`` -> an assistant ``ToolCall`` (``arguments`` parsed; arguments that are not a
  JSON object are kept as the raw string), ``custom_tool_call`` -> a ``ToolCall`` with a string
  input;
- ``function_call_output`` / ``custom_tool_call_output`` -> a user ``ToolResult`` (``output`` a
  string or a list of content parts);
- ``reasoning`` -> an assistant ``Thinking``: summary text with ``encrypted_content`` as
  ``encrypted`` (OpenAI's reasoning), or, when the item has ``content`` (``reasoning_text``
  parts, the Agents SDK's shape for Claude's thinking through LiteLLM), that text with
  ``encrypted_content`` as the ``signature``; an empty ``content`` list is redacted thinking;
- any other item (hosted tool calls, references) -> a text block holding its JSON, assistant
  for calls and user for outputs, so the engine counts it; it reaches the model as the original
  item while the engine keeps it.

The way back builds exactly these shapes (a neutral assistant message with several blocks becomes
a run of items: reasoning, one message with its texts, the calls). What the Responses format has no
field for is dropped: a tool result's ``is_error`` and ``name``, an image's size, assistant
images (refused: ``TypeError``). With the item a message was built from, a changed tool result
keeps every other key of that item.
"""

from __future__ import annotations

import json
from typing import Any

from ctxengine.integrations.media import data_url, parse_data_url
from ctxengine.messages.model import (
    Block,
    Document,
    Image,
    Message,
    ResultPart,
    Role,
    Text,
    Thinking,
    ToolCall,
    ToolResult,
)

Item = dict[str, Any]

CALL_TYPES = {"function_call": "function_call_output", "custom_tool_call": "custom_tool_call_output"}
OUTPUT_TYPES = frozenset(CALL_TYPES.values())
ROLES: dict[str, Role] = {"developer": "system", "system": "system", "assistant": "assistant", "user": "user"}


# ---------------------------------------------------------------- items -> neutral


def as_item(item: Any) -> Item:
    """A plain dict of an item (the SDK's items are dicts; a pydantic model is dumped)."""
    if isinstance(item, dict):
        return item
    dump = getattr(item, "model_dump", None)
    if dump is None:
        raise TypeError(f"not a Responses input item: {type(item).__name__}")
    dumped: Item = dump(exclude_unset=True, mode="json")
    return dumped


def to_message(raw: Any, message_id: str) -> Message:
    """The neutral message of one input item (see the module docstring)."""
    item = as_item(raw)
    kind = item.get("type")
    if kind in (None, "message") and "role" in item:
        role = ROLES.get(item["role"], "user")
        return Message(role, tuple(_parts(item.get("content"))), message_id)
    if kind in CALL_TYPES:
        call = ToolCall(str(item.get("call_id") or ""), str(item.get("name") or ""), _input(item))
        return Message("assistant", (call,), message_id)
    if kind in OUTPUT_TYPES:
        parts = tuple(p for p in _parts(item.get("output")) if isinstance(p, Text | Image | Document))
        return Message("user", (ToolResult(str(item.get("call_id") or ""), parts),), message_id)
    if kind == "reasoning":
        return Message("assistant", (_thinking(item),), message_id)
    other: Role = "user" if str(kind).endswith("_output") else "assistant"
    return Message(other, (Text(json.dumps(item, ensure_ascii=False, default=str)),), message_id)


def _input(item: Item) -> dict[str, Any] | str:
    if item.get("type") == "custom_tool_call":
        return str(item.get("input") or "")
    arguments = item.get("arguments")
    if isinstance(arguments, dict):
        return arguments
    try:
        parsed = json.loads(arguments or "{}")
    except (TypeError, ValueError):
        return str(arguments)
    return parsed if isinstance(parsed, dict) else str(arguments)


def _thinking(item: Item) -> Thinking:
    secret = str(item.get("encrypted_content") or "")
    content = item.get("content")
    if isinstance(content, list):  # Claude's thinking as the Agents SDK stores it
        if not content:
            return Thinking("", redacted=True, encrypted=secret)
        return Thinking("\n".join(str(p.get("text", "")) for p in content), signature=secret)
    summary = "\n".join(str(p.get("text", "")) for p in item.get("summary") or ())
    return Thinking(summary, encrypted=secret)


def _parts(content: Any) -> list[Block]:
    if content is None:
        return []
    if isinstance(content, str):
        return [Text(content)]
    out: list[Block] = []
    for part in content:
        kind = part.get("type")
        if kind in ("input_text", "output_text", "text"):
            out.append(Text(str(part.get("text", ""))))
        elif kind == "refusal":
            out.append(Text(str(part.get("refusal", ""))))
        elif kind == "input_image":
            url = str(part.get("image_url") or "")
            inline = parse_data_url(url)
            out.append(Image(inline[0], data=inline[1]) if inline else Image("", url=url))
        elif kind == "input_file":
            inline = parse_data_url(str(part.get("file_data") or ""))
            media, data = inline if inline else ("", str(part.get("file_data") or ""))
            out.append(Document(media, data=data, title=str(part.get("filename") or "")))
        else:
            out.append(Text(json.dumps(part, ensure_ascii=False, default=str)))
    return out


# ---------------------------------------------------------------- neutral -> items


def from_message(message: Message, original: Any = None) -> list[Item]:
    """Input items for a neutral message; a changed tool result keeps the other keys of
    ``original`` (the item it came from)."""
    if message.role == "assistant":
        return _assistant_items(message)
    base = as_item(original) if original is not None else None
    out: list[Item] = []
    run: list[Block] = []
    role = "system" if message.role == "system" else "user"
    for b in (*message.blocks, None):
        if b is not None and not isinstance(b, ToolResult):
            run.append(b)
            continue
        if run or (b is None and not out):
            out.append({"role": role, "content": [_part(x) for x in run]})
            run = []
        if isinstance(b, ToolResult):
            out.append(_output_item(b, base))
    return out


def _output_item(result: ToolResult, base: Item | None) -> Item:
    output: Any = [_part(p) for p in result.content]
    if len(result.content) == 1 and isinstance(result.content[0], Text):
        output = result.content[0].text
    if base is not None and base.get("type") in OUTPUT_TYPES and base.get("call_id") == result.call_id:
        return {**base, "output": output}
    return {"type": "function_call_output", "call_id": result.call_id, "output": output}


def _assistant_items(message: Message) -> list[Item]:
    out: list[Item] = []
    texts: list[Item] = []
    for b in (*message.blocks, None):
        if isinstance(b, Text):
            texts.append({"type": "output_text", "text": b.text, "annotations": []})
            continue
        if texts:
            out.append({"type": "message", "role": "assistant", "content": texts, "status": "completed"})
            texts = []
        if isinstance(b, Thinking):
            out.append(_reasoning_item(b))
        elif isinstance(b, ToolCall):
            if isinstance(b.input, str):
                out.append({"type": "custom_tool_call", "call_id": b.id, "name": b.name, "input": b.input})
            else:
                arguments = json.dumps(b.input, ensure_ascii=False)
                out.append({"type": "function_call", "call_id": b.id, "name": b.name, "arguments": arguments})
        elif b is not None:
            raise TypeError(f"an assistant {type(b).__name__} block has no Responses input item")
    return out


def _reasoning_item(b: Thinking) -> Item:
    item: Item = {"type": "reasoning", "summary": []}
    if b.redacted:
        item["content"] = []
        item["encrypted_content"] = b.encrypted
    elif b.signature:
        item["content"] = [{"type": "reasoning_text", "text": b.thinking}]
        item["encrypted_content"] = b.signature
    else:
        if b.thinking:
            item["summary"] = [{"type": "summary_text", "text": b.thinking}]
        if b.encrypted:
            item["encrypted_content"] = b.encrypted
    return item


def _part(b: Block | ResultPart) -> Item:
    if isinstance(b, Text):
        return {"type": "input_text", "text": b.text}
    if isinstance(b, Image):
        url = data_url(b.media_type, b.data) if b.data else b.url
        return {"type": "input_image", "image_url": url, "detail": "auto"}
    if isinstance(b, Document):
        part: Item = {"type": "input_file", "file_data": data_url(b.media_type, b.data)}
        return part | ({"filename": b.title} if b.title else {})
    raise TypeError(f"a {type(b).__name__} block has no Responses content part")


class ResponsesConverter:
    """The ``bridge.Converter`` for Responses input items."""

    def to_message(self, item: Any, message_id: str) -> Message:
        return to_message(item, message_id)

    def from_message(self, message: Message, original: Any) -> list[Any]:
        return list(from_message(message, original))
