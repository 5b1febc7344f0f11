"""Test helpers for the gateway: the real PostgreSQL and Redis servers.

``CTXENGINE_TEST_POSTGRES`` / ``CTXENGINE_TEST_REDIS`` name them (default: the local servers).
A server that cannot be reached skips the tests that need it, with the reason; under CI
(``CI=true``) it fails them. ``pg_schema_url`` makes a schema of its own for one test (dropped
after), so that parallel test workers never share a table.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import socket
import threading
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


class Forwarder:
    """A loopback TCP forwarder to ``target`` (host, port) that a test can cut (every connection
    closed, the port refusing) and restore on the same port: the database going away and coming
    back, without touching the shared server."""

    def __init__(self, target: tuple[str, int]) -> None:
        self.target = target
        self.port = 0
        self._socks: list[socket.socket] = []
        self._lock = threading.Lock()
        self._listener: socket.socket | None = None
        self.restore()

    def restore(self) -> None:
        listener = socket.socket()
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", self.port))
        self.port = listener.getsockname()[1]
        listener.listen(64)
        self._listener = listener
        threading.Thread(target=self._accept, args=(listener,), daemon=True).start()

    def cut(self) -> None:
        with self._lock:
            socks, self._socks = self._socks, []
            if self._listener is not None:
                socks.append(self._listener)
                self._listener = None
        for s in socks:
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)
            s.close()

    def _accept(self, listener: socket.socket) -> None:
        while True:
            try:
                client, _ = listener.accept()
            except OSError:
                return
            try:
                server = socket.create_connection(self.target, timeout=3)
            except OSError:
                client.close()
                continue
            with self._lock:
                self._socks += [client, server]
            for a, b in ((client, server), (server, client)):
                threading.Thread(target=self._pump, args=(a, b), daemon=True).start()

    @staticmethod
    def _pump(src: socket.socket, dst: socket.socket) -> None:
        try:
            while data := src.recv(65536):
                dst.sendall(data)
        except OSError:
            pass
        finally:
            with contextlib.suppress(OSError):
                dst.shutdown(socket.SHUT_WR)
