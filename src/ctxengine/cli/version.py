"""The version ``ctxengine --version`` prints, read without the command-line framework (the console
script answers a bare ``--version`` itself, ``cli.launch``; the typer command prints the same)."""

from __future__ import annotations


def installed_version() -> str:
    """The installed distribution's version ("unknown (not installed)" for a source tree)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("ctxengine")
    except PackageNotFoundError:  # pragma: no cover - running from a source tree, not installed
        return "unknown (not installed)"
