"""``data:`` URLs for images and documents (the frameworks pass inline media as data URLs)."""

from __future__ import annotations

import re

_DATA_URL = re.compile(r"^data:([^;,]*)(;base64)?,(.*)$", re.DOTALL)


def data_url(media_type: str, data: str) -> str:
    """``data:<media type>;base64,<data>`` for base64 ``data``."""
    return f"data:{media_type};base64,{data}"


def parse_data_url(url: str) -> tuple[str, str] | None:
    """(media type, base64 data) of a base64 ``data:`` URL; None for any other URL."""
    m = _DATA_URL.match(url)
    if m is None or not m.group(2):
        return None
    return m.group(1), m.group(3)
