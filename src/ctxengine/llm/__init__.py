"""LLM clients: the ``LLMClient`` protocol and adapters over the ``anthropic`` and ``openai`` SDKs.

The SDKs are optional extras (``pip install 'ctxengine[anthropic]'`` / ``'ctxengine[openai]'``)
and are imported only when a client is constructed, so importing this package is cheap.

May import: ``messages``, ``models``, ``formats`` (the writers).
"""

from ctxengine.llm.anthropic_client import AnthropicClient
from ctxengine.llm.calls import (
    CallRecord,
    CallStats,
    LLMClient,
    LLMRequest,
    LLMResponse,
    ToolDefinition,
    call_stats,
)
from ctxengine.llm.errors import (
    AuthError,
    BadRequestError,
    LLMConnectionError,
    LLMError,
    LLMTimeoutError,
    PromptTooLongError,
    RateLimitError,
    SDKNotInstalledError,
    ServerError,
    parse_prompt_too_long,
    redact,
)
from ctxengine.llm.factory import PROVIDERS, make_client, parse_spec
from ctxengine.llm.openai_client import OpenAIClient
from ctxengine.llm.provider import ProviderClient

__all__ = [
    "PROVIDERS",
    "AnthropicClient",
    "AuthError",
    "BadRequestError",
    "CallRecord",
    "CallStats",
    "LLMClient",
    "LLMConnectionError",
    "LLMError",
    "LLMRequest",
    "LLMResponse",
    "LLMTimeoutError",
    "OpenAIClient",
    "PromptTooLongError",
    "ProviderClient",
    "RateLimitError",
    "SDKNotInstalledError",
    "ServerError",
    "ToolDefinition",
    "call_stats",
    "make_client",
    "parse_prompt_too_long",
    "parse_spec",
    "redact",
]
