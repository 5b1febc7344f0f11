"""Check an encoded request body against the provider's rules, before it is sent.

``validate_anthropic(body)`` and ``validate_openai_chat(body)`` take the JSON-ready body a writer
built (or any dict) and return one line per problem, ``[]`` when the provider would accept the
body's message structure. They never raise, whatever the input. The replay counts the problems as
``pairing_violations``. Each check names the provider rule it follows; these are the rules whose
breach makes the API answer 400 (the bugs listed in reference/openclaw.md and
reference/python_peers.md are almost all of them).

Anthropic Messages:
  A1 ``messages`` is a non-empty list; roles are ``user`` / ``assistant``; the first is ``user``;
     roles alternate.
  A2 every ``tool_use`` in an assistant message is answered by a ``tool_result`` with its id in
     the very next message, which is a user message ("tool_use ids were found without
     tool_result blocks immediately after").
  A3 every ``tool_result`` answers a ``tool_use`` of the immediately preceding assistant message
     ("unexpected tool_use_id found in tool_result blocks"), at most once; tool_use ids are unique.
  A4 in a user message, ``tool_result`` blocks come before any other block.
  A5 no empty content: a message's content is a non-empty list (or non-empty string); text
     blocks hold non-whitespace text ("text content blocks must be non-empty"), also inside a
     tool_result and in ``system``.
  A6 block shapes: tool_use has an id matching ``^[a-zA-Z0-9_-]+$``, a name and an object
     input; tool_use, thinking and redacted_thinking only in assistant messages, tool_result only
     in user messages; thinking carries a non-empty signature, redacted_thinking non-empty data;
     image / document have a source.
  A7 at most 4 blocks with ``cache_control`` (system, tools and messages together).

OpenAI Chat Completions:
  O1 ``messages`` is a non-empty list; roles are ``system`` / ``developer`` / ``user`` /
     ``assistant`` / ``tool``.
  O2 an assistant message with ``tool_calls`` is followed directly by one ``tool`` message per
     call ("An assistant message with 'tool_calls' must be followed by tool messages responding
     to each 'tool_call_id'"); its call ids are distinct (ids reused across turns are accepted by
     the API, tau-bench's recorded requests have them).
  O3 a ``tool`` message answers a call of the assistant message right before the run of tool
     messages it is in ("messages with role 'tool' must be a response to a preceding message with
     'tool_calls'"), at most once.
  O4 no empty content: ``content`` is a non-empty string or a non-empty list of parts with
     non-empty text; only an assistant message with tool calls may have null/absent content;
     ``tool_calls``, when present, is non-empty.
  O5 tool call shape: ``{"id", "type": "function", "function": {"name", "arguments": string}}``
     with ``arguments`` valid JSON (``type: "custom"`` with a string ``custom.input`` is
     accepted too).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

MAX_CACHE_BREAKPOINTS = 4  # Anthropic's limit per request

_ANTHROPIC_USER_BLOCKS = frozenset({"text", "image", "document", "tool_result", "search_result"})
_ANTHROPIC_ASSISTANT_BLOCKS = frozenset({"text", "thinking", "redacted_thinking", "tool_use"})
_ANTHROPIC_RESULT_PARTS = frozenset({"text", "image", "document", "search_result"})
_TOOL_USE_ID = re.compile(r"^[a-zA-Z0-9_-]+$")  # Anthropic's pattern for tool_use ids
_OPENAI_ROLES = frozenset({"system", "developer", "user", "assistant", "tool"})


def _str(value: object) -> str | None:
    """``value`` when it is a string, else None (so that set lookups never meet unhashables)."""
    return value if isinstance(value, str) else None


def _blank(value: object) -> bool:
    return not isinstance(value, str) or not value.strip()


def validate_anthropic(body: Mapping[str, Any]) -> list[str]:
    """Problems in an Anthropic Messages request body (rules A1-A7 in the module docstring), one
    line each, naming the message index (``messages[k]``) and block (``[b]``)."""
    problems: list[str] = []
    if not isinstance(body, Mapping):
        return ["body is not an object"]
    breakpoints = _check_system(body.get("system"), problems)
    tools = body.get("tools")
    if isinstance(tools, list):
        breakpoints += sum(1 for t in tools if isinstance(t, Mapping) and "cache_control" in t)

    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        problems.append("messages: missing or empty (A1)")
        messages = []
    breakpoints += _check_anthropic_messages(messages, problems)
    _check_breakpoints(breakpoints, problems)
    return problems


def _check_breakpoints(breakpoints: int, problems: list[str]) -> None:
    """At most ``MAX_CACHE_BREAKPOINTS`` blocks with ``cache_control`` (A7)."""
    most = MAX_CACHE_BREAKPOINTS
    if breakpoints > most:
        problems.append(f"{breakpoints} cache_control breakpoints; at most {most} allowed (A7)")


def _check_system(system: object, problems: list[str]) -> int:
    """Check ``system`` (A5: a string or a list of non-empty text blocks); return its
    cache_control count."""
    breakpoints = 0
    if isinstance(system, list):
        for b, block in enumerate(system):
            if not isinstance(block, Mapping) or block.get("type") != "text":
                problems.append(f"system[{b}]: not a text block (A5)")
                continue
            if _blank(block.get("text")):
                problems.append(f"system[{b}]: empty text block (A5)")
            breakpoints += "cache_control" in block
    elif system is not None and not isinstance(system, str):
        problems.append("system: neither a string nor a list of text blocks (A5)")
    return breakpoints


@dataclass
class _Turn:
    """One message under check: the tool_use ids it must answer (those of the previous assistant
    message), the ones it answers and the ones it makes (A2-A4)."""

    k: int
    role: str | None
    where: str
    expected: dict[str, int]  # tool_use ids of the previous assistant message -> its index
    seen_calls: dict[str, int]  # every tool_use id so far (unique across the request) -> its message
    answered: set[str] = field(default_factory=set)
    calls: dict[str, int] = field(default_factory=dict)
    seen_other: bool = False  # a block other than tool_result came already


@dataclass
class AnthropicScan:
    """A check of Anthropic messages between two messages: cache_control count, tool_use ids so
    far (in order, -> their message), the previous assistant's ids (-> its index), previous role."""

    breakpoints: int = 0
    seen_calls: dict[str, int] = field(default_factory=dict)
    expected: dict[str, int] = field(default_factory=dict)
    prev_role: str | None = None

    def step(self, k: int, msg: Any, problems: list[str]) -> None:
        """Check ``messages[k]`` (A1-A6), appending its problems."""
        where = f"messages[{k}]"
        if not isinstance(msg, Mapping):
            problems.append(f"{where}: not an object (A1)")
            return
        role = _str(msg.get("role"))
        _check_role(role, k, self.prev_role, where, problems)
        blocks = _message_blocks(msg.get("content"), where, problems)
        turn = _Turn(k, role, where, self.expected, self.seen_calls)
        self.breakpoints += _check_blocks(blocks, turn, problems)
        for cid, at_k in self.expected.items():
            if cid not in turn.answered:
                problems.append(
                    f"messages[{at_k}]: tool_use {cid!r} has no tool_result in the next message (A2)"
                )
        self.expected = turn.calls if role == "assistant" else {}
        self.prev_role = role

    def end(self, problems: list[str]) -> int:
        """The end's problems (A2: calls no message answers); returns the cache_control count."""
        for cid, at_k in self.expected.items():
            problems.append(f"messages[{at_k}]: tool_use {cid!r} not answered: no message follows (A2)")
        return self.breakpoints


