"""The alignment of a request with the session it branches off (``proxy.align``)."""

from __future__ import annotations

from ctxengine.proxy.align import Alignment, Kind, align, common_prefix
from ctxengine.proxy.identity import (
    ASSISTANT_TAG,
    OTHER_TAG,
    USER_TAG,
    chain_and_digests,
    digest,
    message_bytes,
)
from ctxengine.proxy.index import TurnRecord, replayable

TAGS = {"u": USER_TAG, "a": ASSISTANT_TAG}


def d(name: str) -> bytes:
    """A message's own digest: ``u.text`` a user message, ``a.text`` an assistant one, else
    another role (system, tool)."""
    role, _, text = name.partition(".")
    return TAGS.get(role, OTHER_TAG) + digest(name.encode()) if text else OTHER_TAG + digest(name.encode())


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


AIDER = "u.map a.ok u.files a.files_ok u.p0 s.reminder"  # the files pair before the prompt


def test_a_rewritten_context_message_under_its_fixed_reply_realigns() -> None:
    # after an edit aider's files message holds the files' new contents; its reply is fixed
    second = ds("u.map a.ok u.p0 a.r0 u.files2 a.files_ok u.p1 s.reminder")
    assert align(ds(AIDER), second) == Alignment(Kind.REALIGNS, 2, 4, 1)
    # the files message rewritten in place (nothing moved) realigns too
    assert align(ds(AIDER), ds("u.map a.ok u.files2 a.files_ok u.p0 s.reminder")) == Alignment(
        Kind.REALIGNS, 2, 4, 1
    )


def test_a_rewritten_first_message_under_its_fixed_reply_realigns_from_the_start() -> None:
    # the repository changed: aider's repo map (its first message) is rewritten under its "Ok",
    # and the files message too (a file was added to the chat)
    third = ds("u.map2 a.ok u.files2 a.files_ok u.p0 a.r0 u.added s.reminder")
    assert align(ds(AIDER), third) == Alignment(Kind.REALIGNS, 0, 6, 2)


def test_another_conversation_with_the_same_system_prompt_branches_from_nothing() -> None:
    # a one-shot side call, or a new conversation: it holds none of the session's replies
    assert align(ds(AIDER), ds("u.summarize")) == Alignment(Kind.BRANCHES, 0)
    assert align(ds(AIDER), ds("u.other a.reply u.next")) == Alignment(Kind.BRANCHES, 0)


def test_a_rewritten_message_whose_reply_changed_too_branches() -> None:
    # aider's "no files" message and reply become the files message and its own reply: both changed
    second = ds("u.map a.ok u.p0 a.r0 u.files2 a.files_ok2 u.p1 s.reminder")
    assert align(ds(AIDER), second) == Alignment(Kind.BRANCHES, 2)


def test_a_rewrite_needs_a_new_user_message_before_the_reply() -> None:
    # the reply now follows a user message the session holds: not a rewrite (p0 is not new)
    second = ds("u.map a.ok u.p0 a.files_ok u.p1 s.reminder")
    assert align(ds(AIDER), second) == Alignment(Kind.BRANCHES, 2)
    # the reply alone, after an assistant message
    assert align(ds(AIDER), ds("u.map a.ok u.p0 a.r0 a.files_ok u.p1")) == Alignment(Kind.BRANCHES, 2)


def test_a_rewrite_is_only_of_a_user_message_followed_by_an_assistant_one() -> None:
    # a system message rewritten under the same reply
    assert align(ds("u.m a.ok s.ctx a.ack u.p"), ds("u.m a.ok s.ctx2 a.ack u.p")).kind is Kind.BRANCHES
    # a user message with no successor in the session (the newest prompt, edited)
    assert align(ds("u.m a.ok u.p"), ds("u.m a.ok u.p2")) == Alignment(Kind.BRANCHES, 2)
    # a user message followed by a tool message
    assert align(ds("u.m a.ok u.x t.out"), ds("u.m a.ok u.x2 t.out")).kind is Kind.BRANCHES


def test_each_rewritten_message_needs_a_reply_of_its_own() -> None:
    live = ds("u.m a.ok u.x a.ack u.y a.ack u.q")
    assert align(live, ds("u.m a.ok u.x2 a.ack u.q")).kind is Kind.BRANCHES  # one ack for two
    assert align(live, ds("u.m a.ok u.x2 a.ack u.q a.ack")).kind is Kind.BRANCHES  # q is not new
    assert align(live, ds("u.m a.ok u.x2 a.ack u.y2 a.ack u.q")) == Alignment(Kind.REALIGNS, 2, 5, 2)


def test_edits_rewinds_and_regenerations_still_branch_with_roles() -> None:
    live = ds("u.m a.ok u.p0 a.r0 u.p1 a.r1")
    assert align(live, ds("u.m a.ok u.p0 a.r0 u.p1")) == Alignment(Kind.BRANCHES, 5)  # rewind
    assert align(live, ds("u.m a.ok u.p0 a.r0 u.p1 a.r1b")) == Alignment(Kind.BRANCHES, 5)  # regenerated
    assert align(live, ds("u.m a.ok u.p0 a.r0 u.p1b")) == Alignment(Kind.BRANCHES, 4)  # edited prompt
    assert align(live, ds("u.m a.ok u.p0 a.r0b u.p1 a.r1")) == Alignment(Kind.BRANCHES, 3)  # a changed reply
    assert align(live, ds("u.summary a.r1 u.p2")) == Alignment(Kind.BRANCHES, 0)  # /compact


def test_digests_follow_the_normal_form_not_the_position() -> None:
    plain = {"role": "user", "content": "hi"}
    marked = {"type": "text", "text": "hi", "cache_control": {"type": "ephemeral"}}
    blocks = {"role": "user", "content": [marked]}
    links, digests = chain_and_digests(b"root", [plain, {"role": "assistant", "content": "yo"}, blocks])
    assert digests[0] == digests[2] == USER_TAG + digest(message_bytes(plain))
    assert digests[1][:1] == ASSISTANT_TAG
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
