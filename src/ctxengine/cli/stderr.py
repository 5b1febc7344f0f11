"""The CLI's lines on stderr: ``say`` (one line, printed literally) and ``fail`` (an ``error:``
line and the exit, code 2, to raise)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rich.console import Console

if TYPE_CHECKING:
    import typer

__all__ = ["err", "fail", "say"]

err = Console(stderr=True)


def say(prefix: str, message: str) -> None:
    """One line to stderr, printed literally (no markup, no emoji codes, no wrapping)."""
    err.print(prefix, message, markup=False, emoji=False, highlight=False, soft_wrap=True)


def fail(message: str) -> typer.Exit:
    """Print ``error: message`` as one line to stderr; return the exit (code 2) to raise
    (``typer.Exit``: typer is imported here, at the first failure, not with this module)."""
    say("error:", message)
    from typer import Exit

    return Exit(2)
