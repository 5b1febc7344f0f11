"""The pairing invariant: find_violations / repair on hand-made cases and random sessions, the
cut-point helpers, and the writers' acceptance of every repaired projection."""

from __future__ import annotations

import itertools

import msgspec
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ctxengine.formats.anthropic_writer import to_anthropic
from ctxengine.formats.openai_writer import to_openai_chat
from ctxengine.formats.validate import validate_anthropic, validate_openai_chat
from ctxengine.layers.pairing import (
    MISSING_RESULT_TEXT,
    aborted_unanswered,
    find_violations,
    repair,
    safe_cut_points,
    tool_groups,
)
from ctxengine.messages.model import Message, Text, ToolCall, ToolResult
from strategies import sessions

PROPS = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def user(id: str, *blocks: object, **kw: object) -> Message:
    return Message("user", tuple(blocks), id, **kw)  # type: ignore[arg-type]


def asst(id: str, *blocks: object, **kw: object) -> Message:
    return Message("assistant", tuple(blocks), id, **kw)  # type: ignore[arg-type]


def call(cid: str) -> ToolCall:
    return ToolCall(cid, "Bash", {"command": "ls"})


def result(cid: str, text: str = "out") -> ToolResult:
    return ToolResult(cid, (Text(text),))


def kinds(msgs: list[Message]) -> list[tuple[str, int, str]]:
    return [(v.kind, v.index, v.call_id) for v in find_violations(msgs)]


def snapshot(msgs: list[Message]) -> bytes:
    return msgspec.json.encode(msgs)


# ---------------------------------------------------------------------------------------------
# Hand-made cases


def test_valid_conversation_has_no_violations_and_is_returned_as_is() -> None:
    msgs = [
        user("u1", Text("hi")),
        asst("a1", Text("let me look"), call("c1"), call("c2")),
        user("u2", result("c2"), result("c1"), Text("attachment")),
        asst("a2", Text("done")),
    ]
    assert find_violations(msgs) == []
    out, report = repair(msgs)
    assert out == msgs and all(a is b for a, b in zip(out, msgs, strict=True))
    assert not report.changed


def test_split_assistant_records_form_one_turn() -> None:
    # Claude Code writes each block of one response as its own assistant record.
    msgs = [
        user("u", Text("go")),
        asst("a1", call("c1")),
        asst("a2", call("c2")),
        user("r", result("c1"), result("c2")),
    ]
    assert find_violations(msgs) == []


def test_results_spread_over_the_zone_are_valid() -> None:
    msgs = [
        user("u", Text("go")),
        asst("a", call("c1"), call("c2")),
        user("r1", result("c1")),
        user("r2", result("c2")),
    ]
    assert find_violations(msgs) == []


def test_missing_result_gets_synthetic_error_after_existing_results() -> None:
    msgs = [user("u", Text("go")), asst("a", call("c1"), call("c2")), user("r", result("c1"), Text("note"))]
    assert kinds(msgs) == [("missing_result", 1, "c2")]
    out, report = repair(msgs)
    assert [m.id for m in out] == ["u", "a", "r"]
    blocks = out[2].blocks
    assert blocks[0] is msgs[2].blocks[0]
    assert isinstance(blocks[1], ToolResult) and blocks[1].call_id == "c2" and blocks[1].is_error
    assert blocks[1].content == (Text(MISSING_RESULT_TEXT),) and blocks[1].name == "Bash"
    assert blocks[2] == Text("note")
    assert report.synthesized == ["c2"]


def test_interrupted_last_call_gets_new_message_with_unique_id() -> None:
    msgs = [user("u", Text("go")), asst("a", call("c1")), user("a:tool-results", Text("clash"))]
    msgs = [msgs[0], msgs[2], msgs[1]]  # the assistant is last, and the natural id is taken
    out, report = repair(msgs)
    assert out[-1].id == "a:tool-results-2" and out[-1].role == "user"
    assert out[-1].meta == {"pairing_repair": True}
    assert report.inserted_messages == ["a:tool-results-2"]
    assert find_violations(out) == []


