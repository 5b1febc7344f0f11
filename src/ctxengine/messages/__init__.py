"""The neutral message model and what reads it without a policy: ``model`` (``Message``, its blocks,
``Session``, ``Usage``), ``identifiers`` (exact identifiers in text), ``media`` (image and document
sizes), ``tool_turns`` / ``tool_failures`` (assistant turns, unanswered calls, failed results),
``file_writes`` (what a tool call wrote), ``view_counts`` (messages of a view holding each key).

May import: the standard library, msgspec and imagesize; nothing else of ctxengine (everything
else imports this package).
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
    """A name of the module this package replaced (the flat ``messages.py``, now ``model``),
    imported on first use: ``from ctxengine.messages import NAME`` keeps working for every name it
    had, and importing a submodule of the package stays light."""
    if name.startswith("__"):
        raise AttributeError(name)
    if name in _SUBMODULES:  # ``from ctxengine.messages import <submodule>`` imports just that one
        return importlib.import_module(f"{__name__}.{name}")
    return getattr(importlib.import_module(__name__ + ".model"), name)
