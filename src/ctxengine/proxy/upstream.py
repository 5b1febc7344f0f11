"""Forwarding to the upstream API with ``httpx``: which headers go, which come back, the URL.

Request headers: everything the client sent, auth included (to the upstream and nowhere else),
less the hop-by-hop ones, ``host``, ``content-length`` (recomputed), ``accept-encoding`` (httpx
asks for what it can decode; the body goes back decoded) and the proxy's own
``x-ctxengine-session``. Response headers: the upstream's, less hop-by-hop, ``content-length``
and ``content-encoding`` (the body is re-framed decoded). The request path is appended to the
upstream URL as received, except that the OpenAI upstream URL already ends in ``/v1``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from ctxengine.proxy.identity import SESSION_HEADER

if TYPE_CHECKING:  # httpx is imported when a client is made: the CLI loads this without the extra
    import httpx

ANTHROPIC_API = "https://api.anthropic.com"
OPENAI_API = "https://api.openai.com/v1"
CONNECT_TIMEOUT_S = 10.0
READ_TIMEOUT_S = 600.0  # a long generation streams for minutes
MAX_CONNECTIONS = 200

HOP_BY_HOP = frozenset(
    {
        "connection",
        "keep-alive",
        "proxy-authenticate",
        "proxy-authorization",
        "te",
        "trailers",
        "transfer-encoding",
        "upgrade",
    }
)
_DROP_REQUEST = HOP_BY_HOP | {"host", "content-length", "accept-encoding", SESSION_HEADER}
_DROP_RESPONSE = HOP_BY_HOP | {"content-length", "content-encoding"}


def request_headers(headers: Mapping[str, str]) -> dict[str, str]:
    """The client's headers to send upstream."""
    return {k: v for k, v in headers.items() if k.lower() not in _DROP_REQUEST}


def response_headers(headers: httpx.Headers) -> dict[str, str]:
    """The upstream's headers to send back to the client."""
    return {k: v for k, v in headers.items() if k.lower() not in _DROP_RESPONSE}


def upstream_url(base: str, path: str, query: str, *, strip_v1: bool) -> str:
    """``base`` + the request path (without its ``/v1`` when ``strip_v1``) + the query string."""
    if strip_v1 and path.startswith("/v1/"):
        path = path[3:]
    url = base.rstrip("/") + path
    return f"{url}?{query}" if query else url


def make_client() -> httpx.AsyncClient:
    """The shared upstream client: pooled connections, a long read timeout, no retries (the
    client's SDK retries; the proxy must not double them)."""
    import httpx

    return httpx.AsyncClient(
        timeout=httpx.Timeout(READ_TIMEOUT_S, connect=CONNECT_TIMEOUT_S),
        limits=httpx.Limits(max_connections=MAX_CONNECTIONS, max_keepalive_connections=MAX_CONNECTIONS),
        follow_redirects=False,
    )


CONTEXT_1M_BETA = "context-1m-"  # anthropic-beta: context-1m-2025-08-07 (Sonnet 4 and 4.5)
CONTEXT_1M_TOKENS = 1_000_000


def beta_window(headers: Any) -> int | None:
    """The window an Anthropic request asks for with a beta header (tokens): 1,000,000 with the
    1M-context beta, else None (the model's)."""
    betas = ",".join(headers.getlist("anthropic-beta")) if hasattr(headers, "getlist") else ""
    return CONTEXT_1M_TOKENS if any(b.strip().startswith(CONTEXT_1M_BETA) for b in betas.split(",")) else None


def is_anthropic(path: str, headers: Any) -> bool:
    """Whether a request the proxy passes through is Anthropic's (by its path, else its headers)."""
    if path.startswith("/v1/messages"):
        return True
    if path.startswith(("/v1/chat/", "/v1/responses", "/v1/embeddings", "/v1/completions")):
        return False
    return "x-api-key" in headers or "anthropic-version" in headers
