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

from ctxengine import restore
from ctxengine.audit import user_request
from ctxengine.compaction_settings import Restore
from ctxengine.file_ledger import FileLedger
from ctxengine.messages import Message, Text
from ctxengine.policy import Policy
from ctxengine.rules import RuleBook


class PinnedFacts:
    """The rules and the file ledger of a session, folded message by message (``observe``)."""

    def __init__(self) -> None:
        self.rules = RuleBook()
        self.ledger = FileLedger()

    def observe(self, msg: Message) -> None:
        """Fold an ingested message: a user-typed text's rules, an assistant message's files."""
        if text := user_request(msg):
            self.rules.add_text(text, msg.id)
        if msg.role == "assistant":
            self.ledger.observe(msg)

    def rules_text(self, max_tokens: int, count: Callable[[str], int]) -> str:
        """The rules block within ``max_tokens`` (the newest rules first to be kept); ""."""
        if not self.rules.rules or max_tokens <= 0:
            return ""
        head = "[Pinned] Standing instructions and corrections from the user, verbatim, oldest first:"
        kept: list[str] = []
        used = count(head)
        for r in reversed(self.rules.rules):
            note = f" (replaces the earlier rule beginning “{r.replaces}”)" if r.replaces else ""
            line = f"- {r.text}{note}"
            t = count(line) + 1
            if used + t > max_tokens - 20:
                break
            kept.append(line)
            used += t
        left = len(self.rules.rules) - len(kept)
        tail = [f"({left} older rule(s) left out: the block is full)"] if left else []
        return "\n".join([head, *reversed(kept), *tail])


def pinned_messages(
    p: Policy,
    facts: PinnedFacts,
    history: Sequence[Message],
    kept: Sequence[Message],
    count: Callable[[str], int],
) -> list[Message]:
    """The pinned messages of a compaction, in order: the latest failure of the whole
    ``history`` (unless ``kept`` shows it whole), the rules, the ledger."""
    r = Restore.of(p)
    out: list[Message] = []
    if r.error_tokens > 0:
        out += restore.latest_error(history, kept, count, max_tokens=r.error_tokens)
    for mid, text in (
        ("pinned:rules", facts.rules_text(r.rules_tokens, count)),
        ("pinned:files", facts.ledger.render(r.ledger_tokens, count)),
    ):
        if text:
            out.append(Message(role="user", blocks=(Text(text),), id=mid, origin="restore"))
    return out


__all__ = ["PinnedFacts", "pinned_messages"]
