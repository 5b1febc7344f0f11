"""Models: the shipped model table (``table``, ``data/models.toml``), one model's facts and prices
(``info``), the registry (``registry``: ``Registry``, ``usage_cost_usd``), the context window's
resolution and guard (``window``) and the prompt-cache model (``prompt_cache``).

May import: ``messages`` and the standard library; nothing of the engine or the policy.
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
    """A name of the module this package replaced (the flat ``models.py``, now ``registry``),
    imported on first use: ``from ctxengine.models import NAME`` keeps working for every name it
    had, and importing a submodule of the package stays light."""
    if name.startswith("__"):
        raise AttributeError(name)
    if name in _SUBMODULES:  # ``from ctxengine.models import <submodule>`` imports just that one
        return importlib.import_module(f"{__name__}.{name}")
    return getattr(importlib.import_module(__name__ + ".registry"), name)
