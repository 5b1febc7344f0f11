"""LangChain messages <-> neutral messages, one LangChain message per neutral message (extra
``langchain``).

- ``AIMessage`` -> an assistant message: content blocks in order (``text``; ``thinking`` /
  ``redacted_thinking`` as Anthropic returns them; the standard ``reasoning`` block; ``image`` /
  ``file``), then each of ``tool_calls`` as a ``ToolCall`` (a ``tool_call`` block placed in the
  content keeps its place); ``usage_metadata`` -> ``Usage`` (LangChain's ``input_tokens`` is the
  total input: the cache reads and writes are taken out of it).
- ``ToolMessage`` -> a user message with one ``ToolResult`` (``tool_call_id``, content, ``status
  == "error"`` -> ``is_error``, ``name``).
- ``HumanMessage`` -> a user message; ``SystemMessage`` -> a system message; any other message
  type -> a user message with its text.

The way back builds standard v1 content blocks: text as ``{"type": "text"}`` (a lone non-empty
text as a plain string), thinking as ``{"type": "reasoning", "reasoning", "extras": {"signature",
"redacted", "encrypted"}}``, images as ``{"type": "image", "base64" | "url", "mime_type"}`` and
documents as ``{"type": "file", ...}`` (their sizes and titles in ``extras``). A tool call whose
input is a raw string (a free-form tool) is sent as ``args={"input": ...}`` and listed in
``response_metadata["ctxengine_raw_input"]``. With the message it was built from, the new message
is a copy of it (ids and metadata kept). Block content the neutral model has no type for is kept
as a text block holding its JSON (the original message is what the model gets while unchanged).
"""

from __future__ import annotations

import json
from typing import Any

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage, ToolMessage

from ctxengine.integrations.media import parse_data_url
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
    Usage,
)

RAW_INPUT_KEY = "ctxengine_raw_input"  # response_metadata: ids of tool calls whose input is a raw string


# ---------------------------------------------------------------- LangChain -> neutral


def to_message(item: BaseMessage, message_id: str) -> Message:
    """The neutral message of a LangChain message (see the module docstring)."""
    if isinstance(item, AIMessage):
        return _from_ai(item, message_id)
    if isinstance(item, ToolMessage):
        parts = tuple(b for b in _blocks(item.content) if isinstance(b, Text | Image | Document))
        result = ToolResult(item.tool_call_id, parts, item.status == "error", item.name or "")
        return Message("user", (result,), message_id)
    role: Role = "system" if isinstance(item, SystemMessage) else "user"
    return Message(role, tuple(_blocks(item.content)), message_id)


def _from_ai(item: AIMessage, message_id: str) -> Message:
    raw = set(item.response_metadata.get(RAW_INPUT_KEY) or ())
    calls = {c["id"]: c for c in item.tool_calls if c.get("id")}
    blocks: list[Block] = []
    placed: set[str] = set()
    for b in _blocks(item.content, tool_calls=True):
        if isinstance(b, ToolCall):  # a tool_call block in the content: its place in the order
            call = calls.get(b.id)
            if call is not None:
                blocks.append(_call(call, raw))
                placed.add(b.id)
            continue
        blocks.append(b)
    blocks.extend(_call(c, raw) for c in item.tool_calls if c.get("id") not in placed)
    model = item.response_metadata.get("model_name") or item.response_metadata.get("model")
    return Message(
        "assistant",
        tuple(blocks),
        message_id,
        usage=_usage(item.usage_metadata),
        model=model if isinstance(model, str) else None,
    )


def _call(call: Any, raw: set[str]) -> ToolCall:
    args = call.get("args") or {}
    cid = call.get("id") or ""
    if cid in raw and set(args) == {"input"} and isinstance(args["input"], str):
        return ToolCall(cid, call["name"], args["input"])
    return ToolCall(cid, call["name"], dict(args))


