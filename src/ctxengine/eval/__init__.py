"""Evaluation of what a compaction kept: fidelity measured on content (``fidelity``, ``file_state``),
the LLM-judged probes (``probes``) and their judge (``judge``), and the ``ctxengine eval`` command
(``command``).

May import: ``messages``, ``models``, ``policy``, ``summary``, ``replay``, ``llm``, ``cli.common``
(the command only).
"""

from __future__ import annotations

import importlib

TYPE_CHECKING = False  # typing's, without importing typing: type checkers treat it alike
if TYPE_CHECKING:
    from typing import Any


def __getattr__(name: str) -> Any:
    """A name of the module this package replaced (the flat ``eval.py``, now ``probes``),
    imported on first use: ``from ctxengine.eval import NAME`` keeps working for every name it
    had, and importing a submodule of the package stays light."""
    if name.startswith("__"):
        raise AttributeError(name)
    return getattr(importlib.import_module(__name__ + ".probes"), name)
