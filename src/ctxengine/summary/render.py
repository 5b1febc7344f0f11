"""The structured summary in ctxengine's own format (the ``ctxengine`` style), within a token budget.

``render`` turns a ``SummaryState`` into the continuation text: the primary request, every user
message, the files read and modified, errors and what followed them, the current plan, the
latest todo list, the current work and the exact identifiers, newest first. When the text is
over ``max_tokens`` (counted with the caller's counter), sections are cut from the least
valuable end (older identifiers, older errors, older user messages), then the text's head is
kept. ``identifier_index`` is the identifier list alone, for a summary written by an LLM. Pure.
"""

from __future__ import annotations

from collections.abc import Callable

from ctxengine.summary.state import SummaryState, current_plan


def render(state: SummaryState, *, max_tokens: int, count: Callable[[str], int], identifiers_max: int) -> str:
    """The summary text, at most ``max_tokens`` tokens by ``count``.

    Sections are dropped or cut from the least valuable end (older user messages, older
    identifiers) until the text fits.
    """
    ids = sorted(state.identifiers, key=lambda k: (-state.identifiers[k], k))[:identifiers_max]
    user_msgs = list(state.user_messages)
    errors = list(state.errors)
    while True:
        text = _render(state, user_msgs, errors, ids)
        if count(text) <= max_tokens:
            return text
        if len(ids) > 40:
            ids = ids[: len(ids) * 3 // 4]
        elif len(errors) > 5:
            errors = errors[len(errors) // 2 :]
        elif len(user_msgs) > 3:
            user_msgs = user_msgs[:1] + user_msgs[2:]
        elif ids:
            ids = ids[: len(ids) // 2]
        else:
            return _cut_to_tokens(text, max_tokens, count)


def _cut_to_tokens(text: str, max_tokens: int, count: Callable[[str], int]) -> str:
    """The longest head of ``text`` within ``max_tokens`` (binary search on characters)."""
    lo, hi = 0, len(text)
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if count(text[:mid]) <= max_tokens:
            lo = mid
        else:
            hi = mid - 1
    return text[:lo]


def _render(state: SummaryState, user_msgs: list[str], errors: list[str], ids: list[str]) -> str:
    parts = [
        "This session is being continued from a previous conversation that ran out of context. "
        f"The {state.messages_summarized} earlier messages are summarized below (structured summary, "
        "no model involved); exact identifiers are kept verbatim.",
        "## Primary request\n" + (state.primary_request or "(none recorded)"),
    ]
    if user_msgs:
        omitted = len(state.user_messages) - len(user_msgs)
        head = f"## All user messages ({omitted} omitted for space)" if omitted else "## All user messages"
        parts.append(head + "\n" + "\n".join(f"- {u}" for u in user_msgs))
    if state.files_read:
        parts.append("## Files read\n" + "\n".join(f"- {p}" for p in state.files_read[-60:]))
    if state.files_modified:
        parts.append("## Files modified\n" + "\n".join(f"- {p}" for p in state.files_modified[-60:]))
    if errors:
        parts.append("## Errors and what followed\n" + "\n".join(errors))
    if state.plan:
        parts.append("## Current plan (latest plan from ExitPlanMode)\n" + current_plan(state))
    if state.todos:
        parts.append("## Pending tasks (latest todo list)\n" + state.todos)
    if state.current_work:
        parts.append("## Current work (latest assistant message)\n" + state.current_work)
    if ids:
        parts.append("## Identifiers (newest first)\n" + " ".join(ids))
    return "\n\n".join(parts)


def identifier_index(
    state: SummaryState, max_tokens: int, count: Callable[[str], int], limit: int = 400
) -> str:
    """A section listing the exact identifiers seen, newest first, within ``max_tokens``."""
    ids = sorted(state.identifiers, key=lambda k: (-state.identifiers[k], k))[:limit]
    while ids:
        text = "## Exact identifiers (newest first)\n" + " ".join(ids)
        if count(text) <= max_tokens:
            return text
        ids = ids[: len(ids) * 3 // 4]
    return ""