def _usage(meta: Any) -> Usage | None:
    if not meta:
        return None
    details = meta.get("input_token_details") or {}
    read = int(details.get("cache_read") or 0)
    created = int(details.get("cache_creation") or 0)
    hour = int(details.get("ephemeral_1h_input_tokens") or 0)
    return Usage(
        input_tokens=max(0, int(meta.get("input_tokens") or 0) - read - created),
        cache_read_tokens=read,
        cache_write_tokens=max(0, created - hour),
        cache_write_1h_tokens=hour,
        output_tokens=int(meta.get("output_tokens") or 0),
    )


def _blocks(content: Any, *, tool_calls: bool = False) -> list[Block]:
    if isinstance(content, str):
        return [Text(content)] if content else []
    out: list[Block] = []
    for part in content or ():
        if isinstance(part, str):
            out.append(Text(part))
            continue
        block = _block(part)
        if isinstance(block, ToolCall) and not tool_calls:
            continue
        if block is not None:
            out.append(block)
    return out


def _block(part: dict[str, Any]) -> Block | None:
    kind = part.get("type")
    extras = part.get("extras") or {}
    if kind == "text":
        return Text(str(part.get("text", "")))
    if kind == "thinking":
        return Thinking(str(part.get("thinking", "")), signature=str(part.get("signature") or ""))
    if kind == "redacted_thinking":
        return Thinking("", redacted=True, encrypted=str(part.get("data") or ""))
    if kind == "reasoning":
        return Thinking(
            str(part.get("reasoning", "")),
            signature=str(extras.get("signature") or ""),
            redacted=bool(extras.get("redacted")),
            encrypted=str(extras.get("encrypted") or ""),
        )
    if kind in ("tool_call", "tool_use"):  # the call itself comes from AIMessage.tool_calls
        return ToolCall(str(part.get("id") or ""), str(part.get("name") or ""), {})
    if kind == "image":
        return Image(
            str(part.get("mime_type") or ""),
            data=str(part.get("base64") or ""),
            url=str(part.get("url") or ""),
            width=extras.get("width"),
            height=extras.get("height"),
        )
    if kind == "image_url":  # the OpenAI chat shape
        url = (
            part["image_url"]["url"]
            if isinstance(part.get("image_url"), dict)
            else str(part.get("image_url"))
        )
        inline = parse_data_url(url)
        return Image(inline[0], data=inline[1]) if inline else Image("", url=url)
    if kind == "file":
        return Document(
            str(part.get("mime_type") or ""),
            data=str(part.get("base64") or ""),
            title=str(extras.get("title") or ""),
        )
    return Text(json.dumps(part, ensure_ascii=False, default=str))


# ---------------------------------------------------------------- neutral -> LangChain


def from_message(message: Message, original: BaseMessage | None = None) -> list[BaseMessage]:
    """LangChain messages for a neutral message (several for a user message holding tool
    results: one ``ToolMessage`` each, its other blocks in a ``HumanMessage``), copies of
    ``original`` where it is of the same kind."""
    if message.role == "assistant":
        return [_to_ai(message, original)]
    if message.role == "system":
        content = _content(message.blocks)
        return [
            original.model_copy(update={"content": content})
            if isinstance(original, SystemMessage)
            else SystemMessage(content=content)
        ]
    out: list[BaseMessage] = []
    run: list[Block] = []
    for b in (*message.blocks, None):
        if b is not None and not isinstance(b, ToolResult):
            run.append(b)
            continue
        if run or (b is None and not out):
            content = _content(tuple(run))
            out.append(
                original.model_copy(update={"content": content})
                if isinstance(original, HumanMessage)
                else HumanMessage(content=content)
            )
            run = []
        if isinstance(b, ToolResult):
            out.append(_to_tool(b, original))
    return out


def _to_tool(result: ToolResult, original: BaseMessage | None) -> ToolMessage:
    content = _content(result.content)
    status = "error" if result.is_error else "success"
    if isinstance(original, ToolMessage) and original.tool_call_id == result.call_id:
        return original.model_copy(update={"content": content, "status": status})
    return ToolMessage(content=content, tool_call_id=result.call_id, name=result.name or None, status=status)


