"""The demo sessions shipped inside the package (``ctxengine replay --demo``): two small real
transcripts whose licences allow redistribution, so that the quick start works with nothing
beside the installed package. Where each comes from and its licence: ``data/demo/SOURCES.md``.
"""

from __future__ import annotations

from importlib.resources import files
from pathlib import Path

__all__ = ["demo_dir", "demo_sources"]


def demo_dir() -> Path:
    """The folder of the shipped demo sessions (a Claude Code session and a SWE-agent
    trajectory; see ``demo_sources``). Raises ``FileNotFoundError`` when the installed package
    lacks it (a broken install)."""
    folder = Path(str(files("ctxengine") / "data" / "demo" / "sessions"))
    if not folder.is_dir():
        raise FileNotFoundError(f"{folder}: the demo sessions are missing from this install of ctxengine")
    return folder


def demo_sources() -> Path:
    """``SOURCES.md`` of the demo sessions: each file's repository, commit, blob and licence."""
    return demo_dir().parent / "SOURCES.md"
