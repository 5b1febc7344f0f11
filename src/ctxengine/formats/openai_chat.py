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
  ``Session.skipped["exit"]``, so the last (``submit``) tool call has no result. In mini-swe-agent's
  text mode (no ``tool`` message, no ``tool_calls``) each fenced bash action becomes a tool call
  and the observation after it its result (``formats.mini_text``).
* a JSON list of trajectories, each an object with ``traj`` (a message list), ``task_id``,
  ``trial``, ``reward`` (tau-bench ``historical_trajectories``): one session per trajectory, named
  ``"task {task_id} trial {trial}"``. tau-bench records no usage and no model name, so
  ``Session.model`` is None (the model is only in the file *name*).
* a bare JSON list of messages: one session.

Conventions (see ``ctxengine.messages.model``): ``system``/``developer`` messages are joined (blank line
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

The helpers shared with the SWE-agent and Codex readers live in ``chat_common`` (content parts,
tool calls, usage, file loading) and ``session_builder`` (``SessionBuilder``); they stay importable
from here.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ctxengine.formats import epoch_seconds, usage_problem
from ctxengine.formats.chat_common import (
    BINARY_SNIFF_BYTES,
    NEWLINE,
    TEXT_PART_TYPES,
    ShapeError,
    as_dict,
    as_int,
    content_blocks,
    content_text,
    image_from_url,
    load_json_document,
    load_json_document_and_tail,
    openai_tool_call,
    openai_usage,
    parse_arguments,
    read_bytes,
    report_malformed,
)
from ctxengine.formats.mini_text import text_action_calls
from ctxengine.formats.session_builder import MAX_WARNINGS, SessionBuilder
from ctxengine.messages.model import Block, Session, Thinking, ToolResult, TranscriptError

# the shared helpers stay importable from here (the SWE-agent and Codex readers, the proxy)
__all__ = [
    "BINARY_SNIFF_BYTES",
    "MAX_WARNINGS",
    "NEWLINE",
    "TEXT_PART_TYPES",
    "SessionBuilder",
    "ShapeError",
    "add_chat_message",
    "as_dict",
    "as_int",
    "content_blocks",
    "content_text",
    "image_from_url",
    "load_json_document",
    "openai_tool_call",
    "openai_usage",
    "parse_arguments",
    "read",
    "read_bytes",
    "report_malformed",
]


def _timestamp(msg: dict[str, Any]) -> float | None:
    extra = msg.get("extra")
    if isinstance(extra, dict):
        ts = extra.get("timestamp")
        if isinstance(ts, int | float) and not isinstance(ts, bool):
            return epoch_seconds(float(ts))
        response = extra.get("response")
        if isinstance(response, dict):
            created = response.get("created")
            if isinstance(created, int | float) and not isinstance(created, bool):
                return epoch_seconds(float(created))
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
        usage = openai_usage(response.get("usage"))
        if (problem := usage_problem(usage)) is not None:
            b.bad(index + 1, f"message {index + 1}: {problem}")
            usage = None
        b.assistant(blocks, id=mid, timestamp=_timestamp(raw), usage=usage, model=model)
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
    raw = [m for m in doc["messages"] if isinstance(m, dict)]
    if not any(m.get("role") == "tool" or m.get("tool_calls") for m in raw):
        session.messages = text_action_calls(session.messages)  # mini-swe-agent's text mode
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
    doc, tail = load_json_document_and_tail(path)
    sessions = _sessions(path, doc)
    sessions[0].malformed.extend(tail)  # the lines after the document: the file's first session
    return sessions


def _sessions(path: Path, doc: Any) -> list[Session]:
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
