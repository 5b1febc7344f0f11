"""Append-only session storage: entries (messages, compactions, clearings, offloads) and artifacts
(original tool-result content that a layer projected out). ``SQLiteStore`` is the default."""

from ctxengine.store.base import Entry, SessionStore, StoreError
from ctxengine.store.sqlite import SQLiteStore

__all__ = ["Entry", "SQLiteStore", "SessionStore", "StoreError"]
