"""Hypothesis strategies for random agent sessions, shared by the property tests of every layer.

``sessions()`` draws a ``list[Message]`` shaped like a real coding-agent conversation: user
prompts, harness attachments (user text with ``origin="attachment"``), assistant turns with
signed / unsigned / redacted thinking, text and parallel tool calls (dict inputs, sometimes a
free-form string input), sometimes recorded as one assistant message per block the way Claude
Code writes them; tool results with text, image and document parts, errors, empty output, one
user message per result or all in one; aborted turns (``meta["stop_reason"] = "aborted"``)
followed by an interruption notice; system notices between turns.

``sessions(corrupt=False)`` is always valid under ``ctxengine.layers.pairing``; ``corrupt=True``
applies 1-5 random corruptions (results dropped, duplicated, moved anywhere, orphan results,
empty messages, duplicate calls, calls in user messages, messages deleted or swapped, a system
notice pushed between a call and its result, the head cut off, a call id reused by a later call
and its results); ``corrupt=None`` draws either.
Message ids are unique in every case.
"""

from __future__ import annotations

import itertools
from typing import Any

import msgspec
from hypothesis import strategies as st

from ctxengine.messages.model import (
    Block,
    Document,
    Image,
    Message,
    ResultPart,
    Text,
    Thinking,
    ToolCall,
    ToolResult,
)

TOOLS = ("Read", "Bash", "Grep", "Edit", "apply_patch")
PNG = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg=="
WORDS = ("src/app.py", "def main():", "error: not found", "0x7f3a", "ok", "test passed", "TODO", "é ü 中")

_texts = st.one_of(
    st.lists(st.sampled_from(WORDS), min_size=1, max_size=6).map(" ".join),
    st.sampled_from(["", " ", "\n"]),  # blank text: writers must drop it
    st.text(max_size=20),
)
# a tool result's text: as above, or a long output (a few hundred characters: a preview of it is
# shorter than it, so the tool-result budget offloads it; a short one it keeps whole)
_result_texts = st.one_of(_texts, st.lists(st.sampled_from(WORDS), min_size=40, max_size=80).map(" ".join))


# strategies built once, not at every draw (hypothesis validates each new strategy object, which
# took most of the property tests' time); what they draw is unchanged
_RESULT_KINDS = st.sampled_from(("text", "text", "text", "image", "text+image", "empty", "document"))
_TOOL_INPUTS = st.fixed_dictionaries(
    {"path": st.sampled_from(("a.py", "src/b.ts", "README.md"))},
    optional={"limit": st.integers(1, 500), "pattern": st.sampled_from(("foo", "^def "))},
)
_THINKING_KINDS = st.sampled_from(("signed", "signed", "unsigned", "redacted"))
_GAPS = st.sampled_from((1.0, 30.0, 400.0))
_TOOL_NAMES = st.sampled_from(TOOLS)
_ROLES = st.sampled_from(("user", "assistant", "system"))


class _Ids:
    def __init__(self) -> None:
        self._n = itertools.count()

    def __call__(self, prefix: str) -> str:
        return f"{prefix}{next(self._n)}"


@st.composite
def _result_content(draw: st.DrawFn) -> tuple[ResultPart, ...]:
    kind = draw(_RESULT_KINDS)
    if kind == "text":
        return (Text(draw(_result_texts)),)
    if kind == "image":
        return (Image("image/png", data=PNG, width=1, height=1),)
    if kind == "text+image":
        return (Text(draw(_texts)), Image("image/png", data=PNG, width=1, height=1))
    if kind == "document":
        return (Document("text/plain", data="hello\n", title="notes.txt"),)
    return ()


_RESULT_CONTENT = _result_content()


def _tool_input(draw: st.DrawFn, name: str) -> dict[str, Any] | str:
    if name == "apply_patch":
        return "*** Begin Patch\n*** Update File: a.py\n-x\n+y\n*** End Patch"
    return draw(_TOOL_INPUTS)


def _thinking(draw: st.DrawFn) -> Thinking:
    kind = draw(_THINKING_KINDS)
    if kind == "signed":
        return Thinking(draw(_texts), signature="EqQBCkYIBxgCKkB" + str(draw(st.integers(0, 99))))
    if kind == "redacted":
        return Thinking("", redacted=True, encrypted="EmwKAhgBEgy3va3pzix/LafPsn4a")
    return Thinking(draw(_texts))


@st.composite
def _valid_session(draw: st.DrawFn, min_turns: int, max_turns: int) -> list[Message]:
    ids = _Ids()
    msgs: list[Message] = []
    now = 1_700_000_000.0

    def add(role: str, blocks: list[Block], **kw: Any) -> None:
        nonlocal now
        now += draw(_GAPS)
        msgs.append(Message(role=role, blocks=tuple(blocks), id=ids("m"), timestamp=now, **kw))  # type: ignore[arg-type]

    for turn in range(draw(st.integers(min_turns, max_turns))):
        if turn and draw(st.integers(0, 5)) == 0:
            add("system", [Text("[notice: older tool results were cleared]")], origin="notice")
        add("user", [Text(draw(_texts) or "do the task")])
        if draw(st.booleans()):
            add("user", [Text("<system-reminder>file a.py was read</system-reminder>")], origin="attachment")
        for _ in range(draw(st.integers(0, 3))):
            blocks: list[Block] = []
            if draw(st.booleans()):
                blocks.append(_thinking(draw))
            if draw(st.booleans()):
                blocks.append(Text(draw(_texts)))
            calls = []
            for _ in range(draw(st.integers(1, 3))):
                name = draw(_TOOL_NAMES)
                calls.append(ToolCall(ids("toolu_"), name, _tool_input(draw, name)))
            blocks.extend(calls)
            aborted = draw(st.integers(0, 9)) == 0
            meta = {"stop_reason": "aborted"} if aborted else {}
            if draw(st.booleans()):  # Claude Code: one record per content block
                for b in blocks:
                    add("assistant", [b], meta=dict(meta))
            else:
                add("assistant", blocks, meta=meta)
            answered = calls[: draw(st.integers(0, len(calls)))] if aborted else calls
            results: list[Block] = [
                ToolResult(
                    c.id,
                    draw(_RESULT_CONTENT),
                    is_error=draw(st.integers(0, 4)) == 0,
                    name=c.name if draw(st.booleans()) else "",
                )
                for c in answered
            ]
            if len(results) > 1 and draw(st.booleans()):
                results = list(draw(st.permutations(results)))
            if results and draw(st.booleans()):
                for r in results:
                    add("user", [r])
            elif results:
                add("user", results)
            if aborted:
                add("user", [Text("[Request interrupted by user]")])
                break
            if draw(st.integers(0, 3)) == 0:
                add(
                    "user",
                    [Text("<system-reminder>todo list changed</system-reminder>")],
                    origin="attachment",
                )
        else:
            final: list[Block] = []
            if draw(st.booleans()):
                final.append(_thinking(draw))
            final.append(Text(draw(_texts) or "done"))
            add("assistant", final, meta={"stop_reason": "end_turn"})
    return msgs


