"""``system`` messages inside an Anthropic conversation (beta ``mid-conversation-system-*``).

Claude Code's default model sends its agent and skills list as a ``role: "system"`` message
right after the first user message. The proxy carries such a message as a neutral ``system``
message (pinned: ``pinned.with_pinned`` puts it back after a summary) and writes it back as the
client sent it, in place:

- ``mark`` replaces each client system message of a projection by a user message holding one
  marker text (the writer merges it with its user neighbours, as it would any user text);
- ``unmark`` splits the written messages at each marker and puts the client's raw message there
  (a breakpoint the writer put on a marker goes to the block before it); system messages that
  end up next to each other (a pinned one put back before a kept reminder) are sent as one, as
  the API would merge them.

Pinned (``preamble``): the system messages before the conversation's first assistant message
(the agent and skills list). Later ones (Claude Code's reminders: "the task tools haven't been
used recently") are ordinary content: written in place while kept, summarized with the rest.
- ``without_system`` is the body the rules are checked on: the system messages left out and
  their neighbours merged when of one role (what the provider does with them is its own
  business; the rest must hold).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ctxengine.messages.model import Message, Text
from ctxengine.proxy.pinned import client_index

MARKER = "\x00ctxengine-client-system-message:{index}\x00"


def is_client_system(message: Message, conversation: Sequence[Any]) -> int | None:
    """The conversation index of ``message`` when it is a client's ``system`` message."""
    i = client_index(message)
    if i is None or message.role != "system" or i >= len(conversation):
        return None
    raw = conversation[i]
    return i if isinstance(raw, dict) and raw.get("role") == "system" else None


def preamble(conversation: Sequence[Any]) -> list[int]:
    """Indices of the client's system messages before its first assistant message."""
    out: list[int] = []
    for i, m in enumerate(conversation):
        role = m.get("role") if isinstance(m, dict) else None
        if role == "assistant":
            break
        if role == "system":
            out.append(i)
    return out


def mark(
    messages: Sequence[Message],
    conversation: Sequence[Any],
    made: dict[tuple[int, str], Message] | None = None,
) -> list[Message]:
    """``messages`` with each client system message replaced by its marker (see module docs).
    ``made``: the markers of earlier calls by (index, id), reused (the same objects from one
    request to the next; ``body_memo``)."""
    out: list[Message] = []
    for m in messages:
        i = is_client_system(m, conversation)
        if i is None:
            out.append(m)
            continue
        marker = made.get((i, m.id)) if made is not None else None
        if marker is None:
            marker = Message("user", (Text(MARKER.format(index=i)),), m.id)
            if made is not None:
                made[(i, m.id)] = marker
        out.append(marker)
    return out


def _marker_index(block: Any) -> int | None:
    if not isinstance(block, dict) or block.get("type") != "text":
        return None
    text = block.get("text")
    head, _, tail = MARKER.partition("{index}")
    if isinstance(text, str) and text.startswith(head) and text.endswith(tail):
        return int(text[len(head) : -len(tail)])
    return None


def unmark(written: list[dict[str, Any]], conversation: Sequence[Any]) -> list[dict[str, Any]]:
    """The written messages with every marker replaced by the client's raw system message."""
    out: list[dict[str, Any]] = []
    for msg in written:
        content = msg.get("content")
        if not isinstance(content, list) or not any(_marker_index(b) is not None for b in content):
            out.append(msg)
            continue
        run: list[Any] = []
        for block in content:
            i = _marker_index(block)
            if i is None:
                run.append(block)
                continue
            if "cache_control" in block and run and isinstance(run[-1], dict):
                run[-1] = {**run[-1], "cache_control": block["cache_control"]}
            if run:
                out.append({**msg, "content": run})
                run = []
            _add_system(out, conversation[i])
        if run:
            out.append({**msg, "content": run})
    return out


def _add_system(out: list[dict[str, Any]], raw: dict[str, Any]) -> None:
    prev = out[-1] if out else None
    if prev is not None and prev.get("role") == "system":
        out[-1] = {**prev, "content": _blocks(prev.get("content")) + _blocks(raw.get("content"))}
    else:
        out.append(raw)


def without_system(messages: list[Any]) -> list[Any]:
    """``messages`` without ``system`` messages, neighbours of one role merged."""
    out: list[Any] = []
    for msg in messages:
        if isinstance(msg, dict) and msg.get("role") == "system":
            continue
        prev = out[-1] if out else None
        if isinstance(prev, dict) and isinstance(msg, dict) and prev.get("role") == msg.get("role"):
            out[-1] = {**prev, "content": _blocks(prev.get("content")) + _blocks(msg.get("content"))}
        else:
            out.append(msg)
    return out


def _blocks(content: Any) -> list[Any]:
    if isinstance(content, str):
        return [{"type": "text", "text": content}] if content.strip() else []
    return list(content) if isinstance(content, list) else []
