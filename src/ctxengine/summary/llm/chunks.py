"""How the LLM summarizer cuts a span too large for one request: chunks and stages.

OpenClaw's numbers: the adaptive chunk ratio (0.4, lowered toward 0.15 when messages are large
for the window: ``computeAdaptiveChunkRatio``), the safety margin 1.2 and 4,096 tokens of
summarization overhead; chunks of at most the budget on tool-group boundaries (a call and its
result stay together); a staged summary's parts split by token share
(``splitMessagesByTokenShare``, at least 4 messages) and labelled with their UTC time range for
the merge. Pure: token counts are given by the caller.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime

from ctxengine.layers.pairing import tool_groups
from ctxengine.messages.model import Message

BASE_CHUNK_RATIO = 0.4  # OpenClaw computeAdaptiveChunkRatio
MIN_CHUNK_RATIO = 0.15
SAFETY_MARGIN = 1.2
SUMMARIZATION_OVERHEAD_TOKENS = 4_096
MIN_MESSAGES_FOR_SPLIT = 4  # OpenClaw summarizeInStages: fewer messages are summarized in one stage


def adaptive_chunk_ratio(tokens: Sequence[int], window: int) -> float:
    """OpenClaw's ratio: 0.4, lowered toward 0.15 when messages are large for the window."""
    if not tokens or window <= 0:
        return BASE_CHUNK_RATIO
    avg = sum(tokens) / len(tokens) * SAFETY_MARGIN / window
    if avg > 0.1:
        return max(MIN_CHUNK_RATIO, BASE_CHUNK_RATIO - min(2 * avg, 0.25))
    return BASE_CHUNK_RATIO


def chunk_groups(messages: Sequence[Message], tokens: Sequence[int], max_tokens: int) -> list[list[Message]]:
    """Split ``messages`` into chunks of at most ``max_tokens / 1.2`` on tool-group boundaries (a
    group larger than that is a chunk of its own)."""
    cap = int(max_tokens / SAFETY_MARGIN)
    chunks: list[list[Message]] = []
    current: list[Message] = []
    size = 0
    for start, end in tool_groups(messages):
        g = list(messages[start:end])
        gt = sum(tokens[start:end])
        if current and size + gt > cap:
            chunks.append(current)
            current, size = [], 0
        current.extend(g)
        size += gt
    if current:
        chunks.append(current)
    return chunks


def split_by_token_share(
    messages: Sequence[Message], tokens: Sequence[int], parts: int
) -> list[list[Message]]:
    """OpenClaw ``splitMessagesByTokenShare`` on tool-group boundaries: at most ``parts`` chunks
    of about total / parts tokens each, in order; a new chunk starts when the next tool group
    would pass the target (the last chunk takes the rest). A call and its result stay together."""
    parts = max(1, min(parts, len(messages)))
    target = sum(tokens) / parts
    chunks: list[list[Message]] = []
    current: list[Message] = []
    size = 0
    for start, end in tool_groups(messages):
        gt = sum(tokens[start:end])
        if current and size + gt > target and len(chunks) < parts - 1:
            chunks.append(current)
            current, size = [], 0
        current.extend(messages[start:end])
        size += gt
    if current:
        chunks.append(current)
    return chunks


def _time_range(messages: Sequence[Message]) -> str:
    stamps = [m.timestamp for m in messages if m.timestamp is not None]
    if not stamps:
        return ""
    fmt = "%Y-%m-%d %H:%M UTC"
    first, last = (datetime.fromtimestamp(t, tz=UTC).strftime(fmt) for t in (min(stamps), max(stamps)))
    return f" {first}" if first == last else f" {first} to {last}"


def chunk_label(i: int, n: int, messages: Sequence[Message]) -> str:
    """OpenClaw's label of a partial summary: ``[Chunk 1/N - oldest messages <UTC range>]``."""
    where = "oldest messages" if i == 1 else "most recent messages" if i == n else "messages"
    return f"[Chunk {i}/{n} - {where}{_time_range(messages)}]"
