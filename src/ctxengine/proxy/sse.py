"""Incremental server-sent-events reader for the proxy's stream tap.

The proxy forwards an upstream stream byte for byte; beside it this reader splits the bytes into
events (``event:`` / ``data:`` lines, an empty line ends an event; WHATWG's rules, the subset the
providers use) and decodes each ``data`` as JSON, so the adapters can read usage and rebuild the
reply. A ``data`` that is not JSON (OpenAI's ``[DONE]``) is skipped.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any


class SSEReader:
    """Feed bytes as they arrive; ``feed`` yields ``(event name, decoded data)`` per whole event."""

    def __init__(self) -> None:
        self._buf = b""
        self.skipped = 0  # data payloads that were not JSON (e.g. ``[DONE]``)

    def feed(self, chunk: bytes) -> Iterator[tuple[str, Any]]:
        self._buf += chunk.replace(b"\r\n", b"\n")
        while True:
            end = self._buf.find(b"\n\n")
            if end < 0:
                return
            raw, self._buf = self._buf[:end], self._buf[end + 2 :]
            event = self._event(raw.decode("utf-8", "replace"))
            if event is not None:
                yield event

    def _event(self, text: str) -> tuple[str, Any] | None:
        name, data = "message", []
        for line in text.split("\n"):
            field, _, value = line.partition(":")
            value = value.removeprefix(" ")
            if field == "event":
                name = value
            elif field == "data":
                data.append(value)
        if not data:
            return None
        try:
            return name, json.loads("\n".join(data))
        except ValueError:
            self.skipped += 1
            return None
