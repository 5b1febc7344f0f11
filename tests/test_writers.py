"""Request-body writers (Anthropic Messages, OpenAI Chat Completions) and the validators that
check the encoded bodies against each provider's rules."""

from __future__ import annotations

import copy
import json
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from ctxengine.formats.anthropic_memo import BlockMemo
from ctxengine.formats.anthropic_writer import (
    EMPTY_CONVERSATION,
    EMPTY_RESULT_TEXT,
    LEADING_PLACEHOLDER,
    breakpoint_indices,
    to_anthropic,
)
from ctxengine.formats.openai_writer import MEDIA_NOTE, to_openai_chat
from ctxengine.formats.validate import validate_anthropic, validate_openai_chat
from ctxengine.messages.model import (
    CACHE_ANCHOR,
    Document,
    Image,
    Message,
    Text,
    Thinking,
    ToolCall,
    ToolResult,
)

CC = {"type": "ephemeral"}


def user(id: str, *blocks: object, **kw: object) -> Message:
    return Message("user", tuple(blocks), id, **kw)  # type: ignore[arg-type]


def asst(id: str, *blocks: object, **kw: object) -> Message:
    return Message("assistant", tuple(blocks), id, **kw)  # type: ignore[arg-type]


def system_msg(id: str, text: str) -> Message:
    return Message("system", (Text(text),), id, origin="notice")


def result(cid: str, *parts: object, is_error: bool = False) -> ToolResult:
    return ToolResult(cid, tuple(parts), is_error=is_error)  # type: ignore[arg-type]


def strip_cache(body: dict[str, Any]) -> dict[str, Any]:
    body = copy.deepcopy(body)
    for m in body["messages"]:
        for b in m["content"]:
            b.pop("cache_control", None)
    return body


SESSION = [
    user("u1", Text("fix the bug")),
    asst("a1", Thinking("I should read", signature="sig-1")),
    asst("a2", Text("Reading."), ToolCall("c1", "Read", {"path": "a.py"})),
    asst("a3", ToolCall("c2", "apply_patch", "*** Begin Patch")),
    user("r1", Text("<system-reminder>todo</system-reminder>"), result("c1", Text("print(1)"))),
    user("r2", result("c2", Text("applied"), is_error=True)),
    asst("a4", Text("Done.")),
    user("u2", Text("thanks")),
]


# ---------------------------------------------------------------------------------------------
# Anthropic


def test_anthropic_merges_same_role_runs_and_puts_results_first() -> None:
    body = to_anthropic(SESSION, model="claude-x", cache_breakpoints=False)
    assert body["model"] == "claude-x" and body["max_tokens"] == 8192
    assert "system" not in body and "tools" not in body
    msgs = body["messages"]
    assert [m["role"] for m in msgs] == ["user", "assistant", "user", "assistant", "user"]
    assert msgs[1]["content"] == [
        {"type": "thinking", "thinking": "I should read", "signature": "sig-1"},
        {"type": "text", "text": "Reading."},
        {"type": "tool_use", "id": "c1", "name": "Read", "input": {"path": "a.py"}},
        {"type": "tool_use", "id": "c2", "name": "apply_patch", "input": {"input": "*** Begin Patch"}},
    ]
    assert msgs[2]["content"] == [
        {
            "type": "tool_result",
            "tool_use_id": "c1",
            "content": [{"type": "text", "text": "print(1)"}],
            "is_error": False,
        },
        {
            "type": "tool_result",
            "tool_use_id": "c2",
            "content": [{"type": "text", "text": "applied"}],
            "is_error": True,
        },
        {"type": "text", "text": "<system-reminder>todo</system-reminder>"},
    ]
    assert validate_anthropic(body) == []


def test_anthropic_thinking_variants() -> None:
    msgs = [
        user("u", Text("q")),
        asst(
            "a",
            Thinking("signed", signature="EqQB+/=="),
            Thinking("unsigned, from another provider"),
            Thinking("", redacted=True, encrypted="opaque-data"),
            Text("answer"),
        ),
    ]
    content = to_anthropic(msgs, model="m", cache_breakpoints=False)["messages"][1]["content"]
    assert content == [
        {"type": "thinking", "thinking": "signed", "signature": "EqQB+/=="},
        {"type": "redacted_thinking", "data": "opaque-data"},
        {"type": "text", "text": "answer"},
    ]


