"""The token ledger: how big the context will be at the next model call.

Context at the next call = the provider-reported input of the *latest* call (input + cache read +
cache write, never summed over a turn) + an estimate of what was added since (pi's and Claude
Code's rule). Usage from before the latest compaction is ignored (pi), so a stale figure cannot
re-trigger compaction; until a new call reports, the ledger falls back to the fixed prefix (system
prompt and tool definitions) plus the calibrated estimate of the content.

The estimate is the caller's counter (``ctxengine.tokens.counter``) times ``scale``: the ratio of
reported growth to estimated growth between consecutive calls, the median of the last
``SCALE_WINDOW`` calls, so a counter that is systematically off for a model (Claude's tokenizer is
not public; harnesses add text the transcript does not show) is corrected by the provider's own
figures. Growth, not the total, teaches the scale because growth is what the ledger estimates;
the median ignores the odd call whose growth is mostly something else (a cache-TTL miss, a
harness reminder). The ledger only ever learns from calls before the one it predicts.
"""

from __future__ import annotations

import statistics

import msgspec

SCALE_MIN, SCALE_MAX = 0.5, 2.5  # a growth ratio outside this range is not a tokenizer effect
SCALE_WINDOW = 15  # calls whose growth ratio the scale is the median of
MIN_GROWTH_FOR_SCALE = 200  # estimated tokens of growth needed before a call teaches the scale
OFFSET_CARRY_SHARE = 0.25  # an anchor's offset kept across a reset when at most this share of its total


class LedgerState(msgspec.Struct):
    """What the ledger knows: the last anchor and the learned scale."""

    fixed_prefix: int = 0  # tokens of system prompt + tool definitions
    anchor_total: int | None = None  # provider-reported total input of the latest call
    anchor_estimate: int = 0  # our content estimate (raw counter tokens) at that call
    scale: float = 1.0  # reported tokens per estimated token (median of recent growth ratios)
    offset: int = 0  # what the last anchor reported beyond fixed prefix + scaled estimate (tokens)
    ratios: list[float] = msgspec.field(default_factory=list)


class Ledger:
    """Predicts the input tokens of the next call from the last reported usage.

    All figures in tokens. ``content_estimate`` arguments are raw counter estimates of the
    messages that will be sent (without the fixed prefix).
    """

    def __init__(self, fixed_prefix: int = 0, scale: float = 1.0) -> None:
        self.state = LedgerState(fixed_prefix=fixed_prefix, scale=scale)

    @property
    def scale(self) -> float:
        return self.state.scale

    @property
    def anchored(self) -> bool:
        return self.state.anchor_total is not None

    def predict(self, content_estimate: int) -> int:
        """Predicted total input tokens of a call sending ``content_estimate`` of content."""
        s = self.state
        if s.anchor_total is not None:
            return max(0, round(s.anchor_total + (content_estimate - s.anchor_estimate) * s.scale))
        return s.fixed_prefix + s.offset + round(content_estimate * s.scale)

    def added_since_anchor(self, content_estimate: int) -> int | None:
        """Estimated tokens added since the anchor call (None when not anchored)."""
        s = self.state
        if s.anchor_total is None:
            return None
        return round((content_estimate - s.anchor_estimate) * s.scale)

    def observe(self, reported_total: int, content_estimate: int) -> None:
        """Record the provider-reported total input of the call that just happened, whose
        content we had estimated at ``content_estimate``. Updates the anchor and the scale."""
        s = self.state
        if s.anchor_total is not None:
            grown = content_estimate - s.anchor_estimate
            if grown >= MIN_GROWTH_FOR_SCALE:
                ratio = (reported_total - s.anchor_total) / grown
                if SCALE_MIN <= ratio <= SCALE_MAX:
                    s.ratios = [*s.ratios[-(SCALE_WINDOW - 1) :], ratio]
                    s.scale = statistics.median(s.ratios)
        s.anchor_total = reported_total
        s.anchor_estimate = content_estimate

    def reset(self) -> None:
        """Forget the anchor (after a compaction): usage from before it no longer applies.

        What the anchor reported beyond the fixed prefix and the scaled estimate (text the
        harness adds that the transcript does not show, a fixed prefix counted differently) is
        kept as ``offset`` when it is at most ``OFFSET_CARRY_SHARE`` of the anchor's total, so
        the prediction right after a compaction is on the same basis as the one before it: a
        compaction that removes content is never measured as growth because the basis changed
        (a 3,000-token offset dropped at the reset made a compaction that freed 2,000 tokens
        read as 1,000 more). A larger offset is not a difference of basis but content the
        estimate does not see, which the compaction may have removed: it is dropped, and the
        prediction falls back to fixed prefix + scaled estimate (pi: usage from before a
        compaction must not re-trigger it)."""
        s = self.state
        s.offset = 0
        if s.anchor_total is not None:
            offset = s.anchor_total - s.fixed_prefix - round(s.anchor_estimate * s.scale)
            if abs(offset) <= OFFSET_CARRY_SHARE * s.anchor_total:
                s.offset = offset
        s.anchor_total = None
        s.anchor_estimate = 0
