"""``LLMClient`` over the official ``openai`` SDK (Chat Completions, non-streaming).

``base_url`` points the client at any OpenAI-compatible server: Ollama
(``http://localhost:11434/v1``), vLLM, LM Studio, OpenRouter (``https://openrouter.ai/api/v1``).
The body is built by ``formats.openai_writer.to_openai_chat``. Usage is normalised to Anthropic
semantics (``formats.openai_chat.openai_usage``): ``prompt_tokens`` includes cached tokens, so
``input = prompt - cached``, ``cache_read = cached``; cache writes that a server reports
(``prompt_tokens_details.cache_write_tokens``, LiteLLM's ``cache_creation_input_tokens``) are
also taken out of ``input``.

The output cap: OpenAI's newer models (o-series, GPT-5) reject ``max_tokens`` and want
``max_completion_tokens``, which many compatible servers do not know. So the cap is sent as
``max_completion_tokens`` to api.openai.com (no ``base_url``) and as ``max_tokens`` to other
servers; when a server answers 400 naming the other parameter, the client switches once and
remembers. Likewise a 400 rejecting ``temperature`` (reasoning models) drops it once and
remembers. The rejected attempt counts in the call's ``attempts``.

Retries are the SDK's: 408, 409, 429, 5xx, connection errors and timeouts, ``max_retries`` times,
waiting what ``retry-after-ms`` / ``retry-after`` ask (the SDK refuses waits over 120 s; this
client caps at ``ProviderClient.max_retry_wait_s``) or else 0.5 s, 1 s, 2 s, ... (max 8 s, minus up
to 25% jitter). ``timeout`` applies to each attempt. The SDK is imported lazily; without it the
constructor raises ``SDKNotInstalledError``.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any, Literal, Unpack

from ctxengine.formats.openai_chat import openai_usage
from ctxengine.formats.openai_writer import to_openai_chat
from ctxengine.llm.calls import LLMRequest
from ctxengine.llm.errors import AuthError, BadRequestError
from ctxengine.llm.provider import NO_KEY_PLACEHOLDER, ClientOptions, ProviderClient, Reply, SDKErrors, log
from ctxengine.messages.model import Usage

if TYPE_CHECKING:
    import openai

TokenParam = Literal["max_tokens", "max_completion_tokens"]

_UNSUPPORTED = re.compile(
    r"unsupported|not supported|unrecognized|unknown|extra inputs|does not support", re.I
)


class OpenAIClient(ProviderClient):
    """Calls ``POST {base_url}/chat/completions`` through ``openai.OpenAI``.

    Arguments as for ``ProviderClient`` (``api_key``, ``base_url``, ``timeout``, ``max_retries``,
    ``registry``), plus ``token_param``, which forces the name of the output cap parameter
    (default: see the module docstring). ``api_key`` defaults to ``OPENAI_API_KEY``; with a
    ``base_url`` (or ``OPENAI_BASE_URL``) and no key, the placeholder ``"not-needed"`` is sent
    (local servers ignore it). Without a key and without a base URL the constructor raises
    ``AuthError``. An SDK error that is not an HTTP error, a timeout or a connection failure
    becomes a ``BadRequestError``.
    """

    provider = "openai"
    api_key_env = "OPENAI_API_KEY"
    base_url_env = "OPENAI_BASE_URL"
    other_error = BadRequestError
    _client: openai.OpenAI

    def __init__(
        self, model: str, *, token_param: TokenParam | None = None, **options: Unpack[ClientOptions]
    ) -> None:
        super().__init__(model, **options)
        self.token_param: TokenParam = token_param or (
            "max_tokens" if self.custom_server else "max_completion_tokens"
        )
        self.send_temperature = True

    def _connect(self, api_key: str | None, base_url: str | None) -> openai.OpenAI:
        import openai

        if api_key is None:
            if not self.custom_server:
                raise AuthError(
                    "openai: no API key: set OPENAI_API_KEY, pass api_key, or give a base_url",
                    provider=self.provider,
                    model=self.model,
                )
            api_key = NO_KEY_PLACEHOLDER
        self._keep_secrets(api_key)
        return openai.OpenAI(**self._sdk_options(openai.DefaultHttpxClient, api_key, base_url))

    def _send(self, request: LLMRequest) -> Reply:
        body = to_openai_chat(
            request.messages,
            system=request.system,
            model=self.model,
            tools=[
                {
                    "type": "function",
                    "function": {"name": t.name, "description": t.description, "parameters": t.parameters},
                }
                for t in request.tools
            ]
            or None,
        )
        adapted: set[str] = set()
        while True:
            attempt = dict(body)
            attempt[self.token_param] = request.max_tokens
            if request.temperature is not None and self.send_temperature:
                attempt["temperature"] = request.temperature
            try:
                completion = self._client.chat.completions.create(**attempt)
            except Exception as exc:
                change = self._adaptation(exc, request, adapted)
                if change is None:
                    raise
                log.debug(
                    "llm %s %s: server rejected a parameter; retrying with %s",
                    self.provider,
                    self.model,
                    change,
                )
                adapted.add(change)
                continue
            break
        choice = completion.choices[0] if completion.choices else None
        text = (choice.message.content or "") if choice is not None else ""
        return Reply(
            text=text,
            usage=normalise_usage(completion.usage.model_dump() if completion.usage is not None else None),
            model=completion.model or self.model,
            stop_reason=choice.finish_reason if choice is not None else None,
        )

    def _adaptation(self, exc: Exception, request: LLMRequest, done: set[str]) -> str | None:
        """The parameter change that fixes a 400 rejecting a parameter, applied; None when the
        error is something else or the change was already tried."""
        import openai as sdk

        if not isinstance(exc, sdk.BadRequestError):
            return None
        error = self._map_error(exc)
        text = error.message if error is not None else ""
        other: TokenParam = "max_completion_tokens" if self.token_param == "max_tokens" else "max_tokens"
        if (
            not done & {"max_tokens", "max_completion_tokens"}
            and self.token_param in text
            and _UNSUPPORTED.search(text)
        ):
            self.token_param = other
            return other
        if (
            "no temperature" not in done
            and request.temperature is not None
            and "temperature" in text
            and _UNSUPPORTED.search(text)
        ):
            self.send_temperature = False
            return "no temperature"
        return None

    def _sdk_errors(self) -> SDKErrors:
        import openai as sdk

        return SDKErrors(sdk.APITimeoutError, sdk.APIConnectionError, sdk.APIStatusError, sdk.OpenAIError)


def normalise_usage(raw: dict[str, Any] | None) -> Usage:
    """A ``Usage`` from a Chat Completions ``usage`` object.

    The reader's ``openai_usage`` (cached tokens taken out of ``prompt_tokens``), plus
    ``prompt_tokens_details.cache_write_tokens`` (OpenRouter) as 5-minute writes taken out of
    ``input``.

    Args:
        raw: the ``usage`` object as a dict, or None.

    Returns:
        The usage in tokens; zero usage when the server reported none.
    """
    if not raw:
        return Usage()
    usage = openai_usage(raw) or Usage()
    details = raw.get("prompt_tokens_details") or {}
    written = details.get("cache_write_tokens") if isinstance(details, dict) else None
    if isinstance(written, int) and written > 0 and not usage.cache_write_tokens:
        usage = Usage(
            input_tokens=max(usage.input_tokens - written, 0),
            cache_read_tokens=usage.cache_read_tokens,
            cache_write_tokens=written,
            output_tokens=usage.output_tokens,
        )
    return usage
