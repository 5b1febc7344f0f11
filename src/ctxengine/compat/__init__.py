"""Old import paths: the packages that replaced a flat module (``policy``, ``engine``,
``messages``, ``models``, ``eval``, ``cli``) still hand out that module's names, imported on
first use (PEP 562), so ``from ctxengine.policy import DEFAULT`` keeps working and importing one
submodule of such a package stays light.

May import: nothing of ctxengine (every package above imports it first).
"""

from __future__ import annotations

import importlib
import os

TYPE_CHECKING = False  # typing's, without importing typing: type checkers treat it alike
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any


def successor_getattr(package: str, init_file: str, successor: str) -> Callable[[str], Any]:
    """The module ``__getattr__`` of package ``package`` (its ``__name__``; ``init_file`` its
    ``__file__``) that replaced a flat module, now its submodule ``successor``: a submodule's name
    imports just that submodule, any other name is looked up in ``successor``. Raises
    ``AttributeError`` for a dunder name or a name ``successor`` lacks."""
    folder = os.path.dirname(init_file)
    submodules = frozenset(
        name.removesuffix(".py")
        for name in os.listdir(folder)
        if name.endswith(".py") or os.path.isfile(os.path.join(folder, name, "__init__.py"))
    )

    def __getattr__(name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        if name in submodules:
            return importlib.import_module(f"{package}.{name}")
        return getattr(importlib.import_module(f"{package}.{successor}"), name)

    return __getattr__
