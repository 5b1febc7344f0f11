"""Tool-result budget: oversized tool results go to the artifact store, the model sees a preview.

Follows Claude Code's large-tool-result handling: a result over the per-tool cap (50,000 chars) is
persisted and replaced by a ``<persisted-output>`` block with its size, a ~2 KB preview and how to
read the rest; a per-message aggregate cap (200,000 chars) replaces the largest results of a
message first. Where the tail looks important (errors, a closing summary, test totals) the preview
keeps head and tail. The decision is made once, when the result arrives, and frozen per tool call
id, so the same history projects to the same bytes on every later call (prompt cache).

Images and documents get the same budget as text (issue 9, item 10: a 40-page PDF read at a 64K
window made a 122K-token request). A part counts as ``MEDIA_CHARS_PER_TOKEN`` characters per
token of the engine's count (Anthropic: 1,500-3,000 tokens a PDF page, w x h / 750 an image), so
the per-tool and per-message caps apply to it as to text (a result whose text alone is over the
cap keeps its parts beside the text preview, as before). An offloaded part is kept whole as
artifact ``tool-result/<call id>/part-<k>`` and shown as one line saying what it was and how to
get it back (a PDF page-wise: ``retrieve(id, pages="1-10")``). Text results of tools with their own
limits (``budget_exempt_tools``; Claude Code opts Read out) are left alone (our read tool pages at
2,000 lines and 25,000 tokens already), but their images and documents are not: nothing pages
those. With the budget off (pi) and the overflow guard on, a result whose parts would take more
than ``MEDIA_GUARD_SHARE`` of the free window is still offloaded: the guard never cuts the newest
round, so a part that large could never be sent.

Images and documents attached to a user message itself (a PDF or screenshots sent with the request,
no tool call) are what the user asked the model to look at: they are not held to the per-tool or
per-message cap (a single pasted screenshot is over 2% of a 64,000-token window), only to what the
window can take: with the overflow guard on, the largest go until those kept in the message take
at most ``MEDIA_GUARD_SHARE`` of the free window (budget on or off). An offloaded part is kept
whole as artifact ``user-media/<message id>/part-<k>`` (``layers.base.user_part_artifact_id``)
and shown as its ``media_line`` after the message's own blocks; the user's text is never
touched.
Cost: $0. Runs on every ingested message.

Settings: ``ToolResultBudget`` and ``ClearedResults`` (``ctxengine.policy.layer_settings``).
"""

from __future__ import annotations

import re
from collections.abc import Callable

from ctxengine.layers.base import (
    LayerEvent,
    Replacements,
    artifact_id,
    identifier_line,
    part_artifact_id,
    result_chars,
    result_key,
    result_text,
    user_part_key,
    user_parts,
)
from ctxengine.messages.model import Document, Image, Message, Text, ToolResult
from ctxengine.policy.layer_settings import ClearedResults, OverflowGuard, ToolResultBudget
from ctxengine.policy.registry import Policy
from ctxengine.tokens.counter import pdf_pages

MediaCounter = Callable[[Image | Document], int]

LAYER = "tool_result_budget"
TAIL_MATTERS_RE = re.compile(
    r"(?i)(error|exception|traceback|failed|failure|fatal|panic|passed|summary|total|exit code|\}\s*$)"
)
TAIL_PROBE_CHARS = 2_000  # how much of the end is inspected for "tail matters"
MEDIA_CHARS_PER_TOKEN = 4  # an image or document counts as 4 chars a token (OpenClaw's ratio)
MEDIA_GUARD_SHARE = 0.5  # with the budget off: parts above this share of the free window go
PDF_PAGES_PER_READ = 10  # pages suggested for one page-wise retrieve


def density(text: str, text_tokens: Callable[[str], int] | None) -> float:
    """How many of the caps' chars one char of ``text`` is worth: 1.0 for English-like text (4 chars
    a token or more), more for denser text (Chinese: about 1 char a token, so about 4.0)."""
    if text_tokens is None or not text:
        return 1.0
    return max(1.0, MEDIA_CHARS_PER_TOKEN * text_tokens(text) / len(text))


