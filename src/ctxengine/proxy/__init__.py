"""``ctxengine proxy``: context management for any agent, unchanged.

A local HTTP proxy that speaks the Anthropic Messages API and OpenAI Chat Completions, applies
the engine to every request (the client's messages are the transcript; what goes upstream is the
engine's projection) and passes everything else through. Modules: ``app`` (routes, fail open),
``identity`` (session hash chain), ``sessions``, ``apply`` (the engine step), ``wire`` /
``wire_anthropic`` / ``wire_openai`` (the formats), ``sse`` and ``turn`` (streams, the log line),
``recovery`` (how the client's tools get an offloaded result back), ``retrieve_loop`` and
``retrieve_rounds`` (``--retrieve-tool``), ``upstream`` (httpx), ``store``, ``server`` (uvicorn),
``command`` (the CLI).

The names below are imported on first use: the ``ctxengine`` command loads this package to
register ``proxy``, and must work without the ``proxy`` extra (Starlette, uvicorn, httpx).

May import: ``messages``, ``formats``, ``models``, ``policy``, ``engine``, ``store``, ``tools``, ``replay``,
``integrations``, ``cli``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ctxengine.proxy.app import Proxy, create_app
    from ctxengine.proxy.config import ProxyConfig

__all__ = ["Proxy", "ProxyConfig", "create_app"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        from ctxengine.proxy import app

        return getattr(app, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
