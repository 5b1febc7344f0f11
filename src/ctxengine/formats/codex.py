"""Reader for OpenAI Codex CLI rollout JSONL (``~/.codex/sessions/YYYY/MM/DD/rollout-*.jsonl``).

Format followed: the rollout of codex-cli (Rust, ``originator: codex_cli_rs``), checked on 0.98
and 0.104. Each line is ``{timestamp, type, payload}`` with ``type``:

* ``session_meta``: ``id`` (-> ``Session.session_id``), ``cwd``, ``cli_version``,
  ``model_provider`` (-> ``Session.meta``), ``base_instructions.text`` (-> ``Session.system``).
* ``turn_context``: per-turn settings; ``model`` is the model of the following calls.
* ``response_item``: the conversation as sent to / received from the Responses API. ``message``
  (role ``user``/``developer``/``assistant``; parts ``input_text``/``output_text``/
  ``input_image``), ``reasoning`` (``summary`` parts + ``encrypted_content`` -> ``Thinking``),
  ``function_call`` (``arguments`` a JSON string) / ``function_call_output``, ``custom_tool_call``
  (free-form ``input`` string, e.g. ``apply_patch``) / ``custom_tool_call_output``,
  ``local_shell_call`` (-> ``ToolCall`` named ``local_shell``, its output is a
  ``function_call_output``) and ``web_search_call`` (-> ``ToolCall`` named ``web_search``; it is
  run by the server and has no output item, so it stays unanswered). Other item types are
  counted in ``Session.skipped``.
* ``event_msg``: UI events. ``token_count`` carries usage; ``user_message``, ``agent_message``,
  ``agent_reasoning`` duplicate response items and are only counted in ``skipped``.
* ``compacted``: a recorded compaction (none in the real data): a ``RecordedCompaction`` at the
  next message index, then ``payload.replacement_history`` (if any) as ``compact_restore``
  messages and ``payload.message`` (if any) as a ``compact_summary`` user message.

Grouping: consecutive assistant-side items (reasoning, assistant message, function/custom/
local-shell/web-search calls) are ONE model call = one assistant ``Message``. The call ends at
the first non-assistant item (a tool output, a user/developer message) or at the first *fresh*
``token_count`` event, whichever comes first.

Usage and the token_count alignment (checked on both real files): each model call is followed,
right after its last output item and before the tool outputs, by a ``token_count`` whose
``info.last_token_usage`` is that call's usage. Codex then emits the same event again (identical
``info``, only ``rate_limits`` refreshed) when the next request starts, and ``info`` is null in
the very first one of a session. So an event is *fresh* only when ``info.total_token_usage``
differs from the previous event's: a fresh event's ``last_token_usage`` goes to the latest
assistant message still without usage; duplicates and null ``info`` are ignored. Codex reports
``input_tokens`` including ``cached_input_tokens``: ``Usage.input_tokens = input - cached``,
``cache_read_tokens = cached``. ``output_tokens`` already includes ``reasoning_output_tokens``
(``total_tokens = input_tokens + output_tokens`` in every event), so it is taken as is.
``info.model_context_window`` (or ``task_started.model_context_window``) goes to
``Session.meta["model_context_window"]``.

Context: ``developer`` messages (permissions, collaboration mode) and the harness-injected user
messages (``# AGENTS.md instructions``, ``<environment_context>``, ``<user_instructions>``) stay
``user`` messages, in order; developer ones get ``meta["role"] = "developer"``, injected user
ones ``meta["context"]`` naming the kind. Message ids are ``m{line}`` (1-based line of the first
record of the message); timestamps are the record timestamps in epoch seconds.

Edges: a line that is not text (NUL bytes from an interrupted write, not UTF-8; see
``formats.bad_line_reason``), not JSON, or not a ``{type, payload}`` object, is a ``Malformed(path,
line, error)`` (plus a warning) and the rest loads, wherever the line is (a line of form feeds
is one too: only JSON whitespace makes a line blank, ``formats.json_line``); ``//`` comment lines
are skipped. A missing, empty or binary file (judged by more than one line), or one without a
single Codex record, raises ``TranscriptError``.
"""

from __future__ import annotations

import hashlib
from datetime import datetime
from pathlib import Path
from typing import Any

import msgspec

