"""PydanticAI ``ModelMessage``s <-> neutral messages, one message each (extra ``pydantic-ai``).

- ``ModelRequest`` -> a user message, parts in order: ``UserPromptPart`` -> ``Text`` (a string) or
  its items (strings and ``TextContent`` -> ``Text``, ``ImageUrl`` and image ``BinaryContent``
  -> ``Image``, other ``BinaryContent`` -> ``Document``); ``ToolReturnPart`` -> ``ToolResult``
  (``outcome`` "failed" / "retried" -> ``is_error``; content a string or a list of strings and
  files, anything else as the JSON the model gets); ``RetryPromptPart`` for a tool -> an error
  ``ToolResult`` with the text the model gets, else a ``Text``. ``SystemPromptPart``s are left
  out: they are the system prompt (``system_prompt``), sent before everything, never compacted.
- ``ModelResponse`` -> an assistant message: ``TextPart`` -> ``Text``, ``ToolCallPart`` ->
  ``ToolCall`` (``args`` as a dict; a raw string marked in ``provider_details`` stays one),
  ``ThinkingPart`` -> ``Thinking`` (as PydanticAI's own models store them: ``signature`` is
  OpenAI's encrypted reasoning when ``provider_name`` is "openai", Claude's signature otherwise,
  the data of redacted thinking when ``id`` is "redacted_thinking"); other parts -> a text
  naming the part, so the engine counts them. ``usage`` -> ``Usage`` (PydanticAI's
  ``input_tokens`` includes the cache reads and writes: taken out).

The way back builds these parts; with the message it was built from, the result is a copy of it
(``dataclasses.replace``: timestamps, run ids, metadata kept) and a changed tool return keeps
its part's other fields. Lost on the way back: a document's title, an image's size. Media whose
data is not valid base64 travel as an ``ImageUrl`` / ``DocumentUrl`` holding a ``data:`` URL.
"""

from __future__ import annotations

import base64
import binascii
import json
from dataclasses import replace
from typing import Any

from pydantic_ai.messages import (
    ERROR_OUTCOMES,
    BinaryContent,
    DocumentUrl,
    ImageUrl,
    ModelMessage,
    ModelRequest,
    ModelRequestPart,
    ModelResponse,
    ModelResponsePart,
    RetryPromptPart,
    SystemPromptPart,
    TextContent,
    TextPart,
    ThinkingPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)
from pydantic_ai.usage import RequestUsage

from ctxengine.integrations.media import data_url, parse_data_url
from ctxengine.messages.model import (
    Block,
    Document,
    Image,
    Message,
    ResultPart,
    Text,
    Thinking,
    ToolCall,
    ToolResult,
    Usage,
)

RAW_INPUT = "ctxengine_raw_input"  # provider_details flag: the tool call's input is a raw string
REDACTED_ID = "redacted_thinking"  # PydanticAI's ThinkingPart id for Claude's redacted thinking


def system_prompt(messages: list[ModelMessage]) -> list[SystemPromptPart]:
    """The system prompt parts of a history (in order)."""
    return [
        p for m in messages if isinstance(m, ModelRequest) for p in m.parts if isinstance(p, SystemPromptPart)
    ]


# ---------------------------------------------------------------- PydanticAI -> neutral


def to_message(item: ModelMessage, message_id: str) -> Message:
    """The neutral message of a ``ModelRequest`` / ``ModelResponse`` (see the module docstring)."""
    if isinstance(item, ModelResponse):
        blocks = [_response_block(p) for p in item.parts]
        return Message(
            "assistant", tuple(blocks), message_id, usage=_usage(item.usage), model=item.model_name
        )
    out: list[Block] = []
    for part in item.parts:
        if isinstance(part, SystemPromptPart):
            continue
        if isinstance(part, UserPromptPart):
            out.extend(_content(part.content))
        elif isinstance(part, ToolReturnPart):
            parts = _result_parts(part)
            out.append(ToolResult(part.tool_call_id, parts, part.outcome in ERROR_OUTCOMES, part.tool_name))
        elif isinstance(part, RetryPromptPart) and part.tool_name:
            out.append(ToolResult(part.tool_call_id, (Text(part.model_response()),), True, part.tool_name))
        elif isinstance(part, RetryPromptPart):
            out.append(Text(part.model_response()))
        else:
            out.append(Text(str(getattr(part, "content", part))))
    return Message("user", tuple(out), message_id)


def _response_block(part: ModelResponsePart) -> Block:
    if isinstance(part, TextPart):
        return Text(part.content)
    if isinstance(part, ToolCallPart):
        raw = bool((part.provider_details or {}).get(RAW_INPUT)) and isinstance(part.args, str)
        args: dict[str, Any] | str = part.args if raw and isinstance(part.args, str) else part.args_as_dict()
        return ToolCall(part.tool_call_id, part.tool_name, args)
    if isinstance(part, ThinkingPart):
        secret = part.signature or ""
        if part.id == REDACTED_ID:
            return Thinking("", redacted=True, encrypted=secret)
        if part.provider_name == "openai":
            return Thinking(part.content, encrypted=secret)
        return Thinking(part.content, signature=secret)
    return Text(f"[{part.part_kind}] {getattr(part, 'content', '')}")


def _usage(usage: RequestUsage) -> Usage | None:
    if not usage.input_tokens and not usage.output_tokens:
        return None
    read, written = usage.cache_read_tokens, usage.cache_write_tokens
    return Usage(
        input_tokens=max(0, usage.input_tokens - read - written),
        cache_read_tokens=read,
        cache_write_tokens=written,
        output_tokens=usage.output_tokens,
    )


