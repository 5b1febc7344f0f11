"""``ctxengine proxy`` on the OpenAI Responses API (``POST /v1/responses``), driven by the official
``openai`` SDK (``responses.create`` and ``responses.stream``) in front of a loopback upstream
that checks every request against the Responses rules (``formats.validate_responses``)."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import msgspec
import pytest

from ctxengine.formats.validate_responses import validate_responses
from ctxengine.messages.model import Message, Text, Thinking, ToolCall, ToolResult
from ctxengine.proxy.responses_items import read_item, write_items
from test_proxy import KEY, Rig, _rig, log_lines

pytestmark = [
    pytest.mark.usefixtures("clean_llm_env"),
    # windows under 32,000 tokens on purpose (compaction within a few requests)
    pytest.mark.filterwarnings("ignore::ctxengine.models.registry.WindowWarning"),
]

TOOLS = [
    {
        "type": "function",
        "name": "shell",
        "description": "Run a command.",
        "parameters": {"type": "object", "properties": {"command": {"type": "string"}}},
    }
]


@pytest.fixture
def rig(tmp_path: Path) -> Iterator[Rig]:
    yield from _rig(tmp_path, window=16_000)


def _call_output(n: int, reasoning: bool = False) -> list[dict[str, Any]]:
    """The upstream's output for turn ``n``: (encrypted reasoning,) a function call."""
    out: list[dict[str, Any]] = []
    if reasoning:
        out.append(
            {
                "type": "reasoning",
                "id": f"rs_{n}",
                "summary": [{"type": "summary_text", "text": f"Think {n}."}],
                "encrypted_content": f"gAAAA{n:04d}" + "Zm9v" * 50,
            }
        )
    out.append(
        {
            "type": "function_call",
            "id": f"fc_{n}",
            "call_id": f"call_{n}",
            "name": "shell",
            "arguments": json.dumps({"command": f"cat src/mod_{n}.py"}),
            "status": "completed",
        }
    )
    return out


def _result(n: int) -> str:
    return "\n".join(f"def f_{n}_{i}(x): return x * {i * 7919 % 10007}  # mod {n}" for i in range(60))


def _drive(rig: Rig, turns: int, *, reasoning: bool = False) -> list[dict[str, Any]]:
    """A tool loop of ``turns`` calls through the SDK, every fourth one streamed; the items the
    client holds at the end."""
    client = rig.openai()
    items: list[dict[str, Any]] = [{"role": "user", "content": "Read the modules and report."}]
    for t in range(turns):
        rig.upstream.script.append({"output": _call_output(t, reasoning)})
        kw: dict[str, Any] = {"model": "gpt-4o", "input": items, "tools": TOOLS, "store": False}
        if reasoning:
            kw["include"] = ["reasoning.encrypted_content"]
        if t % 4 == 3:
            with client.responses.stream(**kw) as stream:
                response = stream.get_final_response()
        else:
            response = client.responses.create(**kw)
        items += [o.model_dump(exclude_none=True) for o in response.output]
        for call in (o for o in response.output if o.type == "function_call"):
            items.append({"type": "function_call_output", "call_id": call.call_id, "output": _result(t)})
    return items


