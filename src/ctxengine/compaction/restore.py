"""The restore step of a compaction: the working set put back after the summary.

After Claude Code's post-compaction restore: the recent file changes, the latest error, the files
read most recently, the instruction files (CLAUDE.md, AGENTS.md) and the todo list follow the
summary; the transcript skeleton (``ctxengine.summary.skeleton``, append-only segments) leads it. The
pieces are ``ctxengine.summary.restore``; here they are chosen by the policy's ``restore_*`` settings and
fitted: an automatic compaction never leaves the context larger than before it, so what is
restored fits in what it freed (the oldest skeleton segments give way first, then a restore that
does not fit is left out and named); a forced one (the user's ``/compact``) restores the working
set as asked.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

from ctxengine.layers.base import Cut
from ctxengine.messages.model import Message
from ctxengine.policy.compaction_settings import Restore
from ctxengine.policy.registry import Policy
from ctxengine.summary import restore
from ctxengine.summary import structured as summarize
from ctxengine.summary.skeleton import Segment, extend_segments


def skeleton_lead(
    p: Policy,
    skeleton: tuple[Segment, ...],
    new: Sequence[Message],
    count: Callable[[str], int],
    *,
    part: int,
) -> list[Segment]:
    """The transcript skeleton's segments after this compaction: the earlier ``skeleton`` extended
    by the history ``new`` since it (``restore_skeleton_tokens`` in all, blocks of
    ``restore_skeleton_block_tokens``, user messages ``restore_skeleton_user_tokens``; ``part``
    numbers the new block)."""
    r = Restore.of(p)
    return list(
        extend_segments(
            skeleton,
            new,
            count,
            max_tokens=r.skeleton_tokens,
            block_tokens=r.skeleton_block_tokens,
            user_tokens=r.skeleton_user_tokens,
            part=part,
        )
    )


def working_set(
    p: Policy,
    before_cut: Sequence[Message],
    kept: Sequence[Message],
    count: Callable[[str], int],
    *,
    shown: str,
    workspace: Path | None,
    from_transcript: bool,
    notes_facts: summarize.SummaryState,
    state: summarize.SummaryState,
    scans: restore.RestoreScans | None = None,
) -> list[Message]:
    """The restore messages of a compaction, in order (before fitting).

    Args:
        p: the policy (``restore_*``, ``instruction_files``).
        before_cut: what the restore reads (the history before the cut, or the span summarized).
        kept: the kept tail (what it already shows is not restored).
        count: tokens of a text.
        shown: the text the skeleton already shows (its changes are not repeated).
        workspace: the agent's working directory (files read from disk), or None.
        from_transcript: restore files from the transcript's reads, not the disk.
        notes_facts: the session notes' facts (their todo list and plan come first).
        state: the structured-summary facts after this compaction.
        scans: the session's folds over ``before_cut``, resumed from the last compaction's.

    Returns:
        The messages: recent changes, recent files, instruction files, todos (the latest error
        is pinned: ``compaction.pinned``).
    """
    r = Restore.of(p)
    restored: list[Message] = []
    if r.changes > 0:
        restored += restore.recent_changes(
            before_cut,
            kept,
            count,
            max_files=r.changes,
            change_tokens=r.change_tokens,
            total_tokens=r.total_tokens,
            shown=shown,
            scans=scans,
        )
    used = sum(count(m.text()) for m in restored)
    if r.files > 0:
        restored += restore.recent_files(
            before_cut,
            kept,
            count,
            workspace=workspace,
            from_transcript=from_transcript,
            max_files=r.files,
            file_tokens=r.file_tokens,
            total_tokens=max(0, r.total_tokens - used),
            shell_reads=r.shell_reads,
            scans=scans,
        )
    restored += restore.instruction_files(workspace, r.instruction_files)
    if r.todos:
        plan = summarize.current_plan(notes_facts) or summarize.current_plan(state)
        restored += restore.todo_message(notes_facts.todos or state.todos, plan)
    return restored


def fit(
    lead: list[Segment],
    restored: list[Message],
    room: int,
    count: Callable[[str], int],
    pinned: Sequence[Message] = (),
) -> tuple[int, list[Message], list[str]]:
    """Fit the skeleton ``lead`` and the ``restored`` messages in ``room`` tokens after the
    ``pinned`` ones, which always stay (first among the restored): the oldest segments give way
    first (popped from ``lead`` in place), then each restore message fits or is skipped, in order.
    Returns the lead's tokens, the messages kept (pinned first) and the ids skipped."""
    room -= sum(count(m.text()) for m in pinned)
    sizes = [count(m.text()) for m, _ in lead]  # on ``count``'s basis (the context's calibration)
    while lead and sum(sizes) > room:  # the oldest segments give way first
        lead.pop(0)  # (the pending segments are this same list)
        sizes.pop(0)
    lead_tokens = sum(sizes)
    room -= lead_tokens
    fitting: list[Message] = list(pinned)
    skipped: list[str] = []
    for m in restored:
        t = count(m.text())
        if t <= room:
            fitting.append(m)
            room -= t
        else:
            skipped.append(m.id)
    return lead_tokens, fitting, skipped


def place(
    cut: Cut,
    lead: Sequence[Segment],
    restored: Sequence[Message],
    lead_tokens: int,
    skipped: list[str],
    count: Callable[[str], int],
) -> int:
    """Put the skeleton ``lead`` before the summary and the ``restored`` messages after it (in
    place), count them in the event, and name what was ``skipped``. Returns the tokens added."""
    cut.prefix = [*(m for m, _ in lead), *cut.prefix, *restored]
    restored_tokens = sum(count(m.text()) for m in restored) + lead_tokens
    cut.event.tokens_after += restored_tokens
    if skipped:
        cut.event.details["restore_skipped"] = skipped
    return restored_tokens
