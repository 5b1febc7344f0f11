"""Pluggable engines, as in OpenClaw's context-engine registry, filled in.

Engines register under an id and an owner: ``core`` (shipped here) or ``plugin:NAME`` (a third
party, discovered through the ``ctxengine.engines`` entry-point group, whose value is a factory
taking the same keyword arguments as ``ContextEngine``). A plugin can never take an id that core
owns. ``create`` wraps a plugin engine in a ``GuardedEngine``: the first time the plugin raises
from a lifecycle method it is quarantined, a core engine is built, the session so far is replayed
into it (bootstrap, every ingested message, every usage), and the core engine answers from then on.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Protocol

from ctxengine.engine.core import ContextEngine, Projection
from ctxengine.layers.base import LayerEvent
from ctxengine.messages.model import Message, RecordedCompaction, Usage

log = logging.getLogger(__name__)


def entry_points(*, group: str) -> Any:
    """``importlib.metadata.entry_points(group=group)``, imported on first use (~20 ms)."""
    from importlib import metadata

    return metadata.entry_points(group=group)


ENTRY_POINT_GROUP = "ctxengine.engines"
CORE_OWNER = "core"

if TYPE_CHECKING:
    from ctxengine.llm import ToolDefinition


class Engine(Protocol):
    """The lifecycle every engine implements (see ``ContextEngine`` for the contract)."""

    def bootstrap(
        self,
        *,
        system: str = "",
        fixed_prefix_tokens: int | None = None,
        recorded_compactions: Sequence[RecordedCompaction] = (),
        tools: Sequence[ToolDefinition] = (),
    ) -> None: ...
    def ingest(self, message: Message) -> list[LayerEvent]: ...
    def assemble(self, budget: int | None = None, *, now: float | None = None) -> Projection: ...
    def after_turn(self, usage: Usage | None) -> None: ...
    def compact(
        self, force: bool = True, reason: str = "manual", instructions: str = ""
    ) -> LayerEvent | None: ...
    def maintain(self) -> list[LayerEvent]: ...
    def dispose(self) -> None: ...


EngineFactory = Callable[..., Engine]


class RegistrationError(Exception):
    """An engine id is taken, or a plugin tried to take a core id."""


class EngineRegistry:
    """Engine factories by id, each with its owner."""

    def __init__(self) -> None:
        self._factories: dict[str, tuple[str, EngineFactory]] = {}
        self.register(ContextEngine.engine_id, ContextEngine, owner=CORE_OWNER)
        from ctxengine.engine.baselines import IdentifiersOnlyEngine, OwnWordsOnlyEngine

        self.register(IdentifiersOnlyEngine.engine_id, IdentifiersOnlyEngine, owner=CORE_OWNER)
        self.register(OwnWordsOnlyEngine.engine_id, OwnWordsOnlyEngine, owner=CORE_OWNER)

    def register(self, engine_id: str, factory: EngineFactory, *, owner: str) -> None:
        """Register ``factory`` as ``engine_id``. Raises ``RegistrationError`` when the id is
        owned by core (for a plugin) or already registered by another owner, or the owner is
        neither ``core`` nor ``plugin:NAME``."""
        if owner != CORE_OWNER and not (owner.startswith("plugin:") and len(owner) > len("plugin:")):
            raise RegistrationError(f"owner must be 'core' or 'plugin:NAME', not {owner!r}")
        current = self._factories.get(engine_id)
        if current is not None:
            if current[0] == CORE_OWNER and owner != CORE_OWNER:
                raise RegistrationError(f"engine id {engine_id!r} belongs to core; {owner} cannot take it")
            if current[0] != owner:
                raise RegistrationError(f"engine id {engine_id!r} is already registered by {current[0]}")
        self._factories[engine_id] = (owner, factory)

    def owner(self, engine_id: str) -> str:
        """The owner of ``engine_id``. Raises ``KeyError`` when unknown."""
        return self._factories[engine_id][0]

    def ids(self) -> list[str]:
        return sorted(self._factories)

    def load_entry_points(self) -> list[str]:
        """Register the plugins installed under the ``ctxengine.engines`` entry-point group.
        A plugin that fails to load or register is logged and skipped. Returns the ids added."""
        added = []
        for ep in entry_points(group=ENTRY_POINT_GROUP):
            owner = f"plugin:{ep.dist.name if ep.dist else ep.module}"
            try:
                self.register(ep.name, ep.load(), owner=owner)
                added.append(ep.name)
            except Exception as exc:
                log.warning("engine plugin %s (%s) not registered: %s", ep.name, owner, exc)
        return added

    def load_for(self, engine_id: str) -> None:
        """Register the entry-point plugins when ``engine_id`` is not registered yet. A core id
        needs none (no plugin can take it), so a run of a core engine skips the scan of every
        installed distribution's metadata; a broken plugin is then not reported either."""
        if engine_id not in self._factories:
            self.load_entry_points()

    def create(self, engine_id: str, **kwargs: Any) -> Engine:
        """Build engine ``engine_id``; plugin engines come wrapped in a ``GuardedEngine``.
        Raises ``KeyError`` for an unknown id."""
        if engine_id not in self._factories:
            raise KeyError(f"unknown engine {engine_id!r}; known: {', '.join(self.ids())}")
        owner, factory = self._factories[engine_id]
        if owner == CORE_OWNER:
            return factory(**kwargs)
        return GuardedEngine(engine_id, factory, kwargs)


