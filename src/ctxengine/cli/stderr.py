"""The CLI's lines on stderr: ``say`` (one line, printed literally) and ``fail`` (an ``error:``
line and the exit, code 2, to raise)."""

from __future__ import annotations

import typer
from rich.console import Console

__all__ = ["err", "fail", "say"]

err = Console(stderr=True)


def say(prefix: str, message: str) -> None:
    """One line to stderr, printed literally (no markup, no emoji codes, no wrapping)."""
    err.print(prefix, message, markup=False, emoji=False, highlight=False, soft_wrap=True)


def fail(message: str) -> typer.Exit:
    """Print ``error: message`` as one line to stderr; return the exit (code 2) to raise."""
    say("error:", message)
    return typer.Exit(2)
