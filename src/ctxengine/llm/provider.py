"""``ProviderClient``, the shared machinery of the SDK adapters: the lazy SDK import, the key
from the environment, the SDK client's options, timing, attempt counting, the cap on
server-requested retry waits, the mapping of the SDK's exceptions onto ``LLMError``s, usage and
cost recording, debug logging. An adapter supplies the SDK client (``_connect``), one call
(``_send``: build the request, read the reply and its usage) and its exception classes
(``_sdk_errors``). Error messages and logs never contain an API key (``_keep_secrets``,
``redact``). Units: tokens, USD, seconds.
"""

from __future__ import annotations

import importlib
import logging
import os
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any, ClassVar, NamedTuple, Protocol, TypedDict

import msgspec

from ctxengine.llm.calls import CallRecord, LLMRequest, LLMResponse
from ctxengine.llm.errors import (
    LLMConnectionError,
    LLMError,
    LLMTimeoutError,
    SDKNotInstalledError,
    redact,
    retry_after_seconds,
    status_error,
)
from ctxengine.messages.model import Usage
from ctxengine.models.registry import ModelInfo, Registry, usage_cost_usd

log = logging.getLogger("ctxengine.llm")

# Longest wait (seconds) a client accepts from a server's retry-after / retry-after-ms header before
# a 429/5xx retry. The Anthropic SDK honours any value (up to ~49 days); the OpenAI SDK refuses to
# retry above 120 s. A longer wait fails fast with RateLimitError / ServerError (``retry_after_s``
# set) so that the caller decides (e.g. the compaction circuit breaker) instead of blocking.
MAX_RETRY_WAIT_S = 60.0

# When a local OpenAI-compatible server needs no key, this placeholder is sent instead.
NO_KEY_PLACEHOLDER = "not-needed"


class Reply(msgspec.Struct, frozen=True):
    """What an adapter's ``_send`` returns: the reply text, usage, the answering model, the stop
    reason."""

    text: str
    usage: Usage
    model: str
    stop_reason: str | None


class ClientOptions(TypedDict, total=False):
    """The keyword arguments of every ``ProviderClient`` constructor (see ``ProviderClient``)."""

    api_key: str | None
    base_url: str | None
    timeout: float
    max_retries: int
    registry: Registry | None


class _APIError(Protocol):
    @property
    def message(self) -> str: ...


class _Response(Protocol):
    @property
    def headers(self) -> Mapping[str, str]: ...


class _APIStatusError(_APIError, Protocol):
    @property
    def status_code(self) -> int: ...

    @property
    def body(self) -> object: ...

    @property
    def response(self) -> _Response: ...


class _SDKClient(Protocol):
    def close(self) -> None: ...


class SDKErrors(NamedTuple):
    """An SDK's exception classes, as ``ProviderClient._map_error`` maps them: ``timeout`` ->
    ``LLMTimeoutError``; ``connection`` (checked after ``timeout``, its base class in both SDKs)
    -> ``LLMConnectionError``; ``status`` (an HTTP error response) -> the ``LLMError`` for its
    status (``status_error``); ``base`` (anything else the SDK raises) ->
    ``ProviderClient.other_error``."""

    timeout: type[Exception]
    connection: type[_APIError]
    status: type[_APIStatusError]
    base: type[Exception]


