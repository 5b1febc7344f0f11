"""The proxy's SQLite file checkpointed by a thread of its own (``proxy.checkpoint``), never in a
request's commit: ``LocalStore``'s connection has SQLite's automatic checkpoints off, its log
reaches the file on the thread's tick, nothing committed is lost, and a failing checkpoint is
said once."""

from __future__ import annotations

import logging
import os
import sqlite3
import time
from pathlib import Path

import pytest

import ctxengine.proxy.checkpoint as checkpoint
from ctxengine.proxy.checkpoint import Checkpointer
from ctxengine.proxy.local import LocalStore

ENTRY = "x" * 20_000  # 300 of them: ~6 MB of log, past SQLite's 1,000-page automatic checkpoint


def _sizes(path: Path) -> tuple[int, int]:
    wal = Path(f"{path}-wal")
    return path.stat().st_size, wal.stat().st_size if wal.exists() else 0


def test_commits_leave_the_log_to_the_thread_which_copies_it_into_the_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(checkpoint, "CHECKPOINT_S", 3600.0)  # no tick during the writes
    path = tmp_path / "proxy.sqlite"
    store = LocalStore(path)
    try:
        with store.connection() as conn:
            assert conn.execute("PRAGMA wal_autocheckpoint").fetchone()[0] == 0
        before, _ = _sizes(path)
        for i in range(300):
            store.append("s", "message", {"i": i, "text": ENTRY})
        file_size, wal_size = _sizes(path)
        assert file_size == before and wal_size > 5_000_000  # no commit checkpointed
        assert store.checkpointer is not None
        store.checkpointer.close()
        ticking = Checkpointer(path, every_s=0.05)
        try:
            for _ in range(200):
                if _sizes(path)[0] > 5_000_000:
                    break
                time.sleep(0.05)
            assert _sizes(path)[0] > 5_000_000  # the thread copied the log into the file
        finally:
            ticking.close()
        store.checkpointer = None
        assert [e.payload["i"] for e in store.entries("s")] == list(range(300))
    finally:
        store.close()
    reopened = sqlite3.connect(path)
    assert reopened.execute("SELECT count(*) FROM entries").fetchone()[0] == 300
    reopened.close()
    assert os.path.exists(path)


def test_a_failing_checkpoint_is_counted_and_said_once(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "proxy.sqlite"
    sqlite3.connect(path).execute("PRAGMA journal_mode=WAL").close()
    with caplog.at_level(logging.WARNING, logger="ctxengine.proxy"):
        cp = Checkpointer(path, every_s=0.02)
        cp._db.close()  # every checkpoint now raises
        for _ in range(200):
            if cp.failures >= 3:
                break
            time.sleep(0.02)
        cp.close()
    assert cp.failures >= 3
    said = [r.getMessage() for r in caplog.records if "checkpoint failed" in r.getMessage()]
    assert len(said) == 1, said