from ctxengine.formats import TOO_DEEP, bad_line_reason, epoch_seconds, json_line, usage_problem
from ctxengine.formats.chat_common import (
    ShapeError,
    as_int,
    content_blocks,
    parse_arguments,
    read_bytes,
)
from ctxengine.formats.session_builder import SessionBuilder
from ctxengine.messages.model import (
    Block,
    Message,
    RecordedCompaction,
    ResultPart,
    Session,
    Text,
    Thinking,
    ToolCall,
    ToolResult,
    TranscriptError,
    Usage,
)

ASSISTANT_ITEMS = {"reasoning", "function_call", "custom_tool_call", "local_shell_call", "web_search_call"}
OUTPUT_ITEMS = {"function_call_output", "custom_tool_call_output", "local_shell_call_output"}
CONTEXT_PREFIXES = (
    ("# AGENTS.md instructions", "agents_md"),
    ("<environment_context>", "environment_context"),
    ("<user_instructions>", "user_instructions"),
    ("<user_shell_command>", "user_shell_command"),
    ("<turn_aborted>", "turn_aborted"),
)


def parse_timestamp(value: Any) -> float | None:
    """An ISO-8601 timestamp (``2026-02-09T23:41:33.819Z``) or epoch number as epoch seconds."""
    if isinstance(value, int | float) and not isinstance(value, bool):
        return epoch_seconds(float(value))
    if not isinstance(value, str):
        return None
    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def codex_usage(last: Any) -> Usage | None:
    """``Usage`` from a ``last_token_usage`` object (input includes cached; output includes
    reasoning). None when ``last`` is not an object."""
    if not isinstance(last, dict):
        return None
    total_in = as_int(last.get("input_tokens"))
    cached = min(as_int(last.get("cached_input_tokens")), total_in)
    return Usage(
        input_tokens=total_in - cached,
        cache_read_tokens=cached,
        output_tokens=as_int(last.get("output_tokens")),
    )


def _output_blocks(output: Any) -> tuple[tuple[ResultPart, ...], bool]:
    """Content and is_error of a tool output: a string, or ``{content, success}`` (content a
    string or a list of ``input_text``/``input_image`` parts)."""
    if isinstance(output, str):
        return ((Text(output),) if output else ()), False
    if isinstance(output, dict):
        content = output.get("content", output.get("output"))
        blocks = tuple(content_blocks(content))
        return blocks, output.get("success") is False
    if isinstance(output, list):
        return tuple(content_blocks(output)), False
    if output is None:
        return (), False
    raise ShapeError(f"tool output is a {type(output).__name__}")