def _check_anthropic_messages(messages: list[Any], problems: list[str]) -> int:
    """Check the messages in order (A1-A6); return their cache_control count."""
    scan = AnthropicScan()
    for k, msg in enumerate(messages):
        scan.step(k, msg, problems)
    return scan.end(problems)


def _check_role(role: str | None, k: int, prev_role: str | None, where: str, problems: list[str]) -> None:
    """Roles are user / assistant, the first is user, and they alternate (A1)."""
    if role not in ("user", "assistant"):
        problems.append(f"{where}: role {role!r} is not user or assistant (A1)")
    elif k == 0 and role != "user":
        problems.append(f"{where}: the first message must be a user message (A1)")
    elif role == prev_role:
        problems.append(f"{where}: two {role} messages in a row; roles must alternate (A1)")


def _message_blocks(content: object, where: str, problems: list[str]) -> list[Any]:
    """The blocks of a message's ``content``, checked not to be empty (A5); [] for a string."""
    blocks: list[Any] = []
    if isinstance(content, str):
        if not content.strip():
            problems.append(f"{where}: empty content (A5)")
    elif isinstance(content, list):
        if not content:
            problems.append(f"{where}: empty content list (A5)")
        blocks = content
    else:
        problems.append(f"{where}: content is neither a string nor a list (A5)")
    return blocks


