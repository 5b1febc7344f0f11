"""What every compaction carries, whatever room the restore has left: the latest failure, the
user's standing rules and the file ledger.

Ours (issue 29). The skeleton and the restore give way when the room under the threshold is
short; these do not: the head and tail of the latest failed tool result with the call that made it
(``restore.latest_error``, unless the kept tail shows it), the rules and corrections the user typed
(``rules.RuleBook``, verbatim, corrections in place of what they correct) within
``restore_rules_tokens``, and the files touched (``file_ledger.FileLedger``) within
``restore_ledger_tokens``. Each block says when it is full. Pure: it reads what was ingested.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from ctxengine.messages.model import Message, Text
from ctxengine.policy.compaction_settings import Restore
from ctxengine.policy.registry import Policy
from ctxengine.summary import restore
from ctxengine.summary.file_ledger import FileLedger
from ctxengine.summary.rules import RuleBook


class PinnedFacts:
    """The rules and the file ledger of a session, folded message by message (``observe``), and
    the restore's folds over its history (``scans``: the files read, the last changes, the latest
    failure), each resumed where the previous compaction's left off."""

    def __init__(self) -> None:
        self.rules = RuleBook()
        self.ledger = FileLedger()
        self.scans = restore.RestoreScans()

    def observe(self, msg: Message, typed: str) -> None:
        """Fold an ingested message (``typed``: its user-typed text, ``audit.user_request``): the
        rules of what the user typed, an assistant message's files."""
        if typed:
            self.rules.add_text(typed, msg.id)
        if msg.role == "assistant":
            self.ledger.observe(msg)

    def rules_text(self, max_tokens: int, count: Callable[[str], int]) -> str:
        """The rules block within ``max_tokens``, oldest first (the newest kept first); ""."""
        lines = [
            f"- {r.text}" + (f" (replaces the earlier rule beginning “{r.replaces}”)" if r.replaces else "")
            for r in reversed(self.rules.rules)
        ]
        head = "[Pinned] Standing instructions and corrections from the user, verbatim, oldest first:"
        return fit_block(head, lines, max_tokens, count, "rule(s)", oldest_first=True)

    def ledger_text(self, max_tokens: int, count: Callable[[str], int]) -> str:
        """The file ledger's block within ``max_tokens``, newest first; ""."""
        head = (
            "[Pinned] Files touched in this session, newest first (path: last action; for a write, "
            "the tool and its first new line):"
        )
        return fit_block(head, self.ledger.lines(), max_tokens, count, "file(s)")


def fit_block(
    head: str,
    newest_first: list[str],
    max_tokens: int,
    count: Callable[[str], int],
    what: str,
    *,
    oldest_first: bool = False,
) -> str:
    """``head`` and as many of the lines (newest first) as fit ``max_tokens`` (tokens, 20 kept
    for the note), shown newest first or, with ``oldest_first``, in the order stated; a last line
    says how many older ones were left out. "" when there is nothing or no room."""
    if not newest_first or max_tokens <= 0:
        return ""
    kept: list[str] = []
    used = count(head)
    for line in newest_first:
        t = count(line) + 1
        if used + t > max_tokens - 20:
            break
        kept.append(line)
        used += t
    left = len(newest_first) - len(kept)
    tail = [f"({left} older {what} left out: the block is full)"] if left else []
    return "\n".join([head, *(reversed(kept) if oldest_first else kept), *tail])


def pinned_messages(
    p: Policy,
    facts: PinnedFacts,
    history: Sequence[Message],
    kept: Sequence[Message],
    count: Callable[[str], int],
) -> list[Message]:
    """The pinned messages of a compaction, in order: the latest failure of the whole
    ``history`` (unless ``kept`` shows it whole; folded by ``facts.scans``), the rules, the
    ledger."""
    r = Restore.of(p)
    out: list[Message] = []
    if r.error_tokens > 0:
        out += restore.latest_error(history, kept, count, max_tokens=r.error_tokens, scans=facts.scans)
    for mid, text in (
        ("pinned:rules", facts.rules_text(r.rules_tokens, count)),
        ("pinned:files", facts.ledger_text(r.ledger_tokens, count)),
    ):
        if text:
            out.append(Message(role="user", blocks=(Text(text),), id=mid, origin="restore"))
    return out


__all__ = ["PinnedFacts", "pinned_messages"]
