"""Token counting and the token ledger.

``counter`` holds the counters (exact OpenAI encodings offline, calibrated estimates for Claude
and others), over ``encoders`` (the exact encodings), ``estimate`` (the estimate profiles) and
``media`` (the image/document rules); ``ledger`` predicts the next call's input from the last
provider-reported usage. Encoders load lazily, so importing this package is cheap.

May import: ``messages``, ``models``.
"""

from __future__ import annotations

from ctxengine.tokens.counter import (
    CLAUDE_PROFILE,
    GENERIC_PROFILE,
    EstimateCounter,
    EstimateProfile,
    OpenAICounter,
    TokenCounter,
    anthropic_image_tokens,
    count_tokens,
    counter_for,
    openai_image_tokens,
)

__all__ = [
    "CLAUDE_PROFILE",
    "GENERIC_PROFILE",
    "EstimateCounter",
    "EstimateProfile",
    "OpenAICounter",
    "TokenCounter",
    "anthropic_image_tokens",
    "count_tokens",
    "counter_for",
    "openai_image_tokens",
]
