"""What one model call is: the request (``LLMRequest``, its ``ToolDefinition``s), the reply
(``LLMResponse``), the record of a call and totals over records (``CallRecord``, ``CallStats``),
and the ``LLMClient`` protocol the summarizer, the session-notes updater and compaction call.
Units: tokens, USD, seconds.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Protocol, runtime_checkable

import msgspec

from ctxengine.llm.errors import Outcome
from ctxengine.messages.model import Message, Usage


class ToolDefinition(msgspec.Struct, frozen=True):
    """A tool the model may call.

    Sent so that a summary request carries the same tools as the main conversation (the tools
    are part of the cached prefix); adapters encode it for their provider.

    Attributes:
        name: the tool's name.
        description: what the tool does, for the model.
        parameters: the arguments' JSON schema object (default: an object without properties).
    """

    name: str
    description: str = ""
    parameters: dict[str, Any] = msgspec.field(default_factory=lambda: {"type": "object", "properties": {}})


class LLMRequest(msgspec.Struct, frozen=True):
    """One model call.

    ``messages`` are neutral messages (encoded by the adapter's writer); ``max_tokens`` caps the
    output; ``purpose`` names the caller ("summary", "notes", ...) for logs and ``CallRecord``s.
    ``cache_prefix=True`` keeps the Anthropic writer's ``cache_control`` breakpoints, so a request
    that repeats the main conversation's system, tools and messages and appends to them reads that
    prefix from the prompt cache (OpenAI-style providers cache prefixes automatically; the flag
    changes nothing there). ``tools`` should then be the main conversation's tools.
    ``temperature`` is sent to OpenAI-style servers only: the Anthropic API version of the
    ``anthropic`` 2.x SDK (2026-10-21) rejects sampling parameters.
    """

    system: str
    messages: list[Message]
    max_tokens: int
    temperature: float | None = None
    purpose: str = ""
    cache_prefix: bool = False
    tools: tuple[ToolDefinition, ...] = ()


class LLMResponse(msgspec.Struct, frozen=True):
    """A completed call: the concatenated text blocks of the reply, the provider-reported
    ``usage`` (Anthropic semantics, see ``messages.Usage``), the model that answered, the cost in
    USD at the registry's prices for the client's model, the wall time of the call including
    retries (``latency_s``, seconds), and the provider's raw stop reason (Anthropic ``end_turn`` /
    ``max_tokens`` / ``tool_use``; OpenAI ``stop`` / ``length`` / ``tool_calls``)."""

    text: str
    usage: Usage
    model: str
    cost_usd: float
    latency_s: float
    stop_reason: str | None

    @property
    def truncated(self) -> bool:
        """True when the reply stopped at the output cap (``max_tokens`` / ``length``)."""
        return self.stop_reason in ("max_tokens", "length", "model_context_window_exceeded")


class CallRecord(msgspec.Struct, frozen=True):
    """What one ``complete`` call cost and how it ended. ``attempts`` counts HTTP attempts (1 +
    the SDK's retries); ``error`` is the redacted error message ("" when ``outcome`` is ok);
    ``started_at`` is seconds since the epoch. A failed call has zero usage and cost (providers
    do not bill rejected requests)."""

    provider: str
    model: str
    purpose: str
    outcome: Outcome
    usage: Usage
    cost_usd: float
    latency_s: float
    attempts: int
    started_at: float
    stop_reason: str | None = None
    error: str = ""


class CallStats(msgspec.Struct, frozen=True):
    """Totals over a list of ``CallRecord``s: number of calls, of successful ones, failures by
    outcome, summed usage, cost (USD) and latency (seconds), and HTTP attempts."""

    calls: int
    ok: int
    errors: dict[str, int]
    usage: Usage
    cost_usd: float
    latency_s: float
    attempts: int


def call_stats(records: Iterable[CallRecord]) -> CallStats:
    """Sum ``records`` into a ``CallStats``."""
    n = ok = attempts = 0
    cost = latency = 0.0
    errors: dict[str, int] = {}
    fields = [0, 0, 0, 0, 0]
    for r in records:
        n += 1
        attempts += r.attempts
        cost += r.cost_usd
        latency += r.latency_s
        if r.outcome == "ok":
            ok += 1
        else:
            errors[r.outcome] = errors.get(r.outcome, 0) + 1
        u = r.usage
        for i, v in enumerate(
            (
                u.input_tokens,
                u.cache_read_tokens,
                u.cache_write_tokens,
                u.cache_write_1h_tokens,
                u.output_tokens,
            )
        ):
            fields[i] += v
    usage = Usage(*fields)
    return CallStats(n, ok, errors, usage, cost, latency, attempts)


@runtime_checkable
class LLMClient(Protocol):
    """What the summarizer and the notes updater need from a model: ``complete`` a request and
    keep a ``CallRecord`` of every call (successful or not). ``provider`` is ``anthropic`` or
    ``openai`` (the wire format); ``model`` the model name sent to the provider."""

    @property
    def provider(self) -> str: ...

    @property
    def model(self) -> str: ...

    @property
    def calls(self) -> list[CallRecord]: ...

    def complete(self, request: LLMRequest) -> LLMResponse:
        """Send ``request``; return the reply or raise an ``LLMError`` subclass."""
        ...
