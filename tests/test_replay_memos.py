"""The replay's per-call memos give what computing from scratch gives, on a real session that the
default policy compacts (the MiMo sub-agent session at a 64,000-token window): the request body
encoded with ``anthropic_memo.BlockMemo`` (``openai_writer.RunMemo``) equals the body encoded
without it, and
``view_counts.ViewCounts`` (which looks only at the added messages when a view extends the
previous one) holds exactly the keys of the messages in view."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from conftest import CLAUDE_CODE
from ctxengine.formats.anthropic_memo import BlockMemo
from ctxengine.formats.anthropic_writer import to_anthropic
from ctxengine.formats.openai_writer import RunMemo, to_openai_chat
from ctxengine.messages.model import Block, Message, Text
from ctxengine.messages.view_counts import ViewCounts
from test_replay_stages import Setup, _setup, calls

MIMO_SIDECHAIN = CLAUDE_CODE / "cc_mimo-v2.5-pro_subagent-sidechain_of-4530697c_agent-aee292b61a7ab9367.jsonl"


@pytest.fixture(scope="module")
def mimo(transcripts: Path) -> Setup:
    return _setup(MIMO_SIDECHAIN, 64_000)


@pytest.mark.parametrize("share", [False, True], ids=["new-messages", "shared-messages"])
def test_block_memo_encodes_every_projection_as_a_fresh_encoding_does(mimo: Setup, share: bool) -> None:
    memo = BlockMemo(share_messages=share)
    bodies = []
    for _, proj, _ in calls(mimo, "default"):
        with_memo = to_anthropic(proj.messages, system=proj.system, model="m", memo=memo)
        fresh = to_anthropic(proj.messages, system=proj.system, model="m")
        assert json.dumps(with_memo, sort_keys=False) == json.dumps(fresh, sort_keys=False)
        bodies.append(json.dumps(with_memo))
    assert len(bodies) == 19
    # each projection was grouped from where it left the previous one, not from its start
    total = sum(len(p.messages) for _, p, _ in calls(mimo, "default"))
    assert 0 < memo.regrouped < total / 2
    # the breakpoints were copied, not written into the shared blocks: the earlier bodies are intact
    memo2 = BlockMemo(share_messages=share)
    again = [
        json.dumps(to_anthropic(p.messages, system=p.system, model="m", memo=memo2))
        for _, p, _ in calls(mimo, "default")
    ]
    assert again == bodies


def test_run_memo_encodes_every_projection_as_a_fresh_encoding_does(mimo: Setup) -> None:
    memo = RunMemo()
    total = 0
    for _, proj, _ in calls(mimo, "default"):
        with_memo = to_openai_chat(proj.messages, system=proj.system, model="m", memo=memo)
        fresh = to_openai_chat(proj.messages, system=proj.system, model="m")
        assert json.dumps(with_memo) == json.dumps(fresh)
        total += len(proj.messages)
    # each projection was grouped from where it left the previous one, not from its start
    assert 0 < memo.regrouped < total / 2


def _words(b: Block) -> set[str]:
    return set(Message(role="user", blocks=[b], id="b").text().split())


def test_view_counts_hold_the_keys_of_the_view(mimo: Setup) -> None:
    counts: ViewCounts[str] = ViewCounts(_words)
    ever: set[str] = set()
    left = 0
    for _, proj, _ in calls(mimo, "default"):
        counts.move_to(proj.messages)
        held = set().union(*(_words(b) for m in proj.messages for b in m.blocks))
        ever |= held
        assert {w for w in ever if counts.holds(w)} == held
        left += len(ever - held)
    assert left > 0  # the compaction took words out of view, and they are no longer held


def test_view_counts_forget_what_left_the_view() -> None:
    x, y, z = Text("x"), Text("y"), Text("z")
    a, b, c = (Message(role="user", blocks=[t], id=f"m{i}") for i, t in enumerate((x, y, z)))
    counts: ViewCounts[str] = ViewCounts(lambda blk: [blk.text] if isinstance(blk, Text) else [])
    counts.move_to([a, b])
    counts.move_to([a, b, c])  # extends the view
    assert counts.holds("x") and counts.holds("y") and counts.holds("z")
    counts.move_to([c])  # a compaction dropped a and b
    assert not counts.holds("x") and not counts.holds("y") and counts.holds("z")
    counts.move_to([c, a])  # a comes back
    assert counts.holds("x") and counts.holds("z") and not counts.holds("y")


def test_view_counts_follow_blocks_a_rebuilt_message_keeps_or_shares() -> None:
    """A message rebuilt around blocks it already had (a baseline's growing message), and one
    block in two messages of the view: a key is held while any block that holds it is in view."""
    x, y, z = Text("x"), Text("y"), Text("z")
    counts: ViewCounts[str] = ViewCounts(lambda blk: [blk.text] if isinstance(blk, Text) else [])
    counts.move_to([Message(role="user", blocks=[x, y], id="one")])
    counts.move_to([Message(role="user", blocks=[x, y, z], id="one")])  # rebuilt, one block more
    assert counts.holds("x") and counts.holds("y") and counts.holds("z")
    counts.move_to(
        [Message(role="user", blocks=[y, z], id="one"), Message(role="user", blocks=[y], id="two")]
    )
    assert not counts.holds("x") and counts.holds("y") and counts.holds("z")
    counts.move_to([Message(role="user", blocks=[y], id="two")])  # y still held by the other message
    assert counts.holds("y") and not counts.holds("z")
    counts.move_to([])
    assert not counts.holds("y")
