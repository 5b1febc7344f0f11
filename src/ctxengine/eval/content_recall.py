"""Content recall alone, as the shared anchor script counts it (line-number gutters are words).

``FidelityTracker`` (``ctxengine.eval.fidelity``) computes content recall beside read recall, the
probes and the re-fetch charges. The replay needs its content recall a second time, counted the
anchor's way (``../shared/acceptance/anchor_content_recall.py``: a gutter is a word), and nothing
else from that second count. ``ContentRecall`` keeps only what that figure reads: the shingles
seen so far, those of the current view and those of the system prompt; it gives the ``hits`` and
``grounded`` that ``FidelityTracker(..., gutters_are_words=True).measure(..., compaction=False)``
gives, without the file states, rules, sources and kinds that tracker also keeps.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

from ctxengine.eval.fidelity import MessageShingles, shingles, units
from ctxengine.messages.model import Message
from ctxengine.messages.view_counts import ViewCounts


class Recalled(NamedTuple):
    """Content recall at one call: ``hits`` of the ``grounded`` shingles (counts of shingles)."""

    hits: int
    grounded: int


class ContentRecall:
    """The anchor's content recall over one replay, fed in transcript order: ``observe(msg)`` after
    each message the agent saw, ``measure(call, messages, system)`` at each model call with what
    the policy sent. ``fixed_prefix``: the text every policy sends (its shingles never count)."""

    def __init__(self, fixed_prefix: str) -> None:
        self._fixed = _sh(fixed_prefix)
        self._seen: set[int] = set()
        self._of = MessageShingles(_sh)
        self._view: ViewCounts[int] = ViewCounts(self._of.block)
        self._system: tuple[str, frozenset[int]] = ("", frozenset())

    def observe(self, msg: Message) -> None:
        """Fold ``msg`` (a message of the session's own content) into the shingles seen."""
        self._seen |= self._of.msg(msg)

    def measure(self, call: Message, messages: Sequence[Message], system: str) -> Recalled:
        """The content recall of ``call`` (the recorded output) given what the policy sent."""
        self._view.move_to(messages)
        if system != self._system[0]:
            self._system = (system, _sh(system))
        sys_sh = self._system[1]
        out: set[int] = set()
        for u in units(call, outputs_only=True):
            out |= _sh(u)
        grounded = hits = 0
        for s in out:
            if s in self._fixed or s not in self._seen:
                continue
            grounded += 1
            hits += self._view.holds(s) or s in sys_sh
        return Recalled(hits, grounded)


def _sh(text: str) -> frozenset[int]:
    return shingles(text, gutters_are_words=True)
