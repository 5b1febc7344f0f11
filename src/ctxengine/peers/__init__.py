"""Python peers measured through the same replay: LangChain's ``trim_messages`` and its
``ClearToolUsesEdit`` (``ctxengine.peers.langchain``), as plugin engines.

They are an optional extra (``pip install 'ctxengine[peers]'``), never a core dependency: without
LangChain installed, ``available()`` says why and ``register`` adds nothing, and the bench reports
the peers as unavailable with the install hint. The peers are measured as they are: their output
is sent as it comes (pairing breaks are counted by the replay's request validation, not repaired).

May import: ``messages``, ``policy``, ``layers``, ``engine``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ctxengine.policy.registry import NONE, Policy

if TYPE_CHECKING:
    from ctxengine.engine.plugins import EngineRegistry

OWNER = "plugin:langchain"
INSTALL_HINT = "pip install 'ctxengine[peers]'"
PEERS: dict[str, str] = {
    "langchain-trim": "LangChain trim_messages(strategy='last', approximate token counter)",
    "langchain-clear": "LangChain ContextEditingMiddleware(ClearToolUsesEdit()) (no model)",
}
"""Peer engine ids and what each runs."""
PEER_LAYERS = frozenset({"langchain_trim", "langchain_clear"})
"""Event layers the peers report (a change of what is sent that is not an append)."""


def available() -> str | None:
    """None when the peers can run; else why not (with the install hint)."""
    try:
        import langchain.agents.middleware  # noqa: F401
        import langchain_core.messages  # noqa: F401
    except ImportError as exc:
        return f"LangChain is not installed ({exc.name or exc}): {INSTALL_HINT}"
    return None


def register(engines: EngineRegistry) -> list[str]:
    """Register the peer engines (owner ``plugin:langchain``) when LangChain is installed;
    returns the ids added (none when it is not, or when they are registered already)."""
    if available() is not None:
        return []
    from ctxengine.peers.langchain import ClearToolUsesEngine, TrimMessagesEngine

    added = []
    for engine_id, factory in (
        ("langchain-trim", TrimMessagesEngine),
        ("langchain-clear", ClearToolUsesEngine),
    ):
        if engine_id not in engines.ids():
            engines.register(engine_id, factory, owner=OWNER)
            added.append(engine_id)
    return added


def policy_for(name: str) -> Policy:
    """The policy record a peer runs under: ours does nothing (the peer engine decides), it only
    names the run and sets the cache TTL the replay prices with. Raises ``KeyError``."""
    if name not in PEERS:
        raise KeyError(f"unknown peer {name!r}; known: {', '.join(PEERS)}")
    return NONE.with_(name=name, description=PEERS[name])