class GuardedEngine:
    """A plugin engine that falls back to the core engine the first time it raises."""

    def __init__(self, engine_id: str, factory: EngineFactory, kwargs: dict[str, Any]) -> None:
        self.engine_id = engine_id
        self._kwargs = kwargs
        self._log: list[tuple[str, tuple[Any, ...], dict[str, Any]]] = []
        self.quarantined: str | None = None
        self._engine: Engine
        try:
            self._engine = factory(**kwargs)
        except Exception as exc:
            self._engine = self._take_over(exc)

    def _take_over(self, exc: Exception) -> Engine:
        self.quarantined = f"{type(exc).__name__}: {exc}"
        log.warning("engine %s quarantined (%s); core engine takes over", self.engine_id, self.quarantined)
        core = ContextEngine(**self._kwargs)
        for method, args, kwargs in self._log:
            getattr(core, method)(*args, **kwargs)
        return core

    def _call(self, method: str, *args: Any, **kwargs: Any) -> Any:
        try:
            result = getattr(self._engine, method)(*args, **kwargs)
        except Exception as exc:
            if self.quarantined is not None:
                raise  # the core engine itself failed: nothing left to fall back to
            self._engine = self._take_over(exc)
            result = getattr(self._engine, method)(*args, **kwargs)
        if method in ("bootstrap", "ingest", "assemble", "after_turn"):
            self._log.append((method, args, kwargs))
        return result

    def bootstrap(
        self,
        *,
        system: str = "",
        fixed_prefix_tokens: int | None = None,
        recorded_compactions: Sequence[RecordedCompaction] = (),
        tools: Sequence[ToolDefinition] = (),
    ) -> None:
        self._call(
            "bootstrap",
            system=system,
            fixed_prefix_tokens=fixed_prefix_tokens,
            recorded_compactions=recorded_compactions,
            tools=tools,
        )

    def ingest(self, message: Message) -> list[LayerEvent]:
        result: list[LayerEvent] = self._call("ingest", message)
        return result

    def assemble(self, budget: int | None = None, *, now: float | None = None) -> Projection:
        result: Projection = self._call("assemble", budget, now=now)
        return result

    def after_turn(self, usage: Usage | None) -> None:
        self._call("after_turn", usage)

    def compact(
        self, force: bool = True, reason: str = "manual", instructions: str = ""
    ) -> LayerEvent | None:
        result: LayerEvent | None = self._call("compact", force, reason, instructions=instructions)
        return result

    def maintain(self) -> list[LayerEvent]:
        result: list[LayerEvent] = self._call("maintain")
        return result

    def dispose(self) -> None:
        self._call("dispose")
