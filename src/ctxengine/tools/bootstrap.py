"""The ``instructions`` agent tool: the workspace's instruction files through the bootstrap loader
(``ctxengine.tools.instruction_files``, which holds the loader, its caps and reference behaviour; its
names are re-exported here).

``instructions`` is the agent tool over both (``specs(workspace)``, registered by ``build_tools``
and so served by ``ctxengine mcp`` and ``ctxengine tool instructions``): without ``files`` the
defaults, with ``files`` exactly those (absent ones marked MISSING); the rendered text, then one
``[warning] ...`` line per loader warning (a skipped or unreadable file). A file outside the root
is an error of the tool call, as for ``read`` (the CLI exits 2), not a warning.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ctxengine.tools.base import ToolError, ToolSpec
from ctxengine.tools.instruction_files import (
    DEFAULT_NAMES,
    HEAD_RATIO,
    MAX_READ_BYTES,
    MIN_REMAINING,
    PER_FILE_CHARS,
    TOTAL_CHARS,
    Bootstrap,
    BootstrapFile,
    cut_head_tail,
    load_bootstrap,
    load_bootstrap_files,
    truncation_marker,
)
from ctxengine.tools.workspace import Workspace

__all__ = [
    "DEFAULT_NAMES",
    "HEAD_RATIO",
    "INSTRUCTIONS_DESCRIPTION",
    "INSTRUCTIONS_PARAMETERS",
    "MAX_READ_BYTES",
    "MIN_REMAINING",
    "PER_FILE_CHARS",
    "TOTAL_CHARS",
    "Bootstrap",
    "BootstrapFile",
    "cut_head_tail",
    "instructions",
    "load_bootstrap",
    "load_bootstrap_files",
    "specs",
    "truncation_marker",
]


def instructions(workspace: Workspace, files: Sequence[str] | None = None) -> str:
    """The ``instructions`` tool: ``load_bootstrap`` (the defaults) when ``files`` is omitted or
    empty, else ``load_bootstrap_files`` (exactly ``files``, absent ones marked MISSING); the
    rendered text followed by the loader's warnings. A file outside the workspace is refused
    with ``Workspace.resolve``'s ``ToolError``, as ``read`` refuses it (nothing is loaded)."""
    if files is not None and (
        not isinstance(files, (list, tuple)) or not all(isinstance(f, str) and f.strip() for f in files)
    ):
        raise ToolError(f"files must be a list of workspace-relative paths, got {files!r}")
    for f in files or ():
        workspace.resolve(f)
    names: Sequence[str] = files or DEFAULT_NAMES
    loaded = load_bootstrap_files(workspace.root, files) if files else load_bootstrap(workspace.root)
    out = loaded.text or f"No instruction files found (looked for {', '.join(names)})."
    if loaded.warnings:
        out += "\n\n" + "\n".join(f"[warning] {w}" for w in loaded.warnings)
    return out


INSTRUCTIONS_DESCRIPTION = (
    "Load the workspace's instruction files: AGENTS.md and CLAUDE.md (those present), or exactly "
    "the `files` given (a missing one shows `[MISSING] Expected at: PATH`). Caps: 20,000 chars per "
    "file, 60,000 in all; a longer file shows its head (75%) and tail (25%) with the read() call "
    "for the omitted lines."
)

INSTRUCTIONS_PARAMETERS: dict[str, Any] = {
    "type": "object",
    "properties": {
        "files": {
            "type": "array",
            "items": {"type": "string"},
            "description": "Files relative to the workspace root (default: AGENTS.md, CLAUDE.md).",
        },
    },
    "additionalProperties": False,
}


def specs(workspace: Workspace) -> list[ToolSpec]:
    """The ``instructions`` tool bound to ``workspace``."""

    def run(files: list[str] | None = None) -> str:
        return instructions(workspace, files)

    return [ToolSpec("instructions", INSTRUCTIONS_DESCRIPTION, INSTRUCTIONS_PARAMETERS, run)]
