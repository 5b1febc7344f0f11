"""Reader for OpenAI chat-completions message lists with ``tool_calls``.

Format followed: the Chat Completions message shape (roles ``system``/``developer``/``user``/
``assistant``/``tool``; assistant ``tool_calls`` = ``[{id, type: "function", function: {name,
arguments}}]`` with ``arguments`` a JSON string; ``tool`` messages answer by ``tool_call_id``;
legacy ``function_call`` / ``role: "function"`` is accepted too). Three containers are read:

* a JSON object with a ``messages`` list: one session. This is mini-swe-agent's ``.traj.json``
  (``trajectory_format`` ``mini-swe-agent-1.x``, checked on mini-swe-agent 2.2.7): every
  assistant message carries ``extra.response`` (the raw LiteLLM response: ``usage``, ``model``,
  ``created``) and ``extra.timestamp`` (epoch seconds, taken as the message time). The final
  ``role: "exit"`` message holds the submission and was never sent to a model: it is counted in
  ``Session.skipped["exit"]``, so the last (``submit``) tool call has no result.
* a JSON list of trajectories, each an object with ``traj`` (a message list), ``task_id``,
  ``trial``, ``reward`` (tau-bench ``historical_trajectories``): one session per trajectory, named
  ``"task {task_id} trial {trial}"``. tau-bench records no usage and no model name, so
  ``Session.model`` is None (the model is only in the file *name*).
* a bare JSON list of messages: one session.

Conventions (see ``ctxengine.messages``): ``system``/``developer`` messages are joined (blank line
between) into ``Session.system``; consecutive ``tool`` messages after one assistant message become
one ``user`` message of ``ToolResult`` blocks; message ids are ``m{i}`` with ``i`` the 0-based
index of the (first) source message. Usage is normalised to disjoint input fields: OpenAI's
``prompt_tokens`` includes cached tokens, so ``input_tokens = prompt - cached`` and
``cache_read_tokens = cached`` (DeepSeek's ``prompt_cache_hit_tokens`` is preferred as the cached
count when present; LiteLLM's ``cache_creation_input_tokens`` becomes ``cache_write_tokens``).
Tool-call arguments that are not a JSON object are kept as the raw string.

Edges: a message of the wrong shape (not an object, no role, content of the wrong type, a tool
call without a function name, a tool message without ``tool_call_id``) is reported as
``Malformed(path, i, error)`` with ``i`` the 1-based message index within its session (plus a
``warnings.warn``) and skipped; the rest loads. A tau-bench entry that is not a trajectory becomes
an empty session carrying the ``Malformed`` record. A file that is not JSON at all, or JSON of
another shape, raises ``TranscriptError``.

The helpers here (``SessionBuilder``, ``content_blocks``, ``openai_usage``, ...) are shared by the
SWE-agent and Codex readers.
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

from ctxengine.formats import readable_text
from ctxengine.messages import (
    Block,
    Document,
    Image,
    Malformed,
    Message,
    Origin,
    ResultPart,
    Session,
    Text,
    Thinking,
    ToolCall,
    ToolResult,
    TranscriptError,
    Usage,
)

BINARY_SNIFF_BYTES = 64 * 1024
NEWLINE = b"\n"
MAX_WARNINGS = 20  # per session; every malformed record is still kept in Session.malformed
TEXT_PART_TYPES = {"text", "input_text", "output_text", "summary_text", "reasoning_text"}


class ShapeError(ValueError):
    """A record has the wrong shape; the reader turns it into a ``Malformed`` entry."""


# --------------------------------------------------------------------------------------------
# Shared helpers (also used by the SWE-agent and Codex readers)
# --------------------------------------------------------------------------------------------


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
    return data


def load_json_document(path: Path) -> Any:
    """Decode the whole file at ``path`` as one JSON document.

    Raises ``TranscriptError`` as ``read_bytes`` does, or when the file is not valid JSON.
    """
    data = read_bytes(path)
    try:
        return msgspec.json.decode(data)
    except msgspec.DecodeError as exc:
        reason = str(exc).replace("\n", " ")
        at = re.search(r"\(byte (\d+)\)", reason)  # one document: a bad line spoils it, named
        where = f":{data.count(NEWLINE, 0, int(at.group(1))) + 1}" if at else ""
        raise TranscriptError(f"{path}{where}: not valid JSON ({reason})") from None


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
    except msgspec.DecodeError:
        return raw
    return value if isinstance(value, dict) else raw


def image_size(data: bytes) -> tuple[int, int] | None:
    """(width, height) in pixels from a PNG, GIF, JPEG or WebP header, or None."""
    if data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) >= 24:
        return int.from_bytes(data[16:20], "big"), int.from_bytes(data[20:24], "big")
    if data[:6] in (b"GIF87a", b"GIF89a") and len(data) >= 10:
        return int.from_bytes(data[6:8], "little"), int.from_bytes(data[8:10], "little")
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP" and len(data) >= 30:
        chunk = data[12:16]
        if chunk == b"VP8 ":
            w = int.from_bytes(data[26:28], "little") & 0x3FFF
            h = int.from_bytes(data[28:30], "little") & 0x3FFF
            return w, h
        if chunk == b"VP8L":
            b0, b1, b2, b3 = data[21], data[22], data[23], data[24]
            w = 1 + (((b1 & 0x3F) << 8) | b0)
            h = 1 + (((b3 & 0x0F) << 10) | (b2 << 2) | ((b1 & 0xC0) >> 6))
            return w, h
        if chunk == b"VP8X":
            return 1 + int.from_bytes(data[24:27], "little"), 1 + int.from_bytes(data[27:30], "little")
        return None
    if data[:2] == b"\xff\xd8":
        i = 2
        while i + 9 < len(data):
            if data[i] != 0xFF:
                i += 1
                continue
            marker = data[i + 1]
            if marker == 0xFF:
                i += 1
                continue
            if marker in (0xD8, 0x01) or 0xD0 <= marker <= 0xD7:
                i += 2
                continue
            if marker in (0xC0, 0xC1, 0xC2, 0xC3, 0xC5, 0xC6, 0xC7, 0xC9, 0xCA, 0xCB, 0xCD, 0xCE, 0xCF):
                h = int.from_bytes(data[i + 5 : i + 7], "big")
                w = int.from_bytes(data[i + 7 : i + 9], "big")
                return w, h
            i += 2 + int.from_bytes(data[i + 2 : i + 4], "big")
    return None


def image_from_url(url: str) -> Image:
    """An ``Image`` from a ``data:`` URL (base64 kept, pixel size decoded) or a remote URL."""
    if url.startswith("data:"):
        header, _, payload = url.partition(",")
        media_type = header[5:].split(";", 1)[0]
        size = None
        if ";base64" in header:
            try:
                size = image_size(base64.b64decode(payload, validate=False))
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


class SessionBuilder:
    """Accumulates messages for one ``Session`` and enforces the neutral conventions.

    Consecutive tool results merge into one ``user`` message (until any other message is added);
    ids are made unique (a repeated id gets ``~2``, ``~3``...); a ``ToolResult`` without a name
    gets the name of its call. ``open_assistant`` lets a reader (Codex) extend the last assistant
    message with further blocks of the same model call.
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self.messages: list[Message] = []
        self.malformed: list[Malformed] = []
        self.skipped: dict[str, int] = {}
        self.system_parts: list[str] = []
        self.open_assistant: Message | None = None
        self._results: Message | None = None
        self._ids: set[str] = set()
        self._call_names: dict[str, str] = {}
        self._call_ids: set[str] = set()
        self._call_alias: dict[str, str] = {}  # recorded call id -> id of its latest call

    def _id(self, wanted: str) -> str:
        if wanted not in self._ids:
            self._ids.add(wanted)
            return wanted
        n = 2
        while f"{wanted}~{n}" in self._ids:
            n += 1
        self._ids.add(f"{wanted}~{n}")
        return f"{wanted}~{n}"

    def _unique_calls(self, blocks: tuple[Block, ...] | list[Block]) -> tuple[Block, ...]:
        """Tool call ids unique within the session: a recorded id used again (tau-bench reuses
        them across turns) becomes ``id~2``...; later results for that id answer the newest call.
        Layers freeze decisions per call id, so ids must not repeat."""
        out: list[Block] = []
        for b in blocks:
            if isinstance(b, ToolCall):
                new_id = b.id
                n = 2
                while new_id in self._call_ids:
                    new_id = f"{b.id}~{n}"
                    n += 1
                self._call_ids.add(new_id)
                self._call_alias[b.id] = new_id
                if new_id != b.id:
                    b = ToolCall(new_id, b.name, b.input)
                self._call_names[b.id] = b.name
            out.append(b)
        return tuple(out)

    def close(self) -> None:
        """End the open assistant message and the open tool-result message."""
        self.open_assistant = None
        self._results = None

    def user(
        self,
        blocks: list[Block] | tuple[Block, ...],
        *,
        id: str,
        timestamp: float | None = None,
        origin: Origin = "message",
        meta: dict[str, Any] | None = None,
        compaction: int | None = None,
    ) -> Message:
        """Append a ``user`` message."""
        self.close()
        msg = Message(
            role="user",
            blocks=tuple(blocks),
            id=self._id(id),
            timestamp=timestamp,
            origin=origin,
            compaction=compaction,
            meta=meta or {},
        )
        self.messages.append(msg)
        return msg

    def assistant(
        self,
        blocks: list[Block] | tuple[Block, ...],
        *,
        id: str,
        timestamp: float | None = None,
        usage: Usage | None = None,
        model: str | None = None,
        meta: dict[str, Any] | None = None,
        keep_open: bool = False,
    ) -> Message:
        """Append an ``assistant`` message (one model call). With ``keep_open`` it stays
        ``open_assistant`` so ``extend_assistant`` can add blocks of the same call."""
        self.close()
        msg = Message(
            role="assistant",
            blocks=self._unique_calls(blocks),
            id=self._id(id),
            timestamp=timestamp,
            usage=usage,
            model=model,
            meta=meta or {},
        )
        self.messages.append(msg)
        if keep_open:
            self.open_assistant = msg
        return msg

    def extend_assistant(self, blocks: list[Block]) -> None:
        """Add blocks to ``open_assistant`` (which must be set)."""
        assert self.open_assistant is not None
        self.open_assistant.blocks = self.open_assistant.blocks + self._unique_calls(blocks)

    def tool_results(self, results: list[ToolResult], *, id: str, timestamp: float | None = None) -> Message:
        """Append tool results: to the open tool-result message if the previous message is one,
        else as a new ``user`` message."""
        named = []
        for r in results:
            cid = self._call_alias.get(r.call_id, r.call_id)
            name = r.name or self._call_names.get(cid, "")
            named.append(
                r if (cid, name) == (r.call_id, r.name) else ToolResult(cid, r.content, r.is_error, name)
            )
        self.open_assistant = None
        if self._results is not None and self.messages and self.messages[-1] is self._results:
            self._results.blocks = self._results.blocks + tuple(named)
            return self._results
        msg = Message(role="user", blocks=tuple(named), id=self._id(id), timestamp=timestamp)
        self.messages.append(msg)
        self._results = msg
        return msg

    def bad(self, line: int, error: str) -> None:
        """Record a malformed record and warn (the first ``MAX_WARNINGS`` of a session, then one
        notice that more are in ``Session.malformed``)."""
        n = len(self.malformed) + 1
        self.malformed.append(report_malformed(self.path, line, error, warn=n <= MAX_WARNINGS))
        if n == MAX_WARNINGS + 1:
            warnings.warn(f"{self.path}: more malformed records; see Session.malformed", stacklevel=2)

    def skip(self, kind: str, n: int = 1) -> None:
        """Count a record that is neither a message nor context."""
        self.skipped[kind] = self.skipped.get(kind, 0) + n

    @property
    def system(self) -> str:
        return "\n\n".join(p for p in self.system_parts if p)


