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

from ctxengine.cli.plain_args import Convert, digits, parse_plain

__all__ = ["fast_replay", "parse_replay"]



def _path(text: str) -> Path | None:
    return Path(text) if text and not text.startswith("-") else None


def _word(text: str) -> str | None:
    return text if text and not text.startswith("-") else None


# option -> (the parameter of ``commands.replay``, the converter of its value; None: a flag)
_OPTIONS: dict[str, tuple[str, Convert | None]] = {
    "--policy": ("policy", _word),
    "--policy-file": ("policy_file", _path),
    "--window": ("window", digits),
    "--json": ("json_out", _path),
    "--plot": ("plot_out", _path),
    "--html": ("html_out", _path),
    "--models": ("models", _path),
    "--model": ("model", _word),
    "--engine": ("engine", _word),
    "--jobs": ("jobs", digits),
    "--quiet": ("quiet", None),
}


def parse_replay(args: list[str]) -> dict[str, object] | None:
    """The keyword arguments of ``commands.replay`` for a plain ``ctxengine replay ARGS`` command
    line (the transcript under ``path``), or None when it is anything else (``plain_args.parse_plain``:
    a value that is empty or starts with ``-`` is not plain either)."""
    return parse_plain(args, _OPTIONS, ("path", _path))


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
