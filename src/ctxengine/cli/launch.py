"""The ``ctxengine`` console script: ``tool grep`` and ``tool glob`` start fast, a plain ``replay``
skips the option parsing of the full command line (``cli.launch_replay``), the rest runs the full
command line (``ctxengine.cli.commands``).

A one-shot ``ctxengine tool grep`` spent more time importing the command-line framework, the
engine and every other tool (~0.3 s of CPU) than it took to search a mid-sized tree. A plain
command line of these two tools (the options their ``--help`` lists, each at most once, integer
values as digits) is parsed here, importing nothing but the tool, and prints exactly what the full
command line prints: the result on stdout (ANSI escape sequences removed when stdout is not a
terminal, as click's ``echo`` does), a refusal as ``Error: ...`` on stderr with exit code 2. Any
other command line (help, an unknown or repeated option, a value that is not plain digits, a
stdout that is not UTF-8) goes to ``ctxengine.cli.commands``, which parses and reports it as before.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Callable

from ctxengine.cli.plain_args import Convert, digits, parse_plain

_ANSI = re.compile(r"\033\[[;?0-9]*[a-zA-Z]")  # click's pattern for ANSI escape sequences


def _text(text: str) -> str:
    return text


# per tool: option -> (its field, the converter of its value or None for a flag)
_OPTIONS: dict[str, dict[str, tuple[str, Convert | None]]] = {
    "grep": {
        "--workspace": ("workspace", _text),
        "-w": ("workspace", _text),
        "--path": ("path", _text),
        "--include": ("include", _text),
        "--context": ("context", digits),
        "--offset": ("offset", digits),
        "--case-insensitive": ("case_insensitive", None),
        "--ignore-case": ("case_insensitive", None),
        "-i": ("case_insensitive", None),
    },
    "glob": {
        "--workspace": ("workspace", _text),
        "-w": ("workspace", _text),
        "--path": ("path", _text),
    },
}


def parse_fast(tool: str, args: list[str]) -> dict[str, object] | None:
    """The fields of a plain ``ctxengine tool TOOL ARGS`` command line (the pattern under
    ``pattern``), or None when it is anything else (the full command line handles it)."""
    known = _OPTIONS.get(tool)
    if known is None:
        return None
    return parse_plain(args, known, ("pattern", _text), dash_is_positional=True)


def _run(tool: str, fields: dict[str, object]) -> Callable[[], str]:
    from pathlib import Path

    from ctxengine.tools.grep import glob, grep
    from ctxengine.tools.workspace import Workspace

    root = Path(str(fields.pop("workspace", ".")))
    if tool == "grep":
        return lambda: grep(Workspace(root), **fields)  # type: ignore[arg-type]
    return lambda: glob(Workspace(root), **fields)  # type: ignore[arg-type]


def _echo(text: str, stream: object) -> None:
    out = getattr(stream, "write", None)
    if out is None:
        return
    isatty = getattr(stream, "isatty", None)
    if not (isatty and isatty()):
        text = _ANSI.sub("", text)
    out(text + "\n")
    stream.flush()  # type: ignore[attr-defined]


def fast_tool(argv: list[str]) -> int | None:
    """Run ``ctxengine tool grep|glob ...`` here when its command line is plain; the exit code,
    or None when the full command line must handle it."""
    if len(argv) < 2 or argv[0] != "tool":
        return None
    encoding = (getattr(sys.stdout, "encoding", "") or "").lower().replace("-", "").replace("_", "")
    if encoding != "utf8":
        return None
    fields = parse_fast(argv[1], argv[2:])
    if fields is None:
        return None
    run = _run(argv[1], fields)
    from ctxengine.tools.errors import ToolError

    try:
        text = run()
    except ToolError as exc:
        _echo(f"Error: {exc}", sys.stderr)
        return 2
    _echo(text, sys.stdout)
    return 0


def main() -> None:
    """Console-script entry point."""
    if sys.argv[1:] == ["--version"]:
        from ctxengine.cli.version import installed_version

        _echo(f"ctxengine {installed_version()}", sys.stdout)
        sys.exit(0)
    try:
        code = fast_tool(sys.argv[1:])
    except KeyboardInterrupt:  # pragma: no cover
        sys.exit(130)
    if code is not None:
        sys.exit(code)
    from ctxengine.cli.launch_replay import fast_replay

    code = fast_replay(sys.argv[1:])
    if code is not None:
        sys.exit(code)
    from ctxengine.cli.commands import main as cli_main

    cli_main()
