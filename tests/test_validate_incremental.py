"""The request checker that resumes at the first changed message (``formats.validate_incremental``)
finds exactly what checking each body whole finds: on every call of real replays (under policies
that compact, clear and offload, so the bodies change in the middle too) and on generated body
sequences full of broken pairing, roles and blocks."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conftest import CLAUDE_CODE, CODEX, OPENAI_CHAT
from ctxengine.formats import load
from ctxengine.formats import validate_incremental as vi
from ctxengine.formats.validate import validate_anthropic, validate_openai_chat
from ctxengine.policy.registry import get_policy
from ctxengine.replay import replay_session

FULL = {"anthropic": validate_anthropic, "openai": validate_openai_chat}


class _Both(vi.RequestChecker):
    """The incremental check, held to the whole check at every body."""

    bodies = 0
    with_problems = 0

    def validate(self, body: Any) -> list[str]:
        got = super().validate(body)
        assert got == FULL[self.provider](body)
        _Both.bodies += 1
        _Both.with_problems += bool(got)
        return got


@pytest.mark.parametrize(
    ("path", "window", "policy"),
    [
        (CLAUDE_CODE / "cc_mimo-v2.5-pro_2x-autocompact_db3f6604.jsonl", 64_000, "default"),
        (CLAUDE_CODE / "cc_mimo-v2.5-pro_2x-autocompact_db3f6604.jsonl", 48_000, "claude-code"),
        (CLAUDE_CODE / "cc_mimo-v2.5-pro_2x-autocompact_db3f6604.jsonl", 64_000, "evict-oldest"),
        (next(iter(sorted(CODEX.glob("*.jsonl"))), CODEX), 32_000, "openclaw"),  # the folder: absent
        (next(iter(sorted(OPENAI_CHAT.rglob("*.json"))), OPENAI_CHAT), 32_000, "pi"),
    ],
)
def test_the_checker_finds_what_the_whole_check_finds_on_real_replays(
    transcripts: Path, monkeypatch: pytest.MonkeyPatch, path: Path, window: int, policy: str
) -> None:
    monkeypatch.setattr("ctxengine.replay.measures.RequestChecker", _Both)
    _Both.bodies = 0
    for session in load(path)[:3]:
        replay_session(session, get_policy(policy), window=window)
    assert _Both.bodies > 10


def test_the_checker_checks_only_what_changed() -> None:
    checker = vi.RequestChecker("anthropic")
    msgs: list[dict[str, Any]] = [{"role": "user", "content": [{"type": "text", "text": "go"}]}]
    for k in range(30):
        call = {"type": "tool_use", "id": f"t{k}", "name": "Read", "input": {}}
        msgs.append({"role": "assistant", "content": [call]})
        msgs.append(
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": f"t{k}", "content": "x"}]}
        )
        body = {"model": "m", "messages": copy.deepcopy(msgs)}
        assert checker.validate(body) == validate_anthropic(body) == []
    assert checker.checked < 3 * 61  # each body from its new messages on, not 1 + 2 + ... + 61
    broken = {"model": "m", "messages": copy.deepcopy(msgs[:-1])}  # the last call unanswered
    assert checker.validate(broken) == validate_anthropic(broken) != []


# ---- generated sequences: each body the previous one grown, edited near its end, or cut


_ANTHROPIC_BLOCKS = [
    {"type": "text", "text": "hi"},
    {"type": "text", "text": " "},
    {"type": "text", "text": "x", "cache_control": {"type": "ephemeral"}},
    {"type": "tool_use", "id": "a", "name": "Read", "input": {}},
    {"type": "tool_use", "id": "b", "name": "Bash", "input": {"command": "ls"}},
    {"type": "tool_use", "id": "b c", "name": "Bash", "input": {}},
    {"type": "tool_use", "id": "c", "name": "", "input": []},
    {"type": "tool_result", "tool_use_id": "a", "content": "ok"},
    {"type": "tool_result", "tool_use_id": "b", "content": [{"type": "text", "text": ""}]},
    {"type": "tool_result", "tool_use_id": "z", "content": [{"type": "text", "text": "r"}]},
    {"type": "thinking", "thinking": "t", "signature": ""},
    {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "AA"}},
    "not a block",
]
_OPENAI_MESSAGES = [
    {"role": "system", "content": "sys"},
    {"role": "user", "content": "hi"},
    {"role": "user", "content": ""},
    {"role": "assistant", "content": "ok"},
    {"role": "assistant", "content": None},
    {
        "role": "assistant",
        "content": None,
        "tool_calls": [{"id": "a", "type": "function", "function": {"name": "f", "arguments": "{}"}}],
    },
    {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {"id": "b", "type": "function", "function": {"name": "f", "arguments": "{"}},
            {"id": "a", "type": "custom", "custom": {"name": "g", "input": "x"}},
        ],
    },
    {"role": "tool", "tool_call_id": "a", "content": "r"},
    {"role": "tool", "tool_call_id": "b", "content": ""},
    {"role": "tool", "tool_call_id": "q", "content": "r"},
    {"role": "robot", "content": "?"},
    "not a message",
]


def _anthropic_message(draw: Any) -> Any:
    role = draw(st.sampled_from(["user", "assistant", "user", "assistant", "system"]))
    blocks = draw(st.lists(st.sampled_from(_ANTHROPIC_BLOCKS), max_size=3))
    return {"role": role, "content": copy.deepcopy(blocks)}


@st.composite
def _sequences(draw: Any, provider: str) -> list[list[Any]]:
    def message() -> Any:
        if provider == "anthropic":
            return _anthropic_message(draw)
        return copy.deepcopy(draw(st.sampled_from(_OPENAI_MESSAGES)))

    bodies: list[list[Any]] = []
    msgs = [message() for _ in range(draw(st.integers(0, 6)))]
    for _ in range(draw(st.integers(1, 8))):
        step = draw(st.sampled_from(["grow", "grow", "edit", "cut", "same"]))
        if step == "grow":
            msgs = msgs + [message() for _ in range(draw(st.integers(1, 3)))]
        elif step == "edit" and msgs:
            at = draw(st.integers(max(0, len(msgs) - 3), len(msgs) - 1))
            msgs = [*msgs[:at], message(), *msgs[at + 1 :]]
        elif step == "cut" and msgs:
            msgs = msgs[draw(st.integers(1, len(msgs))) :]
        bodies.append(copy.deepcopy(msgs))
    return bodies


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_the_checker_finds_what_the_whole_check_finds_on_generated_sequences(data: st.DataObject) -> None:
    for provider in ("anthropic", "openai"):
        checker = vi.RequestChecker(provider)  # type: ignore[arg-type]
        for msgs in data.draw(_sequences(provider)):
            body: dict[str, Any] = {"model": "m", "messages": msgs, "system": [{"type": "text", "text": "s"}]}
            assert checker.validate(body) == FULL[provider](body)
