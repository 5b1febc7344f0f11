"""How many blocks of the current view hold each key, kept from one view to the next.

The replay's measures ask, at every call, whether a key (a content shingle, an identifier) is in
what the policy sent. A view mostly repeats the previous one, so the counts follow the blocks
that came or went (by object identity: messages and blocks are treated as immutable); both
directions are tallied in C (``Counter.update``), and a key is held while it came more often than
it went. A view that only adds messages after the previous one (the common case between two
compactions) is found by comparing the two lists' messages by identity in C, and only its new
messages' blocks are looked at. Otherwise the blocks are compared: a message the engine rebuilt
around blocks it already sent (a baseline's one message that grows by a block per call, a cleared
result beside the blocks it kept) costs its new blocks, not all of its keys again.
"""

from __future__ import annotations

import operator
from collections import Counter
from collections.abc import Callable, Hashable, Iterable, Sequence
from typing import Generic, TypeVar

from ctxengine.messages.model import Block, Message

K = TypeVar("K", bound=Hashable)


class ViewCounts(Generic[K]):
    """The keys of the blocks in view; ``keys_of(block)`` gives one block's keys (each once; it
    should be cached by the caller when it is costly). A key is held while some block of some
    message of the view holds it: the same as asking every message of the view."""

    def __init__(self, keys_of: Callable[[Block], Iterable[K]]) -> None:
        self._keys_of = keys_of
        self._came: Counter[K] = Counter()
        self._went: Counter[K] = Counter()
        self._held: dict[int, tuple[Block, int]] = {}  # id -> (block, its occurrences in the view)
        self._order: list[Message] = []  # the view's messages, in order

    def move_to(self, messages: Sequence[Message]) -> None:
        """The view is now ``messages``."""
        prev = self._order
        self._order = list(messages)
        if len(messages) >= len(prev) and all(map(operator.is_, prev, messages)):
            held = self._held  # only messages were added: look at them alone
            for m in messages[len(prev) :]:
                for b in m.blocks:
                    hit = held.get(id(b))
                    held[id(b)] = (b, hit[1] + 1 if hit is not None and hit[0] is b else 1)
                    self._came.update(self._keys_of(b))
            return
        cur: dict[int, tuple[Block, int]] = {}
        for m in messages:
            for b in m.blocks:
                hit = cur.get(id(b))
                cur[id(b)] = (b, hit[1] + 1) if hit is not None else (b, 1)
        for k, (b, n) in self._held.items():
            now = cur.get(k)
            gone = n - (now[1] if now is not None and now[0] is b else 0)
            for _ in range(gone):
                self._went.update(self._keys_of(b))
        for k, (b, n) in cur.items():
            was = self._held.get(k)
            new = n - (was[1] if was is not None and was[0] is b else 0)
            for _ in range(new):
                self._came.update(self._keys_of(b))
        self._held = cur

    def holds(self, key: K) -> bool:
        """Whether a block of the view holds ``key``."""
        return self._came[key] > self._went[key]


class BlockKeys(Generic[K]):
    """``keys(block)`` remembered per block object (blocks are treated as immutable; the block is
    held, so its id is not reused while remembered): ``block(b)`` for one block, ``msg(m)`` for a
    message (its blocks' together). ``put`` keeps a block's keys computed elsewhere."""

    def __init__(self, keys: Callable[[Block], frozenset[K]]) -> None:
        self._keys = keys
        self._cache: dict[int, tuple[Block, frozenset[K]]] = {}

    def block(self, b: Block) -> frozenset[K]:
        """The keys of ``b``."""
        hit = self._cache.get(id(b))
        if hit is not None and hit[0] is b:
            return hit[1]
        keys = self._keys(b)
        self._cache[id(b)] = (b, keys)
        return keys

    def msg(self, m: Message) -> frozenset[K]:
        """The keys of ``m``'s blocks together."""
        out: set[K] = set()
        for b in m.blocks:
            out |= self.block(b)
        return frozenset(out)

    def put(self, b: Block, keys: frozenset[K]) -> None:
        self._cache[id(b)] = (b, keys)