def test_a_tool_loop_is_compacted_and_every_request_stays_valid(rig: Rig) -> None:
    _drive(rig, 24)
    report = rig.sessions()
    assert [s.problems for s in rig.upstream.seen if s.problems] == []
    assert len(report["sessions"]) == 1, report["sessions"]
    assert report["totals"]["fail_open"] == 0
    (session,) = report["sessions"]
    assert session["calls"] == 24
    assert session["compactions"] >= 1
    assert session["upstream_tokens"] < session["client_tokens"]
    last = rig.upstream.seen[-1].body
    assert last["tools"] == TOOLS and last["store"] is False
    assert len(last["input"]) < 2 + 3 * 24  # the history was cut
    # usage read from JSON and from the streams: cached tokens a quarter of the input
    assert session["cache_read_tokens"] == sum(s.input_tokens // 4 for s in rig.upstream.seen)


def test_encrypted_reasoning_round_trips_byte_for_byte(rig: Rig) -> None:
    items = _drive(rig, 20, reasoning=True)
    sent = {item["id"]: item for item in items if item.get("type") == "reasoning"}
    seen_any = 0
    for request in rig.upstream.seen:
        for item in request.body["input"]:
            if isinstance(item, dict) and item.get("type") == "reasoning":
                assert item == sent[item["id"]]  # whole, never edited
                seen_any += 1
    assert seen_any > 20
    report = rig.sessions()
    assert report["sessions"][0]["compactions"] >= 1 and report["totals"]["fail_open"] == 0
    assert [s.problems for s in rig.upstream.seen if s.problems] == []


def test_unchanged_items_go_upstream_as_the_client_sent_them(rig: Rig) -> None:
    items: list[dict[str, Any]] = [
        {"type": "message", "role": "developer", "content": [{"type": "input_text", "text": "Be brief."}]},
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "Patch it."}]},
        {
            "type": "custom_tool_call",
            "id": "ctc_1",
            "call_id": "call_p",
            "name": "apply_patch",
            "input": "*** Begin Patch\n*** End Patch",
            "status": "completed",
        },
        {"type": "custom_tool_call_output", "call_id": "call_p", "output": "Done!"},
        {"type": "message", "role": "user", "content": "And now?", "x_vendor_field": 1},
    ]
    body = {"model": "gpt-4o", "input": items, "instructions": "You are Codex.", "store": False}
    got = httpx.post(rig.base + "/v1/responses", json=body, headers={"authorization": f"Bearer {KEY}"})
    assert got.status_code == 200, got.text
    assert rig.upstream.seen[-1].body == body
    assert rig.sessions()["totals"]["fail_open"] == 0


def test_a_server_side_compaction_item_is_kept_whole_and_in_order(rig: Rig) -> None:
    compaction = {"type": "compaction", "id": "cmp_1", "encrypted_content": "ENC" + "x" * 400}
    client = rig.openai()
    items: list[dict[str, Any]] = [compaction, {"role": "user", "content": "Go on."}]
    for t in range(40):
        rig.upstream.script.append({"output": _call_output(t)})
        response = client.responses.create(model="gpt-4o", input=items, tools=TOOLS)  # type: ignore[arg-type]
        items += [o.model_dump(exclude_none=True) for o in response.output]
        items.append({"type": "function_call_output", "call_id": f"call_{t}", "output": _result(t)})
    report = rig.sessions()
    assert report["sessions"][0]["compactions"] >= 1 and report["totals"]["fail_open"] == 0
    for request in rig.upstream.seen:
        assert request.body["input"].count(compaction) == 1
        assert not request.problems
    last = rig.upstream.seen[-1].body["input"]
    assert len(last) < len(items)
    first_call = next(k for k, i in enumerate(last) if i.get("type") == "function_call")
    assert last.index(compaction) < first_call


def test_previous_response_id_is_left_to_the_provider(rig: Rig, caplog: pytest.LogCaptureFixture) -> None:
    body = {
        "model": "gpt-4o",
        "previous_response_id": "resp_abc",
        "input": [{"type": "function_call_output", "call_id": "call_9", "output": "ok"}],
    }
    with caplog.at_level(logging.INFO, logger="ctxengine.proxy"):
        got = httpx.post(rig.base + "/v1/responses", json=body, headers={"authorization": f"Bearer {KEY}"})
        rig.settle()
        (line,) = log_lines(caplog, "/v1/responses")  # written after the response: in the block
    assert got.status_code == 400  # the loopback upstream has no history: R3, as OpenAI would say
    assert rig.upstream.seen[-1].body == body  # forwarded as sent
    report = rig.sessions()
    assert report["sessions"] == [] and report["totals"]["left_to_provider"] == 1
    assert "left to the provider" in line and "previous_response_id" in line


def test_a_body_that_is_not_a_responses_request_gets_openais_400(rig: Rig) -> None:
    got = httpx.post(rig.base + "/v1/responses", json={"model": "gpt-4o", "input": []})
    assert got.status_code == 400
    assert "input" in got.json()["error"]["message"]
    assert rig.upstream.seen == []


