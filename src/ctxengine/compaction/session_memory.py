"""Ours on the session-memory path: its own policy for the cut and the identifier index.

The session notes are the summary (``layers.session_memory_compact``, Claude Code's SM-compact,
$0); ours adds a kept-message minimum and gain factor of its own (``sm_keep_min_messages``,
``sm_gain_factor``), the cold-cache threshold (``cold_compact_at_share``: once the prompt cache
has expired the next request is written in full anyway, so compacting now costs no extra cache
miss), and the exact identifiers that left the context listed after the notes: inside the notes
message, or in append-only segments (``sm_index_segments``) that the provider's prompt cache keeps
serving. Rewritten segments fill ``REWRITE_SHARE`` (0.6) of their budget.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import msgspec

from ctxengine.compaction.records import Compaction, copy_summary_state
from ctxengine.layers.base import Cut, LayerEvent
from ctxengine.messages.model import Message, Text
from ctxengine.policy.compaction_settings import SessionMemory
from ctxengine.policy.registry import Policy
from ctxengine.summary import structured as summarize
from ctxengine.summary.audit import span_identifiers

REWRITE_SHARE = 0.6  # a rewritten identifier index fills this share of its budget


def sm_policy_changes(p: Policy, cold: bool) -> dict[str, object]:
    """The changes that make the session-memory path's policy from ``p``: its kept-message
    minimum, its gain (``compact_min_gain`` x ``sm_gain_factor``) and, on a cold cache
    (``cold``), the cold threshold and gain."""
    s = SessionMemory.of(p)
    changes: dict[str, object] = {}
    if s.keep_min_messages is not None:
        changes["keep_recent_min_messages"] = s.keep_min_messages
    gain = p.compact_min_gain * s.gain_factor
    if s.gain_factor != 1.0:
        changes["compact_min_gain"] = gain
    if cold:
        changes["compact_at_share"] = p.cold_compact_at_share
        changes["compact_min_gain"] = min(gain, p.cold_compact_min_gain)
    return changes


def _segment_text(ids: Sequence[str], part: int) -> str:
    return f"## Exact identifiers that left the context (part {part}, newest first)\n" + " ".join(ids)


def _segment(text: str, n: int) -> Message:
    return Message(role="user", blocks=(Text(text),), id=f"identifier-index-{n}", origin="summary")


def index_segments(
    state: summarize.SummaryState,
    span: Sequence[Message],
    budget: int,
    *,
    segments: tuple[Message, ...],
    segment_ids: set[str],
    count: Callable[[str], int],
    identifiers_max: int,
    compactions: int,
) -> tuple[tuple[Message, ...], frozenset[str]]:
    """The identifier index as append-only segments (``sm_index_segments``): each compaction
    adds one message listing the identifiers that left the context and are not listed yet
    (newest first), and the earlier segments stay the same objects, so the provider's
    prompt cache keeps serving them; only when the segments would pass ``budget`` (tokens) are
    they rewritten as one segment of the newest identifiers within ``REWRITE_SHARE`` of it (room
    for the next appends).

    Args:
        state: the structured-summary facts after this compaction (identifier positions).
        span: the messages that leave the context.
        budget: tokens the segments may take (``Policy.index_budget``).
        segments: the segments so far; segment_ids: the identifiers they list.
        count: tokens of a text.
        identifiers_max: ``summary_identifiers_max`` (a rewrite keeps at most 4x as many).
        compactions: compactions made so far (names a rewritten segment).

    Returns:
        The segments and the identifiers they list (the compactor keeps them at ``commit``).
    """
    pos = state.identifiers
    span_ids = span_identifiers(span)
    new = sorted((i for i in span_ids if i not in segment_ids), key=lambda k: (-pos.get(k, 0), k))
    if not new:
        return segments, frozenset(segment_ids)
    used = sum(count(m.text()) for m in segments)
    text = _segment_text(new, len(segments) + 1)
    if used + count(text) <= budget:
        return (*segments, _segment(text, len(segments))), frozenset(segment_ids.union(new))
    ids = sorted(pos, key=lambda k: (-pos[k], k))[: identifiers_max * 4]
    room = int(budget * REWRITE_SHARE)
    while ids and count(_segment_text(ids, 1)) > room:
        ids = ids[: len(ids) * 3 // 4]
    return ((_segment(_segment_text(ids, 1), compactions),) if ids else ()), frozenset(ids)


def lead_with_segments(sm: Cut, segments: tuple[Message, ...], count: Callable[[str], int]) -> None:
    """Put the identifier-index segments before the notes message of ``sm`` (in place)."""
    sm.prefix = [*segments, *sm.prefix]
    sm.event.tokens_after += sum(count(m.text()) for m in segments)
    sm.event.details["index_segments"] = len(segments)


def append_index(sm: Cut, index: str, count: Callable[[str], int]) -> None:
    """Append the identifier index to the notes message of ``sm`` (in place)."""
    head = sm.prefix[0]
    text = head.text() + "\n\n" + index
    sm.prefix[0] = msgspec.structs.replace(head, blocks=(Text(text),))
    sm.event.tokens_after += count(text) - count(head.text())


def sm_compaction(
    sm: Cut,
    p: Policy,
    window: int,
    events: list[LayerEvent],
    summary_state: summarize.SummaryState,
    *,
    segments: tuple[Message, ...],
    segment_ids: set[str],
    count: Callable[[str], int],
    identifiers_max: int,
    compactions: int,
) -> tuple[Compaction, int]:
    """The compaction of a session-memory cut ``sm``: the notes cover the whole session; the
    exact identifiers of what left the context are listed after them (newest first), as the
    structured summary does: in the notes message, or in segments before it.

    Args:
        sm: the cut (``layers.session_memory_compact``), changed in place.
        p: the policy resolved for the window; window: the context window (tokens).
        events: the events made on the way (the pre-compaction flush).
        summary_state: the compactor's structured-summary facts (copied, not changed).
        segments, segment_ids, identifiers_max, compactions: see ``index_segments``.
        count: tokens of a text.

    Returns:
        The compaction (its structured facts including the span) and the index of the notes
        message in the prefix.
    """
    s = SessionMemory.of(p)
    state = summarize.update(
        copy_summary_state(summary_state), sm.summarized, user_message_chars=p.summary_user_message_chars
    )
    index = (
        summarize.identifier_index(state, p.index_budget(window), count, limit=p.summary_identifiers_max)
        if s.identifier_index and not s.index_segments
        else ""
    )
    done = Compaction(sm, events, state)
    notes_at = 0  # the notes message in the prefix
    if s.identifier_index and s.index_segments:
        lead, done.segment_ids = index_segments(
            state,
            sm.summarized,
            p.index_budget(window),
            segments=segments,
            segment_ids=segment_ids,
            count=count,
            identifiers_max=identifiers_max,
            compactions=compactions,
        )
        done.segments = lead
        lead_with_segments(sm, lead, count)
        notes_at = len(lead)
    elif index:
        append_index(sm, index, count)
    return done, notes_at