def _check_blocks(blocks: list[Any], turn: _Turn, problems: list[str]) -> int:
    """Check a message's blocks (A3-A6); return their cache_control count."""
    breakpoints = 0
    allowed = _ANTHROPIC_USER_BLOCKS if turn.role == "user" else _ANTHROPIC_ASSISTANT_BLOCKS
    for b, block in enumerate(blocks):
        at = f"{turn.where}[{b}]"
        if not isinstance(block, Mapping):
            problems.append(f"{at}: block is not an object (A6)")
            continue
        kind = _str(block.get("type"))
        breakpoints += "cache_control" in block
        if kind not in allowed:
            problems.append(f"{at}: block type {kind!r} not allowed in a {turn.role} message (A6)")
        if kind == "tool_result":
            _check_tool_result(block, at, turn, problems)
            breakpoints += _check_result_content(block.get("content"), at, problems)
            continue
        turn.seen_other = True
        if kind == "tool_use":
            _check_tool_use(block, at, turn, problems)
        else:
            _check_block_shape(kind, block, at, problems)
    return breakpoints


def _check_tool_result(block: Mapping[str, Any], at: str, turn: _Turn, problems: list[str]) -> None:
    """A tool_result comes before other blocks (A4) and answers, once, a tool_use of the
    previous message (A3)."""
    cid = block.get("tool_use_id")
    if turn.seen_other:
        problems.append(f"{at}: tool_result {cid!r} after other content; results come first (A4)")
    if not isinstance(cid, str) or cid not in turn.expected:
        problems.append(f"{at}: tool_result {cid!r} answers no tool_use of the previous message (A3)")
    elif cid in turn.answered:
        problems.append(f"{at}: second tool_result for tool_use {cid!r} (A3)")
    else:
        turn.answered.add(cid)


def _check_tool_use(block: Mapping[str, Any], at: str, turn: _Turn, problems: list[str]) -> None:
    """A tool_use has a well-formed id, a name and an object input (A6); its id is unique (A3)."""
    cid = block.get("id")
    if _blank(cid) or _blank(block.get("name")):
        problems.append(f"{at}: tool_use without id or name (A6)")
    elif not _TOOL_USE_ID.match(str(cid)):
        problems.append(f"{at}: tool_use id {cid!r} has characters outside [a-zA-Z0-9_-] (A6)")
    if not isinstance(block.get("input"), Mapping):
        problems.append(f"{at}: tool_use input is not an object (A6)")
    if isinstance(cid, str):
        if cid in turn.seen_calls:
            problems.append(f"{at}: tool_use id {cid!r} used twice (A3)")
        else:
            turn.seen_calls[cid] = turn.k
        turn.calls[cid] = turn.k


