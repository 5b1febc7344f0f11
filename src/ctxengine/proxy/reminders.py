"""Harness reminders inside a client's user message: context, not what the user asked.

Claude Code puts its injected context (CLAUDE.md, the date, "the task tools haven't been used
recently") in ``<system-reminder>`` text blocks of a user message, before the user's prompt or
after tool results. Read as part of the user's turn, such text became the session's title and
task in the engine's notes after a compaction. ``split_reminders`` gives the reminder blocks a
neutral message of their own with origin ``attachment`` (harness-injected context, as the
Claude Code transcript reader marks its attachment records), beside the user's own blocks, in
the order they were sent; the writer merges the two back into one user message. A message
whose reminders and other blocks interleave is left whole.
"""

from __future__ import annotations

import msgspec

from ctxengine.messages.model import Message, Text

TAG = "<system-reminder>"


def _is_reminder(block: object) -> bool:
    return isinstance(block, Text) and block.text.lstrip().startswith(TAG)


def split_reminders(message: Message) -> list[Message]:
    """``message`` as one or two neutral messages (see the module docstring); the user's part
    keeps the message's id, the reminders' part gets the id with ``r`` appended."""
    if message.role != "user":
        return [message]
    flags = [_is_reminder(b) for b in message.blocks]
    if not any(flags):
        return [message]
    if all(flags):
        return [msgspec.structs.replace(message, origin="attachment")]
    k = flags.index(not flags[0])  # where the first run ends
    if any(f == flags[0] for f in flags[k:]):
        return [message]  # interleaved
    head, tail = message.blocks[:k], message.blocks[k:]
    reminders, own = (head, tail) if flags[0] else (tail, head)
    attachment = Message("user", reminders, message.id + "r", origin="attachment")
    user = msgspec.structs.replace(message, blocks=own)
    return [attachment, user] if flags[0] else [user, attachment]
