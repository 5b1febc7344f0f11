"""Applying the engine to one request, and feeding the response back (runs on the engine thread).

``prepare``: ingest the client messages the session has not seen, ``assemble`` the projection,
add the recovery hints to its placeholders (``recovery``), write it in the client's wire format
and validate it against the provider's rules; a body that fails validation raises
``InvalidProjection`` (the proxy then fails open). ``finish``: count what the engine removed
(``client_tokens``: savings only from what was actually taken out), give the upstream's usage to
``after_turn`` (the ledger's anchor) and keep the reply until the client sends it back (the
client's history is the truth: a differing turn is counted and the client's is ingested). While
the upstream answers, ``turn.Turn`` rehearses the session's next compaction (``engine.ahead``).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from ctxengine.dashboard.timeline import CallPoint, call_point
from ctxengine.engine.core import ContextEngine, Projection
from ctxengine.messages.model import Message, Usage
from ctxengine.proxy.body_memo import BodyMemo
from ctxengine.proxy.index import TurnRecord
from ctxengine.proxy.pinned import id_index
from ctxengine.proxy.sessions import ProxySession
from ctxengine.proxy.wire import ClientRequest, Wire
from ctxengine.replay import COMPACTION_LAYERS


class InvalidProjection(RuntimeError):
    """The written projection breaks the provider's rules (a bug: the proxy fails open)."""


@dataclass
class Prepared:
    """What goes upstream for one request, and the figures of its projection (tokens)."""

    body: dict[str, Any]
    projection: Projection
    new: list[Message]  # the client messages this request added to the session
    client_tokens: int = 0  # the client's request (fixed prefix + whole history), set by ``finish``
    budget: int | None = None  # what ``assemble`` was given: the prompt's budget, when the client's
    # output ask shrank it (tokens) ...
    at: float = 0.0  # ... and the clock (Unix seconds)
    realigned: int | None = None  # the session's client messages from here on were taken out: moved
    moved: int = 0  # how many were (``align``)
    recorded: bool = False  # in a shared store: the turn (number ``session.turns - 1``) is recorded


OUTPUT_FIELDS = ("max_tokens", "max_completion_tokens", "max_output_tokens")


OUTPUT_FLOOR = 8_192  # tokens of output room before a session has shown what its model writes
OUTPUT_MARGIN = 2  # the room is this many times the longest response seen in the session


