"""Pairing repair of a growing view, computed once per closed turn (issue 10).

The engine's view only grows between rebuilds (a decision rebuilds it), and the projection must be
``repair(view)`` (``layers.pairing``) at every call. Re-planning the whole view at every tool-loop
call made ``assemble`` grow with the history, and a lasting violation (an interrupted call, an
orphan result) made *every* call pay for a whole repair. Here the view is split at a **separating
boundary** (an assistant message after a user or system message, or a system message: no turn or
result zone spans it) into a checked prefix, repaired once and cached, and an open tail, repaired
at each call; the projection is the two outputs joined.

Why that is exact. ``repair`` works per assistant turn and its zone, plus a few things that look
across the whole list: the first call with an id, results matched to calls by id, the new ids
given to a reused call id (unused in the whole list) and to inserted messages (unique among the
list's message ids). At a separating boundary the turns and zones of the two sides are those each
side has alone, so ``repair(P + T) == repair(P) + repair(T)`` whenever the sides share none of
those: no tool call or result id, no id one side makes that the other holds
(``_Part.compatible``). When they do share one (a late result for a call in the prefix, a reused
id, a clash of made ids) the whole view is repaired as before, and the prefix re-cached from
scratch once the shared part has closed.

The messages repair makes are also kept stable across calls (``RepairCache.stable``): equal
bytes must stay the same objects, or the prompt-cache model (which compares by identity) would
see a changed prefix on every call. The prefix's made messages are stabilised once, on the first
call that joins it to a tail, and reused as they are, which is what stabilising them again would
give as long as nothing replaced them under their key (checked: no later made message has the
same key, and a whole-view repair that replaces one makes the prefix be stabilised again).
"""

from __future__ import annotations

from collections.abc import Sequence

from ctxengine.layers.pairing import repair
from ctxengine.messages.model import Message

MadeKey = tuple[str, int]  # (message id, number of blocks) of a message repair made


class _Part:
    """One side of a split: its repair (not yet stabilised) and the ids that could tie it to the
    other side. ``out`` is the repaired list, ``made`` flags the messages repair made in it."""

    def __init__(self, messages: Sequence[Message]) -> None:
        self.ids: set[str] = set()  # tool call ids and tool result call ids
        for m in messages:
            for c in m.tool_calls:
                self.ids.add(c.id)
            for r in m.tool_results:
                self.ids.add(r.call_id)
        self.msg_ids = {m.id for m in messages}
        self.inserted: set[str] = set()
        self.renamed: set[str] = set()
        self.keys: set[MadeKey] = set()  # keys of the messages repair made
        self.made_twice = False  # two made messages share a key: re-stabilising them would differ
        self.valid = True
        self.out: list[Message] = []
        self.made: list[bool] = []

    @classmethod
    def of(cls, messages: Sequence[Message]) -> _Part:
        """``messages`` repaired (not yet stabilised), with their ids."""
        repaired, report = repair(messages)
        part = cls(messages)
        part.valid = not report.violations
        part.inserted = set(report.inserted_messages)
        part.renamed = {new for _, _, new in report.renamed}
        inputs = {id(m) for m in messages}
        part.out = repaired
        part.made = [id(m) not in inputs for m in repaired]
        for m, made in zip(repaired, part.made, strict=True):
            if made:
                key = (m.id, len(m.blocks))
                part.made_twice |= key in part.keys
                part.keys.add(key)
        return part

    def compatible(self, later: _Part) -> bool:
        """Whether ``repair`` of this part followed by ``later`` equals the two repairs joined
        (and their stabilised messages the ones stabilising the whole would give)."""
        return (
            self.ids.isdisjoint(later.ids)
            and self.renamed.isdisjoint(later.ids)
            and later.renamed.isdisjoint(self.ids)
            and later.renamed.isdisjoint(self.renamed)
            and self.inserted.isdisjoint(later.msg_ids)
            and later.inserted.isdisjoint(self.msg_ids)
            and later.inserted.isdisjoint(self.inserted)
            and not self.made_twice
            and self.keys.isdisjoint(later.keys)
        )

    def absorb(self, later: _Part) -> None:
        """Append ``later`` (compatible) to this part."""
        self.ids |= later.ids
        self.msg_ids |= later.msg_ids
        self.inserted |= later.inserted
        self.renamed |= later.renamed
        self.made_twice |= later.made_twice
        self.keys |= later.keys
        self.valid = self.valid and later.valid
        self.out.extend(later.out)
        self.made.extend(later.made)


