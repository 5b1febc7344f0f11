"""OpenClaw's ``pruneHistoryForContextShare`` (``maxHistoryShare``): bound what a summary reads.

When the content that stays (everything but the span to summarize) exceeds
window x ``history_max_share`` x 1.2, the span to summarize is pruned to window x share tokens:
while it is over that budget, split it into two parts by token share and drop the first (oldest)
part, then repair pairing on the rest (OpenClaw's ``repairToolUseResultPairing``). The split falls
on tool-group boundaries (the current, group-aware version), so a call and its result leave
together and the repair finds nothing to fix; it still runs, as a check. The dropped messages are
returned in order: the caller summarizes them first (their summary becomes the previous summary of
the main one), as the current safeguard does. Pure.

Settings: ``HistoryShare`` (``ctxengine.policy.compaction_settings``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from ctxengine.layers.pairing import find_violations, repair, tool_groups
from ctxengine.messages.model import Message

PARTS = 2  # DEFAULT_PARTS


@dataclass
class Pruned:
    """``kept``: the span to summarize after pruning; ``dropped``: what was pruned, oldest first;
    ``chunks``: how many chunks were dropped; ``dropped_tokens``; ``repaired``: whether the pairing
    repair changed anything."""

    kept: list[Message]
    dropped: list[Message] = field(default_factory=list)
    chunks: int = 0
    dropped_tokens: int = 0
    repaired: bool = False


def split_by_token_share(tokens: Sequence[int], groups: Sequence[tuple[int, int]], parts: int) -> list[int]:
    """``splitMessagesByTokenShare`` over tool groups: indices into ``groups`` where each part
    after the first starts. A part closes when adding the next group would pass total / parts,
    provided it is not empty and fewer than ``parts - 1`` parts are closed."""
    parts = max(1, min(parts, len(groups)))
    total = sum(tokens)
    target = total / parts
    starts: list[int] = []
    size = 0
    for g, (s, e) in enumerate(groups):
        gt = sum(tokens[s:e])
        if size > 0 and size + gt > target and len(starts) < parts - 1:
            starts.append(g)
            size = 0
        size += gt
    return starts


def prune_history_for_context_share(
    messages: Sequence[Message], tokens: Sequence[int], *, budget: int, parts: int = PARTS
) -> Pruned:
    """Drop the oldest token-share chunk of ``messages`` (``tokens[i]`` tokens each) until the
    rest holds at most ``budget`` tokens or a single group is left."""
    kept = list(messages)
    kept_tokens = list(tokens)
    out = Pruned(kept=kept)
    while sum(kept_tokens) > budget:
        groups = tool_groups(kept)
        if len(groups) <= 1:
            break
        starts = split_by_token_share(kept_tokens, groups, parts)
        if not starts:
            break
        first = groups[starts[0]][0]
        out.dropped.extend(kept[:first])
        out.dropped_tokens += sum(kept_tokens[:first])
        out.chunks += 1
        kept, kept_tokens = kept[first:], kept_tokens[first:]
        if find_violations(kept):
            repaired, _ = repair(kept)
            known = {id(m): t for m, t in zip(kept, kept_tokens, strict=True)}
            # a message repair rebuilt is estimated at 4 chars per token (pi's estimate)
            kept_tokens = [known.get(id(m), len(m.text()) // 4 + 1) for m in repaired]
            kept = repaired
            out.repaired = True
    out.kept = kept
    return out
