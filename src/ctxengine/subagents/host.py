"""What the sub-agent code needs of an engine, as protocols (``ContextEngine`` has all of it).

The sub-agent modules depend on these, not on ``ctxengine.engine.core``, which calls into them
(``prepare_subagent_spawn``, ``on_subagent_ended``, ``dispose``): the dependency points one way.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

from ctxengine.compaction import Compactor
from ctxengine.layers.base import LayerEvent
from ctxengine.messages.model import Message, Usage
from ctxengine.models.registry import ModelInfo, Registry
from ctxengine.policy.registry import Policy
from ctxengine.store import SessionStore
from ctxengine.tokens.counter import TokenCounter
from ctxengine.tokens.ledger import Ledger


class ProjectionView(Protocol):
    """What a sub-agent's loop sends: the messages and the system prompt (``engine.Projection``)."""

    @property
    def messages(self) -> list[Message]: ...

    @property
    def system(self) -> str: ...


class Engine(Protocol):
    """A session's engine as sub-agent code uses it (a sub-agent's own, or a parent's)."""

    session_id: str
    system: str
    store: SessionStore
    model: ModelInfo
    window: int
    history: list[Message]
    counter: TokenCounter
    policy: Policy
    registry: Registry
    ledger: Ledger
    compactor: Compactor

    def bootstrap(
        self, *, system: str = "", fixed_prefix_tokens: int | None = None, tools: Sequence[Any] = ()
    ) -> None: ...

    def ingest(self, message: Message) -> list[LayerEvent]: ...

    def assemble(self, budget: int | None = None, *, now: float | None = None) -> ProjectionView: ...

    def after_turn(self, usage: Usage | None) -> None: ...

    def dispose(self) -> None: ...


class LiveSubagent(Protocol):
    """A registered sub-agent as the registry sees it."""

    @property
    def child_id(self) -> str: ...

    @property
    def depth(self) -> int: ...

    @property
    def engine(self) -> Engine: ...

    @property
    def parent(self) -> Engine | None: ...