def test_anthropic_images_and_documents() -> None:
    msgs = [
        user(
            "u",
            Image("image/png", data="AAAA", width=1, height=1),
            Image("image/jpeg", url="https://x/y.jpg"),
            Image("image/png"),  # nothing to send
            Document("application/pdf", data="JVBERi0=", title="spec.pdf"),
            Document("text/plain", data="notes"),
        )
    ]
    content = to_anthropic(msgs, model="m", cache_breakpoints=False)["messages"][0]["content"]
    assert content == [
        {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "AAAA"}},
        {"type": "image", "source": {"type": "url", "url": "https://x/y.jpg"}},
        {
            "type": "document",
            "source": {"type": "base64", "media_type": "application/pdf", "data": "JVBERi0="},
            "title": "spec.pdf",
        },
        {"type": "document", "source": {"type": "text", "media_type": "text/plain", "data": "notes"}},
    ]


def test_anthropic_tool_result_with_image_and_empty_output() -> None:
    msgs = [
        user("u", Text("look")),
        asst("a", ToolCall("c1", "Screenshot", {}), ToolCall("c2", "Bash", {"command": "true"})),
        user("r", result("c1", Image("image/png", data="AAAA")), result("c2", Text("  "))),
    ]
    content = to_anthropic(msgs, model="m", cache_breakpoints=False)["messages"][2]["content"]
    assert content[0]["content"] == [
        {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "AAAA"}}
    ]
    assert content[1]["content"] == [{"type": "text", "text": EMPTY_RESULT_TEXT}]


def test_anthropic_drops_empty_text_and_empty_messages() -> None:
    msgs = [user("u", Text("hi"), Text("")), asst("a", Text("  \n")), user("u2", Text("again"))]
    body = to_anthropic(msgs, model="m", cache_breakpoints=False)
    assert body["messages"] == [
        {"role": "user", "content": [{"type": "text", "text": "hi"}, {"type": "text", "text": "again"}]}
    ]


def test_anthropic_placeholders_for_leading_assistant_and_empty_projection() -> None:
    body = to_anthropic([asst("a", Text("summary so far"))], model="m", cache_breakpoints=False)
    assert body["messages"][0] == {"role": "user", "content": [{"type": "text", "text": LEADING_PLACEHOLDER}]}
    body = to_anthropic([], model="m")
    assert body["messages"][0]["content"][0]["text"] == EMPTY_CONVERSATION
    assert validate_anthropic(body) == []


def test_anthropic_system_messages_hoisted_or_inline() -> None:
    msgs = [user("u", Text("hi")), system_msg("s", "[notice: results cleared]"), asst("a", Text("ok"))]
    body = to_anthropic(msgs, system="You are an agent.", model="m")
    assert body["system"] == [
        {"type": "text", "text": "You are an agent."},
        {"type": "text", "text": "[notice: results cleared]", "cache_control": CC},
    ]
    assert [m["role"] for m in body["messages"]] == ["user", "assistant"]
    body = to_anthropic(msgs, model="m", system_messages="inline", cache_breakpoints=False)
    assert "system" not in body
    assert body["messages"][0]["content"][1]["text"] == (
        "<system-reminder>\n[notice: results cleared]\n</system-reminder>"
    )


def test_anthropic_cache_breakpoints_where_claude_code_puts_them() -> None:
    tools = [{"name": "Read", "input_schema": {}}, {"name": "Bash", "input_schema": {}}]
    tools_before = copy.deepcopy(tools)
    body = to_anthropic(SESSION, system="sys", model="m", tools=tools)
    assert tools == tools_before  # caller's dicts untouched
    assert body["system"][-1]["cache_control"] == CC
    assert "cache_control" not in body["tools"][0] and body["tools"][-1]["cache_control"] == CC
    marked = [
        (k, b)
        for k, m in enumerate(body["messages"])
        for b, block in enumerate(m["content"])
        if "cache_control" in block
    ]
    # final message (u2) and the second-to-last user message (r1+r2, after its results)
    assert marked == [(2, 2), (4, 0)]
    assert validate_anthropic(body) == []
    assert breakpoint_indices(SESSION) == [5, 7]  # r2 is the last neutral message merged into [2]
    assert (
        strip_cache(body)["messages"] == to_anthropic(SESSION, model="m", cache_breakpoints=False)["messages"]
    )


