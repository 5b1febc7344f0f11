"""One model's facts and the cost of a call at its prices: ``ModelInfo``, the prompt-cache
price multipliers, the fallback rates for a model with no known price, and ``cost_usd``.

Units: tokens for windows and limits, USD per million tokens (USD/MTok) for prices, USD for
costs. The registry that finds a model's ``ModelInfo`` by name is ``ctxengine.models.registry``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Literal

import msgspec

from ctxengine.messages.model import Usage

CacheStyle = Literal["explicit", "automatic"]
TokenizerName = Literal["o200k_base", "cl100k_base", "claude", "other"]

# Anthropic prompt-cache multipliers of the base input price (docs.anthropic.com, prompt caching).
EXPLICIT_CACHE_WRITE_5M_X = 1.25
EXPLICIT_CACHE_WRITE_1H_X = 2.0
EXPLICIT_CACHE_READ_X = 0.1

# Rates for a model with no known price, USD/MTok: Sonnet-class list prices ($3 in / $15 out,
# writes 1.25x / 2x, reads 0.1x). Mid-range on purpose: a cost report for an unknown model is
# an estimate either way, and it is flagged (``ModelInfo.price_known`` is False). For a model
# with ``automatic`` caching the writes cost the fallback input price (no surcharge).
FALLBACK_PRICES: Mapping[str, float] = {
    "input": 3.0,
    "output": 15.0,
    "cache_write_5m": 3.75,
    "cache_write_1h": 6.0,
    "cache_read": 0.30,
}
FALLBACK_MAX_OUTPUT = 32_000  # tokens; Claude Code's default output cap for unknown models

PRICE_FIELDS = ("input", "output", "cache_write_5m", "cache_write_1h", "cache_read")


class ModelInfo(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """What the engine knows about one model.

    ``context_window``, ``max_input`` and ``max_output`` are in tokens; ``max_input`` is set only
    where the provider caps input below the window (GPT-5 family: 272,000 of 400,000). Prices are
    USD per million tokens. ``cache_style`` is ``explicit`` (Anthropic ``cache_control``
    breakpoints; writes billed at a surcharge) or ``automatic`` (OpenAI / DeepSeek prefix
    caching; no write surcharge). ``tokenizer`` picks the counter: ``o200k_base`` /
    ``cl100k_base`` are exact offline, ``claude`` / ``other`` are calibrated estimates.
    ``price_known`` is False when the fallback rates were applied; ``prices_as_of`` is the ISO
    date of the price list the prices come from.
    """

    name: str
    provider: str
    context_window: int
    max_output: int
    input: float
    output: float
    cache_write_5m: float
    cache_write_1h: float
    cache_read: float
    cache_style: CacheStyle = "explicit"
    tokenizer: TokenizerName = "other"
    prices_as_of: str = ""
    price_known: bool = True
    aliases: tuple[str, ...] = ()
    max_input: int | None = None

    @property
    def input_window(self) -> int:
        """Most input tokens one call may send: ``max_input`` when the provider sets one, else
        the context window."""
        return self.max_input if self.max_input is not None else self.context_window

    def cost_usd(
        self,
        *,
        input_tokens: int = 0,
        cache_read_tokens: int = 0,
        cache_write_5m_tokens: int = 0,
        cache_write_1h_tokens: int = 0,
        output_tokens: int = 0,
    ) -> float:
        """Cost of one call in USD at this model's prices: ``cost_usd(self, ...)``."""
        return cost_usd(
            self,
            input_tokens=input_tokens,
            cache_read_tokens=cache_read_tokens,
            cache_write_5m_tokens=cache_write_5m_tokens,
            cache_write_1h_tokens=cache_write_1h_tokens,
            output_tokens=output_tokens,
        )


def cost_usd(
    model: ModelInfo,
    *,
    input_tokens: int = 0,
    cache_read_tokens: int = 0,
    cache_write_5m_tokens: int = 0,
    cache_write_1h_tokens: int = 0,
    output_tokens: int = 0,
) -> float:
    """Cost of one model call in USD. Token arguments are disjoint (Anthropic semantics, as in
    ``messages.Usage``): ``input_tokens`` excludes cached and cache-written tokens. Each is
    billed at its USD/MTok price; for ``automatic``-style models the table sets write prices to
    the input price, so reported writes (if any) cost plain input."""
    total = (
        input_tokens * model.input
        + cache_read_tokens * model.cache_read
        + cache_write_5m_tokens * model.cache_write_5m
        + cache_write_1h_tokens * model.cache_write_1h
        + output_tokens * model.output
    )
    return total / 1_000_000


def usage_cost_usd(model: ModelInfo, usage: Usage) -> float:
    """The cost of a recorded ``Usage`` at a model's prices (``cost_usd``).

    Args:
        model: the model's entry; its prices are USD per MTok.
        usage: the call's usage in tokens (its ``cache_write_tokens`` are 5-minute writes).

    Returns:
        The cost, USD.
    """
    return cost_usd(
        model,
        input_tokens=usage.input_tokens,
        cache_read_tokens=usage.cache_read_tokens,
        cache_write_5m_tokens=usage.cache_write_tokens,
        cache_write_1h_tokens=usage.cache_write_1h_tokens,
        output_tokens=usage.output_tokens,
    )
