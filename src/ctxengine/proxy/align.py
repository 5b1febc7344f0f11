"""Alignment of a request with the session it branches off: moved messages, not a new history.

Some clients rebuild their request around the conversation rather than append to it: aider puts
its files message (the files added to the chat, with their contents) and its reply just before
the newest prompt, and its SEARCH/REPLACE reminder (a ``system`` message) always last. No request
then extends the previous one as a prefix, and the hash chain (``identity``) sees a branch.

``align`` compares the per-message digests (``identity.message_digests``) of the session's live
client messages with the request's: ``prefix`` is their common prefix; when every session message
after it reappears in the request after it (as many times as the session has it: a multiset, in
any order), the request is a *realignment*: the session's messages from ``prefix`` on leave the
engine's view and the request's from ``prefix`` on are ingested, so the view is what the client
sent. When any of them does not reappear (a rewind, an edited or regenerated turn, Claude Code's
``/compact``) the request is a *branch*, as before: the session is never changed by a history it
does not hold. A request whose messages tool calls and results moved keeps them paired: each moved
message is in the request, whose pairing is the client's.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from enum import Enum

import msgspec


class Kind(Enum):
    """What a request is to the session it was matched with."""

    CONTINUES = "continues"  # the whole session is a prefix of the request
    REALIGNS = "realigns"  # the session's messages after the common prefix all reappear, moved
    BRANCHES = "branches"  # some session message after the common prefix is gone or changed


class Alignment(msgspec.Struct, frozen=True):
    """``align``'s answer: ``kind``; ``prefix``, the number of leading messages the session and
    the request share; ``moved``, the session's messages after ``prefix`` (0 unless ``kind`` is
    ``REALIGNS``: then they leave the view and reappear at their new places)."""

    kind: Kind
    prefix: int
    moved: int = 0


def common_prefix(a: Sequence[bytes], b: Sequence[bytes]) -> int:
    """How many leading items ``a`` and ``b`` share."""
    n = min(len(a), len(b))
    for i in range(n):
        if a[i] != b[i]:
            return i
    return n


def align(live: Sequence[bytes], request: Sequence[bytes]) -> Alignment:
    """Align the session's live client messages (``live``: their digests, in the session's order)
    with a request's (``request``). Pure: see the module docstring for the rule. An empty
    session continues; a session sharing no leading message with the request branches (another
    conversation: nothing to align against)."""
    p = common_prefix(live, request)
    if p == len(live):
        return Alignment(Kind.CONTINUES, p)
    if p == 0:
        return Alignment(Kind.BRANCHES, 0)
    wanted = Counter(live[p:])
    have = Counter(request[p:])
    if any(have[d] < n for d, n in wanted.items()):
        return Alignment(Kind.BRANCHES, p)
    return Alignment(Kind.REALIGNS, p, len(live) - p)