def test_anthropic_breakpoint_at_the_end_of_the_cache_anchor() -> None:
    """The transcript skeleton leads the prefix after a compaction and stays the same up to the
    next one; a breakpoint at its end lets that compaction read it from the cache. The system's
    breakpoint caches the tools too, so the tools' own gives way: never more than 4."""
    seg = Message("user", (Text("[skeleton part 1]"),), "restore-skeleton:1", origin="restore")
    seg = Message(seg.role, seg.blocks, seg.id, origin="restore", meta={CACHE_ANCHOR: True})
    summary = Message("user", (Text("[summary]"),), "summary", origin="summary")
    msgs = [seg, summary, asst("a1", Text("next")), user("u2", Text("go on"))]
    msgs += [asst("a2", Text("ok")), user("u3", Text("more"))]
    tools = [{"name": "Read", "input_schema": {}}]
    body = to_anthropic(msgs, system="sys", model="m", tools=tools)
    first = body["messages"][0]["content"]  # the segment and the summary, merged in one user message
    assert first[0]["cache_control"] == CC and "cache_control" not in first[1]
    assert "cache_control" not in body["tools"][-1] and body["system"][-1]["cache_control"] == CC
    assert validate_anthropic(body) == []  # 4 breakpoints: system, anchor, u2, u3
    assert breakpoint_indices(msgs) == [0, 3, 5]
    no_system = to_anthropic(msgs, model="m", tools=tools)
    assert no_system["tools"][-1]["cache_control"] == CC and validate_anthropic(no_system) == []
    plain = to_anthropic([summary, *msgs[2:]], system="sys", model="m", tools=tools)
    assert plain["tools"][-1]["cache_control"] == CC  # no anchor: as before


def test_anthropic_breakpoints_never_exceed_four_and_skip_thinking() -> None:
    msgs = [user("u", Text("q")), asst("a", Text("t"), Thinking("x", signature="s"))]
    body = to_anthropic(msgs, system="sys", model="m", tools=[{"name": "T", "input_schema": {}}])
    assert body["messages"][1]["content"][0]["cache_control"] == CC  # not on the thinking block
    assert "cache_control" not in body["messages"][1]["content"][1]
    assert validate_anthropic(body) == []
    assert breakpoint_indices([user("u", Text("q"))]) == [0]
    assert breakpoint_indices([]) == []
    assert to_anthropic([user("u", Text("q"))], model="m", cache_breakpoints=False)["messages"][0][
        "content"
    ] == [{"type": "text", "text": "q"}]


# ---------------------------------------------------------------------------------------------
# OpenAI Chat Completions


def test_openai_tool_messages_follow_the_assistant() -> None:
    body = to_openai_chat(SESSION, system="sys", model="gpt-x", tools=[{"type": "function", "function": {}}])
    assert body["tools"] == [{"type": "function", "function": {}}]
    msgs = body["messages"]
    assert msgs[0] == {"role": "system", "content": "sys"}
    assert msgs[1] == {"role": "user", "content": "fix the bug"}
    assert msgs[2] == {
        "role": "assistant",
        "content": "Reading.",
        "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "Read", "arguments": '{"path": "a.py"}'}},
            {
                "id": "c2",
                "type": "function",
                "function": {"name": "apply_patch", "arguments": json.dumps({"input": "*** Begin Patch"})},
            },
        ],
    }
    assert msgs[3] == {"role": "tool", "tool_call_id": "c1", "content": "print(1)"}
    assert msgs[4] == {"role": "tool", "tool_call_id": "c2", "content": "applied"}
    assert msgs[5] == {"role": "user", "content": "<system-reminder>todo</system-reminder>"}
    assert msgs[6] == {"role": "assistant", "content": "Done."}
    assert msgs[7] == {"role": "user", "content": "thanks"}
    assert validate_openai_chat(body) == []


