"""Tool-result budget: oversized tool results go to the artifact store, the model sees a preview.

Follows Claude Code's large-tool-result handling: a result over the per-tool cap (50,000 chars) is
persisted and replaced by a ``<persisted-output>`` block with its size, a ~2 KB preview and how to
read the rest; a per-message aggregate cap (200,000 chars) replaces the largest results of a
message first. Where the tail looks important (errors, a closing summary, test totals) the preview
keeps head and tail. The decision is made once, when the result arrives, and frozen per tool call
id, so the same history projects to the same bytes on every later call (prompt cache).

Images and documents are never cut by a character cap: they are counted by pixels elsewhere.
Results of tools with their own limits (``budget_exempt_tools``; Claude Code opts Read out) are
left alone: our read tool pages at 2,000 lines and 25,000 tokens already.
Cost: $0. Runs on every ingested message.
"""

from __future__ import annotations

import re

from ctxengine.layers.base import (
    LayerEvent,
    Replacements,
    artifact_id,
    identifier_line,
    result_chars,
    result_key,
    result_text,
)
from ctxengine.messages import Message, Text, ToolResult
from ctxengine.policy import Policy

LAYER = "tool_result_budget"
TAIL_MATTERS_RE = re.compile(
    r"(?i)(error|exception|traceback|failed|failure|fatal|panic|passed|summary|total|exit code|\}\s*$)"
)
TAIL_PROBE_CHARS = 2_000  # how much of the end is inspected for "tail matters"


def preview(result: ToolResult, policy: Policy) -> ToolResult:
    """The replacement shown for an offloaded result: size, artifact reference, head (+ tail
    where it matters), identifiers, and how to read more."""
    text = result_text(result)
    head_chars = policy.preview_chars
    tail = ""
    if TAIL_MATTERS_RE.search(text[-TAIL_PROBE_CHARS:]):
        head_chars = max(policy.preview_chars - policy.tail_chars, policy.preview_chars // 2)
        tail = text[-policy.tail_chars :]
    head = text[:head_chars]
    aid = artifact_id(result.call_id)
    lines = [
        "<persisted-output>",
        f"Output too large ({len(text):,} chars); the full output is stored as artifact {aid}.",
        "Read more with retrieve(id, offset, limit) or search it with grep; preview follows.",
        head,
    ]
    if tail:
        lines += [f"[... {len(text) - len(head) - len(tail):,} chars omitted ...]", tail]
    if policy.keep_identifiers:
        ids = identifier_line(text, policy.identifiers_max)
        if ids:
            lines.append(ids)
    lines.append("</persisted-output>")
    others = tuple(p for p in result.content if not isinstance(p, Text))
    return ToolResult(result.call_id, (Text("\n".join(lines)), *others), result.is_error, result.name)


def budget_message(msg: Message, policy: Policy, predicted: int) -> Replacements | None:
    """Decide which tool results of a newly arrived ``msg`` to offload (None when none).

    ``predicted`` (tokens) only labels the event.
    """
    exempt = {t.lower() for t in policy.budget_exempt_tools}
    results = [r for r in msg.tool_results if r.name.lower() not in exempt]
    if not results or not policy.tool_result_budget:
        return None
    sizes = {r.call_id: result_chars(r) for r in results}
    chosen = {cid for cid, n in sizes.items() if n > policy.tool_result_max_chars}
    remaining = sum(n for cid, n in sizes.items() if cid not in chosen)
    if remaining > policy.message_results_max_chars:
        for cid, n in sorted(sizes.items(), key=lambda kv: -kv[1]):
            if remaining <= policy.message_results_max_chars:
                break
            if cid not in chosen and n > policy.preview_chars * 2:
                chosen.add(cid)
                remaining -= n
    if not chosen:
        return None
    out = {result_key(msg.id, r.call_id): preview(r, policy) for r in results if r.call_id in chosen}
    saved_chars = sum(sizes[c] for c in chosen) - sum(result_chars(r) for r in out.values())
    event = LayerEvent(
        layer=LAYER,
        reason=f"{len(chosen)} tool result(s) over the cap",
        tokens_before=predicted,
        tokens_after=predicted,  # the engine fills in the measured figure
        details={"call_ids": sorted(chosen), "chars_saved": saved_chars},
    )
    return Replacements(out, event)
