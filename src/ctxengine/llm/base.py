"""The narrow LLM interface the summarizer, the session-notes updater and compaction call.

``LLMClient`` is a protocol with one method, ``complete(LLMRequest) -> LLMResponse``, plus a record
of every call (``calls``). Requests carry neutral ``Message`` lists; each adapter encodes them with
the package's own writers (``formats.anthropic_writer`` / ``formats.openai_writer``), so a summary
request is built exactly like the main conversation's requests and can share its cached prefix.

Failures are specific ``LLMError`` subclasses a caller can catch (``PromptTooLongError`` carries the
token gap parsed from the provider's message when it states one). Error messages and logs never
contain an API key: adapters pass their secrets to ``redact``, and errors are raised ``from None``
so that the SDK's exception (whose request holds the auth headers) is not chained.

``ProviderClient`` is the shared machinery of the SDK adapters: timing, attempt counting, the cap on
server-requested retry waits, usage and cost recording, debug logging. Units: tokens, USD, seconds.
"""

from __future__ import annotations

import json
import logging
import re
import threading
import time
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, ClassVar, Literal, Protocol, runtime_checkable

import msgspec

from ctxengine.messages import Message, Usage
from ctxengine.models import ModelInfo, Registry, usage_cost_usd

log = logging.getLogger("ctxengine.llm")

# Longest wait (seconds) a client accepts from a server's retry-after / retry-after-ms header before
# a 429/5xx retry. The Anthropic SDK honours any value (up to ~49 days); the OpenAI SDK refuses to
# retry above 120 s. A longer wait fails fast with RateLimitError / ServerError (``retry_after_s``
# set) so that the caller decides (e.g. the compaction circuit breaker) instead of blocking.
MAX_RETRY_WAIT_S = 60.0

# When a local OpenAI-compatible server needs no key, this placeholder is sent instead.
NO_KEY_PLACEHOLDER = "not-needed"

Outcome = Literal[
    "ok",
    "prompt_too_long",
    "rate_limit",
    "server_error",
    "timeout",
    "connection",
    "auth",
    "bad_request",
    "error",
]


# --------------------------------------------------------------------------------------------
# Requests and responses
# --------------------------------------------------------------------------------------------


class ToolDefinition(msgspec.Struct, frozen=True):
    """A tool the model may call: ``name``, ``description`` and ``parameters`` (a JSON schema
    object). Sent so that a summary request carries the same tools as the main conversation (the
    tools are part of the cached prefix); adapters encode it for their provider."""

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


# --------------------------------------------------------------------------------------------
# Errors
# --------------------------------------------------------------------------------------------


