"""Price with the cache model: what each call costs on the engine track, and the recorded track.

- ``CallPricer``: the policy's requests through the prompt-cache model (``cache.CacheModel``):
  cache reads, writes and uncached input per call, a *cache break* when a warm request reads less
  than ``CACHE_BREAK_SHARE`` of the previous one with no compaction to explain it, and the cost in
  USD at the model's prices (writes at the 5-minute or 1-hour rate by the TTL).
- ``RecordedTrack``: what the recorded session actually sent (the full history, restarting at each
  recorded compaction). The ledger's figures (``prediction_error``, ``delta_error``) and the cache
  model's error are measured here, online: at call k the ledger has seen calls before k; and the
  recorded usage is priced (``recorded_cost_usd``).

Tokens; USD; seconds (TTL).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from ctxengine.formats.anthropic_writer import breakpoint_indices
from ctxengine.messages.model import Message, Session, Usage
from ctxengine.models.prompt_cache import CacheModel, CacheOutcome
from ctxengine.models.registry import ModelInfo
from ctxengine.policy.registry import Policy
from ctxengine.replay.records import (
    CACHE_BREAK_SHARE,
    COMPACTION_LAYERS,
    DELTA_MIN_TOKENS,
    ONE_HOUR_TTL_S,
)
from ctxengine.tokens.ledger import Ledger

if TYPE_CHECKING:
    from ctxengine.engine.core import Projection


def cache_ttl(session: Session, policy: Policy) -> float:
    """The prompt cache's TTL in seconds: the policy's, or one hour when the recorded harness
    wrote to the 1-hour cache."""
    ttl = policy.cache_ttl_s
    if any(m.usage and m.usage.cache_write_1h_tokens for m in session.messages):
        ttl = ONE_HOUR_TTL_S  # the recorded harness used the 1-hour cache
    return ttl


class CallPricer:
    """The engine track's prompt cache: each request the policy sends split into cache reads,
    writes and uncached input, and priced. ``fixed``: the fixed prefix (tokens); ``ttl``: the
    cache TTL (seconds)."""

    def __init__(self, model: ModelInfo, ttl: float, fixed: int) -> None:
        self.model = model
        self.ttl = ttl
        self.fixed = fixed
        self.style = model.cache_style
        self.cache = CacheModel(self.style, ttl)
        self.prev_sent = 0

    def request(
        self, proj: Projection, tokens: list[int], sent: int, now: float | None
    ) -> tuple[CacheOutcome, bool]:
        """The cache's split of a request of ``sent`` tokens carrying ``proj`` (``tokens``: the
        estimate of each message), and whether it broke the cache: warm, no compaction layer in
        ``proj.events``, and reading less than ``CACHE_BREAK_SHARE`` of the smaller of this and
        the previous request."""
        outcome = self.cache.request(
            proj.messages,
            tokens,
            fixed_prefix=self.fixed,
            total=sent,
            now=now,
            breakpoints=breakpoint_indices(proj.messages) if self.style == "explicit" else None,
        )
        expected_miss = any(e.layer in COMPACTION_LAYERS for e in proj.events)
        prev_sent = self.prev_sent
        cache_break = bool(
            self.cache.last_warm
            and not expected_miss
            and prev_sent > 0
            and outcome.cache_read < CACHE_BREAK_SHARE * min(prev_sent, sent)
        )
        self.prev_sent = sent
        return outcome, cache_break

    def cost(self, outcome: CacheOutcome, output_tokens: int) -> float:
        """The call's cost in USD: ``outcome``'s split and ``output_tokens`` at the model's
        prices, cache writes at the 1-hour rate when the TTL is an hour, else the 5-minute one."""
        return self.model.cost_usd(
            input_tokens=outcome.uncached,
            cache_read_tokens=outcome.cache_read,
            cache_write_5m_tokens=outcome.cache_write if self.ttl < ONE_HOUR_TTL_S else 0,
            cache_write_1h_tokens=outcome.cache_write if self.ttl >= ONE_HOUR_TTL_S else 0,
            output_tokens=output_tokens,
        )


class RecordedTrack:
    """What the recorded session sent, and the errors measured on it: the ledger's prediction
    and delta errors, the cache model's error on cache reads (absolute percentages of the
    recorded total), and the recorded usage priced (USD). ``count``: tokens of a message."""

    def __init__(self, model: ModelInfo, ttl: float, fixed: int, count: Callable[[Message], int]) -> None:
        self.model = model
        self.fixed = fixed
        self.count = count
        self.style = model.cache_style
        self.cache = CacheModel(self.style, ttl)
        self.ledger = Ledger(fixed_prefix=fixed)
        self.messages: list[Message] = []
        self.tokens: list[int] = []  # tokens of each of ``messages`` (our counter) ...
        self.estimate = 0  # ... and their sum
        self.prev_total: int | None = None
        self.compacted_since_prev = False
        self.first_call_seen = False
        self.prediction_errors: list[float] = []
        self.delta_errors: list[float] = []
        self.cache_errors: list[float] = []
        self.cost = 0.0
        self.cost_known = False

    def restart(self) -> None:
        """A recorded compaction starts here: the recorded context starts over."""
        self.messages, self.tokens, self.estimate = [], [], 0
        self.ledger.reset()
        self.cache.reset()
        self.compacted_since_prev = True

    def add(self, msg: Message) -> None:
        """``msg`` joins the recorded context."""
        n = self.count(msg)
        self.messages.append(msg)
        self.tokens.append(n)
        self.estimate += n

    def predict(self, recorded: int | None) -> int | None:
        """The ledger's prediction of a call that recorded ``recorded`` input tokens (None for
        the first call and for calls without usage); its error, and the error of the tokens it
        says were added since the previous call, are kept."""
        predicted: int | None = None
        if recorded is not None:
            if self.first_call_seen:
                predicted = self.ledger.predict(self.estimate)
                self.prediction_errors.append(abs(predicted - recorded) / recorded * 100)
                added = self.ledger.added_since_anchor(self.estimate)
                if (
                    added is not None
                    and self.prev_total is not None
                    and not self.compacted_since_prev
                    and recorded - self.prev_total > DELTA_MIN_TOKENS
                ):
                    real = recorded - self.prev_total
                    self.delta_errors.append(abs(added - real) / real * 100)
            self.first_call_seen = True
        return predicted

    def price(self, usage: Usage | None, recorded: int | None, now: float | None) -> None:
        """Run the recorded request through the cache model and keep its error on cache reads;
        price the recorded usage."""
        r_out = self.cache.request(
            self.messages,
            self.tokens,
            fixed_prefix=self.fixed,
            total=recorded if recorded is not None else self.fixed + self.estimate,
            now=now,
            breakpoints=breakpoint_indices(self.messages) if self.style == "explicit" else None,
        )
        if usage is not None and recorded:
            self.cache_errors.append(abs(r_out.cache_read - usage.cache_read_tokens) / recorded * 100)
            self.cost += self.model.cost_usd(
                input_tokens=usage.input_tokens,
                cache_read_tokens=usage.cache_read_tokens,
                cache_write_5m_tokens=usage.cache_write_tokens,
                cache_write_1h_tokens=usage.cache_write_1h_tokens,
                output_tokens=usage.output_tokens,
            )
            self.cost_known = True

    def respond(self, msg: Message, recorded: int | None) -> None:
        """The call ``msg`` is answered: the ledger learns the recorded total, and the response
        joins the recorded context."""
        if recorded is not None:
            self.ledger.observe(recorded, self.estimate)
            self.prev_total = recorded
            self.compacted_since_prev = False
        self.add(msg)
