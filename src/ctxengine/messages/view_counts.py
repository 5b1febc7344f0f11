"""How many messages of the current view hold each key, kept from one view to the next.

The replay's measures ask, at every call, whether a key (a content shingle, an identifier) is in
what the policy sent. A view mostly repeats the previous one, so the counts follow the messages
that came or went (by object identity: messages are treated as immutable); both directions are
tallied in C (``Counter.update``), and a key is held while it came more often than it went. A
view that only adds messages after the previous one (the common case between two compactions) is
found by comparing the two lists' messages by identity in C, and only its new messages are
looked at.
"""

from __future__ import annotations

import operator
from collections import Counter
from collections.abc import Callable, Hashable, Iterable, Sequence
from typing import Generic, TypeVar

from ctxengine.messages.model import Message

K = TypeVar("K", bound=Hashable)


class ViewCounts(Generic[K]):
    """The keys of the messages in view; ``keys_of(message)`` gives one message's keys (each
    once; it should be cached by the caller when it is costly)."""

    def __init__(self, keys_of: Callable[[Message], Iterable[K]]) -> None:
        self._keys_of = keys_of
        self._came: Counter[K] = Counter()
        self._went: Counter[K] = Counter()
        self._view: dict[int, Message] = {}
        self._order: list[Message] = []  # the view's messages, in order

    def move_to(self, messages: Sequence[Message]) -> None:
        """The view is now ``messages``."""
        prev = self._order
        if len(messages) >= len(prev) and all(map(operator.is_, prev, messages)):
            view = self._view  # only messages were added: look at them alone
            for m in messages[len(prev) :]:
                if view.get(id(m)) is not m:
                    view[id(m)] = m
                    self._came.update(self._keys_of(m))
            self._order = list(messages)
            return
        cur = {id(m): m for m in messages}
        for k, m in self._view.items():
            if cur.get(k) is not m:
                self._went.update(self._keys_of(m))
        for k, m in cur.items():
            if self._view.get(k) is not m:
                self._came.update(self._keys_of(m))
        self._view = cur
        self._order = list(messages)

    def holds(self, key: K) -> bool:
        """Whether a message of the view holds ``key``."""
        return self._came[key] > self._went[key]
