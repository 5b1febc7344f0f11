"""The ``SessionStore`` protocol (after the OpenAI Agents SDK ``Session``: a few methods are enough).

The transcript only grows (DESIGN principle 1): nothing is updated or deleted. What the model sees
is a projection computed from the entries; original content stays retrievable by id.
"""

from __future__ import annotations

from typing import Any, Literal, Protocol

import msgspec

EntryKind = Literal["message", "compaction", "clear", "offload", "notes", "event"]


class Entry(msgspec.Struct, frozen=True):
    """One appended record. ``payload`` is kind-specific JSON-able data."""

    session: str
    seq: int
    kind: EntryKind
    payload: Any


class StoreError(Exception):
    """The store cannot read or write (I/O, a missing artifact)."""


class FencedOut(StoreError):
    """A writer's fencing number is older than the session's latest (its lock expired and
    another writer holds it now): a store that checks fences refuses the write."""


NO_FENCE = -1  # a writer without a lock across processes


class SessionStore(Protocol):
    """Where a session's entries and artifacts live."""

    def append(self, session: str, kind: EntryKind, payload: Any) -> Entry:
        """Append an entry and return it with its sequence number."""
        ...

    def entries(self, session: str, kind: EntryKind | None = None) -> list[Entry]:
        """All entries of ``session`` in order (optionally of one kind)."""
        ...

    def put_artifact(self, session: str, artifact_id: str, content: str, meta: dict[str, Any]) -> None:
        """Store original content under ``artifact_id`` (idempotent for the same id)."""
        ...

    def get_artifact(self, session: str, artifact_id: str) -> tuple[str, dict[str, Any]]:
        """Content and meta of an artifact. Raises ``StoreError`` when it does not exist."""
        ...

    def artifact_ids(self, session: str) -> list[str]:
        """Ids of the artifacts of ``session``, in the order they were stored."""
        ...

    def close(self) -> None:
        """Release resources."""
        ...
