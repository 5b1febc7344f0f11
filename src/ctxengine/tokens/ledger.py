"""The token ledger: how big the context will be at the next model call.

Context at the next call = the provider-reported input of the *latest* call (input + cache read +
cache write, never summed over a turn) + an estimate of what was added since (pi's and Claude
Code's rule). Usage from before the latest compaction is ignored (pi), so a stale figure cannot
re-trigger compaction; until a new call reports, the ledger falls back to the fixed prefix (system
prompt and tool definitions) plus the calibrated estimate of the content.

The estimate is the caller's counter (``ctxengine.tokens.counter``) times ``scale``: the ratio of
reported content tokens to estimated content tokens, learned online from each reported call, so
a counter that is systematically off for a model (Claude's tokenizer is not public) is corrected
by the provider's own figures. The ledger only ever learns from calls before the one it predicts.
"""

from __future__ import annotations

import msgspec

SCALE_MIN, SCALE_MAX = 0.5, 2.0  # a learned scale outside this range means a bad anchor
SCALE_SMOOTHING = 0.3  # weight of the newest observation in the running scale
MIN_CONTENT_FOR_SCALE = 2_000  # tokens of content needed before a call teaches the scale


class LedgerState(msgspec.Struct):
    """What the ledger knows: the last anchor and the learned scale."""

    fixed_prefix: int = 0  # tokens of system prompt + tool definitions
    anchor_total: int | None = None  # provider-reported total input of the latest call
    anchor_estimate: int = 0  # our content estimate (raw counter tokens) at that call
    scale: float = 1.0  # reported content tokens per estimated token
    observations: int = 0


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
        return s.fixed_prefix + round(content_estimate * s.scale)

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
        content = reported_total - s.fixed_prefix
        if content_estimate >= MIN_CONTENT_FOR_SCALE and content > 0:
            ratio = content / content_estimate
            if SCALE_MIN <= ratio <= SCALE_MAX:
                if s.observations == 0:
                    s.scale = ratio
                else:
                    s.scale = (1 - SCALE_SMOOTHING) * s.scale + SCALE_SMOOTHING * ratio
                s.observations += 1
        s.anchor_total = reported_total
        s.anchor_estimate = content_estimate

    def reset(self) -> None:
        """Forget the anchor (after a compaction): usage from before it no longer applies."""
        self.state.anchor_total = None
        self.state.anchor_estimate = 0