def test_openai_null_content_and_dropped_thinking() -> None:
    msgs = [
        user("u", Text("q")),
        asst("a", Thinking("hmm", signature="s"), ToolCall("c1", "Bash", {"command": "ls"})),
        user("r", result("c1", Text("a.py"))),
    ]
    out = to_openai_chat(msgs, model="m")["messages"]
    assert out[1]["content"] is None and len(out[1]["tool_calls"]) == 1
    assert "hmm" not in json.dumps(out)


def test_openai_images_in_tool_results_follow_in_a_user_message() -> None:
    msgs = [
        user("u", Text("look")),
        asst("a", ToolCall("c1", "Screenshot", {}), ToolCall("c2", "Bash", {})),
        user("r", result("c1", Image("image/png", data="AAAA")), result("c2"), Text("and this")),
    ]
    out = to_openai_chat(msgs, model="m")["messages"]
    assert out[2] == {"role": "tool", "tool_call_id": "c1", "content": MEDIA_NOTE}
    assert out[3] == {"role": "tool", "tool_call_id": "c2", "content": "(no output)"}
    assert out[4] == {
        "role": "user",
        "content": [
            {"type": "text", "text": "[attachments from tool result c1]"},
            {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}},
            {"type": "text", "text": "and this"},
        ],
    }
    assert validate_openai_chat({"messages": out}) == []


def test_openai_documents_and_image_urls_in_user_content() -> None:
    msgs = [
        user(
            "u",
            Text("read these"),
            Image("image/jpeg", url="https://x/y.jpg"),
            Document("application/pdf", data="JVBERi0=", title="spec.pdf"),
            Document("text/markdown", data="# notes", title="notes.md"),
        )
    ]
    content = to_openai_chat(msgs, model="m")["messages"][0]["content"]
    assert content == [
        {"type": "text", "text": "read these"},
        {"type": "image_url", "image_url": {"url": "https://x/y.jpg"}},
        {
            "type": "file",
            "file": {"filename": "spec.pdf", "file_data": "data:application/pdf;base64,JVBERi0="},
        },
        {"type": "text", "text": "notes.md\n\n# notes"},
    ]


def test_openai_system_messages_hoisted_or_inline() -> None:
    msgs = [user("u", Text("hi")), system_msg("s", "[notice]"), user("u2", Text("more"))]
    out = to_openai_chat(msgs, system="sys", model="m")["messages"]
    assert out == [{"role": "system", "content": "sys\n\n[notice]"}, {"role": "user", "content": "hi\nmore"}]
    out = to_openai_chat(msgs, model="m", system_messages="inline")["messages"]
    assert [m["role"] for m in out] == ["user", "system", "user"]


def test_openai_leaves_out_unanswered_calls_of_aborted_turns() -> None:
    msgs = [
        user("u", Text("go")),
        asst("a", ToolCall("c1", "Bash", {}), meta={"stop_reason": "aborted"}),
        user("i", Text("[Request interrupted by user]")),
    ]
    out = to_openai_chat(msgs, model="m")["messages"]
    assert out == [{"role": "user", "content": "go\n[Request interrupted by user]"}]  # nothing left of "a"
    assert validate_openai_chat({"messages": out}) == []


