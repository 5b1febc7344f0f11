"""``SessionState``: what the parts of ``ContextEngine`` read and change of the session, as a protocol.

The engine holds the session (history, decisions, ledger, policy, store); its parts (``view``,
``commit``, ``cascade``, ``subagents``) each do one job on it and depend on this protocol, not on
the engine's class, so the dependency points one way (``core`` -> parts -> ``state``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from ctxengine.compaction import Compactor
    from ctxengine.layers.base import LayerEvent
    from ctxengine.messages.model import Message, RecordedCompaction
    from ctxengine.models.registry import ModelInfo, Registry
    from ctxengine.policy.registry import Policy
    from ctxengine.store import SessionStore
    from ctxengine.tokens.counter import TokenCounter
    from ctxengine.tokens.ledger import Ledger


class SessionState(Protocol):
    """One session's state as the engine's parts see it (``ContextEngine`` has all of it).

    Attributes:
        policy: the layers' settings.
        registry: the model registry.
        model: the model's entry (window, max output, prices).
        window: the engine's context window, tokens.
        counter: the token counter.
        store: where entries and artifacts go.
        session_id: the session's id in the store.
        system: the system prompt.
        ledger: the input-token ledger (the provider's usage against the counter's figures).
        history: every ingested message, unchanged.
        recorded: the recorded session's compactions by index (policy ``recorded``).
        replacements: the decisions' replacements, frozen (key -> what is shown instead).
        kept_from: history index where the projection's verbatim part starts.
        prefix: engine-made messages before it (summary, notices).
        evicted: history indices evicted without a summary.
        compactor: the compaction chain and the session notes.
        compaction_listeners: called whenever content leaves the context.
        pending_events: events made since the last ``assemble``, reported by the next one.
        last_call: the time of the last call, epoch seconds (None: unknown).
        failures: layers that raised (the session unchanged each time), over the session.
    """

    policy: Policy
    registry: Registry
    model: ModelInfo
    window: int
    counter: TokenCounter
    store: SessionStore
    session_id: str
    system: str
    ledger: Ledger
    history: list[Message]
    recorded: dict[int, RecordedCompaction]
    replacements: dict[str, Any]
    kept_from: int
    prefix: list[Message]
    evicted: set[int]
    compactor: Compactor
    compaction_listeners: list[Callable[[], None]]
    pending_events: list[LayerEvent]
    last_call: float | None
    failures: int


def take_notes_events(state: SessionState) -> None:
    """Move the events of a background notes update the compactor applied into the pending events."""
    if state.compactor.notes_events:
        state.pending_events.extend(state.compactor.notes_events)
        state.compactor.notes_events.clear()


def content_left(state: SessionState) -> None:
    """Tell the ``compaction_listeners`` that content left the context (re-reads must show it)."""
    for listener in state.compaction_listeners:
        listener()
