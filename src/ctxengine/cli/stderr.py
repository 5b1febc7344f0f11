"""The CLI's lines on stderr: ``say`` (one line, printed literally) and ``fail`` (an ``error:``
line and the exit, code 2, to raise).

``err`` (rich's console on stderr, for progress bars) is made on first use: a line of printable
ASCII text is written by ``say`` itself, byte for byte what that console prints for it (no markup,
no emoji codes, no highlighting, no wrapping), so ``ctxengine replay --quiet --json`` does not
import rich (~0.03 s). Any other line goes through ``err``.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import typer
    from rich.console import Console

__all__ = ["fail", "say", "stderr_console"]  # and ``err``, made on first use (``__getattr__``)

_console: list[Console] = []  # ``err``, once made


def __getattr__(name: str) -> Any:
    """``err``: rich's console on stderr, made on first use."""
    if name == "err":
        return stderr_console()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def stderr_console() -> Console:
    """Rich's console on stderr (``err``), made once per process."""
    if not _console:
        from rich.console import Console

        _console.append(Console(stderr=True))
    return _console[0]


def say(prefix: str, message: str) -> None:
    """One line to stderr, printed literally (no markup, no emoji codes, no wrapping)."""
    line = f"{prefix} {message}"
    if _console or not (line.isascii() and line.isprintable()) or sys.stderr is None:
        stderr_console().print(prefix, message, markup=False, emoji=False, highlight=False, soft_wrap=True)
        return
    sys.stderr.write(line + "\n")
    sys.stderr.flush()


def fail(message: str) -> typer.Exit:
    """Print ``error: message`` as one line to stderr; return the exit (code 2) to raise
    (``typer.Exit``: typer is imported here, at the first failure, not with this module)."""
    say("error:", message)
    from typer import Exit

    return Exit(2)
