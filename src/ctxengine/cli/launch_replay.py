"""``ctxengine replay`` started without the command-line framework's option parsing, for a plain
command line (``ctxengine.cli.launch`` calls ``fast_replay`` first).

typer (0.2x) builds a pydantic ``TypeAdapter`` for each of the command's sixteen parameters on
every run before it calls the command: ~0.09 s of CPU, a seventh of replaying the largest shared
transcript, and importing typer itself ~0.04 s more. A plain ``replay`` command line (one
transcript path, and options among ``_VALUE_OPTIONS`` and ``--quiet``, each at most once, integer
values as digits, no value that is empty or starts with ``-``) is parsed here and handed to the
very function the full command line's ``replay`` calls (``cli.replay_command.run_replay``) with
the same arguments, so the output, the files written, the ``error:`` lines and the exit codes are
the command's own: 0, or the code of the ``typer.Exit`` it raises (2 after an ``error:`` line;
typer is imported only then). ctxengine's warnings print as ``warning:`` lines as under the full
command line (``commands.main``); an interrupt exits 130 and a closed
stdout 1, as typer's main does. Any other command line (help, no
path, an option not listed here, a repeated option, ``--``) goes to the full command line, which
parses and reports it as before. An unexpected exception is Python's traceback here (typer
would print it through rich).
"""

from __future__ import annotations

import sys
from pathlib import Path

__all__ = ["fast_replay", "parse_replay"]

# option -> (the parameter of ``commands.replay``, its type)
_VALUE_OPTIONS: dict[str, tuple[str, type]] = {
    "--policy": ("policy", str),
    "--policy-file": ("policy_file", Path),
    "--window": ("window", int),
    "--json": ("json_out", Path),
    "--plot": ("plot_out", Path),
    "--html": ("html_out", Path),
    "--models": ("models", Path),
    "--model": ("model", str),
    "--engine": ("engine", str),
    "--jobs": ("jobs", int),
}
_FLAGS: dict[str, str] = {"--quiet": "quiet"}


def _value(kind: type, text: str) -> object | None:
    """``text`` as the parameter's type, or None when the full command line should judge it."""
    if not text or text.startswith("-"):
        return None
    if kind is int:
        return int(text) if text.isascii() and text.isdigit() else None
    return Path(text) if kind is Path else text


def parse_replay(args: list[str]) -> dict[str, object] | None:
    """The keyword arguments of ``commands.replay`` for a plain ``ctxengine replay ARGS`` command
    line (the transcript under ``path``), or None when it is anything else."""
    fields: dict[str, object] = {}
    i = 0
    while i < len(args):
        arg = args[i]
        name, eq, inline = arg.partition("=") if arg.startswith("--") else (arg, "", "")
        if not arg.startswith("-"):
            if "path" in fields:
                return None
            value = _value(Path, arg)
            if value is None:
                return None
            fields["path"] = value
        elif name in _FLAGS and not eq:
            if _FLAGS[name] in fields:
                return None
            fields[_FLAGS[name]] = True
        elif name in _VALUE_OPTIONS:
            field, kind = _VALUE_OPTIONS[name]
            if field in fields:
                return None
            if not eq:
                i += 1
                if i == len(args):
                    return None
                inline = args[i]
            value = _value(kind, inline)
            if value is None:
                return None
            fields[field] = value
        else:
            return None  # help, "--", "-", another option: the full command line's business
        i += 1
    return fields if "path" in fields else None


def fast_replay(argv: list[str]) -> int | None:
    """Run ``ctxengine replay ...`` here when its command line is plain; the exit code, or None
    when the full command line must handle it."""
    if not argv or argv[0] != "replay":
        return None
    fields = parse_replay(argv[1:])
    if fields is None:
        return None
    import warnings

    from ctxengine.cli.replay_command import run_replay, show_warning

    warnings.showwarning = show_warning
    path = fields.pop("path")
    try:
        run_replay(path, **fields)  # type: ignore[arg-type]
    except KeyboardInterrupt:  # pragma: no cover
        return 130
    except BrokenPipeError:  # pragma: no cover
        from typer._click.utils import PacifyFlushWrapper

        sys.stdout = PacifyFlushWrapper(sys.stdout)
        sys.stderr = PacifyFlushWrapper(sys.stderr)
        return 1
    except Exception as exc:
        typer = sys.modules.get("typer")  # imported by ``cli.stderr.fail`` when it made the exit
        if typer is not None and isinstance(exc, typer.Exit):
            return int(exc.exit_code)
        raise
    return 0
