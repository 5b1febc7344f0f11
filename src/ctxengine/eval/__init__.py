"""Evaluation of what a compaction kept: fidelity measured on content (``fidelity``, ``file_state``),
the LLM-judged probes (``probes``) and their judge (``judge``), and the ``ctxengine eval`` command
(``command``).

May import: ``messages``, ``tokens``, ``models``, ``policy``, ``layers``, ``summary``, ``llm``,
``engine``, ``replay``; ``cli`` (the command only).
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
    """A name of the module this package replaced (the flat ``eval.py``, now ``probes``),
    imported on first use: ``from ctxengine.eval import NAME`` keeps working for every name it
    had, and importing a submodule of the package stays light."""
    if name.startswith("__"):
        raise AttributeError(name)
    if name in _SUBMODULES:  # ``from ctxengine.eval import <submodule>`` imports just that one
        return importlib.import_module(f"{__name__}.{name}")
    return getattr(importlib.import_module(__name__ + ".probes"), name)