def separating_boundary(view: Sequence[Message], lo: int) -> int | None:
    """The largest index ``b`` with ``lo < b < len(view)`` where no assistant turn or result zone
    spans the cut before ``view[b]`` (see ``layers.pairing``: ``view[b]`` is a non-empty system
    message, or a non-empty assistant message after a non-empty non-assistant one); None if
    there is none."""
    for b in range(len(view) - 1, lo, -1):
        m, prev = view[b], view[b - 1]
        if not m.blocks or not prev.blocks:
            continue
        if m.role == "system" or (m.role == "assistant" and prev.role != "assistant"):
            return b
    return None


class RepairCache:
    """``repair`` of the engine's view, its checked prefix cached (see the module docstring).

    ``project(view)`` returns what ``stable(repair(view))`` returns, in time proportional to what
    was appended since the last call (plus a list copy); ``reset()`` after the view was rebuilt.
    ``valid`` tells whether the last projected view needed no repair at all.

    Stabilising writes what it made to a table the next calls compare against, so it happens
    only where the whole-view repair would do it: on a call whose projection is the prefix and
    the tail joined, in order (the prefix's messages once, then kept while nothing replaces them
    under their key: ``_stable_upto``), or on the whole view when the two sides share an id.
    """

    def __init__(self) -> None:
        self._made: dict[MadeKey, Message] = {}  # messages repair made, by id and size
        self._prefix: _Part | None = None
        self._checked = 0  # view[:_checked] is the cached prefix
        self._stable: list[Message] = []  # the prefix's repair stabilised, as far as it goes
        self.valid = True
        self.full_repairs = 0  # calls that repaired the whole view (a shared id; the first call)

    def reset(self) -> None:
        """Forget the cached prefix (the view was rebuilt); stabilised messages are kept."""
        self._prefix = None
        self._checked = 0
        self._stable = []

    def stable(self, repaired: Sequence[Message], made: Sequence[bool]) -> list[Message]:
        """``repaired`` with each message repair made (``made``) replaced by the equal one made
        before under the same key, if any (and remembered otherwise)."""
        out: list[Message] = []
        keys = self._prefix.keys if self._prefix is not None else ()
        for m, new in zip(repaired, made, strict=True):
            if new:
                key = (m.id, len(m.blocks))
                known = self._made.get(key)
                if known is not None and known == m:
                    m = known
                else:
                    self._made[key] = m
                    if key in keys:  # the prefix's message under this key is not the one kept
                        self._stable = []
            out.append(m)
        return out

    def project(self, view: Sequence[Message]) -> list[Message]:
        """``repair(view)``, stabilised: the cached prefix extended to the last closed turn,
        then the open tail repaired alone and joined (or the whole view repaired, see above)."""
        b = separating_boundary(view, self._checked)
        if b is not None:
            self._extend(view, b)
        prefix = self._prefix
        if prefix is None:
            return self._whole(view)
        part = _Part.of(view[self._checked :])
        if not prefix.compatible(part):
            return self._whole(view)
        self.valid = prefix.valid and part.valid
        if self.valid:
            return list(view)
        done = len(self._stable)
        self._stable.extend(self.stable(prefix.out[done:], prefix.made[done:]))
        return self._stable + self.stable(part.out, part.made)

    def _extend(self, view: Sequence[Message], b: int) -> None:
        """Cache ``view[:b]``: the new closed turns appended to the prefix, or (when they share
        an id with it) the whole of it repaired afresh. Nothing is stabilised here."""
        part = _Part.of(view[self._checked : b])
        if self._prefix is not None and self._prefix.compatible(part):
            self._prefix.absorb(part)
        else:
            self._prefix = _Part.of(view[:b])
            self._stable = []
        self._checked = b

    def _whole(self, view: Sequence[Message]) -> list[Message]:
        self.full_repairs += 1
        repaired, report = repair(view)
        self.valid = not report.violations
        if self.valid:
            return list(view)
        inputs = {id(m) for m in view}
        return self.stable(repaired, [id(m) not in inputs for m in repaired])
