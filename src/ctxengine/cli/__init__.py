"""The ``ctxengine`` command line: the console script (``launch``: fast paths that import almost
nothing), the typer application and ``replay`` (``commands``), what the commands share
(``common``, ``outputs``, ``stderr``, ``version``). Each command imports what it needs when it runs.

May import: everything; nothing imports it but ``eval.command``, ``bench`` and ``proxy`` commands
(for ``cli.common``).
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
    """A name of the module this package replaced (the flat ``cli.py``, now ``commands``),
    imported on first use: ``from ctxengine.cli import NAME`` keeps working for every name it
    had, and importing a submodule of the package stays light."""
    if name.startswith("__"):
        raise AttributeError(name)
    if name in _SUBMODULES:  # ``from ctxengine.cli import <submodule>`` imports just that one
        return importlib.import_module(f"{__name__}.{name}")
    return getattr(importlib.import_module(__name__ + ".commands"), name)
