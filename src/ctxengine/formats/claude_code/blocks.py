"""Claude Code records' content -> neutral blocks (the Anthropic Messages block shapes).

``content_blocks`` converts a ``message.content`` (a string or a list of blocks: text, thinking,
redacted thinking, tool_use, tool_result, image, document) into ``ctxengine.messages.model`` blocks;
block types it does not model become JSON ``Text`` and are noted in the message's
``meta["unknown_blocks"]``. Image sizes come from ``ctxengine.messages.media`` (the header of the base64
data). ``Draft`` is a message under construction; ``block_key`` is the content key the reader
dedupes blocks by. The scalar helpers (``as_str``, ``as_int``, ``timestamp``...) read the loosely
typed JSON fields of a record.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

from ctxengine.messages.media import image_size
from ctxengine.messages.model import (
    Block,
    Document,
    Image,
    Origin,
    ResultPart,
    Text,
    Thinking,
    ToolCall,
    ToolResult,
    Usage,
)


class Draft:
    """A message under construction (blocks still mutable)."""

    __slots__ = (
        "blocks",
        "compaction",
        "id",
        "keys",
        "meta",
        "model",
        "origin",
        "role",
        "timestamp",
        "usage",
    )

    def __init__(
        self,
        role: str,
        msg_id: str,
        timestamp: float | None,
        origin: Origin = "message",
        compaction: int | None = None,
    ) -> None:
        self.role = role
        self.id = msg_id
        self.timestamp = timestamp
        self.origin: Origin = origin
        self.compaction = compaction
        self.blocks: list[Block] = []
        self.keys: set[tuple[Any, ...]] = set()  # content keys of blocks, for in-message dedupe
        self.usage: Usage | None = None
        self.model: str | None = None
        self.meta: dict[str, Any] = {}


def content_blocks(content: Any, draft: Draft) -> list[Block]:
    """Convert a ``message.content`` (string or list of blocks) to neutral blocks. Unknown block
    types become JSON text and are noted in ``draft.meta["unknown_blocks"]``."""
    if isinstance(content, str):
        return [Text(content)]
    out: list[Block] = []
    for raw in content:
        if isinstance(raw, str):
            out.append(Text(raw))
            continue
        if not isinstance(raw, dict):
            continue
        block = to_block(raw)
        if block is None:
            draft.meta.setdefault("unknown_blocks", []).append(str(raw.get("type")))
            block = Text(compact_json(raw))
        out.append(block)
    return out


def to_block(raw: dict[str, Any]) -> Block | None:
    """One Anthropic content block -> a neutral block; None for a type this reader does not model."""
    kind = raw.get("type")
    if kind == "text":
        return Text(as_str(raw.get("text")))
    if kind == "thinking":
        return Thinking(as_str(raw.get("thinking")), signature=as_str(raw.get("signature")))
    if kind == "redacted_thinking":
        return Thinking(as_str(raw.get("data")), redacted=True)
    if kind == "tool_use":
        args = raw.get("input")
        if not isinstance(args, dict | str):
            args = {} if args is None else {"input": args}
        return ToolCall(as_str(raw.get("id")), as_str(raw.get("name")), args)
    if kind == "tool_result":
        return ToolResult(
            call_id=as_str(raw.get("tool_use_id")),
            content=result_content(raw.get("content")),
            is_error=raw.get("is_error") is True,
        )
    if kind == "image":
        return image_block(raw)
    if kind == "document":
        return document_block(raw)
    return None


def result_content(content: Any) -> tuple[ResultPart, ...]:
    """A ``tool_result``'s ``content`` (None, a string, an object or a list of parts) -> parts;
    parts of other types become compact JSON text."""
    if content is None or content == "":
        return ()
    if isinstance(content, str):
        return (Text(content),)
    if isinstance(content, dict):
        content = [content]
    if not isinstance(content, list):
        return (Text(compact_json(content)),)
    parts: list[ResultPart] = []
    for raw in content:
        if isinstance(raw, str):
            parts.append(Text(raw))
            continue
        if not isinstance(raw, dict):
            continue
        kind = raw.get("type")
        if kind == "text":
            parts.append(Text(as_str(raw.get("text"))))
        elif kind == "image":
            parts.append(image_block(raw))
        elif kind == "document":
            parts.append(document_block(raw))
        else:
            parts.append(Text(compact_json(raw)))
    return tuple(parts)


def image_block(raw: dict[str, Any]) -> Image:
    """An ``image`` block; a base64 image gets its pixel size from its header (``media.image_size``)."""
    source = raw.get("source")
    source = source if isinstance(source, dict) else {}
    media_type = as_str(source.get("media_type"))
    if source.get("type") == "url":
        return Image(media_type=media_type, url=as_str(source.get("url")))
    data = as_str(source.get("data"))
    size = image_size(data) if data else None
    return Image(
        media_type=media_type,
        data=data,
        width=size[0] if size else None,
        height=size[1] if size else None,
    )


def document_block(raw: dict[str, Any]) -> Document:
    """A ``document`` block: text or base64 source kept as is, any other source as compact JSON."""
    source = raw.get("source")
    source = source if isinstance(source, dict) else {}
    kind = source.get("type")
    if kind == "text":
        data = as_str(source.get("data"))
        media_type = as_str(source.get("media_type")) or "text/plain"
    elif kind == "base64":
        data = as_str(source.get("data"))
        media_type = as_str(source.get("media_type"))
    else:
        data = compact_json(source)
        media_type = as_str(source.get("media_type")) or "application/json"
    return Document(media_type=media_type, data=data, title=as_str(raw.get("title")))


def block_key(block: Block) -> tuple[Any, ...]:
    """A hashable content key for dedupe (large payloads are keyed by length and ends)."""
    if isinstance(block, Text):
        return ("text", block.text)
    if isinstance(block, Thinking):
        return ("thinking", block.thinking, block.redacted, block.signature if block.redacted else "")
    if isinstance(block, Image | Document):
        data = block.data
        return (
            type(block).__name__,
            block.media_type,
            len(data),
            data[:256],
            data[-256:],
            getattr(block, "url", ""),
        )
    if isinstance(block, ToolCall):
        return ("tool_call", block.id)
    return ("tool_result", block.call_id)


def timestamp(value: Any) -> float | None:
    """ISO-8601 string (``...Z`` or with offset; naive means UTC) -> epoch seconds."""
    if not isinstance(value, str) or not value:
        return None
    try:
        dt = datetime.fromisoformat(value)
    except ValueError:
        return None
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=UTC)
    return dt.timestamp()


def as_int(value: Any) -> int:
    """``value`` when it is an int (not a bool), else 0."""
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def int_or_none(value: Any) -> int | None:
    """``value`` when it is an int (not a bool), else None."""
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def as_str(value: Any) -> str:
    """``value`` when it is a string, "" for None, else its compact JSON."""
    if value is None:
        return ""
    return value if isinstance(value, str) else compact_json(value)


def compact_json(obj: Any) -> str:
    """``obj`` as JSON without spaces (non-ASCII kept, unknown types as ``str``)."""
    return json.dumps(obj, ensure_ascii=False, separators=(",", ":"), default=str)
