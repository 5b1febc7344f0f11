"""Policies the tests share.

``ROUND2`` is ``default`` as the second round of issue 25 left it, before it was re-tuned on read
recall counted on what the agent read (tool results previewed over 2% of the free window,
cache-aware clearing from 40%, compaction at 75% with 8,000 + 6,000 reserved, 10% when the
prompt cache is cold, one restored file, a 30% transcript skeleton). Tests written for the
moments those thresholds compact at use it; the default's own figures are measured by
``ctxengine bench``.

``PRE_SKELETON`` is ``default`` as issue 8's first re-tuning left it (Claude Code's 20,000 + 13,000
compaction reserves; no pinned rules or file ledger; restore by content: the
5 most recent files, the last changes and the latest error; a 3% identifier index in append-only
segments; no transcript skeleton). The restore, summary and LLM-compaction tests were written
for its mechanisms.

``LAYER_DEFAULT`` is ``default`` with the thresholds the layer, engine and property tests were
written for: ``default`` before issue 8 re-tuned it for content (compaction at 30% of the free
window keeping the newest round, tool results capped at 2% of it, a 12% identifier index, no
restore by content). Those tests exercise mechanisms; the default's own figures are measured by
``ctxengine bench`` (``tests/test_fidelity.py``, ``tests/test_bench.py``).

``off(policy, IdleClear, ...)`` turns layers off the way the tests do most often.
"""

from __future__ import annotations

from ctxengine.policy.registry import (
    DEFAULT,
    CacheClear,
    CompactionSettings,
    Policy,
    Restore,
    SessionMemory,
    Settings,
    ToolResultBudget,
)

ROUND2 = DEFAULT.with_(
    DEFAULT.settings(ToolResultBudget).with_(window_share=0.02, weigh_tokens=False),
    DEFAULT.settings(CacheClear).with_(trigger=0.4, target=0.25, reach_target=False),
    DEFAULT.settings(CompactionSettings).with_(buffer=6_000, at_share=0.75, cold_at_share=0.1),
    DEFAULT.settings(Restore).with_(
        files=1, file_share=0.026, total_share=0.08, skeleton_share=0.30, room_tokens=8_000
    ),
)

PRE_SKELETON = ROUND2.with_(
    ROUND2.settings(CompactionSettings).with_(at_share=0.6, reserve_output=20_000, buffer=13_000),
    ROUND2.settings(SessionMemory).with_(
        keep_min_tokens=10_000,
        keep_min_share=0.25,
        keep_max_share=0.35,
        identifier_index=True,
        index_max_share=0.03,
        index_segments=True,
    ),
    ROUND2.settings(CacheClear).with_(trigger=0.5, target=0.35),
    ROUND2.settings(Restore).with_(
        files=5,
        skeleton_user_tokens=0,
        room_tokens=0,
        total_share=0.26,
        change_share=0.05,
        shell_reads=False,
        skeleton_tokens=0,
        rules_tokens=0,
        ledger_tokens=0,
    ),
)

LAYER_DEFAULT = PRE_SKELETON.with_(
    PRE_SKELETON.settings(CompactionSettings).with_(at_share=0.3),
    PRE_SKELETON.settings(SessionMemory).with_(
        keep_min_tokens=0,
        keep_min_share=0.0,
        keep_max_share=0.2,
        index_max_share=0.12,
    ),
    PRE_SKELETON.settings(ToolResultBudget).with_(max_chars=20_000, window_share=0.02),
    PRE_SKELETON.settings(Restore).with_(from_history=False, changes=0, error_tokens=0),
)


def off(policy: Policy, *layers: type[Settings]) -> Policy:
    """``policy`` with each of ``layers`` (records with an ``enabled`` switch) turned off, their
    other settings as ``policy`` has them; ``CompactionSettings`` (no switch) means compaction
    mode "none"."""
    records: list[Settings] = []
    for kind in layers:
        record = policy.settings(kind)
        records.append(
            record.with_(mode="none") if kind is CompactionSettings else record.with_(enabled=False)
        )
    return policy.with_(*records)