def test_anthropic_memo_follows_aborted_turns_as_a_fresh_encoding_does() -> None:
    """Projection after projection of one conversation, where an aborted turn arrives after the
    first bodies, is answered later, and is cut away by a compaction: the memo's bodies (new or
    shared message dicts) are the fresh encoding's, and an earlier body is never changed."""
    go, fine = user("u", Text("go")), asst("a0", Text("ok"))
    aborted = asst("a", ToolCall("c1", "Bash", {"command": "ls"}), meta={"stop_reason": "aborted"})
    interrupted = user("i", Text("[Request interrupted by user]"))
    again = asst("a2", ToolCall("c2", "Bash", {"command": "pwd"}))
    answer = user("r", result("c2", Text("/tmp")))
    answered_late = user("r1", result("c1", Text("late")))
    summary = user("s", Text("summary"), meta={CACHE_ANCHOR: True})
    views = [
        [go, fine],
        [go, fine, aborted, interrupted],
        [go, fine, aborted, interrupted, again, answer],
        [go, fine, aborted, answered_late, again, answer],
        [summary, again, answer],
        [summary, again, answer, aborted, interrupted],
    ]
    for share in (False, True):
        memo = BlockMemo(share_messages=share)
        bodies = []
        for view in views:
            body = to_anthropic(view, system="sys", model="m", memo=memo)
            assert body == to_anthropic(view, system="sys", model="m")
            bodies.append((body, json.dumps(body)))
        assert all(json.dumps(b) == text for b, text in bodies)


# ---------------------------------------------------------------------------------------------
# Validators: each rule caught on a hand-made bad body


