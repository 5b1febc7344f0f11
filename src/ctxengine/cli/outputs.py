"""Output paths of the CLI (``--json``, ``--plot``, ``--html``), checked before any work: one ``error:`` line
and exit 2 for a path that cannot be written (a directory, a missing or unwritable folder, a
format matplotlib cannot write), two options naming one file, or a transcript being read."""

from __future__ import annotations

import importlib.util
import os
import tempfile
import warnings
from collections.abc import Iterable
from pathlib import Path

from ctxengine.cli.stderr import fail

__all__ = ["check_distinct_outputs", "check_not_an_input", "check_output"]


def check_output(path: Path | None, option: str) -> None:
    """Check, before any work, that ``option``'s output file (``--json``, ``--plot``) can be
    written: not a directory, in a folder that exists and is writable (issue 9: a missing
    parent is a bad path, as a directory is), where a file can really be created (a probe file,
    removed at once: /proc says writable and is not). A bad path prints
    ``error: OPTION PATH: why`` and raises ``typer.Exit(2)``; nothing is left behind."""
    if path is None:
        return
    if path.is_dir():
        raise fail(f"{option} {path}: is a directory; give a file name")
    if path.exists() and not os.access(path, os.W_OK):
        raise fail(f"{option} {path}: the file is not writable")
    folder = path.absolute().parent
    while not folder.exists() and folder != folder.parent:
        folder = folder.parent
    if not folder.is_dir():
        raise fail(f"{option} {path}: {folder} is not a directory")
    if folder != path.absolute().parent:
        raise fail(f"{option} {path}: the folder {path.absolute().parent} does not exist; make it first")
    if not os.access(folder, os.W_OK | os.X_OK):
        raise fail(f"{option} {path}: cannot write in {folder}")
    try:  # the folder's permissions may say yes where writing says no (/proc, a read-only mount)
        with tempfile.NamedTemporaryFile(dir=folder, prefix=".ctxengine-check-"):
            pass
    except OSError as exc:
        raise fail(f"{option} {path}: cannot write in {folder} ({exc.strerror or exc})") from None
    if option == "--plot":
        if importlib.util.find_spec("matplotlib") is None:
            raise fail("--plot needs matplotlib: pip install 'ctxengine[plot]'")
        kind = path.suffix.lower().removeprefix(".")
        if kind:
            from matplotlib.backend_bases import FigureCanvasBase

            known = FigureCanvasBase.get_supported_filetypes()
            if kind not in known:
                formats = ", ".join(sorted(known))
                raise fail(f"{option} {path}: matplotlib cannot write .{kind}; use one of {formats}")


def check_distinct_outputs(
    json_out: Path | None, plot_out: Path | None, html_out: Path | None = None
) -> None:
    """``--json``, ``--plot`` and ``--html`` name distinct files (one would overwrite another):
    else one ``error:`` line and ``typer.Exit(2)``, before any work."""
    named = [(o, p) for o, p in (("--json", json_out), ("--plot", plot_out), ("--html", html_out)) if p]
    what = {"--json": "report", "--plot": "plot", "--html": "page"}
    for i, (a, pa) in enumerate(named):
        for b, pb in named[i + 1 :]:
            if pa.absolute() == pb.absolute():
                raise fail(f"{a} and {b} both name {pa}: the {what[b]} would overwrite the {what[a]}")


def check_not_an_input(path: Path | None, option: str, inputs: Iterable[Path]) -> None:
    """Refuse (``error: OPTION PATH: ...``, ``typer.Exit(2)``), before any work, an output file
    that is one of the transcripts to be read: an input file itself, or a transcript inside an
    input folder. Written after the work, it would replace a transcript by the report."""
    if path is None or not path.is_file():
        return
    from ctxengine.formats import load
    from ctxengine.messages.model import TranscriptError

    for src in inputs:
        if src.is_file() and os.path.samefile(path, src):
            raise fail(f"{option} {path}: is the transcript being replayed; give another file name")
        if src.is_dir() and path.resolve().is_relative_to(src.resolve()):
            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")  # its bad lines are the replay's to report
                    load(path)
            except (TranscriptError, OSError):  # not a transcript (an earlier report): skipped anyway
                continue
            raise fail(f"{option} {path}: is a transcript of {src} being replayed; give another file name")