def _content(content: Any) -> list[Block]:
    if isinstance(content, str):
        return [Text(content)]
    out: list[Block] = []
    for item in content:
        if isinstance(item, str):
            out.append(Text(item))
        elif isinstance(item, TextContent):
            out.append(Text(item.content))
        elif isinstance(item, ImageUrl) and (inline := parse_data_url(item.url)):
            out.append(Image(inline[0], data=inline[1]))
        elif isinstance(item, DocumentUrl) and (inline := parse_data_url(item.url)):
            out.append(Document(inline[0], data=inline[1]))
        elif isinstance(item, ImageUrl):
            out.append(Image("", url=item.url))  # its media type is inferred from the URL
        elif isinstance(item, BinaryContent) and item.is_image:
            out.append(Image(item.media_type, data=item.base64))
        elif isinstance(item, BinaryContent):
            data = item.data.decode() if item.media_type.startswith("text/") else item.base64
            out.append(Document(item.media_type, data=data))
        else:
            out.append(Text(json.dumps(item, ensure_ascii=False, default=str)))
    return out


def _result_parts(part: ToolReturnPart) -> tuple[ResultPart, ...]:
    if isinstance(part.content, str):
        return (Text(part.content),)
    if isinstance(part.content, list) and all(
        isinstance(c, str | BinaryContent | ImageUrl) for c in part.content
    ):
        return tuple(b for b in _content(part.content) if isinstance(b, Text | Image | Document))
    return (Text(part.model_response_str(wrap_if_error=False)),)


# ---------------------------------------------------------------- neutral -> PydanticAI


def from_message(message: Message, original: ModelMessage | None = None) -> list[ModelMessage]:
    """The ``ModelMessage`` of a neutral message (a copy of ``original`` when it is of the same
    kind; its system prompt parts stay first)."""
    if message.role == "assistant":
        answer = [_response_part(b) for b in message.blocks]
        if isinstance(original, ModelResponse):
            return [replace(original, parts=answer)]
        usage = _request_usage(message.usage)
        return [ModelResponse(parts=answer, usage=usage, model_name=message.model)]
    if message.role == "system":
        return [ModelRequest(parts=[SystemPromptPart(message.text())])]
    return [_request(message, original if isinstance(original, ModelRequest) else None)]


def _request(message: Message, original: ModelRequest | None) -> ModelRequest:
    kept = {p.tool_call_id: p for p in original.parts if isinstance(p, ToolReturnPart)} if original else {}
    parts: list[ModelRequestPart] = list(system_prompt([original])) if original is not None else []
    run: list[Block] = []
    for b in (*message.blocks, None):
        if b is not None and not isinstance(b, ToolResult):
            run.append(b)
            continue
        if run:
            parts.append(UserPromptPart(_user_content(run)))
            run = []
        if isinstance(b, ToolResult):
            parts.append(_return_part(b, kept.get(b.call_id)))
    return replace(original, parts=parts) if original is not None else ModelRequest(parts=parts)


def _response_part(b: Block) -> ModelResponsePart:
    if isinstance(b, Text):
        return TextPart(b.text)
    if isinstance(b, ToolCall):
        if isinstance(b.input, str):
            return ToolCallPart(b.name, b.input, b.id, provider_details={RAW_INPUT: True})
        return ToolCallPart(b.name, dict(b.input), b.id)
    if isinstance(b, Thinking):
        if b.redacted:
            return ThinkingPart("", id=REDACTED_ID, signature=b.encrypted, provider_name="anthropic")
        if b.encrypted and not b.signature:
            return ThinkingPart(b.thinking, signature=b.encrypted, provider_name="openai")
        return ThinkingPart(b.thinking, signature=b.signature or None)
    raise TypeError(f"an assistant {type(b).__name__} block has no PydanticAI response part")


def _request_usage(usage: Usage | None) -> RequestUsage:
    if usage is None:
        return RequestUsage()
    return RequestUsage(
        input_tokens=usage.total_input,
        cache_read_tokens=usage.cache_read_tokens,
        cache_write_tokens=usage.cache_write_tokens + usage.cache_write_1h_tokens,
        output_tokens=usage.output_tokens,
    )


def _user_content(blocks: list[Block]) -> Any:
    if len(blocks) == 1 and isinstance(blocks[0], Text):
        return blocks[0].text
    return [_user_item(b) for b in blocks]


def _user_item(b: Block | ResultPart) -> Any:
    if isinstance(b, Text):
        return b.text
    if isinstance(b, Image) and not b.data:
        return ImageUrl(b.url)
    if isinstance(b, Image | Document):
        if isinstance(b, Document) and b.media_type.startswith("text/"):
            return BinaryContent(b.data.encode(), media_type=b.media_type)
        try:
            return BinaryContent(base64.b64decode(b.data, validate=True), media_type=b.media_type)
        except binascii.Error:  # not valid base64 (a cut transcript): kept as it is, in a data URL
            url = data_url(b.media_type, b.data)
            return ImageUrl(url) if isinstance(b, Image) else DocumentUrl(url)
    raise TypeError(f"a {type(b).__name__} block has no PydanticAI user content")


def _return_part(result: ToolResult, original: ToolReturnPart | None) -> ToolReturnPart:
    content: Any = [_user_item(p) for p in result.content]
    if len(result.content) == 1 and isinstance(result.content[0], Text):
        content = result.content[0].text
    if original is not None:
        return replace(original, content=content, outcome="failed" if result.is_error else original.outcome)
    return ToolReturnPart(
        result.name, content, result.call_id, outcome="failed" if result.is_error else "success"
    )


class PydanticAIConverter:
    """The ``bridge.Converter`` for PydanticAI messages."""

    def to_message(self, item: ModelMessage, message_id: str) -> Message:
        return to_message(item, message_id)

    def from_message(self, message: Message, original: ModelMessage | None) -> list[ModelMessage]:
        return from_message(message, original)
