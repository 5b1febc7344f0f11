"""Test helpers for the gateway: the real PostgreSQL and Redis servers.

``CTXENGINE_TEST_POSTGRES`` / ``CTXENGINE_TEST_REDIS`` name them (default: the local servers).
A server that cannot be reached skips the tests that need it, with the reason; under CI
(``CI=true``) it fails them. ``pg_schema_url`` makes a schema of its own for one test (dropped
after), so that parallel test workers never share a table.
"""

from __future__ import annotations

import os
import secrets
from collections.abc import Iterator
from contextlib import contextmanager
from urllib.parse import quote

import pytest

PG = os.environ.get("CTXENGINE_TEST_POSTGRES", "postgresql://127.0.0.1:5432/test")
REDIS = os.environ.get("CTXENGINE_TEST_REDIS", "redis://127.0.0.1:6379/0")


def unreachable(what: str, exc: BaseException) -> None:
    """Skip (or, under CI, fail) a test whose server cannot be reached."""
    why = f"{what} unreachable ({type(exc).__name__}: {exc})"
    if os.environ.get("CI") == "true":
        pytest.fail(f"{why}: CI must have it")
    pytest.skip(why)


def with_options(url: str, schema: str) -> str:
    """``url`` with ``search_path`` set to ``schema`` (libpq's ``options`` parameter)."""
    sep = "&" if "?" in url else "?"
    return f"{url}{sep}options={quote('-csearch_path=' + schema)}"


@contextmanager
def pg_schema_url() -> Iterator[str]:
    """A URL of the test database whose tables go to a fresh schema, dropped afterwards."""
    import psycopg

    schema = f"ctxtest_{os.getpid()}_{secrets.token_hex(4)}"
    try:
        admin = psycopg.connect(PG, autocommit=True, connect_timeout=3)
    except psycopg.Error as exc:
        unreachable(f"PostgreSQL at {PG}", exc)
    with admin:
        admin.execute(f"CREATE SCHEMA {schema}".encode())
        try:
            yield with_options(PG, schema)
        finally:
            admin.execute(f"DROP SCHEMA {schema} CASCADE".encode())


def redis_url() -> str:
    """The test Redis's URL, once it answers a ping."""
    import redis

    try:
        redis.Redis.from_url(REDIS, socket_connect_timeout=3).ping()
    except redis.RedisError as exc:
        unreachable(f"Redis at {REDIS}", exc)
    return REDIS
