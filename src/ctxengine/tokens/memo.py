"""A bounded memo of token counts by text: each distinct text is tokenized once.

The counters are pure (the same text always gives the same count), and the same texts are counted
again and again: each ingested message by the engine and by the replay, every session-notes
rendering at each capping step, a tool result in the projection and in the store's preview. A
memo keyed by the text itself turns those repeats into one dictionary lookup (a ``str`` caches its
own hash, so a lookup does not re-read the text).

Bounded by characters held (``MEMO_MAX_CHARS``) and by entries (``MEMO_MAX_ENTRIES``); when either
is passed the oldest entries go first (insertion order). Texts shorter than ``MEMO_MIN_CHARS`` are
not memoized: counting them costs about what the lookup does. Safe to share between threads (the
background notes worker counts too): a lookup is a single ``dict.get``, and changes take a lock.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

MEMO_MAX_CHARS = 16_000_000  # characters of text held by one memo (the texts are shared, not copied)
MEMO_MAX_ENTRIES = 100_000
MEMO_MIN_CHARS = 24  # shorter texts are counted each time


class TextMemo:
    """``count(text)`` through ``fn``, remembered by text. ``fn`` must be pure. Texts shorter
    than ``min_chars`` are counted each time (``MEMO_MIN_CHARS`` unless told)."""

    def __init__(
        self,
        fn: Callable[[str], int],
        *,
        max_chars: int = MEMO_MAX_CHARS,
        max_entries: int = MEMO_MAX_ENTRIES,
        min_chars: int = MEMO_MIN_CHARS,
    ) -> None:
        self._fn = fn
        self._min_chars = min_chars
        self._counts: dict[str, int] = {}
        self._chars = 0
        self._max_chars = max_chars
        self._max_entries = max_entries
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._counts)

    def count(self, text: str) -> int:
        """Tokens of ``text`` (``fn(text)``, computed once while the memo holds it)."""
        n = self._counts.get(text)
        if n is not None:
            return n
        n = self._fn(text)
        if self._min_chars <= len(text) <= self._max_chars:
            with self._lock:
                if text not in self._counts:
                    self._counts[text] = n
                    self._chars += len(text)
                    self._evict()
        return n

    def get(self, text: str) -> int | None:
        """The count held for ``text``, or None (nothing is counted)."""
        return self._counts.get(text)

    def learn(self, text: str, n: int) -> None:
        """Remember ``n`` as the count of ``text``, counted elsewhere by the same pure ``fn`` (a
        worker process's copy of this memo's counter): the same as ``count(text)`` would keep.
        Nothing when ``text`` is held already or its length is outside what is memoized."""
        if self._min_chars <= len(text) <= self._max_chars and text not in self._counts:
            with self._lock:
                if text not in self._counts:
                    self._counts[text] = n
                    self._chars += len(text)
                    self._evict()

    def _evict(self) -> None:
        while self._counts and (self._chars > self._max_chars or len(self._counts) > self._max_entries):
            oldest = next(iter(self._counts))
            del self._counts[oldest]
            self._chars -= len(oldest)