def a_body(*messages: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {"model": "m", "max_tokens": 10, "messages": list(messages), **extra}


def u(*content: dict[str, Any]) -> dict[str, Any]:
    return {"role": "user", "content": list(content)}


def a(*content: dict[str, Any]) -> dict[str, Any]:
    return {"role": "assistant", "content": list(content)}


def text(t: str, **kw: Any) -> dict[str, Any]:
    return {"type": "text", "text": t, **kw}


def use(cid: str) -> dict[str, Any]:
    return {"type": "tool_use", "id": cid, "name": "Bash", "input": {}}


def res(cid: str) -> dict[str, Any]:
    return {"type": "tool_result", "tool_use_id": cid, "content": [text("ok")]}


def one(problems: list[str], rule: str) -> None:
    assert len(problems) == 1 and f"({rule})" in problems[0], problems


def test_validate_anthropic_rules() -> None:
    assert validate_anthropic(a_body(u(text("q")), a(use("c")), u(res("c")))) == []
    one(validate_anthropic(a_body()), "A1")
    one(validate_anthropic(a_body(a(text("hi")))), "A1")
    one(validate_anthropic(a_body(u(text("q")), u(text("again")))), "A1")
    one(validate_anthropic(a_body({"role": "system", "content": "x"})), "A1")
    one(validate_anthropic(a_body(u(text("q")), a(use("c")), u(text("no result")))), "A2")
    one(validate_anthropic(a_body(u(text("q")), a(use("c")))), "A2")
    one(validate_anthropic(a_body(u(text("q")), a(text("t")), u(res("ghost")))), "A3")
    one(validate_anthropic(a_body(u(text("q")), a(use("c")), u(res("c"), res("c")))), "A3")
    one(validate_anthropic(a_body(u(text("q")), a(use("c"), use("c")), u(res("c")))), "A3")
    one(validate_anthropic(a_body(u(text("q")), a(use("c")), u(text("first"), res("c")))), "A4")
    one(validate_anthropic(a_body(u(text(" ")))), "A5")
    one(validate_anthropic(a_body(u())), "A5")
    one(validate_anthropic(a_body({"role": "user", "content": ""})), "A5")
    one(validate_anthropic(a_body(u(text("q")), system=[text("")])), "A5")
    bad_result = {"type": "tool_result", "tool_use_id": "c", "content": [text("")]}
    one(validate_anthropic(a_body(u(text("q")), a(use("c")), u(bad_result))), "A5")
    one(
        validate_anthropic(a_body(u(text("q")), a({"type": "thinking", "thinking": "x", "signature": ""}))),
        "A6",
    )
    one(validate_anthropic(a_body(u(text("q")), a({"type": "redacted_thinking", "data": ""}))), "A6")
    one(validate_anthropic(a_body(u(text("q")), a({**use("c"), "input": "raw"}), u(res("c")))), "A6")
    one(
        validate_anthropic(a_body(u(text("q")), a(use("functions.bash:0")), u(res("functions.bash:0")))), "A6"
    )
    one(validate_anthropic(a_body(u(use("c")))), "A6")
    one(validate_anthropic(a_body(u({"type": "image"}))), "A6")
    five = [text(str(k), cache_control=CC) for k in range(5)]
    one(validate_anthropic(a_body(u(*five))), "A7")
    four = a_body(u(*five[:3]), system=[text("s", cache_control=CC)])
    assert validate_anthropic(four) == []
    assert validate_anthropic("nope") == ["body is not an object"]  # type: ignore[arg-type]


def o_body(*messages: dict[str, Any]) -> dict[str, Any]:
    return {"model": "m", "messages": list(messages)}


def tc(cid: str, args: str = "{}") -> dict[str, Any]:
    return {"id": cid, "type": "function", "function": {"name": "Bash", "arguments": args}}


def oa(*calls: dict[str, Any], content: Any = None) -> dict[str, Any]:
    return {"role": "assistant", "content": content, "tool_calls": list(calls)}


def tool(cid: str, content: Any = "ok") -> dict[str, Any]:
    return {"role": "tool", "tool_call_id": cid, "content": content}


def ou(content: Any = "q") -> dict[str, Any]:
    return {"role": "user", "content": content}


def test_validate_openai_rules() -> None:
    good = o_body(
        {"role": "system", "content": "s"}, ou(), oa(tc("c1"), tc("c2")), tool("c2"), tool("c1"), ou("more")
    )
    assert validate_openai_chat(good) == []
    one(validate_openai_chat(o_body()), "O1")
    one(validate_openai_chat(o_body({"role": "robot", "content": "x"})), "O1")
    one(validate_openai_chat(o_body(ou(), oa(tc("c1"), tc("c2")), tool("c1"))), "O2")
    problems = validate_openai_chat(o_body(ou(), oa(tc("c1")), ou("interjection"), tool("c1")))
    assert any("(O2)" in p for p in problems) and any("(O3)" in p for p in problems)
    one(validate_openai_chat(o_body(ou(), oa(tc("c1"), tc("c1")), tool("c1"))), "O2")
    assert validate_openai_chat(o_body(ou(), oa(tc("c1")), tool("c1"), oa(tc("c1")), tool("c1"))) == []
    one(validate_openai_chat(o_body(ou(), tool("c1"))), "O3")
    one(validate_openai_chat(o_body(ou(), oa(tc("c1")), tool("c1"), tool("ghost"))), "O3")
    one(validate_openai_chat(o_body(ou(), oa(tc("c1")), tool("c1"), tool("c1"))), "O3")
    one(validate_openai_chat(o_body(ou(""))), "O4")
    one(validate_openai_chat(o_body(ou([]))), "O4")
    one(validate_openai_chat(o_body(ou([{"type": "text", "text": ""}]))), "O4")
    one(validate_openai_chat(o_body(ou(), {"role": "assistant", "content": None})), "O4")
    one(validate_openai_chat(o_body(ou(), {"role": "assistant", "content": "x", "tool_calls": []})), "O4")
    one(validate_openai_chat(o_body(ou(), oa(tc("c1")), tool("c1", ""))), "O4")
    one(validate_openai_chat(o_body(ou(), oa(tc("c1", "{not json")), tool("c1"))), "O5")
    one(validate_openai_chat(o_body(ou(), oa({"id": "c1", "type": "web"}), tool("c1"))), "O5")
    custom = {"id": "c1", "type": "custom", "custom": {"name": "apply_patch", "input": "*** Begin"}}
    assert validate_openai_chat(o_body(ou(), oa(custom), tool("c1"))) == []


_KEYS = [
    "role",
    "content",
    "type",
    "text",
    "tool_use_id",
    "id",
    "tool_calls",
    "tool_call_id",
    "input",
    "function",
]
_VALUES = (
    st.none() | st.booleans() | st.integers() | st.sampled_from(["user", "assistant", "tool", "text", ""])
)
_json = st.recursive(
    _VALUES,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.sampled_from(_KEYS), inner, max_size=4),
    max_leaves=30,
)


@settings(max_examples=300, deadline=None)
@given(st.dictionaries(st.sampled_from(["messages", "system", "tools"]), _json))
def test_validators_never_raise(body: dict[str, Any]) -> None:
    assert isinstance(validate_anthropic(body), list)
    assert isinstance(validate_openai_chat(body), list)
