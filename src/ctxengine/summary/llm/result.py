"""What an LLM summary returns: the summary with its audit (``SummaryResult``), the LLM work
it spent (``Spend``: calls, tokens, USD), and the error that carries what was spent
(``SummaryError``). The caller leaves the session as it was on an error; no placeholder summary
is ever returned.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import msgspec

from ctxengine.summary.audit import Audit

if TYPE_CHECKING:
    from ctxengine.llm import LLMResponse


class SummaryError(Exception):
    """A summary could not be made. ``spent`` holds the LLM calls/tokens/USD already used."""

    def __init__(self, message: str, spent: Spend) -> None:
        super().__init__(message)
        self.spent = spent


class Spend(msgspec.Struct, kw_only=True):
    """LLM work done for one summary. Tokens; USD."""

    llm_calls: int = 0
    input_tokens: int = 0
    cache_read_tokens: int = 0
    output_tokens: int = 0
    cost_usd: float = 0.0

    def add(self, r: LLMResponse) -> None:
        self.llm_calls += 1
        self.input_tokens += r.usage.total_input
        self.cache_read_tokens += r.usage.cache_read_tokens
        self.output_tokens += r.usage.output_tokens
        self.cost_usd += r.cost_usd


class SummaryResult(msgspec.Struct, kw_only=True):
    """A finished summary (analysis stripped) with its audit and what it cost."""

    text: str
    audit: Audit | None
    spent: Spend
    chunks: int = 1
    stages: int = 1  # parts summarized apart and merged (OpenClaw summarizeInStages)
    partial: bool = False
    ptl_retries: int = 0
    prefix_reused: bool = False
