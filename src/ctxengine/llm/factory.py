"""Build an ``LLMClient`` from a ``PROVIDER:MODEL`` spec (the CLI's ``--llm`` option).

``PROVIDER`` is the wire format: ``anthropic`` (Messages API) or ``openai`` (Chat Completions, also
for OpenAI-compatible servers via ``base_url``). ``MODEL`` is everything after the first colon, so
Ollama tags work: ``openai:llama3.1:8b``.
"""

from __future__ import annotations

from ctxengine.llm.provider import ProviderClient
from ctxengine.models.registry import Registry

PROVIDERS = ("anthropic", "openai")


def parse_spec(spec: str) -> tuple[str, str]:
    """``(provider, model)`` from ``PROVIDER:MODEL``; ``ValueError`` naming the expected form."""
    provider, sep, model = spec.strip().partition(":")
    provider = provider.strip().lower()
    model = model.strip()
    if not sep or not provider or not model:
        raise ValueError(
            f"bad LLM spec {spec!r}: expected PROVIDER:MODEL with PROVIDER one of "
            f"{', '.join(PROVIDERS)} (e.g. anthropic:claude-sonnet-4-5, openai:gpt-4o)"
        )
    if provider not in PROVIDERS:
        raise ValueError(
            f"unknown LLM provider {provider!r} in {spec!r}: expected one of {', '.join(PROVIDERS)}"
        )
    return provider, model


def make_client(
    spec: str,
    *,
    base_url: str | None = None,
    timeout: float = 60.0,
    max_retries: int = 2,
    api_key: str | None = None,
    registry: Registry | None = None,
) -> ProviderClient:
    """The LLM client for ``spec``.

    Keys come from ``api_key`` or the provider's environment variable (``ANTHROPIC_API_KEY`` /
    ``OPENAI_API_KEY``).

    Args:
        spec: ``PROVIDER:MODEL``; ``PROVIDER`` is the wire format, "anthropic" (Messages API) or
            "openai" (Chat Completions, also for OpenAI-compatible servers), ``MODEL`` everything
            after the first colon (``openai:llama3.1:8b``).
        base_url: another server than the provider's (None: the SDK's default or its environment
            variable).
        timeout: seconds per attempt.
        max_retries: the SDK's retry count.
        api_key: the key (None: the provider's environment variable).
        registry: prices the calls (None: the built-in model table).

    Returns:
        The provider's client (``AnthropicClient`` or ``OpenAIClient``).

    Raises:
        ValueError: for a bad spec or provider, a non-positive timeout or a negative retry count.
        SDKNotInstalledError: when the provider's SDK is missing.
        AuthError: when no key is configured (and no ``base_url`` makes a placeholder
            acceptable).
    """
    provider, model = parse_spec(spec)
    if provider == "anthropic":
        from ctxengine.llm.anthropic_client import AnthropicClient

        return AnthropicClient(
            model,
            api_key=api_key,
            base_url=base_url,
            timeout=timeout,
            max_retries=max_retries,
            registry=registry,
        )
    from ctxengine.llm.openai_client import OpenAIClient

    return OpenAIClient(
        model, api_key=api_key, base_url=base_url, timeout=timeout, max_retries=max_retries, registry=registry
    )
