"""``ctxengine proxy`` on what Claude Code's requests hold beyond the SDKs' scripted ones: a
``system`` message inside ``messages`` (beta ``mid-conversation-system-2026-04-07``), top-level
fields the engine does not own, server-side context editing, and its newest prompt sent as a
text-block list with ``cache_control`` and as a plain string once older. The shapes are those of
Claude Code 2.1.197's requests, recorded against a loopback upstream."""

from __future__ import annotations

import copy
import logging
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from ctxengine.messages.model import Message, Text
from ctxengine.proxy.reminders import split_reminders
from ctxengine.proxy.wire_anthropic import AnthropicWire
from test_proxy import KEY, Rig, _rig, _turns, log_lines

pytestmark = [
    pytest.mark.usefixtures("clean_llm_env"),
    # windows under 32,000 tokens on purpose (compaction within a few requests)
    pytest.mark.filterwarnings("ignore::ctxengine.models.registry.WindowWarning"),
]

BETA = "claude-code-20250219,context-management-2025-06-27,mid-conversation-system-2026-04-07"
AGENTS = {"role": "system", "content": "Available agent types for the Agent tool: - claude: any task."}
EXTRA = {
    "context_management": {"edits": [{"type": "clear_thinking_20251015", "keep": "all"}]},
    "output_config": {"effort": "high"},
    "diagnostics": {"trace": True},
    "container": "container_abc",
    "mcp_servers": [{"type": "url", "url": "https://mcp.example", "name": "x"}],
    "metadata": {"user_id": "u"},
}


@pytest.fixture
def rig(tmp_path: Path) -> Iterator[Rig]:
    yield from _rig(tmp_path, window=16_000)


def _post(rig: Rig, messages: list[dict[str, Any]], **extra: Any) -> httpx.Response:
    body = {"model": "claude-sonnet-4-5", "max_tokens": 1024, "messages": messages, **extra}
    headers = {"x-api-key": KEY, "anthropic-version": "2023-06-01", "anthropic-beta": BETA}
    return httpx.post(rig.base + "/v1/messages", json=body, headers=headers, timeout=60)


REMINDER = {"role": "system", "content": "The task tools haven't been used recently."}


def _claude_code_turns(n: int) -> list[dict[str, Any]]:
    """Claude Code's shape: the agent list after the first prompt, a reminder every 5 rounds."""
    msgs = _turns(n)
    out = [msgs[0], AGENTS]
    for k in range(1, len(msgs), 2):
        out += msgs[k : k + 2] + ([REMINDER] if k % 10 == 9 else [])
    return out


def test_a_system_message_inside_messages_is_carried_in_place_and_never_summarized(rig: Rig) -> None:
    full = _claude_code_turns(24)
    for n in range(3, len(full) + 1):
        if full[n - 1]["role"] == "assistant":
            continue  # a request ends with the client's turn
        got = _post(rig, full[:n], **EXTRA)
        assert got.status_code == 200, got.text
    report = rig.sessions()
    assert [s.problems for s in rig.upstream.seen if s.problems] == []
    assert report["totals"]["fail_open"] == 0 and len(report["sessions"]) == 1
    assert report["sessions"][0]["compactions"] >= 1
    first, last = rig.upstream.seen[0].body, rig.upstream.seen[-1].body
    assert first["messages"][1] == AGENTS  # in place, as sent
    assert last["messages"].count(AGENTS) == 1  # kept after the compaction
    assert 0 < last["messages"].count(REMINDER) < full.count(REMINDER)  # in place, or summarized
    assert len(last["messages"]) < len(full)
    for key, value in EXTRA.items():  # fields the engine does not own: untouched
        assert last[key] == value


def test_server_side_context_editing_is_left_to_the_provider(
    rig: Rig, caplog: pytest.LogCaptureFixture
) -> None:
    edits = {
        "edits": [{"type": "clear_tool_uses_20250919", "trigger": {"type": "input_tokens", "value": 30000}}]
    }
    msgs = _claude_code_turns(3)
    with caplog.at_level(logging.INFO, logger="ctxengine.proxy"):
        got = _post(rig, msgs, context_management=edits)
        rig.settle()
        (line,) = log_lines(caplog, "POST /v1/messages")  # written after the response: in the block
    assert got.status_code == 200
    assert rig.upstream.seen[-1].body["messages"] == msgs
    report = rig.sessions()
    assert report["sessions"] == [] and report["totals"]["left_to_provider"] == 1
    assert "left to the provider" in line and "clear_tool_uses_20250919" in line


