"""What every cascade step is: ``CascadeLayer`` (the protocol), ``EngineParts`` (what a step is built
from) and ``ReplacementStep`` (a $0 layer whose decision replaces tool results, committed as is)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar, Protocol

from ctxengine.layers.base import LayerContext, LayerEvent, Replacements

if TYPE_CHECKING:
    from ctxengine.engine.commit import Commits
    from ctxengine.engine.state import SessionState
    from ctxengine.engine.view import EngineView


@dataclass(frozen=True)
class EngineParts:
    """The parts of one engine a cascade step works with.

    Attributes:
        state: the session (history, decisions, ledger, policy, store).
        view: its projection.
        commits: the commit of a decision to the store and the view.
    """

    state: SessionState
    view: EngineView
    commits: Commits


class CascadeLayer(Protocol):
    """One step of the cascade: ``name`` (its layer, in logs) and ``apply``, which runs the layer
    over the ``LayerContext`` and commits its decision; it returns the event of what changed, or
    None when nothing did. A step that raises leaves the session unchanged (``assemble`` logs and
    counts it, then runs the next step)."""

    name: str

    def apply(self, context: LayerContext) -> LayerEvent | None: ...


class ReplacementStep:
    """A layer whose decision is ``Replacements`` committed as is (``decide`` gives it, or None)."""

    name: ClassVar[str]

    def __init__(self, parts: EngineParts) -> None:
        self.commits = parts.commits

    def decide(self, context: LayerContext) -> Replacements | None:
        """The layer's decision, or None (each step names its layer)."""
        raise NotImplementedError

    def apply(self, context: LayerContext) -> LayerEvent | None:
        """Run the layer; commit its decision (store, view, event figures) when it made one."""
        d = self.decide(context)
        return self.commits.commit_replacements(d) if d else None