@pytest.mark.parametrize(
    ("items", "rule"),
    [
        ([{"type": "function_call_output", "call_id": "c", "output": "x"}], "(R3)"),
        ([{"type": "function_call", "call_id": "c", "name": "f", "arguments": "{}"}], "(R4)"),
        ([{"role": "tool", "content": "x"}], "(R2)"),
        ([{"role": "user", "content": []}], "(R2)"),
        (
            [
                {"type": "function_call", "call_id": "c", "name": "f", "arguments": "{}"},
                {"type": "function_call_output", "call_id": "c", "output": "x"},
                {"type": "function_call_output", "call_id": "c", "output": "y"},
            ],
            "(R5)",
        ),
        ([{"type": "custom_tool_call_output", "call_id": "c", "output": "x"}], "(R3)"),
        ([{"type": "function_call", "call_id": "c", "name": "f", "arguments": {}}], "(R6)"),
    ],
)
def test_the_validator_names_the_broken_rule(items: list[dict[str, Any]], rule: str) -> None:
    problems = validate_responses({"input": items})
    assert problems and any(p.endswith(rule) for p in problems), problems


def test_the_validator_accepts_a_paired_conversation() -> None:
    items = [
        {"role": "user", "content": "hi"},
        {"type": "reasoning", "id": "rs", "summary": [], "encrypted_content": "e"},
        {"type": "function_call", "call_id": "c", "name": "f", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "c", "output": "x"},
        {"type": "compaction", "encrypted_content": "e"},
    ]
    assert validate_responses({"input": items}) == []
    assert validate_responses({"input": "hello"}) == []


def test_the_session_id_is_the_prompt_cache_key_when_the_client_sets_none(tmp_path: Path) -> None:
    for rig in _rig(tmp_path, window=32_000, prompt_cache_key=True):
        client = rig.openai()
        items: list[dict[str, Any]] = [{"role": "user", "content": "Hi."}]
        client.responses.create(model="gpt-4o", input=items)  # type: ignore[arg-type]
        client.responses.create(model="gpt-4o", input=items, prompt_cache_key="mine")  # type: ignore[arg-type]
        chat = [{"role": "user", "content": "Hello."}]
        client.chat.completions.create(model="gpt-4o", messages=chat)  # type: ignore[arg-type]
        ids = [s["id"] for s in rig.sessions()["sessions"]]
        keys = [s.body.get("prompt_cache_key") for s in rig.upstream.seen]
        assert keys == [ids[0], "mine", ids[-1]]


def test_no_prompt_cache_key_for_an_upstream_that_is_not_openais(rig: Rig) -> None:
    assert rig.proxy.cache_key is False  # the loopback upstream may not know the field
    rig.openai().responses.create(model="gpt-4o", input="Hi.")
    assert "prompt_cache_key" not in rig.upstream.seen[-1].body


def test_a_changed_item_keeps_every_key_but_the_one_the_engine_changed() -> None:
    conversation: list[dict[str, Any]] = [
        {
            "type": "message",
            "role": "user",
            "id": "msg_1",
            "content": [
                {"type": "input_text", "text": "Look at this."},
                {"type": "input_image", "image_url": "https://example.com/a.png", "detail": "high"},
            ],
        },
        {
            "type": "function_call",
            "id": "fc_1",
            "call_id": "c1",
            "name": "shell",
            "arguments": '{"command": "ls"}',
        },
        {
            "type": "function_call_output",
            "id": "fco_1",
            "call_id": "c1",
            "output": "a\nb\nc",
            "status": "completed",
        },
        {"type": "reasoning", "id": "rs_1", "summary": [], "encrypted_content": "SECRET"},
    ]
    read = [read_item(item, k) for k, item in enumerate(conversation)]
    message, call, output, reasoning = read
    changed = [
        msgspec.structs.replace(message, blocks=(message.blocks[1], Text("Look closer."))),
        msgspec.structs.replace(call, blocks=(ToolCall("c1", "shell", {"command": "ls -la"}),)),
        msgspec.structs.replace(output, blocks=(ToolResult("c1", (Text("[cut]"),)),)),
        msgspec.structs.replace(reasoning, blocks=(Thinking("edited", encrypted="OTHER"),)),
        Message("user", (Text("Summary so far."),), "s1", origin="summary"),
    ]
    items = write_items(changed, conversation)
    assert items[0] == {
        **conversation[0],
        "content": [conversation[0]["content"][1], {"type": "input_text", "text": "Look closer."}],
    }  # the image part as sent (its detail kept), the new text written fresh
    assert items[1] == {**conversation[1], "arguments": '{"command": "ls -la"}'}
    assert items[2] == {**conversation[2], "output": "[cut]"}
    assert items[3] == conversation[3]  # reasoning: whole or not at all, never edited
    assert items[4] == {"role": "user", "content": [{"type": "input_text", "text": "Summary so far."}]}
    assert write_items(read, conversation) == conversation  # unchanged: as sent