def test_the_newest_prompt_as_a_block_list_then_as_a_string_is_one_session(rig: Rig) -> None:
    msgs: list[dict[str, Any]] = [{"role": "user", "content": "First question?"}]
    for t in range(4):
        newest = copy.deepcopy(msgs)
        prompt = newest[-1]["content"]
        newest[-1]["content"] = [{"type": "text", "text": prompt, "cache_control": {"type": "ephemeral"}}]
        assert _post(rig, newest).status_code == 200
        msgs += [{"role": "assistant", "content": f"Answer {t}."}, {"role": "user", "content": f"Then {t}?"}]
    report = rig.sessions()
    assert len(report["sessions"]) == 1, report["sessions"]
    assert report["sessions"][0]["calls"] == 4


def test_a_system_message_is_refused_by_the_upstream_without_the_beta(rig: Rig) -> None:
    """The loopback upstream checks the beta as Anthropic does; the proxy passes the client's
    headers, so the answer is the provider's, not the proxy's own 400."""
    body = {"model": "claude-sonnet-4-5", "max_tokens": 64, "messages": _claude_code_turns(1)}
    got = httpx.post(rig.base + "/v1/messages", json=body, headers={"x-api-key": KEY}, timeout=60)
    assert got.status_code == 400
    assert "(A1)" in got.json()["error"]["message"]  # the upstream's rule, not the proxy's wording
    assert len(rig.upstream.seen) == 1


def test_a_pinned_system_message_put_back_before_a_kept_one_is_sent_merged_with_it() -> None:
    conversation = [
        {"role": "user", "content": "Go."},
        AGENTS,
        {"role": "assistant", "content": "Working."},
        {"role": "user", "content": "More."},
        REMINDER,
        {"role": "assistant", "content": "Still working."},
        {"role": "user", "content": "Done?"},
    ]
    wire = AnthropicWire()
    request = wire.parse({"model": "claude-sonnet-4-5", "max_tokens": 64, "messages": conversation})
    read = wire.reader().read(conversation, 0)
    summary = Message("user", (Text("Summary of the work so far."),), "s1", origin="summary")
    body = wire.build(request, [summary, *read[4:]])  # the engine cut before the reminder
    roles = [m["role"] for m in body["messages"]]
    assert roles == ["user", "system", "assistant", "user"]
    assert [b["text"] for b in body["messages"][1]["content"]] == [AGENTS["content"], REMINDER["content"]]
    assert wire.validate(body) == []
    untouched = wire.build(request, read)  # nothing cut: every message as the client sent it
    assert untouched["messages"][1] == AGENTS and untouched["messages"][4] == REMINDER


def test_a_conversation_the_engine_leaves_alone_saves_nothing(rig: Rig) -> None:
    short = _turns(3, size=400)
    msgs = [short[0], AGENTS, *short[1:]]
    for n in (3, 5, 7, 8):
        assert _post(rig, msgs[:n]).status_code == 200
    (session,) = rig.sessions()["sessions"]
    assert session["compactions"] == 0 and session["offloads"] == 0
    assert session["client_tokens"] == session["upstream_tokens"] and session["cost_saved_usd"] == 0


