"""The narrow LLM interface the summarizer, the session-notes updater and compaction call.

``LLMClient`` is a protocol with one method, ``complete(LLMRequest) -> LLMResponse``, plus a record
of every call (``calls``). Requests carry neutral ``Message`` lists; each adapter encodes them with
the package's own writers (``formats.anthropic_writer`` / ``formats.openai_writer``), so a summary
request is built exactly like the main conversation's requests and can share its cached prefix.

Failures are specific ``LLMError`` subclasses a caller can catch (``llm.errors``;
``PromptTooLongError`` carries the token gap parsed from the provider's message when it states
one). Error messages and logs never contain an API key: adapters register their secrets
(``ProviderClient._keep_secrets``) and every message goes through ``redact``; errors are raised
``from None`` so that the SDK's exception (whose request holds the auth headers) is not chained.

``ProviderClient`` is the shared machinery of the SDK adapters: the lazy SDK import, the key from
the environment, the SDK client's options, timing, attempt counting, the cap on server-requested
retry waits, the mapping of the SDK's exceptions onto ``LLMError``s, usage and cost recording,
debug logging. An adapter supplies the SDK client (``_connect``), one call (``_send``: build the
request, read the reply and its usage) and its exception classes (``_sdk_errors``). Units:
tokens, USD, seconds.

The records and the protocol live in ``llm.calls``, the adapter machinery in ``llm.provider``;
every name is importable from here too.
"""

from __future__ import annotations

from ctxengine.llm.calls import (
    CallRecord,
    CallStats,
    LLMClient,
    LLMRequest,
    LLMResponse,
    ToolDefinition,
    call_stats,
)
from ctxengine.llm.provider import (
    MAX_RETRY_WAIT_S,
    NO_KEY_PLACEHOLDER,
    ClientOptions,
    ProviderClient,
    Reply,
    SDKErrors,
    log,
)

__all__ = [
    "MAX_RETRY_WAIT_S",
    "NO_KEY_PLACEHOLDER",
    "CallRecord",
    "CallStats",
    "ClientOptions",
    "LLMClient",
    "LLMRequest",
    "LLMResponse",
    "ProviderClient",
    "Reply",
    "SDKErrors",
    "ToolDefinition",
    "call_stats",
    "log",
]
