"""The cascade of ``ContextEngine.assemble``: the steps ``ctxengine.policy.cascade.CASCADE`` names,
built once per engine from its parts, run in order over the ``LayerContext``.

Each step (``steps.base.CascadeLayer``) runs one layer and commits its decision; it returns the
event of what changed, or None when nothing did. A step that raises is logged and counted, and the
session is then unchanged (decisions are computed first, committed after); the next step runs.
"""

from __future__ import annotations

import importlib
import logging

from ctxengine.engine.steps.base import CascadeLayer, EngineParts
from ctxengine.layers.base import LayerEvent
from ctxengine.policy.cascade import CASCADE

log = logging.getLogger(__name__)  # a child of the engine package's logger


def build_cascade(parts: EngineParts, names: tuple[str, ...] = CASCADE) -> list[CascadeLayer]:
    """The steps ``names`` (``"module:Class"``) built from ``parts``, in order.

    Raises:
        ImportError, AttributeError: for a name that does not resolve (a policy's typo fails at
            the engine's construction, not at its first call).
    """
    steps: list[CascadeLayer] = []
    for name in names:
        module, _, cls = name.partition(":")
        steps.append(getattr(importlib.import_module(module), cls)(parts))
    return steps


class Cascade:
    """The steps of one engine and their run.

    Args:
        parts: the engine's state, view and commits the steps are built from.
        names: the steps, ``"module:Class"`` (default: the policy's ``CASCADE``).

    Attributes:
        layers: the steps, in the order they run.
    """

    def __init__(self, parts: EngineParts, names: tuple[str, ...] = CASCADE) -> None:
        self.parts = parts
        self.layers = build_cascade(parts, names)

    def run(self, window: int, now: float | None) -> int:
        """Every step in order over a call of ``window`` tokens at time ``now``; each step's event
        goes to the pending events (the view's context is taken again after a change). Returns
        how many steps raised."""
        view, pending = self.parts.view, self.parts.state.pending_events
        failures = 0
        ctx = view.context(window, now)
        for layer in self.layers:
            try:
                event: LayerEvent | None = layer.apply(ctx)
            except Exception as exc:  # a failing layer leaves the session as it was
                log.warning("layer %s failed: %s", layer.name, exc)
                failures += 1
                continue
            if event is not None:
                pending.append(event)
                ctx = view.context(window, now)  # the view changed
        return failures
