"""The progress bars of the commands that replay many sessions: ``progress_bar`` (rich's, on
stderr, gone when done) and ``sessions_bar`` (none for a single session). ``rich.progress`` is
imported when a bar is first made: a replay of one file never makes one.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, cast

from ctxengine.cli.stderr import stderr_console

if TYPE_CHECKING:
    from rich.progress import Progress, TaskID

__all__ = ["SilentBar", "progress_bar", "sessions_bar"]


def progress_bar(*, disable: bool = False) -> Progress:
    """A transient progress bar on stderr (description, bar, done/total, elapsed time)."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    return Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=stderr_console(),
        transient=True,
        disable=disable,
    )


class SilentBar:
    """A progress bar that shows nothing (``sessions_bar`` for one session), without importing
    rich's progress module: ``add_task`` and ``advance`` as ``rich.progress.Progress`` has them."""

    def __enter__(self) -> SilentBar:
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def add_task(self, description: str, total: float | None = None) -> TaskID:
        """A task id (always 0)."""
        return cast("TaskID", 0)

    def advance(self, task: TaskID, advance: float = 1) -> None:
        """Nothing to show."""


def sessions_bar(sessions: int) -> Progress | SilentBar:
    """The progress bar of a replay of ``sessions`` sessions: ``progress_bar`` for two or more,
    else a ``SilentBar`` (as ``progress_bar(disable=True)`` shows nothing, one import less)."""
    return progress_bar() if sessions >= 2 else SilentBar()
