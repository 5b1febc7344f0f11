"""The prompt-cache model: which tokens of a request are cache reads, writes, or plain input.

Two provider styles (``ModelInfo.cache_style``):
- ``explicit`` (Anthropic ``cache_control``): Claude Code puts a breakpoint on the last message of
  every request, so everything sent is written to the cache, and the next request reads the longest
  prefix it shares with the previous one, if that request was within the TTL (5 min, or 1 h with
  the 1-hour cache). Reads cost 0.1x input, 5-minute writes 1.25x, 1-hour writes 2x.
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

from ctxengine.messages import Message

AUTO_MIN_PREFIX = 1_024  # OpenAI: caching starts at 1,024 tokens
AUTO_STEP = 128  # and grows in 128-token increments


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
        self.last_warm = False  # whether the latest request found the previous one within the TTL

    def reset(self) -> None:
        """Forget the previous request (e.g. after an expected miss)."""
        self._prev = []
        self._prev_total = 0
        self._has_prev = False

    def request(
        self,
        messages: Sequence[Message],
        tokens: Sequence[int],
        *,
        fixed_prefix: int,
        total: int,
        now: float | None,
    ) -> CacheOutcome:
        """Split a request of ``total`` tokens. ``tokens[i]`` are (any-scale) estimates of
        ``messages[i]``, rescaled so the whole request sums to ``total``; ``fixed_prefix`` are the
        tokens of system prompt and tools, identical on every request."""
        total = max(total, 0)
        warm = self._has_prev and (
            now is None or self._prev_time is None or now - self._prev_time <= self.ttl_s
        )
        shared = 0
        self.last_warm = warm
        if warm:
            common = 0
            prev = self._prev
            n = min(len(prev), len(messages))
            while common < n and messages[common] is prev[common]:
                common += 1
            content_total = sum(tokens)
            scale = (total - fixed_prefix) / content_total if content_total > 0 else 1.0
            shared = fixed_prefix + round(sum(tokens[:common]) * scale)
            shared = max(0, min(shared, self._prev_total, total))
        self._prev = list(messages)
        self._prev_total = total
        self._prev_time = now if now is not None else self._prev_time
        self._has_prev = True
        if self.style == "explicit":
            return CacheOutcome(total=total, cache_read=shared, cache_write=total - shared, uncached=0)
        cached = shared // AUTO_STEP * AUTO_STEP if shared >= AUTO_MIN_PREFIX else 0
        return CacheOutcome(total=total, cache_read=cached, cache_write=0, uncached=total - cached)
