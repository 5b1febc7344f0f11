"""``LLMClient`` over the official ``anthropic`` SDK (Messages API, non-streaming).

The request body is built by ``formats.anthropic_writer.to_anthropic`` (the same encoder as the
main conversation), with ``cache_control`` breakpoints only when ``LLMRequest.cache_prefix`` is
set. Usage maps ``input_tokens`` / ``cache_read_input_tokens`` / ``cache_creation_input_tokens``
(split into 5-minute and 1-hour writes when ``cache_creation`` says so) onto ``messages.Usage``.

Retries are the SDK's: 408, 409, 429 and 5xx (529 overloaded included) and connection errors and
timeouts, ``max_retries`` times, waiting what ``retry-after-ms`` / ``retry-after`` ask (capped by
``ProviderClient.max_retry_wait_s``) or else 0.5 s, 1 s, 2 s, ... (max 8 s, minus up to 25%
jitter). The SDK also obeys the API's ``x-should-retry`` header. ``timeout`` applies to each
attempt. The SDK is imported lazily (importing it takes seconds); without it the constructor
raises ``SDKNotInstalledError``.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

from ctxengine.formats.anthropic_writer import to_anthropic
from ctxengine.llm.base import (
    NO_KEY_PLACEHOLDER,
    AuthError,
    LLMConnectionError,
    LLMError,
    LLMRequest,
    LLMTimeoutError,
    ProviderClient,
    Reply,
    SDKNotInstalledError,
)
from ctxengine.messages import Usage
from ctxengine.models import Registry

if TYPE_CHECKING:
    import anthropic

INSTALL_HINT = "the anthropic SDK is not installed: pip install 'ctxengine[anthropic]'"


class AnthropicClient(ProviderClient):
    """Calls ``POST /v1/messages`` through ``anthropic.Anthropic``.

    ``api_key`` defaults to ``ANTHROPIC_API_KEY`` (the SDK also accepts ``ANTHROPIC_AUTH_TOKEN``
    and its profiles); with a ``base_url`` (or ``ANTHROPIC_BASE_URL``) and no credential at all a
    placeholder key is sent, for local Anthropic-compatible servers. ``timeout`` is in seconds per
    attempt; ``max_retries`` is the SDK's retry count. ``registry`` prices the calls (default:
    the built-in model table; unknown models price at the fallback rates).

    ``LLMRequest.temperature`` is not sent: the API version the SDK 2.x sends
    (``anthropic-version: 2026-10-21``) rejects ``temperature``/``top_p``/``top_k`` with a 400,
    even at their defaults, and the SDK no longer has the parameters.
    """

    provider = "anthropic"

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
        super().__init__(model, timeout=timeout, max_retries=max_retries, registry=registry)
        try:
            import anthropic
        except ImportError as err:
            raise SDKNotInstalledError(INSTALL_HINT, provider=self.provider, model=model) from err
        if api_key is None:
            api_key = os.environ.get("ANTHROPIC_API_KEY") or None
        no_credential = api_key is None and not os.environ.get("ANTHROPIC_AUTH_TOKEN")
        if no_credential and (base_url or os.environ.get("ANTHROPIC_BASE_URL")):
            api_key = NO_KEY_PLACEHOLDER
        if api_key is not None and api_key != NO_KEY_PLACEHOLDER:
            self._secrets = (api_key,)
        try:
            self._client: anthropic.Anthropic = anthropic.Anthropic(
                api_key=api_key,
                base_url=base_url,
                timeout=timeout,
                max_retries=max_retries,
                http_client=anthropic.DefaultHttpxClient(event_hooks=self._event_hooks()),
            )
        except anthropic.AnthropicError as err:  # the SDK's credential chain (profiles) failed
            raise AuthError(
                f"anthropic: no API key: set ANTHROPIC_API_KEY or pass api_key ({self._redact(str(err))})",
                provider=self.provider,
                model=model,
            ) from None
        secrets = (self._client.api_key, self._client.auth_token)
        self._secrets = tuple(s for s in secrets if s and s != NO_KEY_PLACEHOLDER)
        if (
            self._client.api_key is None
            and self._client.auth_token is None
            and self._client.credentials is None
        ):
            self._client.close()
            raise AuthError(
                "anthropic: no API key: set ANTHROPIC_API_KEY or pass api_key",
                provider=self.provider,
                model=model,
            )

    def _send(self, request: LLMRequest) -> Reply:
        body = to_anthropic(
            request.messages,
            system=request.system,
            model=self.model,
            max_tokens=request.max_tokens,
            tools=[
                {"name": t.name, "description": t.description, "input_schema": t.parameters}
                for t in request.tools
            ]
            or None,
            cache_breakpoints=request.cache_prefix,
        )
        message = self._client.messages.create(**body)
        text = "".join(getattr(b, "text", "") for b in message.content if getattr(b, "type", "") == "text")
        return Reply(
            text=text,
            usage=anthropic_usage(message.usage),
            model=message.model or self.model,
            stop_reason=message.stop_reason,
        )

    def _map_error(self, exc: Exception) -> LLMError | None:
        import anthropic as sdk

        if isinstance(exc, sdk.APITimeoutError):
            return self._generic_error(LLMTimeoutError, f"no response within {self.timeout:g} s")
        if isinstance(exc, sdk.APIConnectionError):
            return self._generic_error(LLMConnectionError, f"connection failed: {exc.message}")
        if isinstance(exc, sdk.APIStatusError):
            return self._status_error(
                exc.status_code, exc.body, exc.response.headers, exc.response.headers.get("request-id")
            )
        if isinstance(exc, sdk.AnthropicError):
            return self._generic_error(LLMError, f"{type(exc).__name__}: {exc}")
        return None

    def close(self) -> None:
        """Release the SDK client's connections."""
        self._client.close()


def anthropic_usage(usage: Any) -> Usage:
    """``messages.Usage`` from an Anthropic ``usage`` object: ``cache_creation`` (5-minute and
    1-hour writes) when present, else all of ``cache_creation_input_tokens`` as 5-minute writes."""
    if usage is None:
        return Usage()
    write = getattr(usage, "cache_creation_input_tokens", None) or 0
    write_1h = 0
    split = getattr(usage, "cache_creation", None)
    if split is not None:
        write_1h = getattr(split, "ephemeral_1h_input_tokens", 0) or 0
        write_5m = getattr(split, "ephemeral_5m_input_tokens", 0) or 0
        if write_5m + write_1h:
            write = write_5m
    return Usage(
        input_tokens=getattr(usage, "input_tokens", 0) or 0,
        cache_read_tokens=getattr(usage, "cache_read_input_tokens", None) or 0,
        cache_write_tokens=write,
        cache_write_1h_tokens=write_1h,
        output_tokens=getattr(usage, "output_tokens", 0) or 0,
    )