def preview(result: ToolResult, policy: Policy, dense: float = 1.0) -> ToolResult:
    """The replacement shown for an offloaded result: size, artifact reference, head (+ tail
    where it matters), identifiers, and how to read more. ``dense`` (the text's ``density``)
    shortens the head and tail of dense text so that they take the tokens the preview's chars
    stand for in English-like text."""
    b, c = ToolResultBudget.of(policy), ClearedResults.of(policy)
    text = result_text(result)
    preview_chars, tail_chars = int(b.preview_chars / dense), int(b.tail_chars / dense)
    head_chars = preview_chars
    tail = ""
    if TAIL_MATTERS_RE.search(text[-TAIL_PROBE_CHARS:]):
        head_chars = max(preview_chars - tail_chars, preview_chars // 2)
        tail = text[-tail_chars:] if tail_chars else ""
    head = text[:head_chars]
    aid = artifact_id(result.call_id)
    lines = [
        "<persisted-output>",
        f"Output too large ({len(text):,} chars); the full output is stored as artifact {aid}.",
        "Read more with retrieve(id, offset, limit) or search it with grep; preview follows."
        if c.name_retrieve
        else "Preview follows.",
        head,
    ]
    if tail:
        lines += [f"[... {len(text) - len(head) - len(tail):,} chars omitted ...]", tail]
    if c.keep_identifiers:
        ids = identifier_line(text, c.identifiers_max)
        if ids:
            lines.append(ids)
    lines.append("</persisted-output>")
    others = tuple(p for p in result.content if not isinstance(p, Text))
    return ToolResult(result.call_id, (Text("\n".join(lines)), *others), result.is_error, result.name)


def media_parts(result: ToolResult) -> list[tuple[int, Image | Document]]:
    """(1-based index in ``result.content``, part) of its images and documents."""
    return [(k, p) for k, p in enumerate(result.content, 1) if isinstance(p, Image | Document)]


def media_line(aid: str, part: Image | Document, tokens: int, *, name_retrieve: bool = True) -> str:
    """The line shown for an offloaded image or document kept as artifact ``aid``: what it was
    (``tokens``: its count), its artifact, and how to read it when the agent has ctxengine's
    ``retrieve`` tool (``name_retrieve``: ``ClearedResults.name_retrieve``; a placeholder names
    only a way back the client has)."""
    if isinstance(part, Image):
        size = f", {part.width}x{part.height} px" if part.width and part.height else ""
        return (
            f"[image ({part.media_type or 'unknown type'}{size}, ~{tokens:,} tokens) offloaded: too large "
            f"for the context; kept whole as artifact {aid}]"
        )
    title = f' "{part.title}"' if part.title else ""
    media = part.media_type.lower()
    if media == "application/pdf" and part.data:
        pages = pdf_pages(part.data)
        first = f"1-{min(pages, PDF_PAGES_PER_READ)}" if pages > 1 else "1"
        read = f' Read it page-wise with retrieve(id="{aid}", pages="{first}")' if name_retrieve else ""
        return (
            f"[document{title} (application/pdf, {pages:,} pages, ~{tokens:,} tokens) offloaded: too large "
            f"for the context; kept whole as artifact {aid}.{read}]"
        )
    paged = media.startswith("text/") and name_retrieve
    how = f'page it with retrieve(id="{aid}", offset, limit)' if paged else "kept whole"
    return (
        f"[document{title} ({part.media_type or 'unknown type'}, ~{tokens:,} tokens) offloaded: too large "
        f"for the context; artifact {aid}: {how}]"
    )


def media_preview(
    result: ToolResult, policy: Policy, tokens: dict[int, int], *, keep_text: bool
) -> ToolResult:
    """The replacement shown for an offloaded result with images or documents: its text (whole
    when ``keep_text`` or short, else the usual preview) and one ``media_line`` per part."""
    text = result_text(result)
    lines = ["<persisted-output>"]
    if text and (keep_text or len(text) <= ToolResultBudget.of(policy).preview_chars):
        lines.append(text)
    elif text:
        body = preview(ToolResult(result.call_id, (Text(text),), result.is_error, result.name), policy)
        lines += result_text(body).split("\n")[1:-1]
    named = ClearedResults.of(policy).name_retrieve
    lines += [
        media_line(part_artifact_id(result.call_id, k), p, tokens[k], name_retrieve=named)
        for k, p in media_parts(result)
    ]
    lines.append("</persisted-output>")
    return ToolResult(result.call_id, (Text("\n".join(lines)),), result.is_error, result.name)


def guard_user_media(tokens: dict[str, int], chosen: set[str], guard: int) -> set[str]:
    """The user parts (artifact id -> tokens, in block order) to offload besides ``chosen`` so
    that those kept take at most ``guard`` tokens: the largest first (ties: the earliest)."""
    kept = {aid: n for aid, n in tokens.items() if aid not in chosen}
    total = sum(kept.values())
    out: set[str] = set()
    for aid, n in sorted(kept.items(), key=lambda kv: -kv[1]):
        if total <= guard:
            break
        out.add(aid)
        total -= n
    return out


def budget_message(
    msg: Message,
    policy: Policy,
    predicted: int,
    *,
    media_tokens: MediaCounter | None = None,
    free_window: int | None = None,
    text_tokens: Callable[[str], int] | None = None,
) -> Replacements | None:
    """Decide which tool results, and which images and documents attached to the user message
    itself, of a newly arrived ``msg`` to offload (None when none).

    ``predicted`` (tokens) only labels the event. ``media_tokens`` counts an image or document in
    tokens (the engine's counter; without it parts are not budgeted); ``free_window`` (tokens the
    window leaves after the fixed prefix) sizes ``MEDIA_GUARD_SHARE``. ``text_tokens`` (the
    engine's counter) weighs dense text by ``density`` where ``ToolResultBudget.weigh_tokens``:
    the caps are chars of English-like text, and 2,400 chars of Chinese are about 2,400 tokens,
    not 600.
    """
    b = ToolResultBudget.of(policy)
    dense: dict[str, float] = {}  # call id -> its text's density, counted once

    def density_of(r: ToolResult) -> float:
        if r.call_id not in dense:
            dense[r.call_id] = density(result_text(r), text_tokens if b.weigh_tokens else None)
        return dense[r.call_id]

    def chars(r: ToolResult) -> int:
        return int(result_chars(r) * density_of(r))

    exempt = {t.lower() for t in b.exempt_tools}
    part_tokens: dict[str, dict[int, int]] = {}
    if media_tokens is not None:
        for r in msg.tool_results:
            parts = media_parts(r)
            if parts:
                part_tokens[r.call_id] = {k: media_tokens(p) for k, p in parts}
    media = {cid: sum(t.values()) for cid, t in part_tokens.items()}
    user = {aid: (p, media_tokens(p)) for _, aid, p in user_parts(msg)} if media_tokens is not None else {}
    user_sizes = {aid: MEDIA_CHARS_PER_TOKEN * n for aid, (_, n) in user.items()}
    guard = (
        int(free_window * MEDIA_GUARD_SHARE)
        if OverflowGuard.of(policy).enabled and free_window is not None and free_window > 0
        else None
    )
    forced = {cid for cid, n in media.items() if guard is not None and n > guard}
    results, chosen = _over_caps(msg, b, exempt, media, forced, chars)
    chosen |= forced
    if guard is not None:
        chosen |= guard_user_media({aid: n for aid, (_, n) in user.items()}, chosen, guard)
    if not chosen:
        return None
    out: dict[str, ToolResult] = {}
    for r in results:
        if r.call_id not in chosen:
            continue
        key = result_key(msg.id, r.call_id)
        own_text = r.name.lower() not in exempt and b.enabled
        text_over = own_text and chars(r) > b.max_chars
        media_over = r.call_id in forced or (MEDIA_CHARS_PER_TOKEN * media.get(r.call_id, 0) > b.max_chars)
        if r.call_id in part_tokens and (media_over or not text_over):
            out[key] = media_preview(r, policy, part_tokens[r.call_id], keep_text=not own_text)
        else:  # the text alone is over the cap: its preview keeps the images and documents
            shown = preview(r, policy, density_of(r))
            if result_chars(shown) >= result_chars(r) and r.call_id not in part_tokens:
                chosen.discard(r.call_id)  # just over the cap: the preview and its lines are longer
                continue
            out[key] = shown
    if not chosen:
        return None
    raw = {r.call_id: result_chars(r) + MEDIA_CHARS_PER_TOKEN * media.get(r.call_id, 0) for r in results}
    named = ClearedResults.of(policy).name_retrieve
    lines = {aid: Text(media_line(aid, *user[aid], name_retrieve=named)) for aid in user if aid in chosen}
    calls = chosen - lines.keys()
    saved_chars = (
        sum(raw[c] if c in raw else user_sizes[c] for c in chosen)
        - sum(result_chars(r) for r in out.values())
        - sum(len(t.text) for t in lines.values())
    )
    offloaded = sum(len(part_tokens[c]) for c in calls if c in part_tokens) + len(lines)
    tokens = sum(media[c] for c in calls if c in media) + sum(user[a][1] for a in lines)
    event = _event(predicted, calls, lines, saved_chars, offloaded, tokens)
    return Replacements(out, event, {user_part_key(msg.id, aid): t for aid, t in lines.items()})


def _over_caps(
    msg: Message,
    b: ToolResultBudget,
    exempt: set[str],
    media: dict[str, int],
    forced: set[str],
    chars: Callable[[ToolResult], int] = result_chars,
) -> tuple[list[ToolResult], set[str]]:
    """The tool results of ``msg`` the budget looks at and those over the per-tool cap or, largest
    first, over the per-message cap (sizes in ``chars``; a part counts ``MEDIA_CHARS_PER_TOKEN``
    per token). With the budget off, only the results whose parts the guard forces out
    (``forced``) are looked at, and none is chosen here."""
    if not b.enabled:
        return [r for r in msg.tool_results if r.call_id in forced], set()
    results = [r for r in msg.tool_results if r.name.lower() not in exempt or r.call_id in media]
    sizes = {
        r.call_id: (0 if r.name.lower() in exempt else chars(r))
        + MEDIA_CHARS_PER_TOKEN * media.get(r.call_id, 0)
        for r in results
    }
    chosen = {cid for cid, n in sizes.items() if n > b.max_chars}
    remaining = sum(n for cid, n in sizes.items() if cid not in chosen)
    if remaining > b.message_max_chars:
        for cid, n in sorted(sizes.items(), key=lambda kv: -kv[1]):
            if remaining <= b.message_max_chars:
                break
            if cid not in chosen and n > b.preview_chars * 2:
                chosen.add(cid)
                remaining -= n
    return results, chosen


def _event(
    predicted: int,
    calls: set[str],
    lines: dict[str, Text],
    saved_chars: int,
    media_offloaded: int,
    media_tokens: int,
) -> LayerEvent:
    """The budget's event: the tool results (``calls``) and user attachments (``lines``, by
    artifact id) offloaded, the chars saved and, when any, the images and documents."""
    details: dict[str, object] = {"call_ids": sorted(calls), "chars_saved": saved_chars}
    if lines:
        details["user_parts"] = list(lines)
    if media_offloaded:
        details["media_offloaded"] = media_offloaded
        details["media_tokens"] = media_tokens
    what = [f"{len(calls)} tool result(s)"] if calls else []
    what += [f"{len(lines)} user attachment(s)"] if lines else []
    return LayerEvent(
        layer=LAYER,
        reason=f"{' and '.join(what)} over the cap",
        tokens_before=predicted,
        tokens_after=predicted,  # the engine fills in the measured figure
        details=details,
    )
