"""The proxy's SQLite file checkpointed off the requests (``Checkpointer``, for ``local.LocalStore``).

In WAL mode SQLite copies the write-ahead log back into the database file (a *checkpoint*, with
an fsync of the file) in whichever commit first finds the log over 1,000 pages: one request's
store round trip in every ~30 took 6-7 ms instead of ~0.2 (the latency run's p99 at 150,000
tokens: the commit of the turn before, which the next request waits for behind the session's
lock). The store's connection turns that off (``PRAGMA wal_autocheckpoint=0``) and this thread
checkpoints on a connection of its own every ``CHECKPOINT_S`` seconds, ``PASSIVE``ly: it copies
what no reader still needs and never waits for, nor blocks, the store's readers and writers
(SQLite releases the GIL meanwhile). What a commit guarantees is unchanged: a committed
transaction is in the log, which a reopened database reads (and the last connection to close
checkpoints it whole). A checkpoint that fails is logged once per run of failures and tried
again at the next tick; the log grows meanwhile, nothing is lost.
"""

from __future__ import annotations

import logging
import sqlite3
import threading
from pathlib import Path

log = logging.getLogger("ctxengine.proxy")

CHECKPOINT_S = 1.0  # how often the log's new pages are copied into the database file


class Checkpointer:
    """A thread that checkpoints the SQLite database at ``path`` (WAL mode) every ``every_s``
    seconds (None: ``CHECKPOINT_S``), ``PASSIVE``ly, until ``close``. ``failures``: checkpoints
    that raised."""

    def __init__(self, path: str | Path, every_s: float | None = None) -> None:
        self.every_s = every_s if every_s is not None else CHECKPOINT_S
        self.failures = 0
        self._db = sqlite3.connect(str(path), isolation_level=None, check_same_thread=False)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="ctxengine-checkpoint", daemon=True)
        self._thread.start()

    def checkpoint(self) -> tuple[int, int, int]:
        """One ``PASSIVE`` checkpoint now: (busy, the log's pages, pages copied), SQLite's answer.
        Raises ``sqlite3.Error``."""
        row = self._db.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
        return int(row[0]), int(row[1]), int(row[2])

    def _run(self) -> None:
        failing = False
        while not self._stop.wait(self.every_s):
            try:
                self.checkpoint()
                failing = False
            except sqlite3.Error as exc:
                self.failures += 1
                if not failing:
                    why, every = f"{type(exc).__name__}: {exc}", self.every_s
                    log.warning("proxy: the store's checkpoint failed (%s); tried every %g s", why, every)
                failing = True

    def close(self) -> None:
        """Stop the thread and close its connection."""
        self._stop.set()
        self._thread.join()
        self._db.close()