class LLMError(Exception):
    """A model call failed. ``status`` is the HTTP status when there was a response;
    ``retry_after_s`` the server's requested wait (seconds) when it sent one. The message names
    provider and model and quotes the provider's error message, never an API key."""

    kind: ClassVar[Outcome] = "error"

    def __init__(
        self,
        message: str,
        *,
        provider: str = "",
        model: str = "",
        status: int | None = None,
        request_id: str | None = None,
        retry_after_s: float | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.provider = provider
        self.model = model
        self.status = status
        self.request_id = request_id
        self.retry_after_s = retry_after_s


class PromptTooLongError(LLMError):
    """The request does not fit the model's context window. ``actual`` and ``limit`` (tokens)
    are parsed from the provider's message when it states them, and ``gap_tokens = actual -
    limit`` is how many tokens must go at least; each is None when unknown."""

    kind: ClassVar[Outcome] = "prompt_too_long"

    def __init__(
        self,
        message: str,
        *,
        gap_tokens: int | None = None,
        actual: int | None = None,
        limit: int | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(message, **kwargs)
        self.gap_tokens = gap_tokens
        self.actual = actual
        self.limit = limit


class RateLimitError(LLMError):
    """429 after the retries: the provider's rate limit (or a retry wait above the cap)."""

    kind: ClassVar[Outcome] = "rate_limit"


class ServerError(LLMError):
    """5xx (including Anthropic's 529 overloaded) after the retries."""

    kind: ClassVar[Outcome] = "server_error"


class LLMTimeoutError(LLMError):
    """No response within the timeout, on every attempt (or a 408 from the server)."""

    kind: ClassVar[Outcome] = "timeout"


class LLMConnectionError(LLMError):
    """The server could not be reached (refused, DNS, TLS, dropped connection) on every attempt."""

    kind: ClassVar[Outcome] = "connection"


class AuthError(LLMError):
    """401/403, or no API key configured."""

    kind: ClassVar[Outcome] = "auth"


class BadRequestError(LLMError):
    """Any other 4xx: the request is invalid (unknown model, bad parameter, ...). Not retried."""

    kind: ClassVar[Outcome] = "bad_request"


class SDKNotInstalledError(LLMError, ImportError):
    """The provider's SDK is not installed; the message says which extra to install."""


# Prompt-too-long messages, by provider:
#   Anthropic  "prompt is too long: 208380 tokens > 200000 maximum"
#              "input length and `max_tokens` exceed context limit: 188240 + 21333 > 200000, ..."
#   OpenAI     "This model's maximum context length is 128000 tokens. However, your messages
#              resulted in 130000 tokens." (code context_length_exceeded); "... However, you
#              requested 5000 tokens (4000 in the messages, 1000 in the completion)." (also vLLM,
#              OpenRouter: "requested about 250000 tokens"); "Input tokens exceed the configured
#              limit of 272000 tokens. Your messages resulted in 300000 tokens."
#   llama.cpp  "the request exceeds the available context size" (type exceed_context_size_error)
_TOO_LONG_MARKERS = re.compile(
    r"prompt is too long|exceed(?:s|ed)? (?:the )?context (?:limit|window|size)|maximum context length"
    r"|context[_ ]length[_ ]exceeded|exceed(?:s)? the configured limit|exceeds? the available context"
    r"|context window of this model|too many (?:input )?tokens",
    re.IGNORECASE,
)
_TOO_LONG_CODES = frozenset(
    {"context_length_exceeded", "exceed_context_size_error", "string_above_max_length"}
)
_NUM = r"(\d[\d,]*)"
_ANTHROPIC_GT = re.compile(_NUM + r"\s*tokens?\s*>\s*" + _NUM)
_ANTHROPIC_SUM = re.compile(_NUM + r"\s*\+\s*" + _NUM + r"\s*>\s*" + _NUM)
_LIMIT = re.compile(
    r"(?:maximum context length|configured limit|context (?:limit|window|size)) (?:is |of )?" + _NUM,
    re.IGNORECASE,
)
_ACTUAL = re.compile(
    r"(?:resulted in|requested(?: about)?|request has|you sent|prompt has|contains?) "
    + _NUM
    + r"\s*(?:input )?tokens",
    re.IGNORECASE,
)


def _int(text: str) -> int:
    return int(text.replace(",", ""))


def parse_prompt_too_long(message: str, code: str | None = None) -> tuple[int | None, int | None] | None:
    """``(actual, limit)`` in tokens when ``message`` (or the error ``code``) says the prompt is
    too long for the context window, each None when the message does not state it; None when the
    error is something else."""
    if not (_TOO_LONG_MARKERS.search(message) or (code or "") in _TOO_LONG_CODES):
        return None
    if m := _ANTHROPIC_SUM.search(message):
        return _int(m[1]) + _int(m[2]), _int(m[3])
    if m := _ANTHROPIC_GT.search(message):
        return _int(m[1]), _int(m[2])
    limit = _LIMIT.search(message)
    actual = _ACTUAL.search(message)
    return (_int(actual[1]) if actual else None), (_int(limit[1]) if limit else None)


def prompt_too_long_error(message: str, code: str | None = None, **kwargs: Any) -> PromptTooLongError | None:
    """A ``PromptTooLongError`` for a provider message (``parse_prompt_too_long``), else None.
    ``kwargs`` go to ``LLMError`` (provider, model, status, ...)."""
    parsed = parse_prompt_too_long(message, code)
    if parsed is None:
        return None
    actual, limit = parsed
    gap = actual - limit if actual is not None and limit is not None and actual > limit else None
    return PromptTooLongError(message, gap_tokens=gap, actual=actual, limit=limit, **kwargs)


_KEYLIKE = re.compile(r"\b(?:sk|pk|rk)-[A-Za-z0-9_\-*.]{6,}|\bBearer\s+\S+", re.IGNORECASE)


def redact(text: str, secrets: Iterable[str] = ()) -> str:
    """``text`` without any of ``secrets`` and without anything shaped like an API key
    (``sk-...``, ``Bearer ...``): a provider may quote a (partly masked) key in a 401 message."""
    for s in secrets:
        if s:
            text = text.replace(s, "[redacted]")
    return _KEYLIKE.sub("[redacted]", text)


def error_details(body: object) -> tuple[str, str | None]:
    """``(message, code)`` from an error response body: ``{"error": {"message", "code"|"type"}}``
    (Anthropic, OpenAI), ``{"error": "text"}`` (Ollama), ``{"message": ...}``, or raw text."""
    if isinstance(body, (bytes, str)):
        text = body.decode("utf-8", "replace") if isinstance(body, bytes) else body
        try:
            body = json.loads(text)
        except ValueError:
            return text.strip()[:2000], None
    if isinstance(body, Mapping):
        err = body.get("error", body)
        if isinstance(err, str):
            return err, None
        if isinstance(err, Mapping):
            code = err.get("code") or err.get("type")
            msg = err.get("message")
            if not isinstance(msg, str):
                msg = json.dumps(err, default=str)[:2000]
            return msg, str(code) if code is not None else None
    return (str(body)[:2000] if body is not None else ""), None


def retry_after_seconds(headers: Mapping[str, str]) -> float | None:
    """The wait a response asks for: ``retry-after-ms`` (milliseconds) or ``retry-after``
    (seconds; the HTTP-date form is not parsed). None when absent or malformed."""
    for name, scale in (("retry-after-ms", 0.001), ("retry-after", 1.0)):
        value = headers.get(name)
        if value is None:
            continue
        try:
            return float(value) * scale
        except ValueError:
            continue
    return None


def status_error(
    status: int,
    body: object,
    *,
    provider: str,
    model: str,
    headers: Mapping[str, str] | None = None,
    request_id: str | None = None,
    secrets: Sequence[str] = (),
) -> LLMError:
    """The ``LLMError`` for an HTTP error ``status`` with response ``body``."""
    raw, code = error_details(body)
    detail = redact(raw, secrets)
    message = (
        f"{provider} {model}: HTTP {status}: {detail}" if detail else f"{provider} {model}: HTTP {status}"
    )
    kw: dict[str, Any] = {"provider": provider, "model": model, "status": status, "request_id": request_id}
    if headers is not None:
        kw["retry_after_s"] = retry_after_seconds(headers)
    if status in (400, 413, 422) or (status == 404 and code in _TOO_LONG_CODES):
        too_long = prompt_too_long_error(message, code, **kw)
        if too_long is not None:
            return too_long
        if status == 413:  # request too large (bytes): the remedy is the same, drop content
            return PromptTooLongError(message, **kw)
    if status in (401, 403):
        return AuthError(message, **kw)
    if status == 408:
        return LLMTimeoutError(message, **kw)
    if status == 429:
        return RateLimitError(message, **kw)
    if status >= 500:
        return ServerError(message, **kw)
    return BadRequestError(message, **kw)


# --------------------------------------------------------------------------------------------
# Shared adapter machinery
# --------------------------------------------------------------------------------------------


class Reply(msgspec.Struct, frozen=True):
    """What an adapter's ``_send`` returns: the reply text, usage, the answering model, the stop
    reason."""

    text: str
    usage: Usage
    model: str
    stop_reason: str | None


class ProviderClient:
    """Base of the SDK adapters: implements ``LLMClient.complete`` around ``_send`` (one SDK
    call, retries included) and ``_map_error`` (SDK exception -> ``LLMError``).

    The SDK's HTTP client is built with two event hooks: one counts attempts (per thread), one
    stops a retry whose server-requested wait exceeds ``max_retry_wait_s``. Usable as a context
    manager; ``close()`` releases the connection pool.
    """

    provider: str = ""
    max_retry_wait_s: float = MAX_RETRY_WAIT_S

    def __init__(self, model: str, *, timeout: float, max_retries: int, registry: Registry | None) -> None:
        if not model:
            raise ValueError("model name is empty")
        if timeout <= 0:
            raise ValueError(f"timeout must be positive, got {timeout}")
        if max_retries < 0:
            raise ValueError(f"max_retries must be >= 0, got {max_retries}")
        self.model = model
        self.timeout = timeout
        self.max_retries = max_retries
        self.model_info: ModelInfo = (registry or Registry.default()).get(model)
        self.calls: list[CallRecord] = []
        self._secrets: tuple[str, ...] = ()
        self._local = threading.local()

    # -- hooks for the SDK's httpx client -------------------------------------------------

    def _event_hooks(self) -> dict[str, list[Any]]:
        return {"request": [self._on_request], "response": [self._on_response]}

    def _on_request(self, request: Any) -> None:
        self._local.attempts = getattr(self._local, "attempts", 0) + 1

    def _on_response(self, response: Any) -> None:
        """Tell the SDK not to retry when the server asks for a wait above the cap (both SDKs
        obey ``x-should-retry: false``)."""
        status = response.status_code
        if status == 429 or status >= 500:
            wait = retry_after_seconds(response.headers)
            if wait is not None and wait > self.max_retry_wait_s:
                response.headers["x-should-retry"] = "false"

    # -- the call --------------------------------------------------------------------------

    def complete(self, request: LLMRequest) -> LLMResponse:
        """Send ``request`` (retrying 429/5xx/timeouts up to ``max_retries`` times with the SDK's
        backoff) and record the call. Raises an ``LLMError`` subclass on failure."""
        if request.max_tokens <= 0:
            raise ValueError(f"max_tokens must be positive, got {request.max_tokens}")
        self._local.attempts = 0
        started = time.time()
        t0 = time.perf_counter()
        try:
            reply = self._send(request)
        except Exception as exc:  # mapped below; anything unknown propagates unchanged
            latency = time.perf_counter() - t0
            error = exc if isinstance(exc, LLMError) else self._map_error(exc)
            if error is None:
                raise
            self._record_failure(request, error, started, latency)
            raise error from None
        latency = time.perf_counter() - t0
        cost = usage_cost_usd(self.model_info, reply.usage)
        record = CallRecord(
            provider=self.provider,
            model=self.model,
            purpose=request.purpose,
            outcome="ok",
            usage=reply.usage,
            cost_usd=cost,
            latency_s=latency,
            attempts=self._attempts(),
            started_at=started,
            stop_reason=reply.stop_reason,
        )
        self.calls.append(record)
        u = reply.usage
        log.debug(
            "llm call ok: purpose=%s provider=%s model=%s in=%d cache_read=%d cache_write=%d "
            "cache_write_1h=%d out=%d cost_usd=%.6f latency_s=%.3f attempts=%d stop=%s",
            request.purpose or "-",
            self.provider,
            self.model,
            u.input_tokens,
            u.cache_read_tokens,
            u.cache_write_tokens,
            u.cache_write_1h_tokens,
            u.output_tokens,
            cost,
            latency,
            record.attempts,
            reply.stop_reason,
        )
        return LLMResponse(
            text=reply.text,
            usage=reply.usage,
            model=reply.model or self.model,
            cost_usd=cost,
            latency_s=latency,
            stop_reason=reply.stop_reason,
        )

    def _attempts(self) -> int:
        return max(1, int(getattr(self._local, "attempts", 0)))

    def _record_failure(self, request: LLMRequest, error: LLMError, started: float, latency: float) -> None:
        record = CallRecord(
            provider=self.provider,
            model=self.model,
            purpose=request.purpose,
            outcome=error.kind,
            usage=Usage(),
            cost_usd=0.0,
            latency_s=latency,
            attempts=self._attempts(),
            started_at=started,
            error=error.message,
        )
        self.calls.append(record)
        log.debug(
            "llm call failed: purpose=%s provider=%s model=%s outcome=%s status=%s latency_s=%.3f "
            "attempts=%d: %s",
            request.purpose or "-",
            self.provider,
            self.model,
            error.kind,
            error.status,
            latency,
            record.attempts,
            error.message,
        )

    def _redact(self, text: str) -> str:
        return redact(text, self._secrets)

    def _status_error(
        self, status: int, body: object, headers: Mapping[str, str], request_id: str | None
    ) -> LLMError:
        return status_error(
            status,
            body,
            provider=self.provider,
            model=self.model,
            headers=headers,
            request_id=request_id,
            secrets=self._secrets,
        )

    def _generic_error(self, cls: type[LLMError], what: str) -> LLMError:
        message = f"{self.provider} {self.model}: {self._redact(what)}"
        return cls(message, provider=self.provider, model=self.model)

    # -- to implement ----------------------------------------------------------------------

    def _send(self, request: LLMRequest) -> Reply:  # pragma: no cover - abstract
        raise NotImplementedError

    def _map_error(self, exc: Exception) -> LLMError | None:  # pragma: no cover - abstract
        raise NotImplementedError

    def close(self) -> None:  # pragma: no cover - overridden
        """Release the SDK client's connections."""

    def __enter__(self) -> ProviderClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"{type(self).__name__}(model={self.model!r}, calls={len(self.calls)})"