def test_a_branch_and_a_shrunk_budget_are_said_once_per_session(
    rig: Rig, caplog: pytest.LogCaptureFixture
) -> None:
    msgs = _turns(3, size=400)
    rewound = {**msgs[1], "content": [{"type": "text", "text": "Reading again."}, msgs[1]["content"][1]]}
    edited = [msgs[0], rewound, *msgs[2:]]  # the client rewrote its history after the first message
    with caplog.at_level(logging.INFO, logger="ctxengine.proxy"):
        for conversation in (msgs[:3], msgs[:5], edited[:5], edited):
            assert _post(rig, conversation, max_tokens=64_000).status_code == 200
            rig.settle()
        lines = log_lines(caplog, "POST /v1/messages", 4)
    sessions = rig.sessions()["sessions"]
    assert len(sessions) == 2 and sessions[1]["branch_of"] == sessions[0]["id"]
    said = [("branch of" in line, "of the 16,000-token window" in line) for line in lines]
    assert said == [(False, True), (False, False), (True, True), (False, False)]
    budget = int(re.search(r"leaves the prompt ([\d,]+) of", lines[0]).group(1).replace(",", ""))  # type: ignore[union-attr]
    assert 8_000 < budget < 16_000  # the room is what the model writes (8,192 at first), not the 64,000 asked


def test_the_fixed_prefix_is_cached_for_an_hour_once_the_sessions_pauses_outlast_five_minutes(
    rig: Rig, caplog: pytest.LogCaptureFixture
) -> None:
    now = [1_000.0]
    rig.proxy.gaps.clock = lambda: now[0]
    msgs = _turns(4, size=400)
    system = [{"type": "text", "text": "You are Claude Code.", "cache_control": {"type": "ephemeral"}}]
    tools = [{"name": "Bash", "description": "run", "input_schema": {"type": "object"}}]
    with caplog.at_level(logging.INFO, logger="ctxengine.proxy"):
        for n, pause in ((3, 0.0), (5, 60.0), (7, 900.0), (9, 30.0)):
            now[0] += pause
            assert _post(rig, msgs[:n], system=system, tools=tools).status_code == 200
            rig.settle()
        lines = log_lines(caplog, "POST /v1/messages", 4)
    ttl = [[b.get("cache_control", {}).get("ttl") for b in s.body["system"]] for s in rig.upstream.seen]
    assert ttl == [[None], [None], ["1h"], ["1h"]]  # after the 15-minute pause, and from then on
    assert "cache_control" not in rig.upstream.seen[-1].body["tools"][-1]  # the client marked system
    assert system[0]["cache_control"] == {"type": "ephemeral"}  # the client's block untouched
    assert ["cached for 1 hour" in line for line in lines] == [False, False, True, False]
    assert not any(s.problems for s in rig.upstream.seen)


REMIND = "<system-reminder>\nAs you answer the user's questions, you can use this context:\n# currentDate\n"


def test_harness_reminders_are_not_the_task_in_the_notes(rig: Rig) -> None:
    msgs = _turns(40)
    prompt = {"type": "text", "text": "Fix the bug in src/app.py please."}
    msgs[0] = {"role": "user", "content": [{"type": "text", "text": REMIND + "</system-reminder>"}, prompt]}
    for n in range(3, len(msgs) + 1, 2):
        assert _post(rig, msgs[:n]).status_code == 200
    assert rig.sessions()["sessions"][0]["compactions"] >= 1
    first = rig.upstream.seen[-1].body["messages"][0]
    notes = next(b["text"] for b in first["content"] if "# Session Title" in b["text"])
    assert "# Session Title\nFix the bug in src/app.py please." in notes
    assert "# Task specification\nFix the bug" in notes
    sent = rig.upstream.seen[0].body["messages"][0]["content"]
    assert [{k: v for k, v in b.items() if k != "cache_control"} for b in sent] == msgs[0]["content"]


@pytest.mark.parametrize(
    ("kinds", "parts"),
    [("RU", ["attachment", "message"]), ("UR", ["message", "attachment"]), ("RR", ["attachment"]),
     ("RUR", ["message"]), ("U", ["message"])],
)  # fmt: skip
def test_reminders_get_a_message_of_their_own_in_the_order_sent(kinds: str, parts: list[str]) -> None:
    blocks = tuple(Text(REMIND if k == "R" else "Do it.") for k in kinds)
    out = split_reminders(Message("user", blocks, "m4"))
    assert [m.origin for m in out] == parts
    assert tuple(b for m in out for b in m.blocks) == blocks
    assert [m.id for m in out if m.origin == "message"] in ([], ["m4"])
