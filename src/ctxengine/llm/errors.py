"""The errors of an LLM call: the ``LLMError`` hierarchy and how an HTTP error response maps onto it.

Each subclass names one ``Outcome`` (its ``kind``, recorded in ``CallRecord.outcome``).
``status_error`` turns a status, a response body and headers into the right subclass; a 400/413/422
whose message says the prompt is too long becomes a ``PromptTooLongError`` with the token gap
parsed from the message (``parse_prompt_too_long``) when it states one. Messages never contain an
API key: callers pass their secrets to ``redact``, which also masks anything shaped like one.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, ClassVar, Literal

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


class LLMError(Exception):
    """A model call failed. ``status`` is the HTTP status when there was a response;
    ``retry_after_s`` the server's requested wait (seconds) when it sent one. The message names
    provider and model and quotes the provider's error message, never an API key.

    ``kind`` is the ``Outcome`` a ``CallRecord`` of the failure carries; a subclass sets it in its
    class statement (``class RateLimitError(LLMError, kind="rate_limit")``)."""

    kind: ClassVar[Outcome] = "error"

    def __init_subclass__(cls, *, kind: Outcome | None = None, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if kind is not None:
            cls.kind = kind

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


class PromptTooLongError(LLMError, kind="prompt_too_long"):
    """The request does not fit the model's context window. ``actual`` and ``limit`` (tokens)
    are parsed from the provider's message when it states them, and ``gap_tokens = actual -
    limit`` is how many tokens must go at least; each is None when unknown."""

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


class RateLimitError(LLMError, kind="rate_limit"):
    """429 after the retries: the provider's rate limit. Raised at once, without retrying, when
    the server asks for a wait (``retry_after_s``, seconds) above the client's cap."""


class ServerError(LLMError, kind="server_error"):
    """5xx (including Anthropic's 529 overloaded) after the retries."""


class LLMTimeoutError(LLMError, kind="timeout"):
    """No response within the timeout, on every attempt (``status`` None), or a 408 from the
    server."""


class LLMConnectionError(LLMError, kind="connection"):
    """The server could not be reached (refused, DNS, TLS, dropped connection) on every attempt."""


class AuthError(LLMError, kind="auth"):
    """401/403, or no API key configured (raised by the client's constructor, ``status`` None)."""


class BadRequestError(LLMError, kind="bad_request"):
    """Any other 4xx: the request is invalid (unknown model, bad parameter, ...). Not retried."""


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
