"""Replaying a session's recorded turns from the store's entries, not from the request.

A node that must bring a session's engine up to the store's last turn (it never saw the session,
or a restart) replays the recorded turns (``apply.replay_turn``) with each turn's client messages
taken from the current request, where they stand. A turn after which the client moved messages
(a realignment, ``align``: aider's files message, Claude Code clearing an old tool result) cannot
be replayed that way: the current request holds those messages elsewhere, or rewritten
(``index.replayable``). The store holds what each turn gave the engine, in order: the ``event``
entry of the messages it took out (``Ingest.take_out``, their ids) and the ``message`` entries of
the messages it ingested (their neutral form, ids ``m<client index>``). ``split`` cuts that log
into turns by the turn records (``TurnRecord``: how many client messages a turn covered, where it
realigned), and ``StoredTurns`` replays each turn from its part: the same take-out, the same
messages, the same ``assemble`` (budget, clock) and usage, so the engine is the one the node that
served the turns had (the projection it sends is the same).

Entries the engine made itself while assembling (compactions, layer events) are not input: the
replay makes them again (the writer is muted meanwhile). Messages the engine ingested under ids
of its own are not client messages and are left out, as ``replay_turn`` leaves them out.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, NamedTuple

import msgspec

from ctxengine.messages.model import Message
from ctxengine.proxy.apply import after_replayed, bootstrap_once
from ctxengine.proxy.index import TurnRecord
from ctxengine.proxy.pinned import id_index
from ctxengine.store.base import Entry

if TYPE_CHECKING:
    from ctxengine.proxy.sessions import ProxySession
    from ctxengine.proxy.wire import ClientRequest, Wire

TAKE_OUT = "take_out"  # the ``layer`` of ``Ingest.take_out``'s event entry


class TurnInput(NamedTuple):
    """What one recorded turn gave the engine: the ids it took out first (None: none), then the
    messages it ingested."""

    taken_out: list[str] | None
    messages: list[Message]


def _take_out_ids(entry: Entry) -> list[str] | None:
    """The ids of a non-empty take-out event entry, else None."""
    p = entry.payload
    if entry.kind != "event" or not isinstance(p, dict) or p.get("layer") != TAKE_OUT:
        return None
    ids = p.get("ids")
    return [str(i) for i in ids] if isinstance(ids, list) and ids else None


def split(entries: Sequence[Entry], turns: Sequence[TurnRecord]) -> list[TurnInput]:
    """The input of each of ``turns`` (a session's turn records from its first, in order) in its
    ``entries`` (all of them, in order). A turn's messages are the ``message`` entries after the
    previous turn's, up to the first one of a client index at or past the turn's ``messages`` or
    the next take-out; a realigned turn starts with its take-out.

    Raises:
        ValueError: when the entries do not hold the turns (a realigned turn with no take-out).
    """
    out: list[TurnInput] = []
    i, n = 0, len(entries)
    for t in turns:
        taken: list[str] | None = None
        if t.realigned is not None:
            while i < n and (taken := _take_out_ids(entries[i])) is None:
                if entries[i].kind == "message":
                    raise ValueError(f"turn {t.turn} realigned, but a message comes before its take-out")
                i += 1
            if taken is None:
                raise ValueError(f"turn {t.turn} realigned, but the store holds no take-out for it")
            i += 1
        messages: list[Message] = []
        while i < n:
            e = entries[i]
            if _take_out_ids(e) is not None:
                break  # the next turn's realignment
            if e.kind == "message":
                k = id_index(str(e.payload.get("id", "")))
                if k is not None and k >= t.messages:
                    break  # the next turn's message
                if k is not None:
                    messages.append(msgspec.convert(e.payload, Message))
            i += 1
        out.append(TurnInput(taken, messages))
    return out


class StoredTurns:
    """Replays ``turns`` (from the session's first) from ``entries`` on a new engine: call it
    with each turn in order (``shared``'s replay resolves background jobs between the calls)."""

    def __init__(
        self, session: ProxySession, wire: Wire, request: ClientRequest, turns: Sequence[TurnRecord],
        entries: Sequence[Entry],
    ) -> None:  # fmt: skip
        self.session, self.wire, self.request = session, wire, request
        self._inputs = dict(zip((t.turn for t in turns), split(entries, turns), strict=True))

    def __call__(self, turn: TurnRecord) -> None:
        """Replay ``turn``: its take-out, its messages, its ``assemble`` and usage."""
        s, given = self.session, self._inputs.pop(turn.turn)
        engine = s.engine
        bootstrap_once(s, self.request)
        if given.taken_out is not None:
            moved = [m for i in given.taken_out if (m := engine.ingestor.ingested(i)) is not None]
            engine.ingestor.take_out(given.taken_out, "the client moved them")
            s.history_tokens -= sum(engine.counter.count_message(m) for m in moved)
        for m in given.messages:
            engine.ingest(m)
        s.history_tokens += sum(engine.counter.count_message(m) for m in given.messages)
        s.ingested = turn.messages
        after_replayed(s, turn)
        if not self._inputs:  # the last turn: a reader that has read the session's messages
            s.reader = self.wire.reader()
            s.reader.read(self.request.conversation[: s.ingested], 0)
