"""A left fold over a message list, resumed where the previous list it extends left off.

A compaction's restore step reads the history before the cut for the files the agent read, the
files it changed and its latest failure (``summary.restore``). Each read is a fold over the
messages, and the history only grows between two compactions (and between a rehearsal and the
compaction it prepares: ``compaction.rehearse``), so ``PrefixScan`` keeps the state of its last
fold with the messages it covered (the same objects: messages are treated as immutable) and,
when the next list starts with them, folds only the messages after them. Any other list is
folded from the start, and its fold is kept instead. The state is the scan's own: a caller
reads it and never changes it.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Sequence
from typing import Generic, TypeVar

from ctxengine.messages.model import Message

S = TypeVar("S")


class PrefixScan(Generic[S]):
    """``scan(messages)``: the state that ``step`` leaves after each message of ``messages`` in
    turn, starting from ``start()`` (see the module docstring). ``folded``: messages folded in
    all (the ones a resumed scan skipped are not)."""

    def __init__(self, start: Callable[[], S], step: Callable[[S, Message], None]) -> None:
        self._start = start
        self._step = step
        self._seen: list[Message] = []
        self._state: S | None = None
        self.folded = 0

    def __call__(self, messages: Sequence[Message]) -> S:
        seen, state = self._seen, self._state
        n = len(seen)
        if state is None or n > len(messages) or not all(map(operator.is_, seen, messages[:n])):
            state, n = self._start(), 0
            seen = []
        step = self._step
        for m in messages[n:]:
            step(state, m)
        self.folded += len(messages) - n
        seen.extend(messages[n:])
        self._seen, self._state = seen, state
        return state
