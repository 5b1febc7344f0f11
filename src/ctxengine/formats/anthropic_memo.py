"""The Anthropic request body of call after call of one conversation, each encoded from where it
differs from the previous one (``BlockMemo``, the ``memo`` of ``anthropic_writer.to_anthropic``).

The replay checks the request of every call (``replay.measures.RequestMeter``), and a projection
mostly repeats the previous one: the same messages, then a few new ones. ``BlockMemo.encode`` keeps
the previous projection's grouping (``anthropic_writer.Groups``: the provider messages as groups of
merged neutral messages) and, when the new projection starts with the previous one's messages (by
identity; messages are treated as immutable) and leaves out the same aborted tool calls, keeps the
groups that the shared messages close and groups again from the last of them on. Each message's
blocks are encoded once (an aborted message, whose encoding depends on the projection, every
time). The body is ``to_anthropic``'s without a memo, in new message dicts and lists each call;
only the block dicts are shared between bodies (breakpoints are set on copies). With
``share_messages`` (a caller that never changes a body: the replay's request check), an
unchanged group's message dict is shared too (``anthropic_writer.finish``), so a body is made in
time proportional to what changed, not to its length.
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence
from typing import Any

from ctxengine.formats.anthropic_writer import (
    Encoded,
    Groups,
    SystemMessages,
    _blocks,
    finish,
    group,
)
from ctxengine.messages.model import Message, shared_prefix
from ctxengine.messages.tool_turns import aborted_unanswered, is_aborted

BLOCKS_MAX = 20_000  # messages whose blocks are remembered (the oldest forgotten first)


class BlockMemo:
    """``_encode`` of projection after projection (see the module docstring)."""

    def __init__(self, *, share_messages: bool = False) -> None:
        self.share_messages = share_messages
        self._blocks: dict[int, tuple[Message, list[dict[str, Any]]]] = {}
        self._groups: Groups | None = None
        self._messages: list[Message] = []
        self._skip: set[str] = set()
        self._mode: SystemMessages = "hoist"
        self._aborted = False  # whether the previous projection held an aborted message
        self.regrouped = 0  # neutral messages grouped in all (the rest was kept from a previous body)

    def blocks(self, m: Message, skip: set[str]) -> list[dict[str, Any]]:
        """``_blocks(m, skip)``, the same list each time for a message not aborted (not to be
        changed by the caller)."""
        hit = self._blocks.get(id(m))
        if hit is not None and hit[0] is m:
            return hit[1]
        blocks = _blocks(m, skip)
        if not is_aborted(m):
            if len(self._blocks) >= BLOCKS_MAX:
                del self._blocks[next(iter(self._blocks))]
            self._blocks[id(m)] = (m, blocks)
        return blocks

    def encode(self, messages: Sequence[Message], system: str, system_messages: SystemMessages) -> Encoded:
        """``anthropic_writer._encode(messages, system, system_messages)``, from the groups of the
        previous projection that the shared messages close."""
        g = self._groups
        shared = shared_prefix(self._messages, messages) if g is not None else 0
        # no aborted message in the previous projection: only the messages after the shared
        # ones can hold one (``aborted_unanswered`` is empty without one)
        self._aborted = any(map(is_aborted, messages if self._aborted else messages[shared:]))
        skip = aborted_unanswered(messages) if self._aborted else set()
        start = 0
        if g is not None and skip == self._skip and system_messages == self._mode:
            k = bisect.bisect_left(g.first_src, shared) - 1
            start = g.cut(k) if k >= 0 else 0
            if k < 0:
                g = Groups()
        else:
            g = Groups()
        group(g, messages, start, skip, system_messages, lambda m: self.blocks(m, skip))
        self.regrouped += len(messages) - start
        self._groups, self._messages, self._skip, self._mode = g, list(messages), skip, system_messages
        return finish(g, system, share=self.share_messages)