# --------------------------------------------------------------------------------------------
# OpenAI chat reader
# --------------------------------------------------------------------------------------------


def _timestamp(msg: dict[str, Any]) -> float | None:
    extra = msg.get("extra")
    if isinstance(extra, dict):
        ts = extra.get("timestamp")
        if isinstance(ts, int | float) and not isinstance(ts, bool):
            return float(ts)
        response = extra.get("response")
        if isinstance(response, dict):
            created = response.get("created")
            if isinstance(created, int | float) and not isinstance(created, bool):
                return float(created)
    return None


def _response(msg: dict[str, Any]) -> dict[str, Any]:
    extra = msg.get("extra")
    if isinstance(extra, dict) and isinstance(extra.get("response"), dict):
        response: dict[str, Any] = extra["response"]
        return response
    return {}


def add_chat_message(b: SessionBuilder, raw: Any, index: int, default_model: str | None) -> None:
    """Convert one chat-completions message (``index`` 0-based) into ``b``.

    Raises ``ShapeError`` when the message has the wrong shape; nothing is added then.
    """
    if not isinstance(raw, dict):
        raise ShapeError(f"message is a {type(raw).__name__}, not an object")
    role = raw.get("role")
    if not isinstance(role, str):
        raise ShapeError("message without a role")
    content = raw.get("content")
    mid = f"m{index}"
    if role in ("system", "developer"):
        b.system_parts.append(content_text(content))
        return
    if role == "user":
        user_blocks: list[Block] = list(content_blocks(content))
        b.user(user_blocks, id=mid, timestamp=_timestamp(raw))
        return
    if role == "assistant":
        blocks: list[Block] = []
        reasoning = raw.get("reasoning_content")
        if isinstance(reasoning, str) and reasoning:
            blocks.append(Thinking(thinking=reasoning))
        blocks.extend(content_blocks(content))
        calls = raw.get("tool_calls")
        if calls is not None and not isinstance(calls, list):
            raise ShapeError(f"tool_calls is a {type(calls).__name__}, not a list")
        for k, call in enumerate(calls or []):
            blocks.append(openai_tool_call(call, f"call_{mid}_{k}"))
        legacy = raw.get("function_call")
        if isinstance(legacy, dict) and isinstance(legacy.get("name"), str):
            blocks.append(openai_tool_call({"function": legacy}, f"call_{mid}"))
        response = _response(raw)
        model = response.get("model") if isinstance(response.get("model"), str) else default_model
        b.assistant(
            blocks,
            id=mid,
            timestamp=_timestamp(raw),
            usage=openai_usage(response.get("usage")),
            model=model,
        )
        return
    if role in ("tool", "function"):
        call_id = raw.get("tool_call_id")
        if role == "function" and not isinstance(call_id, str):
            call_id = _legacy_call_id(b, raw.get("name"))
        if not isinstance(call_id, str) or not call_id:
            raise ShapeError(f"{role} message without tool_call_id")
        name = raw.get("name")
        name = name if isinstance(name, str) else ""
        result = ToolResult(call_id, tuple(content_blocks(content)), name=name)
        b.tool_results([result], id=mid, timestamp=_timestamp(raw))
        return
    b.skip(role)


