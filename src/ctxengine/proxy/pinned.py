"""Client messages the proxy keeps whatever the engine does: ids, and pinned messages put back.

Every neutral message the proxy reads from a client's conversation has the id ``m<index>``
(its index in the conversation), so a wire's writer finds the raw message it came from in the
request and can send that one unchanged when the engine left the message as it was.

Some client messages are never summarized away (``pinned``): a ``system`` message inside an
Anthropic conversation (Claude Code's agent and skills list), a system / developer item or a
server-side ``compaction`` item of the Responses API (encrypted: no summary can hold it). When a
projection no longer holds one, ``with_pinned`` puts it back where it stood relative to the
messages kept: before the first kept client message that came after it (after the engine's
summary), or at the end.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence

from ctxengine.messages.model import Message

_ID = re.compile(r"m(\d+)")
_LEAD = re.compile(r"m(\d+)(?!\d)")


def message_id(index: int) -> str:
    """The id of the client message at ``index`` of the conversation."""
    return f"m{index}"


def client_index(message: Message) -> int | None:
    """The conversation index ``message`` was read from, or None for a message the engine made."""
    match = _ID.fullmatch(message.id)
    return int(match.group(1)) if match else None


def id_index(mid: str) -> int | None:
    """The conversation index of the client message a neutral message id was read from (``m3``,
    and ``m3r``, ``m3~2`` made of it), or None for an id the engine made."""
    match = _LEAD.match(mid)
    return int(match.group(1)) if match else None


def with_pinned(messages: Sequence[Message], pinned: Mapping[int, Message]) -> list[Message]:
    """``messages`` with every ``pinned`` message (by conversation index) it lacks put back in
    place (see the module docstring); unchanged (a new list) when none is missing."""
    present = {i for m in messages if (i := client_index(m)) is not None}
    missing = sorted(i for i in pinned if i not in present)
    if not missing:
        return list(messages)
    out: list[Message] = []
    k = 0
    for m in messages:
        i = client_index(m)
        while i is not None and k < len(missing) and missing[k] < i:
            out.append(pinned[missing[k]])
            k += 1
        out.append(m)
    out.extend(pinned[i] for i in missing[k:])
    return out
