"""The session's body memo (``proxy.body_memo``) on a real recorded session: at every call, the
body written and checked with the memo equals the body written and checked without it, the
recovery hints' messages equal ``with_recovery_hints``'s, and a message hinted at the previous
call is reused as the same object (what lets the writer reuse its encoding)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import msgspec
import pytest

from conftest import CLAUDE_CODE
from ctxengine.engine.core import ContextEngine
from ctxengine.formats import load
from ctxengine.formats.anthropic_writer import to_anthropic
from ctxengine.messages.model import Message, Usage
from ctxengine.policy.registry import get_policy
from ctxengine.proxy.body_memo import BodyMemo
from ctxengine.proxy.recovery import with_recovery_hints
from ctxengine.proxy.wire_anthropic import AnthropicReader, AnthropicWire

pytestmark = pytest.mark.usefixtures("clean_llm_env")

LONG = CLAUDE_CODE / "cc_sonnet-4.5_long-290-tools_redacted_3cfce0ff.jsonl"
AGENTS = {"role": "system", "content": "Available agents: general-purpose, Explore."}  # Claude Code's


def test_memo_bodies_equal_plain_bodies(transcripts: Path) -> None:
    (session,) = load(LONG)
    engine = ContextEngine(get_policy("default"), model=session.model, window=48_000)
    engine.bootstrap(system=session.system)
    wire, reader, memo = AnthropicWire(), AnthropicReader(), BodyMemo("anthropic")
    history: list[Message] = []
    ingested = calls = reused = hinted_calls = 0
    previous: dict[str, Message] = {}
    for msg in session.messages:
        if msg.role == "assistant" and history:
            calls += 1
            written = to_anthropic(history, model=session.model, cache_breakpoints=False)["messages"]
            conversation: list[Any] = [written[0], AGENTS, *written[1:]]  # a pinned system message
            request = wire.parse({"model": session.model, "max_tokens": 1024, "messages": conversation})
            for m in reader.read(conversation[ingested:], ingested):
                engine.ingest(m)
            ingested = len(conversation)
            projection = engine.assemble(now=msg.timestamp)
            plain_msgs = with_recovery_hints(engine, projection.messages)
            memo_msgs = memo.hints.apply(engine, projection.messages)
            assert memo_msgs == plain_msgs
            hinted = [m for m, p in zip(memo_msgs, projection.messages, strict=True) if m is not p]
            hinted_calls += bool(hinted)
            reused += sum(previous.get(m.id) is m for m in hinted)
            previous = {m.id: m for m in hinted}
            plain = wire.build(request, plain_msgs)
            body = wire.build(request, memo_msgs, memo)
            assert msgspec.json.encode(body) == msgspec.json.encode(plain), f"call {calls}"
            assert wire.validate(body, memo) == wire.validate(plain) == []
            engine.after_turn(Usage(input_tokens=projection.tokens, output_tokens=50))
        history.append(msg)
    assert hinted_calls > 10 and reused > 10  # hints were made, and reused from call to call
    assert memo.checker.checked < calls * 10  # the checker went over the new messages only
