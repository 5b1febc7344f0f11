"""Engines: ``ContextEngine`` (``core``) and the parts it holds, one job each: the projection kept
incrementally and its pairing repair (``view``), decisions committed to the store and the view
(``commit``), the ingest of a message (``ingest``), the cascade of ``assemble`` as a list of layer
steps (``cascade``, ``steps``), sub-agent spawning (``subagents``), what they see of the session
(``state``); the shared lifecycle of other engines (``history``), the baseline engines
(``baselines``) and the plugin registry (``plugins``).

May import: ``messages``, ``models``, ``policy``, ``tokens``, ``layers``, ``compaction``, ``summary``,
``store``, ``llm`` (types); ``subagents`` only inside the calls that spawn. Never the CLI, replay or
proxy.
"""

from __future__ import annotations

import importlib
import os

TYPE_CHECKING = False  # typing's, without importing typing: type checkers treat it alike
if TYPE_CHECKING:
    from typing import Any

_SUBMODULES = frozenset(
    name.removesuffix(".py")
    for name in os.listdir(os.path.dirname(__file__))
    if name.endswith(".py") or os.path.isfile(os.path.join(os.path.dirname(__file__), name, "__init__.py"))
)


def __getattr__(name: str) -> Any:
    """A name of the module this package replaced (the flat ``engine.py``, now ``core``),
    imported on first use: ``from ctxengine.engine import NAME`` keeps working for every name it
    had, and importing a submodule of the package stays light."""
    if name.startswith("__"):
        raise AttributeError(name)
    if name in _SUBMODULES:  # ``from ctxengine.engine import <submodule>`` imports just that one
        return importlib.import_module(f"{__name__}.{name}")
    return getattr(importlib.import_module(__name__ + ".core"), name)