def response_budget(engine: ContextEngine, body: dict[str, Any], seen_output: int = 0) -> int | None:
    """The window this request's prompt may fill (tokens), or None for the engine's own.

    The output room is what the model really writes, not the client's maximum: the client's ask
    (``max_tokens`` and its OpenAI names) or, when smaller, ``OUTPUT_MARGIN`` x the longest
    response of the session so far (``seen_output``, tokens; at least ``OUTPUT_FLOOR``). Claude
    Code asks 32,000-64,000: at a 64,000-token window that left a 29,000-token fixed prefix ~3,000
    for history. When the room is more than the overflow guard keeps free, the prompt leaves all
    of it (vLLM, llama.cpp and OpenAI refuse a prompt plus ``max_tokens`` over the context; letta
    at 32,000 sent 27,441 + 8,192), and ``cap_output`` cuts the ask to what is left."""
    asked = max((v for k in OUTPUT_FIELDS if type(v := body.get(k)) is int), default=0)
    room = min(asked, max(OUTPUT_FLOOR, OUTPUT_MARGIN * seen_output))
    extra = room - engine.policy.overflow_reserve
    if extra <= 0:
        return None
    return max(engine.window - extra, engine.window // 2)  # more than half: the client's to weigh


def prepare(session: ProxySession, wire: Wire, request: ClientRequest) -> Prepared:
    """Ingest, assemble, write and validate. Raises ``BadRequest`` for client messages of the
    wrong shape, ``InvalidProjection``, or whatever the engine raises (the caller drops the
    session and fails open)."""
    engine = session.engine
    moved = _take_out_moved(session, wire, request)
    realigned = session.ingested if moved else None
    new = _ingest(session, request, len(request.conversation), check_reply=wire)
    budget, at = response_budget(engine, request.body, session.output_max), time.time()
    projection = engine.assemble(budget, now=at)
    memo = session.body_memo
    if memo is None:  # the session's first request: its previous body, for the next one
        memo = session.body_memo = BodyMemo("anthropic" if wire.provider == "anthropic" else "openai")
    body = wire.build(request, memo.hints.apply(engine, projection.messages), memo)
    cap_output(body, engine.window - projection.tokens)
    problems = wire.validate(body, memo)
    if problems:
        raise InvalidProjection(f"{len(problems)} problem(s), first: {problems[0]}")
    _count_events(session, projection)
    session.turns += 1
    return Prepared(body, projection, new, budget=budget, at=at, realigned=realigned, moved=moved)


def _take_out_moved(session: ProxySession, wire: Wire, request: ClientRequest) -> int:
    """Take the session's client messages from ``session.realign`` on out of the engine's view
    (the client moved them: ``align``; the caller ingests them again where they now stand) and
    out of the client's tokens, with a reader that has read the request up to there; how many.

    A neutral message that holds client messages on both sides of that point (consecutive tool
    results read as one) is taken out whole, from its first client message on."""
    p, session.realign = session.realign, None
    if p is None:
        return 0
    ingestor = session.engine.ingestor
    while True:  # a reader as the session's would be after the request's first ``p`` messages
        reader = wire.reader()
        read = reader.read(request.conversation[:p], 0) if p else []
        live = ingestor.ingested(read[-1].id) if read else None
        if not read or (live is not None and live.blocks == read[-1].blocks):
            break
        p = id_index(read[-1].id) or 0  # the engine's copy holds more: from its start
    ids = [i for i in ingestor.live_ids() if (k := id_index(i)) is not None and k >= p]
    moved = [m for i in ids if (m := ingestor.ingested(i)) is not None]
    ingestor.take_out(ids, "the client moved them")
    session.history_tokens -= sum(session.engine.counter.count_message(m) for m in moved)
    taken, session.ingested, session.reader = session.ingested - p, p, reader
    return taken


def cap_output(body: dict[str, Any], room: int) -> None:
    """Cut the client's output ask in ``body`` to ``room`` (tokens the window leaves after the
    prompt), so that prompt + ask never exceeds the window; never below an Anthropic thinking
    budget (``max_tokens`` must exceed it) nor below 1."""
    thinking = body.get("thinking")
    floor = thinking.get("budget_tokens", 0) + 1 if isinstance(thinking, dict) else 1
    for k in OUTPUT_FIELDS:
        v = body.get(k)
        if type(v) is int and v > room:
            body[k] = max(room, floor, 1) if max(room, floor) < v else v


def _ingest(
    session: ProxySession, request: ClientRequest, upto: int, check_reply: Wire | None
) -> list[Message]:
    """Ingest the request's client messages ``session.ingested:upto`` (bootstrapping a new
    engine with the request's fixed prefix first: not one realigned from its first message,
    whose ledger keeps its anchor); returns them."""
    engine = session.engine
    bootstrap_once(session, request)
    start = session.ingested
    new = session.reader.read(request.conversation[start:upto], start)
    if check_reply is not None:
        _check_reply(session, check_reply, new[0] if new else None)
    for m in new:
        engine.ingest(m)
    session.ingested = upto
    return new


def bootstrap_once(session: ProxySession, request: ClientRequest) -> None:
    """Bootstrap the session's engine with the request's fixed prefix when it has ingested
    nothing yet (not one realigned from its first message, whose ledger keeps its anchor)."""
    engine = session.engine
    if session.ingested == 0 and not engine.history:
        prefix = engine.counter.count_text(request.prefix_text)
        engine.bootstrap(system=request.prefix_text, fixed_prefix_tokens=prefix)


def replay_turn(session: ProxySession, wire: Wire, request: ClientRequest, turn: TurnRecord) -> None:
    """Bring a session's engine one recorded turn further, as the node that served it did: the
    same client messages (a prefix of ``request``'s; those the client had moved taken out first,
    ``TurnRecord.realigned``: the caller checks that ``request`` still holds the turn's messages
    where they were, ``replayable``), the same ``assemble`` (budget, clock), the
    same usage to ``after_turn`` (none when the upstream failed or never answered). The session's
    figures are not counted again (the store has them).

    Raises:
        ValueError: when ``request`` does not hold the turn's messages (not this conversation).
    """
    if turn.messages > len(request.conversation) or (
        turn.messages < session.ingested and (turn.realigned is None or turn.realigned > session.ingested)
    ):
        raise ValueError(f"turn {turn.turn} covers {turn.messages} messages; the request has them not")
    session.realign = turn.realigned
    _take_out_moved(session, wire, request)
    new = _ingest(session, request, turn.messages, check_reply=None)
    session.history_tokens += sum(session.engine.counter.count_message(m) for m in new)
    after_replayed(session, turn)


def after_replayed(session: ProxySession, turn: TurnRecord) -> None:
    """The rest of a replayed turn once its messages are in: the same ``assemble`` (budget,
    clock), the same usage to ``after_turn`` (none when the upstream failed or never answered)."""
    engine = session.engine
    engine.assemble(turn.budget, now=turn.at)
    if turn.status is not None and turn.status < 400:
        engine.after_turn(turn.usage)
        if turn.usage is not None:
            session.output_max = max(session.output_max, turn.usage.output_tokens)
    session.turns = turn.turn + 1


def _check_reply(session: ProxySession, wire: Wire, first: Any) -> None:
    pending, session.pending_reply = session.pending_reply, None
    if pending is None or first is None or getattr(first, "role", None) != "assistant":
        return
    if pending.blocks != first.blocks:
        session.stats.replies_replaced += 1


def _count_events(session: ProxySession, projection: Projection) -> None:
    for e in projection.events:
        if e.layer in COMPACTION_LAYERS and "error" not in e.details:
            session.stats.compactions += 1
        elif e.layer == "tool_result_budget":
            session.stats.offloads += 1


def client_tokens(session: ProxySession, projection: Projection) -> int:
    """What the client's request would have cost (tokens): the projection's prediction plus what
    the engine removed from the history (its raw count less the projection's, at the ledger's
    scale). One counter: a request the engine left as it was costs exactly its projection."""
    removed = max(0, session.history_tokens - projection.content_estimate)
    return projection.tokens + round(removed * session.engine.ledger.scale)


def _point(session: ProxySession, prepared: Prepared, usage: Usage | None) -> CallPoint:
    p = prepared.projection
    return call_point(
        call=session.stats.calls, at=prepared.at, client_tokens=prepared.client_tokens,
        upstream_tokens=p.tokens, window=p.window, engine=session.engine, events=p.events, usage=usage,
    )  # fmt: skip


def finish(
    session: ProxySession,
    wire: Wire,
    prepared: Prepared | None,
    status: int,
    usage: Usage | None,
    reply: dict[str, Any] | None,
) -> None:
    """After the upstream answered: the client's size counted (off the request's path); on a
    2xx, usage to the ledger, the figures, the reply kept; else the error counted."""
    st = session.stats
    if prepared is not None:
        engine = session.engine
        session.history_tokens += sum(engine.counter.count_message(m) for m in prepared.new)
        prepared.client_tokens = client_tokens(session, prepared.projection)
    if status >= 400:
        st.upstream_errors += 1
        return
    st.calls += 1
    if prepared is not None:
        st.client_tokens += prepared.client_tokens
        st.upstream_tokens += prepared.projection.tokens
        saved = max(0, prepared.client_tokens - prepared.projection.tokens)
        st.cost_saved_usd += session.engine.model.cost_usd(input_tokens=saved)
        session.engine.after_turn(usage)
        session.timeline.append(_point(session, prepared, usage))
    if usage is not None:
        st.reported_input_tokens += usage.total_input
        st.cache_read_tokens += usage.cache_read_tokens
        st.cache_write_tokens += usage.cache_write_tokens + usage.cache_write_1h_tokens
        st.output_tokens += usage.output_tokens
        session.output_max = max(session.output_max, usage.output_tokens)
    if reply is not None:
        try:
            read = wire.reader().read([reply], session.ingested)
        except ValueError:  # a reply the reader cannot take is not compared, only counted
            read = []
        session.pending_reply = read[0] if read else None