def test_orphan_and_duplicate_results_are_dropped_and_reported() -> None:
    msgs = [
        user("u", result("ghost"), Text("hello")),
        asst("a", call("c1")),
        user("r", result("c1", "first"), result("c1", "second")),
    ]
    assert kinds(msgs) == [("orphan_result", 0, "ghost"), ("duplicate_result", 2, "c1")]
    out, report = repair(msgs)
    assert out[0].blocks == (Text("hello"),)
    assert out[2].blocks == (result("c1", "first"),)
    assert [(d.message_id, d.reason, d.call_id) for d in report.dropped] == [
        ("u", "orphan_result", "ghost"),
        ("r", "duplicate_result", "c1"),
    ]
    assert report.dropped[0].block == result("ghost")  # still retrievable


def test_result_behind_a_later_turn_is_moved_back() -> None:
    msgs = [
        user("u", Text("go")),
        asst("a1", call("c1")),
        user("u2", Text("wait")),
        asst("a2", Text("ok")),
        user("late", result("c1")),
    ]
    assert kinds(msgs) == [("misplaced_result", 4, "c1")]
    out, report = repair(msgs)
    assert [m.id for m in out] == ["u", "a1", "u2", "a2"]  # "late" emptied and removed
    assert out[2].blocks == (result("c1"), Text("wait"))
    assert out[2].blocks[0] is msgs[4].blocks[0]
    assert report.moved == ["c1"] and report.removed_messages == ["late"]


def test_result_before_its_call_is_moved_after_it() -> None:
    msgs = [user("early", result("c1")), asst("a1", call("c1")), user("u", Text("next"))]
    assert kinds(msgs) == [("misplaced_result", 0, "c1")]
    out, _ = repair(msgs)
    assert [m.id for m in out] == ["a1", "u"] and out[1].blocks == (result("c1"), Text("next"))


def test_system_notice_between_call_and_result_ends_the_zone() -> None:
    msgs = [asst("a", call("c1")), Message("system", (Text("notice"),), "s"), user("r", result("c1"))]
    assert kinds(msgs) == [("misplaced_result", 2, "c1")]
    out, _ = repair(msgs)
    assert [m.id for m in out] == ["a", "a:tool-results", "s"]


def test_duplicate_and_misplaced_calls_are_dropped() -> None:
    msgs = [
        user("u", Text("go"), call("x")),
        asst("a1", call("c1")),
        user("r1", result("c1")),
        asst("a2", call("c1"), Text("again")),
        user("r2", Text("fine")),
    ]
    assert kinds(msgs) == [("misplaced_call", 0, "x"), ("duplicate_call", 3, "c1")]
    out, report = repair(msgs)
    assert out[0].blocks == (Text("go"),) and out[3].blocks == (Text("again"),)
    assert {d.reason for d in report.dropped} == {"misplaced_call", "duplicate_call"}


def test_reused_call_id_with_its_own_result_is_renamed() -> None:
    # tau-bench: a later turn reuses an earlier call's id, each call answered right after it
    msgs = [
        user("u", Text("go")),
        asst("a1", call("c1")),
        user("r1", result("c1", "first")),
        asst("a2", call("c1")),
        user("r2", result("c1", "second")),
    ]
    assert kinds(msgs) == [("duplicate_call", 3, "c1")]
    out, report = repair(msgs)
    assert out[1] is msgs[1] and out[2] is msgs[2]
    assert out[3].blocks == (ToolCall("c1-2", "Bash", {"command": "ls"}),)
    assert out[4].blocks == (result("c1-2", "second"),)
    assert report.renamed == [("a2", "c1", "c1-2")] and report.dropped == []
    assert find_violations(out) == []
    assert tool_groups(msgs) == [(0, 1), (1, 3), (3, 5)]  # the reuse does not glue the rounds


def test_parallel_calls_sharing_an_id_are_told_apart() -> None:
    msgs = [asst("a", call("c"), call("c")), user("r", result("c", "one"), result("c", "two"))]
    out, _ = repair(msgs)
    assert [b.id for b in out[0].tool_calls] == ["c", "c-2"]
    assert [(r.call_id, r.content) for r in out[1].tool_results] == [
        ("c", (Text("one"),)),
        ("c-2", (Text("two"),)),
    ]


