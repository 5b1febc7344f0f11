"""Usage errors in the command line's one style: a single ``error: ...`` line on stderr and exit
code 2, for click's and typer's own errors too (a bad integer, an unknown option, a missing
argument), which would otherwise print a usage block and a boxed message. An unknown option's
line names the command's valid options; every other message is click's, on one line.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Sequence
from typing import Any

import typer
from typer.core import TyperGroup

from ctxengine.cli.stderr import say

__all__ = ["OneLineErrors", "usage_message"]


def _click_errors() -> tuple[type[Exception], ...]:
    """click's error and abort classes: typer's vendored click (typer 0.2x) and click itself."""
    found: list[type[Exception]] = [typer.Abort]
    for module in ("typer._click.exceptions", "click.exceptions"):
        try:
            mod = importlib.import_module(module)
        except ImportError:
            continue
        found += [getattr(mod, name) for name in ("ClickException", "Abort") if hasattr(mod, name)]
    return tuple(found)


CLICK_ERRORS = _click_errors()


def _options(ctx: Any) -> list[str]:
    """The long options of ``ctx``'s command (``--help`` last), for an unknown option's line."""
    if ctx is None:
        return []
    names = [
        max(p.opts, key=len)
        for p in ctx.command.get_params(ctx)
        if getattr(p, "param_type_name", "") == "option" and not getattr(p, "hidden", False) and p.opts
    ]
    return [*sorted(n for n in names if n != "--help"), "--help"]


def usage_message(exc: Exception) -> str:
    """The one line (without ``error:``) that says what was wrong on the command line: an
    unknown option with the command's options, else click's message with where to look."""
    ctx = getattr(exc, "ctx", None)
    path = str(getattr(ctx, "command_path", ""))
    where = f"ctxengine {path.split(' ', 1)[1]}" if " " in path else "ctxengine"
    if type(exc).__name__ == "NoSuchOption":
        option = getattr(exc, "option_name", "?")
        return f"no such option {option} for {where}; its options: {', '.join(_options(ctx))}"
    format_message = getattr(exc, "format_message", None)
    message = " ".join((format_message() if format_message else str(exc) or "aborted").split()).rstrip(".")
    if getattr(exc, "exit_code", 1) == 2:  # a usage error (bad value, missing argument, ...)
        return f"{message[:1].lower()}{message[1:]} (see {where} --help)"
    return message


class OneLineErrors(TyperGroup):
    """The root command group: runs as typer's does, but prints click's usage errors as one
    ``error:`` line (``usage_message``) and exits 2 (1 for any other click error, as click does)."""

    def main(  # type: ignore[override]
        self,
        args: Sequence[str] | None = None,
        prog_name: str | None = None,
        complete_var: str | None = None,
        standalone_mode: bool = True,
        **extra: Any,
    ) -> Any:
        if not standalone_mode:
            return super().main(args, prog_name, complete_var, standalone_mode=False, **extra)
        try:
            rv = super().main(args, prog_name, complete_var, standalone_mode=False, **extra)
        except CLICK_ERRORS as exc:
            say("error:", usage_message(exc))
            sys.exit(getattr(exc, "exit_code", 1))
        sys.exit(rv if isinstance(rv, int) else 0)
