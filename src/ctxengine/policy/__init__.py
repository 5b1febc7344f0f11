"""Policies as data: the record (``record``: ``Policy``), each layer's settings record
(``settings_base``, ``layer_settings``, ``compaction_settings``, ``fields``: which record owns each
flat field), the harness presets (``harnesses``), session keys and their history limits
(``session_keys``), the built-in policies and the registry (``registry``: ``get_policy``, ``DEFAULT``),
and the order of the cascade (``cascade``).

May import: nothing else of ctxengine (the settings are data; ``cascade`` names the engine's
steps by path, and the engine, the layers and the CLI import this package).
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
    """A name of the module this package replaced (the flat ``policy.py``, now ``registry``),
    imported on first use: ``from ctxengine.policy import NAME`` keeps working for every name it
    had, and importing a submodule of the package stays light."""
    if name.startswith("__"):
        raise AttributeError(name)
    if name in _SUBMODULES:  # ``from ctxengine.policy import <submodule>`` imports just that one
        return importlib.import_module(f"{__name__}.{name}")
    return getattr(importlib.import_module(__name__ + ".registry"), name)
