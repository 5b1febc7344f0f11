"""``identity.ChainMemo``: the hash chain of request after request, reusing the previous request's
links where the messages' bytes are the same, equals ``chain_and_digests`` computed afresh, on
requests that grow, move a cache breakpoint, edit an earlier message, rewind, interleave two
conversations, and come without bytes; and ``raw_messages`` gives each conversation message's
bytes (past an OpenAI fixed prefix too)."""

from __future__ import annotations

import json
import random
from typing import Any

import msgspec

from ctxengine.proxy.identity import ChainMemo, chain_and_digests, raw_messages, root
from ctxengine.proxy.wire import read_request
from ctxengine.proxy.wire_anthropic import AnthropicWire
from ctxengine.proxy.wire_openai import OpenAIWire
from ctxengine.proxy.wire_responses import ResponsesWire


def _message(rng: random.Random, k: int) -> dict[str, Any]:
    role = "user" if k % 2 == 0 else "assistant"
    text = " ".join(rng.choice(["a", "b", "path/x.py", "ok", "ßeta"]) for _ in range(rng.randint(1, 9)))
    if rng.random() < 0.3:
        block = {"type": "text", "text": text, "cache_control": {"type": "ephemeral"}}
        return {"role": role, "content": [block]}
    return {"role": role, "content": text}


def _body(messages: list[dict[str, Any]], spaced: bool) -> bytes:
    body = {"model": "m", "max_tokens": 9, "messages": messages}
    return json.dumps(body).encode() if spaced else msgspec.json.encode(body)


def test_memo_chain_equals_fresh_chain() -> None:
    rng = random.Random(7)
    memo, wire = ChainMemo(max_bytes=20_000), AnthropicWire()
    conversations = [[_message(rng, 0)], [_message(rng, 0)]]
    for step in range(400):
        c = rng.randrange(2)
        msgs = conversations[c]
        op = rng.random()
        if op < 0.6:
            msgs.append(_message(rng, len(msgs)))
        elif op < 0.75 and len(msgs) > 2:  # an earlier message edited (a branch)
            i = rng.randrange(1, len(msgs))
            msgs[i] = _message(rng, i)
        elif op < 0.85 and len(msgs) > 3:  # a rewind
            del msgs[rng.randrange(1, len(msgs)) :]
        elif msgs:  # the breakpoint moved to the newest message
            last = msgs[-1]
            text = last["content"] if isinstance(last["content"], str) else last["content"][0]["text"]
            block = {"type": "text", "text": text, "cache_control": {}}
            msgs[-1] = {"role": last["role"], "content": [block]}
        request = read_request(wire, _body(msgs, spaced=step % 3 == 0))
        start = root("anthropic", "k", None)
        raws = request.raws if step % 11 else None  # now and then a request without its bytes
        assert memo.chain(start, request.conversation, raws) == chain_and_digests(start, request.conversation)
    assert memo.reused > 1_000  # the memo did reuse links (the comparison is not trivial)
    assert memo._bytes <= memo.max_bytes


def test_raw_messages_are_the_conversation() -> None:
    msgs = [{"role": "system", "content": "sys"}, {"role": "user", "content": "hi"}]
    request = read_request(OpenAIWire(), _body(msgs, spaced=True))
    assert request.raws is not None and len(request.raws) == len(request.conversation) == 1
    assert json.loads(bytes(request.raws[0])) == request.conversation[0]
    assert raw_messages(b'{"messages": "not a list"}', []) is None
    # the Responses wire's list is ``input``, whatever else the body holds
    responses = read_request(
        ResponsesWire(),
        b'{"model": "m", "messages": [1, 2, 3], "input": [{"role": "user", "content": "hi"}]}',
    )
    assert responses.raws is not None and [bytes(r) for r in responses.raws] == [
        b'{"role": "user", "content": "hi"}'
    ]
    assert read_request(ResponsesWire(), b'{"model": "m", "input": "hi"}').raws is None
    assert raw_messages(b"[1, 2]", [1]) is None
