"""Who may see which sessions in ``GET /ctxengine/sessions``.

Without ``--admin-token`` (a proxy on loopback): every session, as before. With it: the sessions
of the key the caller sends (``x-api-key`` or ``Authorization``, compared by its digest: the
proxy keeps no key), every session with ``x-ctxengine-admin: TOKEN``, none without either (401).
"""

from __future__ import annotations

import hmac
from collections.abc import Mapping
from typing import Any

from ctxengine.proxy.identity import AUTH_HEADERS, key_digest

ADMIN_HEADER = "x-ctxengine-admin"
ALL = "*all*"  # the caller may see every session
NONE = "*none*"  # the caller may see none
REFUSED: dict[str, Any] = {
    "error": f"send your API key (x-api-key or Authorization) to list its sessions, or {ADMIN_HEADER}"
}
LOOPBACK = ("127.0.0.1", "localhost", "::1")


def scope(headers: Mapping[str, str], admin_token: str | None) -> str:
    """``ALL``, ``NONE``, or the key digest whose sessions the caller may list."""
    if admin_token is None:
        return ALL
    sent = headers.get(ADMIN_HEADER)
    if sent is not None and hmac.compare_digest(sent.encode(), admin_token.encode()):
        return ALL
    if any(headers.get(h) for h in AUTH_HEADERS):
        return key_digest(headers)
    return NONE


def is_loopback(host: str) -> bool:
    """Whether binding ``host`` keeps the proxy on this machine."""
    return host in LOOPBACK or host.startswith("127.")
