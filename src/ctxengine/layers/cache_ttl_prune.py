"""Cache-TTL pruning (OpenClaw's context-pruning extension, mode ``cache-ttl``).

Runs only once the prompt cache has expired (the last call is older than ``ttl_prune_ttl_s``, 5
min), so the first cache write after the expiry is smaller; nothing is pruned while the cache is
warm. The context is measured in characters against a character window of window x 4:

1. the protected tail starts at the ``ttl_prune_keep_last_assistants``-th (3rd) assistant message
   from the end (fewer assistant messages: nothing is pruned); nothing before the first user
   message is pruned (the reads of the bootstrap files);
2. below ``ttl_prune_soft_ratio`` (30%) of the character window nothing happens;
3. soft trim: each prunable tool result whose text exceeds ``ttl_prune_soft_max_chars`` (4,000)
   becomes its first 1,500 chars + ``...`` + its last 1,500 chars and a note of the original size;
4. hard clear: if the ratio is still at least ``ttl_prune_hard_ratio`` (50%) and the prunable
   results hold at least ``ttl_prune_min_prunable_chars`` (50,000), results are replaced by the
   placeholder "[Old tool result content cleared]", oldest first, until the ratio drops below 50%.

Results with images are skipped. Every tool is prunable (OpenClaw's empty allow list). Decisions are
``Replacements`` frozen per call id like every other layer's (the originals go to the artifact
store); OpenClaw prunes only the request in flight. Cost: $0.

Settings: ``TtlPrune`` (``ctxengine.policy.layer_settings``).
"""

from __future__ import annotations

from collections.abc import Iterator

import msgspec

from ctxengine.layers.base import LayerContext, LayerEvent, Replacements, result_key, result_text
from ctxengine.messages.model import Message, Text, Thinking, ToolCall, ToolResult
from ctxengine.policy.layer_settings import TtlPrune

LAYER = "cache_ttl_prune"
PLACEHOLDER = "[Old tool result content cleared]"
CHARS_PER_TOKEN = 4  # OpenClaw's character window is contextWindow x 4


def message_chars(msg: Message) -> int:
    """Characters of a message as the pruner counts them: text, thinking, tool inputs, results."""
    n = 0
    for b in msg.blocks:
        if isinstance(b, Text):
            n += len(b.text)
        elif isinstance(b, Thinking):
            n += len(b.thinking)
        elif isinstance(b, ToolCall):
            n += len(b.input) if isinstance(b.input, str) else len(msgspec.json.encode(b.input))
        elif isinstance(b, ToolResult):
            n += sum(len(p.text) for p in b.content if isinstance(p, Text))
    return n


def soft_trimmed(result: ToolResult, head: int, tail: int) -> ToolResult:
    """The result cut to ``head`` + ``...`` + ``tail`` chars with a note of the original size."""
    text = result_text(result)
    body = (
        f"{text[:head]}\n...\n{text[-tail:] if tail else ''}\n\n"
        f"[Tool result trimmed: kept first {head:,} chars and last {tail:,} chars of {len(text):,} chars.]"
    )
    return ToolResult(result.call_id, (Text(body),), result.is_error, result.name)


def _prunable(ctx: LayerContext, first: int, protected: int) -> Iterator[tuple[Message, ToolResult]]:
    for i in range(first + 1, protected):
        msg = ctx.view[i]
        if msg.role != "user":
            continue
        for r in msg.tool_results:
            if any(not isinstance(p, Text) for p in r.content):
                continue  # image results are skipped
            yield msg, r


def cache_ttl_prune(ctx: LayerContext) -> Replacements | None:
    """Soft-trim / hard-clear old tool results after the cache TTL expired (module docstring)."""
    s = TtlPrune.of(ctx.policy)
    if not s.enabled or ctx.now is None or ctx.last_call is None:
        return None
    idle = ctx.now - ctx.last_call
    if idle <= s.ttl_s:
        return None
    view = ctx.view
    seen = 0
    protected: int | None = None
    for i in range(len(view) - 1, -1, -1):
        if view[i].role == "assistant":
            seen += 1
            if seen == s.keep_last_assistants:
                protected = i
                break
    if protected is None:
        return None
    first = next(
        (i for i, m in enumerate(view) if m.role == "user" and m.origin == "message" and not m.tool_results),
        None,
    )
    if first is None or first >= protected:
        return None
    char_window = ctx.window * CHARS_PER_TOKEN
    total = sum(message_chars(m) for m in view)
    if total / char_window < s.soft_ratio:
        return None
    out: dict[str, ToolResult] = {}
    candidates: list[tuple[str, ToolResult, int]] = []  # key, shown result, its chars
    soft = 0
    for msg, r in _prunable(ctx, first, protected):
        key = result_key(msg.id, r.call_id)
        n = len(result_text(r))
        if n > s.soft_max_chars:
            trimmed = soft_trimmed(r, s.head_chars, s.tail_chars)
            m = len(result_text(trimmed))
            if m < n:
                out[key] = trimmed
                total -= n - m
                n = m
                soft += 1
        candidates.append((key, out.get(key, r), n))
    hard = 0
    prunable_chars = sum(n for _, _, n in candidates)
    if total / char_window >= s.hard_ratio and prunable_chars >= s.min_prunable_chars:
        for key, r, n in candidates:
            if total / char_window < s.hard_ratio:
                break
            if n <= len(PLACEHOLDER):
                continue
            out[key] = ToolResult(r.call_id, (Text(PLACEHOLDER),), r.is_error, r.name)
            total -= n - len(PLACEHOLDER)
            hard += 1
    if not out:
        return None
    saved_chars = sum(message_chars(m) for m in view) - total
    saved_tokens = min(ctx.predicted, saved_chars // CHARS_PER_TOKEN)
    return Replacements(
        out,
        LayerEvent(
            layer=LAYER,
            reason=f"cache expired ({idle / 60:.0f} min idle > {s.ttl_s / 60:.0f} min)",
            tokens_before=ctx.predicted,
            tokens_after=ctx.predicted - saved_tokens,  # the engine fills in the measured figure
            details={"soft_trimmed": soft, "hard_cleared": hard, "chars_saved": saved_chars},
        ),
    )
