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
from ctxengine.llm.calls import LLMRequest
from ctxengine.llm.errors import AuthError
from ctxengine.llm.provider import NO_KEY_PLACEHOLDER, ProviderClient, Reply, SDKErrors
from ctxengine.messages.model import Usage

if TYPE_CHECKING:
    import anthropic


class AnthropicClient(ProviderClient):
    """Calls ``POST /v1/messages`` through ``anthropic.Anthropic``.

    Arguments as for ``ProviderClient``: ``AnthropicClient(model, *, api_key=None, base_url=None,
    timeout=60.0, max_retries=2, registry=None)``. ``api_key`` defaults to ``ANTHROPIC_API_KEY``
    (the SDK also accepts ``ANTHROPIC_AUTH_TOKEN`` and its profiles); with a ``base_url`` (or
    ``ANTHROPIC_BASE_URL``) and no credential at all a placeholder key is sent, for local
    Anthropic-compatible servers. Without any credential the constructor raises ``AuthError``.

    ``LLMRequest.temperature`` is not sent: the API version the SDK 2.x sends
    (``anthropic-version: 2026-10-21``) rejects ``temperature``/``top_p``/``top_k`` with a 400,
    even at their defaults, and the SDK no longer has the parameters.
    """

    provider = "anthropic"
    api_key_env = "ANTHROPIC_API_KEY"
    base_url_env = "ANTHROPIC_BASE_URL"
    request_id_header = "request-id"
    _client: anthropic.Anthropic

    def _connect(self, api_key: str | None, base_url: str | None) -> anthropic.Anthropic:
        import anthropic

        if api_key is None and self.custom_server and not os.environ.get("ANTHROPIC_AUTH_TOKEN"):
            api_key = NO_KEY_PLACEHOLDER
        self._keep_secrets(api_key)
        try:
            client = anthropic.Anthropic(**self._sdk_options(anthropic.DefaultHttpxClient, api_key, base_url))
        except anthropic.AnthropicError as err:  # the SDK's credential chain (profiles) failed
            raise AuthError(
                f"anthropic: no API key: set ANTHROPIC_API_KEY or pass api_key ({self._redact(str(err))})",
                provider=self.provider,
                model=self.model,
            ) from None
        self._keep_secrets(client.api_key, client.auth_token)
        if client.api_key is None and client.auth_token is None and client.credentials is None:
            client.close()
            raise AuthError(
                "anthropic: no API key: set ANTHROPIC_API_KEY or pass api_key",
                provider=self.provider,
                model=self.model,
            )
        return client

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

    def _sdk_errors(self) -> SDKErrors:
        import anthropic as sdk

        return SDKErrors(sdk.APITimeoutError, sdk.APIConnectionError, sdk.APIStatusError, sdk.AnthropicError)


def anthropic_usage(usage: Any) -> Usage:
    """A ``Usage`` from an Anthropic response's ``usage`` object.

    Cache writes come from ``cache_creation`` (5-minute and 1-hour writes) when present, else all
    of ``cache_creation_input_tokens`` count as 5-minute writes.

    Args:
        usage: the SDK's ``usage`` object (attributes read by name; missing ones count 0), or None.

    Returns:
        The usage in tokens; zero usage for None.
    """
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
