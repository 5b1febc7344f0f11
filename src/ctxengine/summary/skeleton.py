"""The transcript skeleton restored after a compaction: the agent's own words, verbatim.

Ours. A summary keeps what happened; the skeleton keeps the agent's own tool-call inputs, among
them the current text of the files it wrote (on the shared transcripts 43% of the 8-word runs an
agent re-uses are in a file it wrote, which read recall counts; its past commands and prose,
which it can write again, are not counted there: ``ctxengine.eval.fidelity``). So after the summary the
compaction re-attaches, newest first within a token budget, the user's messages and the
assistant's text and tool-call inputs from before the cut, each block as it was written (cut
to its head when long), with every tool result left out (the call says how to get it again).

Pure: it reads messages and returns append-only segments (``extend_segments``); the compactor
places them first in the prefix, before the summary and the restored files.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import Any

from ctxengine.messages.model import CACHE_ANCHOR, Message, Text, ToolCall
from ctxengine.summary.audit import harness_text
from ctxengine.tokens.counter import fits

SEGMENT_HEADER = (
    "[Restored after compaction, part {part}] Your own messages and tool calls from before the "
    "summary, verbatim and oldest first (tool results left out: re-run or re-read to see them "
    "again; long blocks are cut to their head):\n\n"
)
CUT_NOTE = "\n[... cut]"
USER_ENTRY = "[user]"  # the label of a user message's entry
MIN_NEW_SHARE = 0.2  # room a new segment needs; below it the oldest segments go in one batch
MAX_MISSES = 20  # entries that no longer fit before the scan stops (the budget is nearly full)
LEFT_OUT_KEYS = frozenset({"old_string", "old_str", "description", "todos"})
"""Tool-call input keys the skeleton leaves out, at any depth: the text an edit replaced (gone from
the file once the edit ran; the new text and the path stay), a shell command's description (the
command itself stays) and the todo list (restored whole after the summary). On the shared
transcripts at 64,000 tokens they took 11% of the skeleton's tokens for 12 of its 5,000 content
hits that nothing else in the context held."""


def _values(key: str, v: Any) -> Iterator[tuple[str, str]]:
    """(key, string) for every string in a tool-call input, nested values under their top key;
    values under a ``LEFT_OUT_KEYS`` key are skipped at any depth."""
    if isinstance(v, str):
        yield key, v
    elif isinstance(v, dict):
        for k, x in v.items():
            if k not in LEFT_OUT_KEYS:
                yield from _values(key, x)
    elif isinstance(v, list):
        for x in v:
            yield from _values(key, x)


def _entries(msg: Message) -> Iterator[str]:
    """The skeleton entries of one message: its text blocks and each string of its tool-call
    inputs (one entry per block, so a long block is cut alone). Tool results, thinking, images
    and documents are left out, and so are a harness's notices in a user message
    (``audit.harness_text``: system reminders, IDE notices, interruption markers) and the
    ``LEFT_OUT_KEYS`` of tool-call inputs."""
    for b in msg.blocks:
        if isinstance(b, Text) and b.text.strip():
            if msg.role == "user" and harness_text(b.text):
                continue
            label = USER_ENTRY if msg.role == "user" else f"[{msg.role}]"
            yield f"{label}\n{b.text}"
        elif isinstance(b, ToolCall):
            data = b.input if isinstance(b.input, dict) else {"input": b.input}
            parts = [f"{k}: {s}" for k, v in data.items() if k not in LEFT_OUT_KEYS for k, s in _values(k, v)]
            if parts:
                yield f"[tool call {b.name}]\n" + "\n".join(parts)


def _head(text: str, max_tokens: int, count: Callable[[str], int]) -> str | None:
    """``text`` within ``max_tokens`` (its head, marked as cut); None when not even a head fits."""
    if fits(count, text, max_tokens):
        return text
    chars = min(len(text), max_tokens * 4)
    while chars > 80:
        head = text[:chars] + CUT_NOTE
        if fits(count, head, max_tokens):
            return head
        chars = int(chars * 0.8)
    return None


def _select(
    span: Sequence[Message],
    count: Callable[[str], int],
    budget: int,
    block_tokens: int,
    user_tokens: int = 0,
) -> list[str]:
    """The newest entries of ``span`` within ``budget`` tokens, oldest first; each at most
    ``block_tokens``, a user message's text at most ``user_tokens`` (when > 0)."""
    chosen: list[str] = []
    used = misses = 0
    user_cap = min(block_tokens, user_tokens) if user_tokens > 0 else block_tokens
    for msg in reversed(span):
        if msg.origin not in ("message", "attachment") or msg.meta.get("synthetic"):
            continue
        for entry in reversed(list(_entries(msg))):
            cap = user_cap if entry.startswith(USER_ENTRY) else block_tokens
            text = _head(entry, min(cap, budget - used), count)
            if text is None:
                misses += 1
                continue
            chosen.append(text)
            used += count(text) + 1  # the blank line between entries
        if used >= budget - 8 or misses >= MAX_MISSES:
            break
    return chosen[::-1]


Segment = tuple[Message, int]
"""A skeleton segment and its size (tokens)."""


def extend_segments(
    segments: Sequence[Segment],
    span: Sequence[Message],
    count: Callable[[str], int],
    *,
    max_tokens: int,
    block_tokens: int,
    part: int,
    user_tokens: int = 0,
) -> tuple[Segment, ...]:
    """The skeleton as append-only segments, for the prompt cache: ``segments`` (what earlier
    compactions made, oldest first, kept as the same objects:
    a prefix-caching provider serves them from its cache;
    Anthropic's explicit cache where a breakpoint ends: each segment is marked ``CACHE_ANCHOR``, and
    the writer puts one at the end of the last) plus one new segment for ``span`` (the
    messages that left the context since the last segment). When fewer than ``MIN_NEW_SHARE`` of
    ``max_tokens`` is left for the new segment, the oldest segments are dropped in one batch until
    ``max_tokens x (1 - MIN_NEW_SHARE x 2)`` or less is kept (one cache miss now, then appends again);
    more go while not even the newest entry of ``span`` fits. The new segment holds the newest entries
    of ``span`` that fit what is left, each at most ``block_tokens`` (a user message's text at most
    ``user_tokens`` when > 0: the head of a long paste or command expansion). ``part`` numbers it.
    Returns the segments to send (``()`` when ``max_tokens`` is 0)."""
    if max_tokens <= 0:
        return ()
    kept = list(segments)
    total = sum(t for _, t in kept)
    if max_tokens - total < MIN_NEW_SHARE * max_tokens:
        while kept and total > max_tokens * (1 - 2 * MIN_NEW_SHARE):
            total -= kept.pop(0)[1]
    header = SEGMENT_HEADER.format(part=part)
    while True:
        budget = max_tokens - total - count(header)
        chosen = _select(span, count, budget, block_tokens, user_tokens) if budget > 0 else []
        if chosen or not kept or not span:
            break
        total -= kept.pop(0)[1]  # the newest entry did not fit: older segments give way
    if not chosen:
        return tuple(kept)
    body = header + "\n\n".join(chosen)
    msg = Message(
        role="user",
        blocks=(Text(body),),
        id=f"restore-skeleton:{part}",
        origin="restore",
        meta={CACHE_ANCHOR: True},
    )
    return (*kept, (msg, count(body)))


__all__ = ["Segment", "extend_segments"]
