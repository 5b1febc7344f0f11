"""Reader for SWE-agent ``.traj`` files, both the 0.x and the 1.x layout.

A ``.traj`` is one JSON object with ``trajectory`` (per-step ``action``/``observation``/
``thought``/``response``, plus ``query``/``execution_time``/``extra_info`` in 1.x), ``history``
(the messages sent to the model), ``info`` (``exit_status``, ``submission``, ``model_stats``) and,
in 1.x, ``replay_config`` (a JSON *string* of the run config). Messages are taken from
``history``; ``trajectory`` is only used to fill an action missing from a history message.

* 1.x (checked on SWE-agent 1.1.0 with function calling): history messages have ``role``
  ``system``/``user``/``assistant``/``tool``, ``content`` a string or a list of ``{type: text}``
  parts, ``message_type``, ``agent``; assistant messages carry OpenAI-style ``tool_calls``, tool
  messages ``tool_call_ids``. The model is ``replay_config.agent.model.name``.
* 0.x (and 1.x with a text action parser): there are no ``tool_calls``. An assistant message is a
  discussion followed by a fenced command; it becomes ``Text(discussion)`` plus
  ``ToolCall(id=f"call_{i}", name="shell", input={"command": action})`` (``i`` = 0-based step),
  the action taken from the message's ``action`` field (else ``trajectory[i].action``, else the
  last fenced block), and the next ``user`` message (the observation) becomes its
  ``ToolResult``. 0.x records no model name: ``Session.model`` is None unless the file sits in a
  0.x run directory named ``<model>__<dataset>__<config>__t-...`` (the model is taken from it).

Conventions: the system prompt goes to ``Session.system``; ``is_demo`` messages (demonstrations,
sent to the model as context) stay ``user`` messages with ``meta["is_demo"] = True`` (a demo in
the assistant role is kept as a user message with ``meta["role"] = "assistant"``, since it was not
a model call); message ids are ``m{i}`` (``i`` = 0-based history index). Per-call usage is not
recorded (``usage`` None); ``info.model_stats`` (tokens_sent, tokens_received, api_calls, cost)
goes to ``Session.meta["model_stats"]`` and ``info.exit_status`` to ``meta["exit_status"]``.

Edges: when a run ends by autosubmission (``exit_context``, ``exit_cost``, ...) SWE-agent appends
an assistant message ``"Exit due to ..."`` with an empty action and no tool call, then a user
observation ``"Exited (autosubmitted)"``. That assistant message was not a model response (the
call it stands for failed, e.g. on context overflow); both are kept, marked
``meta["synthetic"] = True``, with ``usage`` and ``model`` None. The final ``submit`` action of a
0.x run has no observation in ``history`` (it was never sent back), so that call has no result.
A history message of the wrong shape is reported as ``Malformed(path, i, error)`` (``i`` = 1-based
history index) with a warning and skipped; a file that is not JSON, or not a trajectory object,
raises ``TranscriptError``.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import msgspec

from ctxengine.formats.chat_common import (
    ShapeError,
    as_dict,
    content_blocks,
    content_text,
    load_json_document_and_tail,
    openai_tool_call,
)
from ctxengine.formats.session_builder import SessionBuilder
from ctxengine.messages.model import Block, Session, Text, ToolCall, ToolResult, TranscriptError

SHELL_TOOL = "shell"
EXIT_PREFIX = "Exit due to"
# 0.x run directory: <model>__<dataset>__<config>__t-<temp>__p-<top_p>__c-<cost>__install-<n>
RUN_DIR = re.compile(r"^(?P<model>[^_][^/]*?)__.+__t-[\d.]+__p-[\d.]+__c-[\d.]+")
FENCE = re.compile(r"```[^\n]*\n(.*?)```", re.DOTALL)


def _replay_model(doc: dict[str, Any]) -> str | None:
    replay = doc.get("replay_config")
    if isinstance(replay, str):
        try:
            replay = msgspec.json.decode(replay)
        except (msgspec.DecodeError, RecursionError):
            return None
    if not isinstance(replay, dict):
        return None
    agent = replay.get("agent")
    model = agent.get("model") if isinstance(agent, dict) else None
    name = model.get("name") if isinstance(model, dict) else None
    return name if isinstance(name, str) and name else None


def _run_dir_model(path: Path) -> str | None:
    for part in (path.parent.name, path.parent.parent.name):
        match = RUN_DIR.match(part)
        if match:
            return match.group("model")
    return None


def _split_action(content: str, thought: Any, action: str) -> str:
    """The discussion part of a text-action assistant message (content minus the command)."""
    if isinstance(thought, str) and thought and content.startswith(thought):
        return thought.rstrip()
    fences = list(FENCE.finditer(content))
    if fences and action.strip() and action.strip() in fences[-1].group(1):
        return content[: fences[-1].start()].rstrip()
    return content


def _text_action(content: str) -> str:
    fences = list(FENCE.finditer(content))
    return fences[-1].group(1) if fences else ""


class _Reader:
    def __init__(self, path: Path, doc: dict[str, Any]) -> None:
        self.path = path
        self.doc = doc
        self.b = SessionBuilder(path)
        steps = doc.get("trajectory")
        self.steps: list[Any] = steps if isinstance(steps, list) else []
        self.step = 0  # index of the next model step (non-demo assistant message)
        self.pending_text_call: str | None = None  # synthetic call awaiting its observation
        self.model: str | None = _replay_model(doc) or _run_dir_model(path)

    def message(self, raw: Any, i: int) -> None:
        if not isinstance(raw, dict):
            raise ShapeError(f"message is a {type(raw).__name__}, not an object")
        role = raw.get("role")
        if not isinstance(role, str):
            raise ShapeError("message without a role")
        content = raw.get("content")
        meta: dict[str, Any] = {}
        for key in ("message_type", "agent"):
            if isinstance(raw.get(key), str):
                meta[key] = raw[key]
        mid = f"m{i}"
        if raw.get("is_demo"):
            meta["is_demo"] = True
            if role != "user":
                meta["role"] = role
            self.b.user(list(content_blocks(content)), id=mid, meta=meta)
            return
        if role == "system":
            self.b.system_parts.append(content_text(content))
            return
        if role == "assistant":
            self.assistant(raw, content, mid, meta)
            return
        if role == "tool":
            self.tool(raw, content, mid)
            return
        if role == "user":
            blocks = content_blocks(content)
            if self.pending_text_call is not None:
                call_id, self.pending_text_call = self.pending_text_call, None
                self.b.tool_results([ToolResult(call_id, tuple(blocks), name=SHELL_TOOL)], id=mid)
                return
            if self.b.messages and self.b.messages[-1].meta.get("synthetic"):
                meta["synthetic"] = True
            self.b.user(list(blocks), id=mid, meta=meta)
            return
        raise ShapeError(f"unknown role {role!r}")

    def assistant(self, raw: dict[str, Any], content: Any, mid: str, meta: dict[str, Any]) -> None:
        calls = raw.get("tool_calls")
        if calls is not None and not isinstance(calls, list):
            raise ShapeError(f"tool_calls is a {type(calls).__name__}, not a list")
        step = self.step
        blocks: list[Block] = []
        model: str | None = self.model
        if calls:
            blocks.extend(content_blocks(content))
            blocks.extend(openai_tool_call(c, f"call_{step}_{k}") for k, c in enumerate(calls))
            self.pending_text_call = None
        else:
            text = content_text(content)
            action = raw.get("action")
            if not isinstance(action, str):
                step_rec = self.steps[step] if step < len(self.steps) else None
                action = step_rec.get("action") if isinstance(step_rec, dict) else None
                if not isinstance(action, str):
                    action = _text_action(text)
            if action.strip():
                discussion = _split_action(text, raw.get("thought"), action)
                if discussion:
                    blocks.append(Text(discussion))
                call_id = f"call_{step}"
                blocks.append(ToolCall(call_id, SHELL_TOOL, {"command": action}))
                self.pending_text_call = call_id
            else:
                blocks.extend(content_blocks(content))
                self.pending_text_call = None
                if text.startswith(EXIT_PREFIX):
                    meta["synthetic"] = True
                    model = None
        self.step += 1
        self.b.assistant(blocks, id=mid, model=model, meta=meta)

    def tool(self, raw: dict[str, Any], content: Any, mid: str) -> None:
        ids = raw.get("tool_call_ids")
        if ids is None and isinstance(raw.get("tool_call_id"), str):
            ids = [raw["tool_call_id"]]
        if not isinstance(ids, list) or not ids or not all(isinstance(x, str) for x in ids):
            raise ShapeError("tool message without tool_call_ids")
        blocks = tuple(content_blocks(content))
        # One observation per message: the content belongs to the first id; any further ids
        # (never seen in practice) get an empty result so every call stays answered.
        results = [ToolResult(ids[0], blocks)] + [ToolResult(x, ()) for x in ids[1:]]
        self.pending_text_call = None
        self.b.tool_results(results, id=mid)

    def session(self) -> Session:
        history = self.doc.get("history")
        if not isinstance(history, list):
            history = []
            self.b.skip("no-history")
        for i, raw in enumerate(history):
            try:
                self.message(raw, i)
            except ShapeError as exc:
                self.b.bad(i + 1, f"history message {i + 1}: {exc}")
        info = as_dict(self.doc.get("info"))
        meta: dict[str, Any] = {}
        stats = info.get("model_stats")
        if isinstance(stats, dict):
            meta["model_stats"] = stats
        for key in ("exit_status", "swe_agent_version"):
            if isinstance(info.get(key), str):
                meta[key] = info[key]
        if isinstance(self.doc.get("environment"), str):
            meta["environment"] = self.doc["environment"]
        meta["layout"] = "1.x" if "replay_config" in self.doc or "swe_agent_version" in info else "0.x"
        meta["steps"] = len(self.steps)
        return Session(
            source=str(self.path),
            format="swe-agent",
            messages=self.b.messages,
            model=self.model,
            system=self.b.system,
            malformed=self.b.malformed,
            skipped=self.b.skipped,
            meta=meta,
        )


def read(path: Path) -> list[Session]:
    """Read the SWE-agent trajectory at ``path`` (0.x or 1.x layout) into one ``Session``.

    Raises ``TranscriptError`` when the file is missing, empty, binary, not JSON, or not a
    SWE-agent trajectory object (no ``trajectory``/``history``).
    """
    path = Path(path)
    doc, tail = load_json_document_and_tail(path)
    if not isinstance(doc, dict) or not (
        isinstance(doc.get("history"), list) or isinstance(doc.get("trajectory"), list)
    ):
        raise TranscriptError(f"{path}: not a SWE-agent trajectory (no 'history'/'trajectory')")
    session = _Reader(path, doc).session()
    session.malformed.extend(tail)
    return [session]
