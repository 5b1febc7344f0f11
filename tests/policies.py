"""Policies the tests share.

``LAYER_DEFAULT`` is ``default`` with the thresholds the layer, engine and property tests were
written for: ``default`` before issue 8 re-tuned it for content (compaction at 30% of the free
window keeping the newest round, tool results capped at 2% of it, a 12% identifier index, no
restore by content). Those tests exercise mechanisms; the default's own figures are measured by
``ctxengine bench`` (``tests/test_fidelity.py``, ``tests/test_bench.py``).
"""

from __future__ import annotations

from ctxengine.policy import DEFAULT

LAYER_DEFAULT = DEFAULT.with_(
    compact_at_share=0.3,
    sm_keep_min_tokens=0,
    sm_keep_min_share=0.0,
    sm_keep_max_share=0.2,
    sm_index_max_share=0.12,
    tool_result_max_chars=20_000,
    tool_result_window_share=0.02,
    restore_from_history=False,
    restore_changes=0,
    restore_error_tokens=0,
)
