"""Alignment of a request with the session it branches off: moved messages, not a new history.

Some clients rebuild their request around the conversation rather than append to it: aider puts
its files message (the files added to the chat, with their contents) and its reply just before
the newest prompt, and its SEARCH/REPLACE reminder (a ``system`` message) always last. No request
then extends the previous one as a prefix, and the hash chain (``identity``) sees a branch.

``align`` compares the per-message digests (``identity.chain_and_digests``: each starts with its
message's role tag) of the session's live client messages with the request's: ``prefix`` is their
common prefix; when every session message after it reappears in the request after it (as many
times as the session has it: a multiset, in any order), the request is a *realignment*: the
session's messages from ``prefix`` on leave the engine's view and the request's from ``prefix`` on
are ingested, so the view is what the client sent.

One kind of change is tolerated too: a *rewritten context message*. A session message after the
prefix that does not reappear is accepted only when it is a ``user`` message X, the session's
next message is an ``assistant`` message A that does reappear, and A stands in the request right
after a ``user`` message X' the session does not hold: the pair (X, A) became (X', A), a client
rewriting its own context message under its fixed acknowledgement (aider's files message, whose
text is the chat files' current contents, and its "Ok, any changes I propose will be to those
files."). X leaves the view like a moved message and X' is ingested where it stands. Each X needs
an A of its own in the request. X may be the first message (aider's repo map, rewritten when the
repository changes): the prefix is then empty, and the session was found by its chain's root.

When any other session message does not reappear (a rewind, an edited prompt, a regenerated or
changed assistant reply, Claude Code's ``/compact``) the request is a *branch*, as before: the
session is never changed by a history it does not hold. A request whose messages tool calls and
results moved keeps them paired: each moved message is in the request, whose pairing is the
client's.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from enum import Enum

import msgspec

from ctxengine.proxy.identity import ASSISTANT_TAG, USER_TAG


class Kind(Enum):
    """What a request is to the session it was matched with."""

    CONTINUES = "continues"  # the whole session is a prefix of the request
    REALIGNS = "realigns"  # the session's messages after the common prefix reappear, moved (or rewritten)
    BRANCHES = "branches"  # some session message after the common prefix is gone or changed


class Alignment(msgspec.Struct, frozen=True):
    """``align``'s answer: ``kind``; ``prefix``, the number of leading messages the session and
    the request share; ``moved``, the session's messages after ``prefix`` (0 unless ``kind`` is
    ``REALIGNS``: then they leave the view and reappear at their new places, or rewritten);
    ``rewritten``, how many of them are user context messages the request rewrote."""

    kind: Kind
    prefix: int
    moved: int = 0
    rewritten: int = 0


def common_prefix(a: Sequence[bytes], b: Sequence[bytes]) -> int:
    """How many leading items ``a`` and ``b`` share."""
    n = min(len(a), len(b))
    for i in range(n):
        if a[i] != b[i]:
            return i
    return n


def _missing(live: Sequence[bytes], request: Sequence[bytes], p: int) -> list[int]:
    """Indexes of the session messages after ``p`` that do not reappear in ``request`` after
    ``p`` (as a multiset: the later copies of a message the request has fewer times)."""
    have = Counter(request[p:])
    missing: list[int] = []
    for i in range(p, len(live)):
        if have[live[i]] > 0:
            have[live[i]] -= 1
        else:
            missing.append(i)
    return missing


def _rewrites(live: Sequence[bytes], request: Sequence[bytes], p: int, missing: list[int]) -> bool:
    """Whether every missing session message is a rewritten context message (module docstring):
    a user message whose assistant successor reappears right after a user message new to the
    session, each such place in the request used once."""
    gone = set(missing)
    known = set(live)
    used: set[int] = set()
    for i in missing:
        if live[i][:1] != USER_TAG or i + 1 >= len(live) or i + 1 in gone:
            return False
        reply = live[i + 1]
        if reply[:1] != ASSISTANT_TAG:
            return False
        at = next(
            (
                j
                for j in range(p + 1, len(request))
                if request[j] == reply
                and j not in used
                and request[j - 1][:1] == USER_TAG
                and request[j - 1] not in known
            ),
            None,
        )
        if at is None:
            return False
        used.add(at)
    return True


def align(live: Sequence[bytes], request: Sequence[bytes]) -> Alignment:
    """Align the session's live client messages (``live``: their digests, in the session's order)
    with a request's (``request``). Pure: see the module docstring for the rule. An empty
    session continues. A session sharing no leading message with the request is aligned all the
    same (aider rewrites its first message, the repo map, under its unchanged "Ok" when the
    repository changes): another conversation holds none of its replies, so it branches."""
    p = common_prefix(live, request)
    if p == len(live):
        return Alignment(Kind.CONTINUES, p)
    missing = _missing(live, request, p)
    if missing and not _rewrites(live, request, p, missing):
        return Alignment(Kind.BRANCHES, p)
    return Alignment(Kind.REALIGNS, p, len(live) - p, len(missing))
