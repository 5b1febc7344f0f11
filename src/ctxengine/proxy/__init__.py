"""``ctxengine proxy``: context management for any agent, unchanged.

A local HTTP proxy that speaks the Anthropic Messages API and OpenAI Chat Completions, applies
the engine to every request (the client's messages are the transcript; what goes upstream is the
engine's projection) and passes everything else through. Modules: ``app`` (routes, fail open),
``identity`` (session hash chain), ``sessions``, ``apply`` (the engine step), ``wire`` /
``wire_anthropic`` / ``wire_openai`` (the formats), ``sse`` and ``turn`` (streams, the log line),
``recovery`` (how the client's tools get an offloaded result back), ``retrieve_loop``
(``--retrieve-tool``), ``upstream`` (httpx), ``server`` (uvicorn).
"""

from ctxengine.proxy.app import Proxy, ProxyConfig, create_app

__all__ = ["Proxy", "ProxyConfig", "create_app"]
