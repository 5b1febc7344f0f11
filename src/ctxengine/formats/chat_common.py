"""Helpers shared by the OpenAI-style readers (chat completions, SWE-agent, Codex).

Loading a transcript file (``read_bytes``, ``load_json_document``: one-line ``TranscriptError``
for a file that cannot be read), reporting a malformed record (``report_malformed``), and the
pieces of the Chat Completions message shape: content parts (``content_blocks``, ``content_text``;
images from ``data:`` URLs get their pixel size from ``ctxengine.messages.media``), tool calls
(``openai_tool_call``, ``parse_arguments``) and usage (``openai_usage``: OpenAI's
``prompt_tokens`` includes cached tokens, so ``input_tokens = prompt - cached - written``). A
record of the wrong shape raises ``ShapeError``, which the readers turn into a ``Malformed`` entry.
"""

from __future__ import annotations

import base64
import binascii
import mimetypes
import re
import warnings
from pathlib import Path
from typing import Any

import msgspec

from ctxengine.formats import TOO_DEEP, UTF8_BOM, bad_tail, readable_text
from ctxengine.messages.media import image_size_bytes
from ctxengine.messages.model import (
    Document,
    Image,
    Malformed,
    ResultPart,
    Text,
    ToolCall,
    TranscriptError,
    Usage,
)

BINARY_SNIFF_BYTES = 64 * 1024
NEWLINE = b"\n"
TEXT_PART_TYPES = {"text", "input_text", "output_text", "summary_text", "reasoning_text"}


class ShapeError(ValueError):
    """A record has the wrong shape; the reader turns it into a ``Malformed`` entry."""


def read_bytes(path: Path) -> bytes:
    """Return the bytes of ``path``.

    Raises ``TranscriptError`` (one line naming the path) for a missing path, a directory, an
    unreadable, empty or binary file (judged line by line: ``formats.readable_text``; one bad
    line is left to the reader).
    """
    if not path.exists():
        raise TranscriptError(f"{path}: no such file")
    if path.is_dir():
        raise TranscriptError(f"{path}: is a directory, not a transcript")
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise TranscriptError(f"{path}: cannot read ({exc.strerror or exc})") from None
    if not data.strip():
        raise TranscriptError(f"{path}: empty file")
    readable_text(path, data[:BINARY_SNIFF_BYTES], complete=len(data) <= BINARY_SNIFF_BYTES)
    return data.removeprefix(UTF8_BOM)  # a byte-order mark is not JSON (lines keep their numbers)


def load_json_document(path: Path) -> Any:
    """Decode the whole file at ``path`` as one JSON document.

    Raises ``TranscriptError`` as ``read_bytes`` does, or when the file is not valid JSON.
    """
    doc, _ = load_json_document_and_tail(path)
    return doc


def load_json_document_and_tail(path: Path) -> tuple[Any, list[Malformed]]:
    """The JSON document of the file at ``path`` and the unreadable lines after it (an
    interrupted append: ``formats.bad_tail``) as malformed records, warned about by file and line.

    Raises ``TranscriptError`` as ``load_json_document`` does."""
    data, tail = bad_tail(read_bytes(path))
    try:
        doc = msgspec.json.decode(data)
    except msgspec.DecodeError as exc:
        reason = str(exc).replace("\n", " ")
        at = re.search(r"\(byte (\d+)\)", reason)  # one document: a bad line spoils it, named
        where = f":{data.count(NEWLINE, 0, int(at.group(1))) + 1}" if at else ""
        raise TranscriptError(f"{path}{where}: not valid JSON ({reason})") from None
    except RecursionError:
        raise TranscriptError(f"{path}: not valid JSON ({TOO_DEEP})") from None
    return doc, [report_malformed(path, line, f"after the document: {why}") for line, why in tail]


def report_malformed(path: Path | str, line: int, error: str, *, warn: bool = True) -> Malformed:
    """Build a ``Malformed`` record and (unless ``warn`` is False) emit a ``UserWarning`` naming
    file and line: ``"<path>:<line>: <error>"``."""
    record = Malformed(str(path), line, error)
    if warn:
        warnings.warn(str(record), stacklevel=3)
    return record


def as_dict(value: Any) -> dict[str, Any]:
    """``value`` if it is a JSON object, else an empty dict."""
    return value if isinstance(value, dict) else {}