def _legacy_call_id(b: SessionBuilder, name: Any) -> str | None:
    for msg in reversed(b.messages):
        if msg.role == "assistant":
            for call in msg.tool_calls:
                if call.name == name:
                    return call.id
            return None
    return None


def _chat_session(
    path: Path,
    raw_messages: list[Any],
    *,
    model: str | None = None,
    session_id: str | None = None,
    name: str = "",
    meta: dict[str, Any] | None = None,
    label: str = "",
) -> Session:
    b = SessionBuilder(path)
    for i, raw in enumerate(raw_messages):
        try:
            add_chat_message(b, raw, i, model)
        except ShapeError as exc:
            b.bad(i + 1, f"{label}message {i + 1}: {exc}")
    if model is None:
        model = next((m.model for m in b.messages if m.role == "assistant" and m.model), None)
    return Session(
        source=str(path),
        format="openai-chat",
        messages=b.messages,
        model=model,
        session_id=session_id,
        system=b.system,
        malformed=b.malformed,
        skipped=b.skipped,
        name=name,
        meta=meta or {},
    )


def _mini_session(path: Path, doc: dict[str, Any]) -> Session:
    info = as_dict(doc.get("info"))
    meta: dict[str, Any] = {}
    for key in ("model_stats", "exit_status", "mini_version"):
        if key in info:
            meta[key] = info[key]
    if isinstance(doc.get("trajectory_format"), str):
        meta["trajectory_format"] = doc["trajectory_format"]
    config = info.get("config")
    configured = None
    if isinstance(config, dict) and isinstance(config.get("model"), dict):
        configured = config["model"].get("model_name")
        if isinstance(configured, str):
            meta["configured_model"] = configured
    session = _chat_session(
        path,
        doc["messages"],
        session_id=doc.get("instance_id") if isinstance(doc.get("instance_id"), str) else None,
        meta=meta,
    )
    if session.model is None and isinstance(configured, str):
        session.model = configured
    return session