def test_empty_messages_are_violations_and_dropped_but_transparent() -> None:
    msgs = [asst("a", call("c1")), asst("e1"), user("e2"), user("r", result("c1"))]
    assert kinds(msgs) == [("empty_message", 1, ""), ("empty_message", 2, "")]
    out, report = repair(msgs)
    assert [m.id for m in out] == ["a", "r"] and out[1] is msgs[3]
    assert report.removed_messages == ["e1", "e2"]


def test_aborted_turn_is_left_alone() -> None:
    aborted = asst("a", Text("partial"), call("c1"), call("c2"), meta={"stop_reason": "aborted"})
    msgs = [
        user("u", Text("go")),
        aborted,
        user("r", result("c1")),
        user("i", Text("[Request interrupted by user]")),
    ]
    assert find_violations(msgs) == []
    assert repair(msgs)[0] == msgs
    assert aborted_unanswered(msgs) == {"c2"}
    body = to_anthropic(msgs, model="m")
    assert [b["id"] for b in body["messages"][1]["content"] if b["type"] == "tool_use"] == ["c1"]
    assert validate_anthropic(body) == []
    assert validate_openai_chat(to_openai_chat(msgs, model="m")) == []


def test_inputs_are_never_mutated() -> None:
    msgs = [user("early", result("c1")), asst("a1", call("c1"), call("c2")), asst("e"), user("u", Text("x"))]
    before = snapshot(msgs)
    repair(msgs)
    assert snapshot(msgs) == before


def test_tool_groups_and_cut_points() -> None:
    msgs = [
        user("u0", Text("go")),  # 0
        asst("a1", Text("thinking aloud")),  # 1
        asst("a2", call("c1")),  # 2
        user("r1", result("c1")),  # 3
        user("att", Text("attachment")),  # 4
        asst("a3", Text("done")),  # 5
        user("u1", Text("next")),  # 6
        Message("system", (Text("notice"),), "s"),  # 7
    ]
    assert tool_groups(msgs) == [(0, 1), (1, 5), (5, 6), (6, 7), (7, 8)]
    assert safe_cut_points(msgs) == [0, 1, 5, 6, 7]
    assert tool_groups([]) == [] and safe_cut_points([]) == []


def test_tool_groups_never_split_a_far_result() -> None:
    msgs = [asst("a1", call("c1")), user("u", Text("x")), asst("a2", Text("y")), user("late", result("c1"))]
    assert tool_groups(msgs) == [(0, 4)]
    assert safe_cut_points(msgs) == [0]


# ---------------------------------------------------------------------------------------------
# Properties on random sessions


@PROPS
@given(sessions(corrupt=False))
def test_clean_sessions_are_valid_and_untouched(msgs: list[Message]) -> None:
    assert find_violations(msgs) == []
    out, report = repair(msgs)
    assert not report.changed and all(a is b for a, b in zip(out, msgs, strict=True))


@PROPS
@given(sessions(corrupt=None))
def test_repair_output_is_valid_and_idempotent(msgs: list[Message]) -> None:
    before = snapshot(msgs)
    out, report = repair(msgs)
    assert snapshot(msgs) == before  # input not mutated
    assert find_violations(out) == []
    again, report2 = repair(out)
    assert again == out and not report2.changed
    assert report.changed == bool(find_violations(msgs))
    if not report.changed:
        assert out == msgs


@PROPS
@given(sessions(corrupt=True))
def test_repair_invents_nothing_and_keeps_ids(msgs: list[Message]) -> None:
    out, report = repair(msgs)
    originals = {id(b) for m in msgs for b in m.blocks}
    new_ids = {new: old for _, old, new in report.renamed}
    synthesized = []
    by_id = {m.id: m for m in msgs}
    for m in out:
        for b in m.blocks:
            if id(b) in originals:
                continue
            if isinstance(b, ToolCall) and b.id in new_ids:  # a reused id, renamed
                assert msgspec.structs.replace(b, id=new_ids[b.id]) in by_id[m.id].blocks
            elif isinstance(b, ToolResult) and b.call_id in new_ids:
                assert any(msgspec.structs.replace(b, call_id=new_ids[b.call_id]) in x.blocks for x in msgs)
            else:
                assert isinstance(b, ToolResult) and b.is_error and b.content == (Text(MISSING_RESULT_TEXT),)
                synthesized.append(b.call_id)
    assert sorted(synthesized) == sorted(report.synthesized)

    in_ids = [m.id for m in msgs]
    inserted = set(report.inserted_messages)
    kept = [m.id for m in out if m.id not in inserted]
    assert kept == [i for i in in_ids if i not in set(report.removed_messages)]
    assert len({m.id for m in out}) == len(out)
    roles = {m.id: m.role for m in msgs}
    assert all(m.role == roles[m.id] for m in out if m.id not in inserted)
    assert all(m.blocks for m in out)