def as_int(value: Any) -> int:
    """``value`` as a non-negative int (0 for None, bools, non-numbers)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return 0
    return max(int(value), 0)


def openai_usage(usage: Any) -> Usage | None:
    """Normalise an OpenAI-style usage object to ``Usage`` (disjoint input fields).

    Accepts chat-completions (``prompt_tokens``/``completion_tokens``/``prompt_tokens_details.
    cached_tokens``) and Responses-API (``input_tokens``/``output_tokens``/``input_tokens_details``)
    names. ``prompt_tokens`` includes cached tokens (and LiteLLM's ``cache_creation_input_tokens``
    for Anthropic models), so those are subtracted from ``input_tokens``. DeepSeek's
    ``prompt_cache_hit_tokens`` wins over ``cached_tokens`` when present. Returns None when
    ``usage`` is not an object.
    """
    if not isinstance(usage, dict):
        return None
    prompt = as_int(usage.get("prompt_tokens", usage.get("input_tokens")))
    output = as_int(usage.get("completion_tokens", usage.get("output_tokens")))
    details = as_dict(usage.get("prompt_tokens_details") or usage.get("input_tokens_details"))
    if isinstance(usage.get("prompt_cache_hit_tokens"), int):
        cached = as_int(usage["prompt_cache_hit_tokens"])
    else:
        cached = as_int(details.get("cached_tokens"))
    written = as_int(usage.get("cache_creation_input_tokens"))
    return Usage(
        input_tokens=max(prompt - cached - written, 0),
        cache_read_tokens=cached,
        cache_write_tokens=written,
        output_tokens=output,
    )


def parse_arguments(raw: Any) -> dict[str, Any] | str:
    """Tool-call arguments: a JSON-object string is parsed; anything else stays a raw string."""
    if raw is None:
        return {}
    if isinstance(raw, dict):
        return raw
    if not isinstance(raw, str):
        return msgspec.json.encode(raw).decode()
    try:
        value = msgspec.json.decode(raw)
    except (msgspec.DecodeError, RecursionError):
        return raw
    return value if isinstance(value, dict) else raw


def image_from_url(url: str) -> Image:
    """An ``Image`` from a ``data:`` URL (base64 kept, pixel size decoded) or a remote URL."""
    if url.startswith("data:"):
        header, _, payload = url.partition(",")
        media_type = header[5:].split(";", 1)[0]
        size = None
        if ";base64" in header:
            try:
                size = image_size_bytes(base64.b64decode(payload, validate=False))
            except (binascii.Error, ValueError):
                size = None
        return Image(
            media_type=media_type,
            data=payload,
            width=size[0] if size else None,
            height=size[1] if size else None,
        )
    guessed, _ = mimetypes.guess_type(url.split("?", 1)[0])
    return Image(media_type=guessed or "", url=url)


def content_blocks(content: Any) -> list[ResultPart]:
    """Blocks of a message ``content``: None, a string, or a list of parts.

    Parts: strings; ``{type: text|input_text|output_text, text}``; ``{type: image_url,
    image_url: {url} | url}`` and ``{type: input_image, image_url}``; ``{type: file|input_file}``
    (a Document). Empty text is dropped. Raises ``ShapeError`` for any other shape.
    """
    if content is None:
        return []
    if isinstance(content, str):
        return [Text(content)] if content else []
    if not isinstance(content, list):
        raise ShapeError(f"content is a {type(content).__name__}, not a string or a list")
    out: list[ResultPart] = []
    for part in content:
        if isinstance(part, str):
            if part:
                out.append(Text(part))
            continue
        if not isinstance(part, dict):
            raise ShapeError(f"content part is a {type(part).__name__}")
        kind = part.get("type")
        if kind in TEXT_PART_TYPES or (kind is None and isinstance(part.get("text"), str)):
            text = part.get("text")
            if not isinstance(text, str):
                raise ShapeError(f"{kind} part without text")
            if text:
                out.append(Text(text))
        elif kind == "refusal" and isinstance(part.get("refusal"), str):
            out.append(Text(part["refusal"]))
        elif kind in ("image_url", "input_image"):
            ref = part.get("image_url")
            url = ref.get("url") if isinstance(ref, dict) else ref
            if not isinstance(url, str):
                raise ShapeError(f"{kind} part without a URL")
            out.append(image_from_url(url))
        elif kind in ("file", "input_file"):
            spec = as_dict(part.get("file")) or part
            data = spec.get("file_data") or ""
            media_type = "application/pdf"
            if isinstance(data, str) and data.startswith("data:"):
                header, _, data = data.partition(",")
                media_type = header[5:].split(";", 1)[0] or media_type
            out.append(Document(media_type=media_type, data=str(data), title=str(spec.get("filename") or "")))
        else:
            raise ShapeError(f"unknown content part type {kind!r}")
    return out


def content_text(content: Any) -> str:
    """The text of a content (string or parts), parts joined by newlines."""
    return "\n".join(b.text for b in content_blocks(content) if isinstance(b, Text))


def openai_tool_call(raw: Any, fallback_id: str) -> ToolCall:
    """A ``ToolCall`` from one chat-completions ``tool_calls`` entry; ``fallback_id`` when the
    entry has no id. Raises ``ShapeError`` when there is no ``function.name``."""
    if not isinstance(raw, dict):
        raise ShapeError(f"tool call is a {type(raw).__name__}, not an object")
    fn = raw.get("function")
    if not isinstance(fn, dict) or not isinstance(fn.get("name"), str):
        raise ShapeError("tool call without function.name")
    call_id = raw.get("id")
    return ToolCall(
        id=call_id if isinstance(call_id, str) and call_id else fallback_id,
        name=fn["name"],
        input=parse_arguments(fn.get("arguments")),
    )
