"""Anthropic ``usage`` -> ``Usage`` (disjoint input fields; cache writes split by TTL).

``input_tokens`` excludes cache reads and writes (Anthropic reports them apart);
``cache_creation_input_tokens`` is split into 5-minute and 1-hour writes by
``cache_creation.ephemeral_{5m,1h}_input_tokens`` when the split is recorded, any unsplit rest
counting as 5-minute. Shared with the Anthropic proxy (``proxy.wire_anthropic``).
"""

from __future__ import annotations

from typing import Any

from ctxengine.formats.claude_code.blocks import as_int
from ctxengine.messages.model import Usage


def anthropic_usage(raw: Any) -> Usage | None:
    """Normalise an Anthropic usage dict; None when absent."""
    if not isinstance(raw, dict):
        return None
    write_total = as_int(raw.get("cache_creation_input_tokens"))
    write_5m, write_1h = write_total, 0
    split = raw.get("cache_creation")
    if isinstance(split, dict):
        e5 = as_int(split.get("ephemeral_5m_input_tokens"))
        e1 = as_int(split.get("ephemeral_1h_input_tokens"))
        if e5 or e1:
            write_1h = e1
            write_5m = max(e5, write_total - e1)  # any unsplit rest counts as unspecified TTL
    return Usage(
        input_tokens=as_int(raw.get("input_tokens")),
        cache_read_tokens=as_int(raw.get("cache_read_input_tokens")),
        cache_write_tokens=write_5m,
        cache_write_1h_tokens=write_1h,
        output_tokens=as_int(raw.get("output_tokens")),
    )
