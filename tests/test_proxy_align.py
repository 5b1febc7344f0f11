"""The alignment of a request with the session it branches off (``proxy.align``)."""

from __future__ import annotations

from ctxengine.proxy.align import Alignment, Kind, align, common_prefix
from ctxengine.proxy.identity import chain_and_digests, digest, message_bytes
from ctxengine.proxy.index import TurnRecord, replayable


def d(name: str) -> bytes:
    return digest(name.encode())


def ds(names: str) -> list[bytes]:
    return [d(n) for n in names.split()]


def test_common_prefix() -> None:
    assert common_prefix(ds("a b c"), ds("a b x")) == 2
    assert common_prefix(ds("a b"), ds("a b c")) == 2
    assert common_prefix([], ds("a")) == 0


def test_a_session_that_is_a_prefix_continues() -> None:
    assert align(ds("s r a"), ds("s r a p")) == Alignment(Kind.CONTINUES, 3)
    assert align([], ds("s")) == Alignment(Kind.CONTINUES, 0)


def test_aider_moves_its_files_pair_and_reminder() -> None:
    # request 1: system-less chat, repo map pair, files pair, prompt, reminder
    first = ds("map ok files ok2 prompt reminder")
    # request 2: the files pair moves before the newest user message, the reminder stays last
    second = ds("map ok prompt reply updated okay files ok2 error reminder")
    assert align(first, second) == Alignment(Kind.REALIGNS, 2, 4)


def test_repeated_messages_must_reappear_as_often() -> None:
    live = ds("a b x x")
    assert align(live, ds("a b y x x")).kind is Kind.REALIGNS
    assert align(live, ds("a b y x")) == Alignment(Kind.BRANCHES, 2)


def test_a_rewind_or_a_regenerated_turn_branches() -> None:
    live = ds("a b c d")
    assert align(live, ds("a b c")) == Alignment(Kind.BRANCHES, 3)  # rewind: d is gone
    assert align(live, ds("a b c d2")) == Alignment(Kind.BRANCHES, 3)  # d regenerated
    assert align(live, ds("a b c2 d e")) == Alignment(Kind.BRANCHES, 2)  # c edited
    assert align(live, ds("summary e")) == Alignment(Kind.BRANCHES, 0)  # /compact: nothing shared


def test_digests_follow_the_normal_form_not_the_position() -> None:
    plain = {"role": "user", "content": "hi"}
    marked = {"type": "text", "text": "hi", "cache_control": {"type": "ephemeral"}}
    blocks = {"role": "user", "content": [marked]}
    links, digests = chain_and_digests(b"root", [plain, {"role": "assistant", "content": "yo"}, blocks])
    assert digests[0] == digests[2] == digest(message_bytes(plain))
    assert links[0] != links[2]  # the chain still tells the positions apart


def turn(n: int, messages: int, realigned: int | None = None) -> TurnRecord:
    return TurnRecord(n, messages, None, 0.0, 200, None, realigned)


def test_turns_before_a_realignment_cannot_be_replayed_from_a_later_request() -> None:
    plain = [turn(0, 4), turn(1, 6)]
    assert replayable(plain) and replayable([])
    moved = [turn(0, 6), turn(1, 9, realigned=2), turn(2, 11)]
    assert not replayable(moved)  # turn 0's messages 2..5 have moved since
    assert replayable(moved[1:])  # from the realigned turn on, the request holds them in place
    assert not replayable(moved[1:], realigned_now=5)  # the request itself moves turn 1's
    assert replayable([turn(0, 2), turn(1, 9, realigned=2)])  # turn 0 ends where the move begins