def _to_ai(message: Message, original: BaseMessage | None) -> AIMessage:
    calls = [b for b in message.blocks if isinstance(b, ToolCall)]
    first_other = max((k for k, b in enumerate(message.blocks) if not isinstance(b, ToolCall)), default=-1)
    inline = any(k < first_other for k, b in enumerate(message.blocks) if isinstance(b, ToolCall))
    parts: list[Any] = []
    for b in message.blocks:
        if isinstance(b, ToolCall):
            if inline:  # a call before other content: its place is kept in the content
                parts.append({"type": "tool_call", "id": b.id, "name": b.name, "args": _args(b)})
        else:
            parts.append(_part(b))
    content: Any = parts[0]["text"] if len(parts) == 1 and _plain_text(parts[0]) else parts
    tool_calls = [{"type": "tool_call", "id": c.id, "name": c.name, "args": _args(c)} for c in calls]
    meta = dict(original.response_metadata) if isinstance(original, AIMessage) else {}
    raw = [c.id for c in calls if isinstance(c.input, str)]
    if raw:
        meta[RAW_INPUT_KEY] = raw
    else:
        meta.pop(RAW_INPUT_KEY, None)
    if message.model and "model_name" not in meta:
        meta["model_name"] = message.model
    usage = _usage_metadata(message.usage)
    if isinstance(original, AIMessage):
        update = {"content": content, "tool_calls": tool_calls, "response_metadata": meta}
        return original.model_copy(update=update)
    return AIMessage(content=content, tool_calls=tool_calls, response_metadata=meta, usage_metadata=usage)


def _args(call: ToolCall) -> dict[str, Any]:
    return dict(call.input) if isinstance(call.input, dict) else {"input": call.input}


def _plain_text(part: Any) -> bool:
    return isinstance(part, dict) and part.get("type") == "text" and len(part) == 2 and bool(part["text"])


def _content(blocks: tuple[Block, ...] | tuple[ResultPart, ...]) -> Any:
    """A lone non-empty text as a string, anything else as a list of content blocks."""
    parts = [_part(b) for b in blocks]
    return parts[0]["text"] if len(parts) == 1 and _plain_text(parts[0]) else parts


def _part(b: Block) -> dict[str, Any]:
    if isinstance(b, Text):
        return {"type": "text", "text": b.text}
    if isinstance(b, Thinking):
        extras = {
            k: v
            for k, v in (("signature", b.signature), ("redacted", b.redacted), ("encrypted", b.encrypted))
            if v
        }
        return {"type": "reasoning", "reasoning": b.thinking, **({"extras": extras} if extras else {})}
    if isinstance(b, Image):
        part: dict[str, Any] = {"type": "image", "mime_type": b.media_type}
        part |= ({"base64": b.data} if b.data else {}) | ({"url": b.url} if b.url else {})
        sizes = {k: v for k, v in (("width", b.width), ("height", b.height)) if v is not None}
        return part | ({"extras": sizes} if sizes else {})
    if isinstance(b, Document):
        doc: dict[str, Any] = {"type": "file", "mime_type": b.media_type, "base64": b.data}
        return doc | ({"extras": {"title": b.title}} if b.title else {})
    raise TypeError(f"a {type(b).__name__} block has no LangChain content block")


def _usage_metadata(usage: Usage | None) -> Any:
    if usage is None:
        return None
    created = usage.cache_write_tokens + usage.cache_write_1h_tokens
    details: dict[str, int] = {"cache_read": usage.cache_read_tokens, "cache_creation": created}
    if usage.cache_write_1h_tokens:
        details["ephemeral_1h_input_tokens"] = usage.cache_write_1h_tokens
    return {
        "input_tokens": usage.total_input,
        "output_tokens": usage.output_tokens,
        "total_tokens": usage.total_input + usage.output_tokens,
        "input_token_details": details,
    }


class LangChainConverter:
    """The ``bridge.Converter`` for LangChain messages."""

    def to_message(self, item: BaseMessage, message_id: str) -> Message:
        return to_message(item, message_id)

    def from_message(self, message: Message, original: BaseMessage | None) -> list[BaseMessage]:
        return from_message(message, original)
