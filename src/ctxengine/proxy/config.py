"""The proxy's configuration (``ProxyConfig``) and its proxy-wide counters (``Totals``)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import ctxengine.proxy.upstream as upstream
from ctxengine.models.registry import Registry
from ctxengine.policy.layer_settings import ToolResultBudget
from ctxengine.policy.registry import ClearedResults, Policy, get_policy


@dataclass
class ProxyConfig:
    """How the proxy runs. ``window`` (tokens) overrides each model's context window; ``store``
    is a folder (the SQLite store ``proxy.sqlite`` in it), a ``postgresql://`` URL (sessions
    shared by every node on it: ``shared``) or None for memory only; ``redis`` a
    ``redis://HOST:PORT/N`` URL (the per-session lock across nodes; needs a PostgreSQL store);
    ``admin_token``: who may list every session (``admin``)."""

    anthropic_upstream: str = upstream.ANTHROPIC_API
    openai_upstream: str = upstream.OPENAI_API
    policy: Policy = field(default_factory=lambda: get_policy("default"))
    policy_name: str = "default"  # for the log
    window: int | None = None
    store: Path | str | None = None
    redis: str | None = None
    admin_token: str | None = None
    retrieve_tool: bool = False
    registry: Registry | None = None
    # an OpenAI ``prompt_cache_key`` (the session's id) on requests whose client sets none, so a
    # session's requests reach the same cache; None: only when the OpenAI upstream is OpenAI's own
    # (another server may refuse a field it does not know)
    prompt_cache_key: bool | None = None
    # session-notes updates in the background (``ContextEngine(background_notes=True)``), so a
    # request never waits for the previous one's upkeep; False runs them in line (deterministic).
    # With a store they are jobs (``jobs``): run by a worker, their outcome recorded in the store
    # and applied at a later request at the turn the store says; without one, on a thread.
    background_notes: bool = True
    # with a store: whether this node's worker runs queued jobs (False: only other nodes' workers
    # take them from the Redis queue; without Redis a node always runs its own)
    job_worker: bool = True
    # the newest tool result reaches the model whole before the budget offloads it
    # (``ToolResultBudget.defer_unseen``): a live agent may refuse to fetch again what it never saw
    # (Claude Code answers a second Read of an unchanged file with "file unchanged"); False: the
    # policy's budget as it is (a result over the cap is offloaded on arrival)
    unseen_whole: bool = True
    # the process is the proxy's own (``ctxengine proxy``, each of its workers): once warm, its
    # start-up heap is collected and frozen (``warm.freeze_heap``: the cyclic collector's full
    # collections then skip it); False for an app inside another program (tests, ``wrap``)
    freeze_heap: bool = False
    # the process is the proxy's own: the sessions' notes updates run in its job process
    # (``job_process``), off the interpreter lock of the requests; False for an app inside another
    # program (tests, ``wrap``, an ASGI server of its own): the updates on threads, as a process
    # spawned there would import that program's main module again
    job_process: bool = False


def live_policy(config: ProxyConfig) -> Policy:
    """The policy the proxy's engines run: ``config.policy`` with what a live agent needs. Without
    ``retrieve_tool`` no placeholder names a tool the agent lacks (``ClearedResults.name_retrieve``
    off); with ``unseen_whole`` a tool result over the budget's cap reaches the model whole once
    and is offloaded when the model has answered it, unless the context with it whole would pass
    the compaction threshold (``ToolResultBudget.defer_unseen``; issue 26: a 19.5 KB ``Read``
    reached Claude Code's model as a 2.3 KB preview, and its re-read was refused)."""
    policy = config.policy
    if not config.retrieve_tool:
        policy = policy.with_(ClearedResults.of(policy).with_(name_retrieve=False))
    if config.unseen_whole:
        policy = policy.with_(ToolResultBudget.of(policy).with_(defer_unseen=True))
    return policy


@dataclass
class Totals:
    """Proxy-wide counters for ``GET /ctxengine/sessions``."""

    requests: int = 0
    fail_open: int = 0
    bad_requests: int = 0
    upstream_unreachable: int = 0
    passed_through: int = 0
    left_to_provider: int = 0  # requests whose context the provider manages (wire.LeftToProvider)
    store_failures: int = 0  # requests failed open because the shared store or the lock failed


__all__ = ["ProxyConfig", "Totals", "live_policy"]
