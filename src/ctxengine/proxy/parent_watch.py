"""A child process of the proxy (a ``--workers`` worker, the job process) that exits when its
parent is gone: killed with SIGKILL, the parent cannot stop its children itself."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable

PARENT_POLL_S = 1.0  # how often a child checks that its parent lives


def exit_with_parent(parent: int, code: int, before: Callable[[], None] | None = None) -> None:
    """Start a daemon thread that exits this process with ``code`` (``os._exit``, after
    ``before``) once its parent is no longer ``parent`` (the pid it was started by)."""

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(PARENT_POLL_S)
        if before is not None:
            before()
        os._exit(code)

    threading.Thread(target=watch, daemon=True, name="ctxengine-parent-watch").start()
