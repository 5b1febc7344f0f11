"""The prompt-cache model: which tokens of a request are cache reads, writes, or plain input.

Two provider styles (``ModelInfo.cache_style``):
- ``explicit`` (Anthropic ``cache_control``): a request writes a cache entry at each of its
  breakpoints (system + tools, and the messages the writer marks: the last one and the
  second-to-last user message, as Claude Code does; ``anthropic_writer.breakpoint_indices``), and
  reads the longest entry written earlier, within the TTL (5 min, or 1 h with the 1-hour cache;
  a read refreshes it), whose prefix is still identical and which lies at most
  ``LOOKBACK_BLOCKS`` content blocks before one of its own breakpoints: the provider looks for
  hits only there. So an append reads everything sent before, while a change in the middle of
  the history (a cleared result) reads only up to the newest entry before the change, not up to
  the change itself. Everything not read is written. Reads cost 0.1x input, 5-minute writes
  1.25x, 1-hour writes 2x.
- ``automatic`` (OpenAI, DeepSeek prefix caching): the shared prefix is read from the cache in
  128-token steps once it reaches 1,024 tokens; the rest is plain input; no write surcharge.

The prefix is compared message by message (object identity: the engine keeps unchanged messages
as the same objects, so an edited or cleared message breaks the prefix from there on, exactly as
a changed byte does for the provider). All figures in tokens.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

import msgspec

from ctxengine.messages.model import Message

AUTO_MIN_PREFIX = 1_024  # OpenAI: caching starts at 1,024 tokens
AUTO_STEP = 128  # and grows in 128-token increments
LOOKBACK_BLOCKS = 20  # Anthropic checks for hits up to about 20 blocks before each breakpoint


class CacheOutcome(msgspec.Struct, frozen=True):
    """How one request's input splits: ``uncached + cache_read + cache_write == total``."""

    total: int
    cache_read: int
    cache_write: int
    uncached: int


class CacheModel:
    """Follows one conversation's requests and splits each into cache reads/writes/uncached."""

    def __init__(self, style: Literal["explicit", "automatic"], ttl_s: float) -> None:
        self.style = style
        self.ttl_s = ttl_s
        self._prev: list[Message] = []
        self._prev_total = 0
        self._prev_time: float | None = None
        self._has_prev = False
        # explicit style: cache entries as prefix lengths (messages) of ``_prev`` -> when last
        # written or read; the system + tools entry is refreshed by every request
        self._entries: dict[int, float | None] = {}
        self.last_warm = False  # whether the latest request found the previous one within the TTL

    def reset(self) -> None:
        """Forget the previous request (e.g. after an expected miss)."""
        self._prev = []
        self._prev_total = 0
        self._has_prev = False
        self._entries = {}

    def _fresh(self, t: float | None, now: float | None) -> bool:
        return now is None or t is None or now - t <= self.ttl_s

    def request(
        self,
        messages: Sequence[Message],
        tokens: Sequence[int],
        *,
        fixed_prefix: int,
        total: int,
        now: float | None,
        breakpoints: Sequence[int] | None = None,
    ) -> CacheOutcome:
        """Split a request of ``total`` tokens. ``tokens[i]`` are (any-scale) estimates of
        ``messages[i]``, rescaled so the whole request sums to ``total``; ``fixed_prefix`` are the
        tokens of system prompt and tools, identical on every request. ``breakpoints``
        (explicit style): indices of the messages whose end carries a cache breakpoint (default:
        the last message)."""
        total = max(total, 0)
        warm = self._has_prev and self._fresh(self._prev_time, now)
        shared = 0
        self.last_warm = warm
        common = 0
        if warm:
            prev = self._prev
            n = min(len(prev), len(messages))
            while common < n and messages[common] is prev[common]:
                common += 1
        read = common
        if self.style == "explicit":
            read = self._explicit(messages, common, now, warm, breakpoints)
        if warm:
            content_total = sum(tokens)
            scale = (total - fixed_prefix) / content_total if content_total > 0 else 1.0
            shared = fixed_prefix + round(sum(tokens[:read]) * scale)
            shared = max(0, min(shared, self._prev_total, total))
        self._prev = list(messages)
        self._prev_total = total
        self._prev_time = now if now is not None else self._prev_time
        self._has_prev = True
        if self.style == "explicit":
            return CacheOutcome(total=total, cache_read=shared, cache_write=total - shared, uncached=0)
        cached = shared // AUTO_STEP * AUTO_STEP if shared >= AUTO_MIN_PREFIX else 0
        return CacheOutcome(total=total, cache_read=cached, cache_write=0, uncached=total - cached)

    def _explicit(
        self,
        messages: Sequence[Message],
        common: int,
        now: float | None,
        warm: bool,
        breakpoints: Sequence[int] | None,
    ) -> int:
        """The prefix length (messages) read from the cache, and the entries updated: those still
        valid for ``messages`` kept (the one read refreshed), this request's breakpoints added."""
        marks = [len(messages) - 1] if breakpoints is None and messages else list(breakpoints or ())
        ends = [b + 1 for b in marks if 0 <= b < len(messages)]
        starts = [0]
        for m in messages:
            starts.append(starts[-1] + max(1, len(m.blocks)))
        entries = {
            n: t for n, t in self._entries.items() if warm and n <= common and self._fresh(t, now)
        }
        reachable = [
            n
            for n in entries
            if any(starts[e] - LOOKBACK_BLOCKS <= starts[n] <= starts[e] for e in ends)
        ]
        read = max(reachable, default=0)
        stamp = now if now is not None else self._prev_time  # no time: the last one known
        if read:
            entries[read] = stamp
        for e in ends:
            entries[e] = stamp
        self._entries = entries
        return read
