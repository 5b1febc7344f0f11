"""A process's state as the tests read it from /proc (Linux): its parent, whether it is dead,
and a SIGKILL that returns once it is."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest

DEAD_WITHIN_S = 30.0


def stat(pid: int) -> list[str]:
    """The fields of ``/proc/PID/stat`` after the command name: state, parent pid, ... Raises
    ``OSError`` when the process is gone."""
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()


def parent(pid: int) -> int:
    return int(stat(pid)[1])


def dead(pid: int) -> bool:
    """``pid`` has exited, every thread of it: gone, or a zombie not yet reaped whose threads
    have all exited. (A killed process's first thread turns zombie while its other threads may
    still be exiting, and they hold its sockets and pipes open: a connection reused then is
    reset under the request.)"""
    try:
        return stat(pid)[0] in ("Z", "X") and len(os.listdir(f"/proc/{pid}/task")) <= 1
    except OSError:
        return True


def wait_dead(pid: int) -> None:
    """Wait until ``pid`` is dead (``dead``); fail the test after ``DEAD_WITHIN_S``."""
    until = time.monotonic() + DEAD_WITHIN_S
    while not dead(pid):
        if time.monotonic() > until:
            pytest.fail(f"process {pid} still not dead {DEAD_WITHIN_S:.0f} s after SIGKILL")
        time.sleep(0.01)


def kill(pid: int) -> None:
    """SIGKILL to ``pid``, returning once it is dead (``wait_dead``)."""
    os.kill(pid, signal.SIGKILL)
    wait_dead(pid)
