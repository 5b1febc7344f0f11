"""Append-only session storage: entries (messages, compactions, clearings, offloads) and artifacts
(original tool-result content that a layer projected out). ``SQLiteStore`` is the default;
``store_from_url`` also opens ``PostgresStore`` (``postgresql://...``, the ``gateway`` extra).

May import: nothing else of ctxengine.
"""

from ctxengine.store.base import Entry, SessionStore, StoreError
from ctxengine.store.sqlite import SQLiteStore
from ctxengine.store.url import store_from_url

__all__ = ["Entry", "SQLiteStore", "SessionStore", "StoreError", "store_from_url"]
