"""``BorrowedStore``: another owner's ``SessionStore``, lent to an engine that must not close it."""

from __future__ import annotations

from typing import Any

from ctxengine.store.base import Entry, EntryKind, SessionStore


class BorrowedStore:
    """Every call goes to ``store``; ``close`` does nothing (closing it is its owner's job: a
    parent engine's for its sub-agents, the proxy's for its sessions' engines)."""

    def __init__(self, store: SessionStore) -> None:
        self._store = store

    def append(self, session: str, kind: EntryKind, payload: Any) -> Entry:
        """``store.append``."""
        return self._store.append(session, kind, payload)

    def entries(self, session: str, kind: EntryKind | None = None) -> list[Entry]:
        """``store.entries``."""
        return self._store.entries(session, kind)

    def put_artifact(self, session: str, artifact_id: str, content: str, meta: dict[str, Any]) -> None:
        """``store.put_artifact``."""
        self._store.put_artifact(session, artifact_id, content, meta)

    def get_artifact(self, session: str, artifact_id: str) -> tuple[str, dict[str, Any]]:
        """``store.get_artifact`` (``StoreError`` when it does not exist)."""
        return self._store.get_artifact(session, artifact_id)

    def artifact_ids(self, session: str) -> list[str]:
        """``store.artifact_ids``."""
        return self._store.artifact_ids(session)

    def close(self) -> None:
        """Nothing: the store stays open for its owner."""
