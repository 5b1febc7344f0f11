"""``store_from_url``: a ``SessionStore`` chosen by a URL or a path."""

from __future__ import annotations

from pathlib import Path

from ctxengine.store.base import SessionStore, StoreError
from ctxengine.store.sqlite import SQLiteStore

PG_SCHEMES = ("postgresql://", "postgres://")
SQLITE_FILE = "store.sqlite"  # inside a folder given as the store


def is_postgres_url(url: str | Path) -> bool:
    """Whether ``url`` names a PostgreSQL database (``postgresql://`` or ``postgres://``)."""
    return str(url).startswith(PG_SCHEMES)


def store_from_url(url: str | Path, *, sqlite_file: str = SQLITE_FILE) -> SessionStore:
    """The store that ``url`` names.

    Args:
        url: ``postgresql://USER@HOST:PORT/DB`` (or ``postgres://``): a ``PostgresStore`` (needs
            the ``gateway`` extra); ``sqlite:///PATH`` (``sqlite:////ABS``; ``sqlite://`` for
            memory) or a file path: a ``SQLiteStore`` on that file; an existing folder: a
            ``SQLiteStore`` on ``sqlite_file`` in it; ``":memory:"``: an in-memory
            ``SQLiteStore`` (the default store).
        sqlite_file: the file's name inside a folder.

    Returns:
        The store, open.

    Raises:
        StoreError: when the SQLite file cannot be opened, or PostgreSQL is asked for without
            psycopg installed.
    """
    text = str(url)
    if is_postgres_url(text):
        try:
            from ctxengine.store.postgres import PostgresStore
        except ImportError as exc:
            raise StoreError(
                f"a PostgreSQL store needs psycopg: pip install 'ctxengine[gateway]' ({exc})"
            ) from None
        return PostgresStore(text)
    if text.startswith("sqlite://"):  # sqlite:///relative, sqlite:////absolute, sqlite:// (memory)
        text = text.removeprefix("sqlite://").removeprefix("/") or ":memory:"
    path = Path(text)
    if text != ":memory:" and path.is_dir():
        path = path / sqlite_file
    return SQLiteStore(path)