def _trajectory_sessions(path: Path, entries: list[Any]) -> list[Session]:
    sessions: list[Session] = []
    for i, entry in enumerate(entries):
        if not isinstance(entry, dict) or not isinstance(entry.get("traj"), list):
            error = f"trajectory {i + 1}: not an object with a 'traj' message list"
            sessions.append(
                Session(
                    source=str(path),
                    format="openai-chat",
                    messages=[],
                    malformed=[report_malformed(path, i + 1, error)],
                    name=f"trajectory {i + 1}",
                )
            )
            continue
        task_id, trial = entry.get("task_id"), entry.get("trial")
        name = f"task {task_id} trial {trial}" if task_id is not None else f"trajectory {i + 1}"
        meta: dict[str, Any] = {"index": i}
        for key in ("task_id", "trial", "reward"):
            if key in entry:
                meta[key] = entry[key]
        info = entry.get("info")
        model = None
        if isinstance(info, dict) and isinstance(info.get("model"), str):
            model = info["model"]
        sessions.append(
            _chat_session(path, entry["traj"], model=model, name=name, meta=meta, label=f"{name}: ")
        )
    return sessions


def read(path: Path) -> list[Session]:
    """Read the OpenAI chat transcript at ``path``.

    Returns one ``Session`` for a ``{"messages": [...]}`` document or a bare message list, and one
    per trajectory for a tau-bench trajectory list (in file order). Raises ``TranscriptError``
    when the file is missing, empty, binary, not JSON, or JSON of another shape.
    """
    path = Path(path)
    doc = load_json_document(path)
    if isinstance(doc, dict):
        if not isinstance(doc.get("messages"), list):
            raise TranscriptError(f"{path}: not an OpenAI chat transcript (no 'messages' list)")
        return [_mini_session(path, doc)]
    if isinstance(doc, list):
        if not doc:
            raise TranscriptError(f"{path}: empty JSON list, no messages")
        if any(isinstance(e, dict) and "traj" in e for e in doc):
            return _trajectory_sessions(path, doc)
        if any(isinstance(e, dict) and "role" in e for e in doc):
            return [_chat_session(path, doc)]
    raise TranscriptError(f"{path}: not an OpenAI chat transcript")