def _corrupt(draw: st.DrawFn, msgs: list[Message]) -> list[Message]:
    ids = _Ids()
    msgs = list(msgs)
    for _ in range(draw(st.integers(1, 5))):
        op = draw(
            st.sampled_from(
                [
                    "drop_result",
                    "dup_result",
                    "move_result",
                    "orphan",
                    "empty",
                    "dup_call",
                    "call_in_user",
                    "drop_message",
                    "swap",
                    "notice_between",
                    "cut_head",
                    "reuse_id",
                ]
            )
        )
        if not msgs:
            msgs.append(Message("user", (), ids("x")))
            continue
        results = [
            (i, b)
            for i, m in enumerate(msgs)
            for b, blk in enumerate(m.blocks)
            if isinstance(blk, ToolResult)
        ]
        calls = [
            (i, b) for i, m in enumerate(msgs) for b, blk in enumerate(m.blocks) if isinstance(blk, ToolCall)
        ]
        pos = draw(st.integers(0, len(msgs)))
        anywhere = draw(st.integers(0, len(msgs) - 1))
        if op == "drop_result" and results:
            i, b = draw(st.sampled_from(results))
            msgs[i] = _with(msgs[i], msgs[i].blocks[:b] + msgs[i].blocks[b + 1 :])
        elif op in ("dup_result", "move_result") and results:
            i, b = draw(st.sampled_from(results))
            block = msgs[i].blocks[b]
            if op == "move_result":
                msgs[i] = _with(msgs[i], msgs[i].blocks[:b] + msgs[i].blocks[b + 1 :])
            at = draw(st.integers(0, len(msgs[anywhere].blocks)))
            msgs[anywhere] = _with(
                msgs[anywhere], (*msgs[anywhere].blocks[:at], block, *msgs[anywhere].blocks[at:])
            )
        elif op == "orphan":
            orphan = ToolResult(ids("ghost_"), (Text("stale output"),))
            msgs.insert(pos, Message("user", (orphan,), ids("x")))
        elif op == "empty":
            msgs.insert(pos, Message(draw(_ROLES), (), ids("x")))
        elif op in ("dup_call", "call_in_user") and calls:
            i, b = draw(st.sampled_from(calls))
            role = "assistant" if op == "dup_call" else "user"
            msgs.insert(pos, Message(role, (msgs[i].blocks[b],), ids("x")))
        elif op == "drop_message":
            del msgs[anywhere]
        elif op == "swap" and len(msgs) > 1:
            j = min(anywhere, len(msgs) - 2)
            msgs[j], msgs[j + 1] = msgs[j + 1], msgs[j]
        elif op == "notice_between" and calls:
            i, _ = draw(st.sampled_from(calls))
            msgs.insert(i + 1, Message("system", (Text("[notice]"),), ids("x"), origin="notice"))
        elif op == "cut_head":
            del msgs[: draw(st.integers(0, len(msgs)))]
        elif op == "reuse_id" and len(calls) > 1:
            # a later call and its results take an earlier call's id (tau-bench reuses ids)
            (i0, b0), (i1, b1) = sorted(
                draw(st.lists(st.sampled_from(calls), min_size=2, max_size=2, unique=True))
            )
            old_id = msgs[i1].blocks[b1].id  # type: ignore[union-attr]
            new_id = msgs[i0].blocks[b0].id  # type: ignore[union-attr]
            msgs = [_with(m, tuple(_renamed(b, old_id, new_id) for b in m.blocks)) for m in msgs]
    return msgs


def _renamed(b: Block, old: str, new: str) -> Block:
    if isinstance(b, ToolCall) and b.id == old:
        return msgspec.structs.replace(b, id=new)
    if isinstance(b, ToolResult) and b.call_id == old:
        return msgspec.structs.replace(b, call_id=new)
    return b


def _with(m: Message, blocks: tuple[Block, ...]) -> Message:
    return msgspec.structs.replace(m, blocks=blocks)


@st.composite
def sessions(
    draw: st.DrawFn, *, corrupt: bool | None = False, min_turns: int = 1, max_turns: int = 6
) -> list[Message]:
    """A random agent conversation (see the module docstring). ``corrupt``: False for a valid
    session, True for a corrupted one, None to draw either."""
    msgs = draw(_valid_session(min_turns, max_turns))
    if corrupt is None:
        corrupt = draw(st.booleans())
    return _corrupt(draw, msgs) if corrupt else msgs