class ProviderClient:
    """Base of the SDK adapters: builds the SDK client and implements ``LLMClient.complete``;
    an adapter supplies only what is provider-specific (the hooks at the end).

    ``model`` is the model name sent to the provider. ``api_key`` defaults to the environment
    variable ``api_key_env``; ``base_url`` (or the environment variable ``base_url_env``) points
    the client at another server than the provider's (``custom_server`` is then true).
    ``timeout`` is in seconds per attempt; ``max_retries`` is the SDK's retry count. ``registry``
    prices the calls (default: the built-in model table; unknown models price at the fallback
    rates). Raises ``ValueError`` for an empty model, a non-positive timeout or a negative retry
    count, ``SDKNotInstalledError`` when the SDK (the module named ``provider``) is missing, and
    ``AuthError`` (from ``_connect``) when no credential is configured.

    The SDK's HTTP client is built with two event hooks: one counts attempts (per thread), one
    stops a retry whose server-requested wait exceeds ``max_retry_wait_s``. Usable as a context
    manager; ``close()`` releases the connection pool.
    """

    provider: str = ""
    api_key_env: ClassVar[str] = ""
    base_url_env: ClassVar[str] = ""
    # The response header that carries the provider's request id (``LLMError.request_id``).
    request_id_header: ClassVar[str] = "x-request-id"
    # What an SDK error that is neither an HTTP error nor a timeout or connection failure becomes.
    other_error: ClassVar[type[LLMError]] = LLMError
    max_retry_wait_s: float = MAX_RETRY_WAIT_S

    def __init__(
        self,
        model: str,
        *,
        api_key: str | None = None,
        base_url: str | None = None,
        timeout: float = 60.0,
        max_retries: int = 2,
        registry: Registry | None = None,
    ) -> None:
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
        try:
            importlib.import_module(self.provider)  # imported here, not with this package: it is slow
        except ImportError as err:
            hint = f"the {self.provider} SDK is not installed: pip install 'ctxengine[{self.provider}]'"
            raise SDKNotInstalledError(hint, provider=self.provider, model=model) from err
        if api_key is None:
            api_key = os.environ.get(self.api_key_env) or None
        self.custom_server = bool(base_url or os.environ.get(self.base_url_env))
        self._client = self._connect(api_key, base_url)

    # -- the SDK client and its httpx hooks -------------------------------------------------

    def _sdk_options(
        self, httpx_client: Callable[..., object], api_key: str | None, base_url: str | None
    ) -> dict[str, Any]:
        """The SDK client's constructor arguments: ``api_key``, ``base_url``, the timeout and
        retry count, and an ``httpx_client`` (the SDK's ``DefaultHttpxClient``) with the hooks."""
        hooks = {"request": [self._on_request], "response": [self._on_response]}
        return {
            "api_key": api_key,
            "base_url": base_url,
            "timeout": self.timeout,
            "max_retries": self.max_retries,
            "http_client": httpx_client(event_hooks=hooks),
        }

    def _keep_secrets(self, *values: str | None) -> None:
        """Redact ``values`` (the credentials in use) from every error message and log line."""
        self._secrets = tuple(v for v in values if v and v != NO_KEY_PLACEHOLDER)

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

    def _map_error(self, exc: Exception) -> LLMError | None:
        """The ``LLMError`` for an exception the SDK raised (classified by ``_sdk_errors``);
        None for any other exception."""
        errors = self._sdk_errors()
        if isinstance(exc, errors.timeout):
            return self._generic_error(LLMTimeoutError, f"no response within {self.timeout:g} s")
        if isinstance(exc, errors.connection):
            return self._generic_error(LLMConnectionError, f"connection failed: {exc.message}")
        if isinstance(exc, errors.status):
            headers = exc.response.headers
            return status_error(
                exc.status_code,
                exc.body,
                provider=self.provider,
                model=self.model,
                headers=headers,
                request_id=headers.get(self.request_id_header),
                secrets=self._secrets,
            )
        if isinstance(exc, errors.base):
            return self._generic_error(self.other_error, f"{type(exc).__name__}: {exc}")
        return None

    def _redact(self, text: str) -> str:
        return redact(text, self._secrets)

    def _generic_error(self, cls: type[LLMError], what: str) -> LLMError:
        message = f"{self.provider} {self.model}: {self._redact(what)}"
        return cls(message, provider=self.provider, model=self.model)

    # -- to implement ----------------------------------------------------------------------

    def _connect(self, api_key: str | None, base_url: str | None) -> _SDKClient:  # pragma: no cover
        """The SDK client (built with ``_sdk_options``), its credentials passed to
        ``_keep_secrets``; ``AuthError`` when there is none. ``api_key`` is the argument or the
        environment's; a custom server may accept ``NO_KEY_PLACEHOLDER``."""
        raise NotImplementedError

    def _send(self, request: LLMRequest) -> Reply:  # pragma: no cover - abstract
        """One SDK call for ``request`` (the SDK retries inside it); the reply, usage read."""
        raise NotImplementedError

    def _sdk_errors(self) -> SDKErrors:  # pragma: no cover - abstract
        """The SDK's exception classes (the SDK is imported by then)."""
        raise NotImplementedError

    def close(self) -> None:
        """Release the SDK client's connections."""
        self._client.close()

    def __enter__(self) -> ProviderClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"{type(self).__name__}(model={self.model!r}, calls={len(self.calls)})"