def _check_block_shape(kind: str | None, block: Mapping[str, Any], at: str, problems: list[str]) -> None:
    """Text is not blank (A5); thinking is signed, redacted_thinking has data, an image or a
    document has a source (A6)."""
    if kind == "text":
        if _blank(block.get("text")):
            problems.append(f"{at}: empty text block (A5)")
    elif kind == "thinking":
        if _blank(block.get("signature")):
            problems.append(f"{at}: thinking block without signature (A6)")
    elif kind == "redacted_thinking":
        if _blank(block.get("data")):
            problems.append(f"{at}: redacted_thinking without data (A6)")
    elif kind in ("image", "document") and not isinstance(block.get("source"), Mapping):
        problems.append(f"{at}: {kind} without source (A6)")


def _check_result_content(content: object, at: str, problems: list[str]) -> int:
    """Check a tool_result's content (A5, A6); return its cache_control count."""
    if content is None or isinstance(content, str):
        return 0  # absent or a string: both accepted (an empty string too)
    if not isinstance(content, list):
        problems.append(f"{at}: tool_result content is neither a string nor a list (A6)")
        return 0
    count = 0
    for p, part in enumerate(content):
        if not isinstance(part, Mapping) or _str(part.get("type")) not in _ANTHROPIC_RESULT_PARTS:
            problems.append(f"{at}.content[{p}]: not a text, image or document block (A6)")
            continue
        count += "cache_control" in part
        if part.get("type") == "text" and _blank(part.get("text")):
            problems.append(f"{at}.content[{p}]: empty text block (A5)")
    return count


def validate_openai_chat(body: Mapping[str, Any]) -> list[str]:
    """Problems in an OpenAI Chat Completions request body (rules O1-O5 in the module
    docstring), one line each, naming the message index (``messages[k]``)."""
    problems: list[str] = []
    if not isinstance(body, Mapping):
        return ["body is not an object"]
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        return ["messages: missing or empty (O1)"]
    scan = OpenAIScan()
    for k, msg in enumerate(messages):
        scan.step(k, msg, problems)
    scan.end(problems)
    return problems


@dataclass
class OpenAIScan:
    """A check of OpenAI chat messages between two messages: the current assistant message's calls
    (id -> its index), those answered so far, whether a run of tool messages may follow."""

    pending: dict[str, int] = field(default_factory=dict)
    answered: set[str] = field(default_factory=set)
    in_tools: bool = False  # inside the run of tool messages after an assistant with tool_calls

    def step(self, k: int, msg: Any, problems: list[str]) -> None:
        """Check ``messages[k]`` (O1-O5), appending its problems."""
        where = f"messages[{k}]"
        if not isinstance(msg, Mapping):
            problems.append(f"{where}: not an object (O1)")
            return
        role = _str(msg.get("role"))
        if role not in _OPENAI_ROLES:
            problems.append(f"{where}: unknown role {role!r} (O1)")
            return
        if role == "tool":
            _check_tool_message(msg, where, self.in_tools, self.pending, self.answered, problems)
            return
        if self.in_tools:
            _check_calls_answered(self.pending, self.answered, problems)
        self.pending = {}
        self.answered = set()
        self.in_tools = _check_openai_message(msg, role, k, self.pending, problems)

    def end(self, problems: list[str]) -> None:
        """The end's problems (O2: the last run's unanswered calls)."""
        if self.in_tools:
            _check_calls_answered(self.pending, self.answered, problems)


def _check_calls_answered(pending: dict[str, int], answered: set[str], problems: list[str]) -> None:
    """At the end of a run of tool messages: every call of its assistant message answered (O2)."""
    for cid, at_k in pending.items():
        if cid not in answered:
            problems.append(
                f"messages[{at_k}]: tool call {cid!r} not answered by a tool message right after it (O2)"
            )


