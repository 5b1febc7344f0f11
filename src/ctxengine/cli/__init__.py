"""The ``ctxengine`` command line: the console script (``launch``: fast paths that import almost
nothing), the typer application and ``replay`` (``commands``), what the commands share
(``common``, ``outputs``, ``stderr``, ``version``). Each command imports what it needs when it runs.

May import: everything; nothing imports it but ``eval.command``, ``bench`` and ``proxy`` commands
(for ``cli.common``).
"""

from __future__ import annotations

from ctxengine.compat import successor_getattr

# the names of the flat ``cli.py`` this package replaced (now ``commands``), imported on first use
__getattr__ = successor_getattr(__name__, __file__, "commands")