class _Reader:
    def __init__(self, path: Path) -> None:
        self.path = path
        self.b = SessionBuilder(path)
        self.model: str | None = None
        self.models: list[str] = []
        self.session_id: str | None = None
        self.meta: dict[str, Any] = {}
        self.compactions: list[RecordedCompaction] = []
        self.last_total: Any = None  # info.total_token_usage of the previous token_count
        self.usage_target: Message | None = None  # latest assistant message without usage
        self.records = 0
        self.item_lines: set[bytes] = set()  # digests of the response_item lines read

    # -- records --------------------------------------------------------------------------

    def record(self, rec: Any, line: int) -> None:
        if not isinstance(rec, dict):
            raise ShapeError(f"record is a {type(rec).__name__}, not an object")
        kind = rec.get("type")
        payload = rec.get("payload")
        if not isinstance(kind, str) or not isinstance(payload, dict):
            raise ShapeError("record without a string 'type' and an object 'payload'")
        self.records += 1
        ts = parse_timestamp(rec.get("timestamp"))
        if kind == "response_item":
            self.response_item(payload, line, ts)
        elif kind == "event_msg":
            self.event(payload)
        elif kind == "turn_context":
            model = payload.get("model")
            if isinstance(model, str) and model:
                self.model = model
                if model not in self.models:
                    self.models.append(model)
        elif kind == "session_meta":
            self.session_meta(payload)
        elif kind == "compacted":
            self.compacted(payload, line, ts)
        else:
            self.b.skip(kind)

    def session_meta(self, p: dict[str, Any]) -> None:
        if self.session_id is not None:  # a resumed/forked rollout repeats the parent's meta
            self.b.skip("session_meta")
            return
        if isinstance(p.get("id"), str):
            self.session_id = p["id"]
        for key in ("cwd", "cli_version", "model_provider", "originator", "source"):
            if isinstance(p.get(key), str):
                self.meta[key] = p[key]
        base = p.get("base_instructions")
        text = base.get("text") if isinstance(base, dict) else base
        if isinstance(text, str) and text:
            self.b.system_parts.append(text)
        if isinstance(p.get("model"), str) and self.model is None:
            self.model = p["model"]

    def event(self, p: dict[str, Any]) -> None:
        kind = p.get("type")
        if kind == "token_count":
            self.token_count(p.get("info"))
            return
        if kind == "task_started" and "model_context_window" in p:
            self.meta.setdefault("model_context_window", as_int(p["model_context_window"]))
        self.b.skip(f"event_msg:{kind}")

    def token_count(self, info: Any) -> None:
        if not isinstance(info, dict):
            return  # null info: no call has completed yet
        if "model_context_window" in info and info["model_context_window"] is not None:
            self.meta["model_context_window"] = as_int(info["model_context_window"])
        total = info.get("total_token_usage", info)
        if total == self.last_total:
            return  # the same event re-emitted when the next request starts
        self.last_total = total
        usage = codex_usage(info.get("last_token_usage"))
        if (problem := usage_problem(usage)) is not None:
            raise ShapeError(problem.removesuffix("; usage left out"))
        target = self.usage_target
        if usage is None or target is None:
            self.meta["unattached_token_counts"] = self.meta.get("unattached_token_counts", 0) + 1
            return
        target.usage = usage
        self.usage_target = None
        self.b.open_assistant = None  # the call is complete: a further assistant item is a new call

    # -- response items ---------------------------------------------------------------------

    def response_item(self, p: dict[str, Any], line: int, ts: float | None) -> None:
        kind = p.get("type")
        mid = f"m{line}"
        if kind == "message":
            role = p.get("role")
            blocks: list[Block] = list(content_blocks(p.get("content")))
            if role == "assistant":
                meta = {"phase": p["phase"]} if isinstance(p.get("phase"), str) else None
                self.assistant_blocks(blocks, mid, ts, meta)
            elif role in ("user", "developer", "system"):
                meta = {}
                if role != "user":
                    meta["role"] = role
                else:
                    text = "".join(b.text for b in blocks if isinstance(b, Text)).lstrip()
                    for prefix, name in CONTEXT_PREFIXES:
                        if text.startswith(prefix):
                            meta["context"] = name
                            break
                self.b.user(blocks, id=mid, timestamp=ts, meta=meta)
            else:
                raise ShapeError(f"message with unknown role {role!r}")
        elif kind in ASSISTANT_ITEMS:
            self.assistant_blocks([self.assistant_item(kind, p, line)], mid, ts, None)
        elif kind in OUTPUT_ITEMS:
            call_id = p.get("call_id")
            if not isinstance(call_id, str) or not call_id:
                raise ShapeError(f"{kind} without call_id")
            content, is_error = _output_blocks(p.get("output"))
            self.b.tool_results([ToolResult(call_id, content, is_error)], id=mid, timestamp=ts)
        else:
            self.b.skip(f"response_item:{kind}")

    def assistant_item(self, kind: str, p: dict[str, Any], line: int) -> Block:
        if kind == "reasoning":
            summary = p.get("summary")
            parts = (
                [s.get("text") for s in summary if isinstance(s, dict)] if isinstance(summary, list) else []
            )
            text = "\n\n".join(x for x in parts if isinstance(x, str) and x)
            if not text and isinstance(p.get("content"), list):
                text = "\n\n".join(
                    c.get("text", "") for c in p["content"] if isinstance(c, dict) and c.get("text")
                )
            encrypted = p.get("encrypted_content")
            return Thinking(thinking=text, encrypted=encrypted if isinstance(encrypted, str) else "")
        call_id = p.get("call_id") or p.get("id")
        call_id = call_id if isinstance(call_id, str) and call_id else f"call_m{line}"
        if kind == "function_call":
            name = p.get("name")
            if not isinstance(name, str):
                raise ShapeError("function_call without a name")
            return ToolCall(call_id, name, parse_arguments(p.get("arguments")))
        if kind == "custom_tool_call":
            name = p.get("name")
            if not isinstance(name, str):
                raise ShapeError("custom_tool_call without a name")
            raw = p.get("input")
            return ToolCall(call_id, name, raw if isinstance(raw, str) else parse_arguments(raw))
        action = p.get("action")
        tool = "local_shell" if kind == "local_shell_call" else "web_search"
        return ToolCall(call_id, tool, action if isinstance(action, dict) else {})

    def assistant_blocks(
        self, blocks: list[Block], mid: str, ts: float | None, meta: dict[str, Any] | None
    ) -> None:
        if self.b.open_assistant is not None:
            self.b.extend_assistant(blocks)
            if meta:
                self.b.open_assistant.meta.update(meta)
            return
        msg = self.b.assistant(blocks, id=mid, timestamp=ts, model=self.model, meta=meta, keep_open=True)
        self.usage_target = msg

    # -- compaction -------------------------------------------------------------------------

    def compacted(self, p: dict[str, Any], line: int, ts: float | None) -> None:
        index = len(self.compactions)
        self.compactions.append(
            RecordedCompaction(index=index, at=len(self.b.messages), trigger="auto", timestamp=ts)
        )
        history = p.get("replacement_history")
        if isinstance(history, list):
            for k, item in enumerate(history):
                if not isinstance(item, dict) or item.get("type") != "message":
                    continue
                blocks: list[Block] = list(content_blocks(item.get("content")))
                meta = {"role": item["role"]} if item.get("role") not in (None, "user") else {}
                self.b.user(
                    blocks,
                    id=f"m{line}.{k}",
                    timestamp=ts,
                    origin="compact_restore",
                    meta=meta,
                    compaction=index,
                )
        summary = p.get("message")
        if isinstance(summary, str) and summary:
            self.b.user(
                [Text(summary)], id=f"m{line}", timestamp=ts, origin="compact_summary", compaction=index
            )
        self.usage_target = None

    def repeated(self, rec: Any, line: bytes) -> bool:
        """Whether ``rec`` is a timestamped ``response_item`` written before byte for byte (a
        retried append): read once, the copy counted in ``skipped["duplicate:response_item"]``."""
        if not isinstance(rec, dict) or rec.get("type") != "response_item" or not rec.get("timestamp"):
            return False
        digest = hashlib.blake2b(line, digest_size=16).digest()
        if digest in self.item_lines:
            self.b.skip("duplicate:response_item")
            return True
        self.item_lines.add(digest)
        return False

    # -- driver -----------------------------------------------------------------------------

    def read(self) -> Session:
        data = read_bytes(self.path)
        for n, raw_line in enumerate(data.split(b"\n"), start=1):
            stripped = json_line(raw_line)
            if not stripped:
                continue
            if stripped.startswith(b"//"):
                self.b.skip("comment")
                continue
            try:  # a line that decodes is readable text (``formats.bad_line_reason``)
                rec = msgspec.json.decode(stripped)
            except msgspec.DecodeError as exc:  # an interrupted write, a stray binary line: one bad record
                self.b.bad(n, bad_line_reason(stripped) or f"not valid JSON ({exc})")
                continue
            except RecursionError:
                self.b.bad(n, bad_line_reason(stripped) or f"not valid JSON ({TOO_DEEP})")
                continue
            if self.repeated(rec, stripped):
                continue
            try:
                self.record(rec, n)
            except ShapeError as exc:
                self.b.bad(n, str(exc))
        if self.records == 0:
            raise TranscriptError(f"{self.path}: no Codex rollout records")
        if len(self.models) > 1:
            self.meta["models"] = self.models
        return Session(
            source=str(self.path),
            format="codex",
            messages=self.b.messages,
            model=self.models[0] if self.models else self.model,
            session_id=self.session_id,
            system=self.b.system,
            compactions=self.compactions,
            malformed=self.b.malformed,
            skipped=self.b.skipped,
            meta=self.meta,
        )


def read(path: Path) -> list[Session]:
    """Read the Codex rollout at ``path`` into one ``Session`` (a list of one).

    Raises ``TranscriptError`` when the file is missing, empty, binary, or holds no Codex record;
    bad lines are kept in ``Session.malformed`` (1-based line numbers) and warned about.
    """
    path = Path(path)
    return [_Reader(path).read()]