@PROPS
@given(sessions(corrupt=True))
def test_results_of_valid_pairs_stay_where_they_are(msgs: list[Message]) -> None:
    violations = find_violations(msgs)
    flagged = {(v.index, v.call_id) for v in violations}
    reused = {v.call_id for v in violations if v.kind == "duplicate_call"}
    out, _ = repair(msgs)
    where = {id(b): m.id for m in out for b in m.blocks}
    for i, m in enumerate(msgs):
        for b in m.blocks:
            if isinstance(b, ToolResult) and (i, b.call_id) not in flagged and b.call_id not in reused:
                assert where.get(id(b)) == m.id


@PROPS
@given(sessions(corrupt=None), st.booleans())
def test_writers_accept_every_repaired_projection(msgs: list[Message], inline: bool) -> None:
    out, _ = repair(msgs)
    mode = "inline" if inline else "hoist"
    body = to_anthropic(out, system="You are an agent.", model="claude-x", system_messages=mode)
    assert validate_anthropic(body) == []
    assert validate_openai_chat(to_openai_chat(out, system="sys", model="gpt-x", system_messages=mode)) == []


@PROPS
@given(sessions(corrupt=None), st.data())
def test_cutting_at_group_boundaries_keeps_pairs(msgs: list[Message], data: st.DataObject) -> None:
    groups = tool_groups(msgs)
    assert [s for s, _ in groups] == sorted({s for s, _ in groups})
    assert all(a[1] == b[0] for a, b in itertools.pairwise(groups))
    if msgs:
        assert groups[0][0] == 0 and groups[-1][1] == len(msgs)
    # a result shares its group with the nearest call with its id before it (else the first after)
    group_of = {}
    for g, (s, e) in enumerate(groups):
        for k in range(s, e):
            group_of[k] = g
    first_call: dict[str, int] = {}
    for k, m in enumerate(msgs):
        for c in m.tool_calls:
            first_call.setdefault(c.id, k)
    last_call: dict[str, int] = {}
    for k, m in enumerate(msgs):
        for blk in m.blocks:
            if isinstance(blk, ToolCall):
                last_call[blk.id] = k
            elif isinstance(blk, ToolResult) and blk.call_id in first_call:
                assert group_of[k] == group_of[last_call.get(blk.call_id, first_call[blk.call_id])]

    out, _ = repair(msgs)
    cuts = safe_cut_points(out)
    for k in cuts:
        assert find_violations(out[k:]) == []
    groups = tool_groups(out)
    if groups:
        i = data.draw(st.integers(0, len(groups) - 1))
        j = data.draw(st.integers(i, len(groups) - 1))
        assert find_violations(out[: groups[i][0]] + out[groups[j][1] :]) == []


# ---------------------------------------------------------------------------------------------
# Performance: linear time


def _long_session(n_rounds: int) -> list[Message]:
    msgs: list[Message] = [user("u", Text("go"))]
    for r in range(n_rounds):
        msgs.append(asst(f"a{r}", Text("step"), call(f"c{r}a"), call(f"c{r}b")))
        blocks = [result(f"c{r}a")] if r % 7 else [result(f"c{r}a"), result(f"c{r}b")]
        msgs.append(user(f"r{r}", *(blocks if r % 5 else [*blocks, result("ghost")])))
    return msgs


@pytest.mark.parametrize("rounds", [1_000, 10_000])
def test_repair_on_long_sessions(rounds: int) -> None:
    # speed is measured in benchmarks, not asserted here
    msgs = _long_session(rounds)
    out, _ = repair(msgs)
    assert find_violations(out) == []
    assert tool_groups(out)
