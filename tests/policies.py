"""Policies the tests share.

``PRE_SKELETON`` is ``default`` as issue 8's first re-tuning left it (restore by content: the
5 most recent files, the last changes and the latest error; a 3% identifier index in append-only
segments; no transcript skeleton). The restore, summary and LLM-compaction tests were written
for its mechanisms.

``LAYER_DEFAULT`` is ``default`` with the thresholds the layer, engine and property tests were
written for: ``default`` before issue 8 re-tuned it for content (compaction at 30% of the free
window keeping the newest round, tool results capped at 2% of it, a 12% identifier index, no
restore by content). Those tests exercise mechanisms; the default's own figures are measured by
``ctxengine bench`` (``tests/test_fidelity.py``, ``tests/test_bench.py``).
"""

from __future__ import annotations

from ctxengine.policy import DEFAULT

PRE_SKELETON = DEFAULT.with_(
    compact_at_share=0.6,
    sm_keep_min_tokens=10_000,
    sm_keep_min_share=0.25,
    sm_keep_max_share=0.35,
    sm_identifier_index=True,
    sm_index_max_share=0.03,
    sm_index_segments=True,
    cache_clear_trigger=0.5,
    cache_clear_target=0.35,
    restore_files=5,
    restore_total_share=0.26,
    restore_change_share=0.05,
    restore_shell_reads=False,
    restore_skeleton_tokens=0,
)

LAYER_DEFAULT = PRE_SKELETON.with_(
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