def _check_tool_message(
    msg: Mapping[str, Any],
    where: str,
    in_tools: bool,
    pending: dict[str, int],
    answered: set[str],
    problems: list[str],
) -> None:
    """A tool message answers, once, a call of the assistant message before its run (O3); its
    content is not empty (O4)."""
    cid = msg.get("tool_call_id")
    if not in_tools:
        problems.append(f"{where}: tool message without an assistant message with tool_calls before it (O3)")
    elif not isinstance(cid, str) or cid not in pending:
        problems.append(f"{where}: tool message {cid!r} answers no call of the assistant message (O3)")
    elif cid in answered:
        problems.append(f"{where}: second tool message for call {cid!r} (O3)")
    else:
        answered.add(cid)
    _check_openai_content(msg.get("content"), where, problems, allow_null=False)


def _check_openai_message(
    msg: Mapping[str, Any], role: str, k: int, pending: dict[str, int], problems: list[str]
) -> bool:
    """Check a system, user or assistant message (O4, and O5 and O2's distinct ids for its tool
    calls, which go into ``pending``); return whether tool messages must follow it."""
    where = f"messages[{k}]"
    if role != "assistant":
        _check_openai_content(msg.get("content"), where, problems, allow_null=False)
        return False
    calls = msg.get("tool_calls")
    if calls is None:
        _check_openai_content(msg.get("content"), where, problems, allow_null=False)
        return False
    if not isinstance(calls, list) or not calls:
        problems.append(f"{where}: tool_calls is empty or not a list (O4)")
        _check_openai_content(msg.get("content"), where, problems, allow_null=False)
        return False
    _check_openai_content(msg.get("content"), where, problems, allow_null=True)
    for c, call in enumerate(calls):
        cid = _check_call(call, f"{where}.tool_calls[{c}]", problems)
        if cid is None:
            continue
        if cid in pending:
            problems.append(f"{where}.tool_calls[{c}]: tool call id {cid!r} used twice (O2)")
        pending[cid] = k
    return True


def _check_call(call: object, at: str, problems: list[str]) -> str | None:
    """Check one tool call's shape (O5); return its id when it has one."""
    if not isinstance(call, Mapping):
        problems.append(f"{at}: not an object (O5)")
        return None
    cid = call.get("id")
    kind = call.get("type")
    if kind == "function":
        fn = call.get("function")
        if not isinstance(fn, Mapping) or _blank(fn.get("name")):
            problems.append(f"{at}: function without a name (O5)")
        elif not isinstance(fn.get("arguments"), str):
            problems.append(f"{at}: arguments is not a string (O5)")
        else:
            try:
                json.loads(fn["arguments"])
            except (ValueError, RecursionError):
                problems.append(f"{at}: arguments is not valid JSON (O5)")
    elif kind == "custom":
        custom = call.get("custom")
        if (
            not isinstance(custom, Mapping)
            or _blank(custom.get("name"))
            or not isinstance(custom.get("input"), str)
        ):
            problems.append(f"{at}: custom tool call without name or string input (O5)")
    else:
        problems.append(f"{at}: tool call type {kind!r} is not function or custom (O5)")
    if _blank(cid):
        problems.append(f"{at}: tool call without id (O5)")
        return None
    return str(cid)


def _check_openai_content(content: object, where: str, problems: list[str], *, allow_null: bool) -> None:
    """Check a message's content (O4)."""
    if content is None:
        if not allow_null:
            problems.append(f"{where}: no content (O4)")
        return
    if isinstance(content, str):
        if not content.strip():
            problems.append(f"{where}: empty content (O4)")
        return
    if not isinstance(content, list) or not content:
        problems.append(f"{where}: content is empty or neither a string nor a list (O4)")
        return
    for p, part in enumerate(content):
        if not isinstance(part, Mapping):
            problems.append(f"{where}.content[{p}]: part is not an object (O4)")
        elif part.get("type") == "text" and _blank(part.get("text")):
            problems.append(f"{where}.content[{p}]: empty text part (O4)")
