"""The proxy driven by real recorded sessions, as their client would drive it: at each recorded
model call the client sends everything so far, then appends the recorded reply. Every request the
upstream receives must be valid and within the window, and its messages must be exactly the
engine's projection of the same history (a reference ``ContextEngine`` fed the same messages
through the public lifecycle, under the same policy and window, written with the same writer).
The proxy rehearses each compaction ahead (``engine.ahead``) and the reference does not: the
projections must not differ for it.

Transcripts: the Claude Code session ``cc_opus-4.5_general-tool-calls`` (all 56 calls) and the
mini-swe-agent session (its first ``MINI_CALLS`` of 156 calls, to keep the test's time modest:
each request re-sends the whole history).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from conftest import CLAUDE_CODE, OPENAI_CHAT
from ctxengine.engine.core import ContextEngine
from ctxengine.formats import load
from ctxengine.formats.anthropic_writer import to_anthropic
from ctxengine.formats.openai_writer import to_openai_chat
from ctxengine.messages.model import Message, Session, Usage
from ctxengine.policy.registry import Policy
from ctxengine.proxy import Proxy, ProxyConfig, create_app
from ctxengine.proxy.recovery import with_recovery_hints
from ctxengine.proxy.wire_anthropic import AnthropicReader
from ctxengine.proxy.wire_openai import OpenAIReader
from proxy_servers import Upstream, serve

pytestmark = [pytest.mark.usefixtures("clean_llm_env"), pytest.mark.filterwarnings("ignore")]

WINDOW = 32_000
MINI_CALLS = 60
CC_FILE = CLAUDE_CODE / "cc_opus-4.5_general-tool-calls_2-comment-header-lines.jsonl"
MINI_FILE = OPENAI_CHAT / "mini-swe-agent-2.2.7_deepseek-chat_tool_calls_django__django-13265.traj.json"


def _report(base: str, proxy: Proxy) -> dict[str, Any]:
    """``GET /ctxengine/sessions`` once every request has completed (upkeep runs after the
    response has gone out)."""
    for _ in range(500):
        if not any(s.lock.locked() for s in list(proxy.table.sessions.values())):
            break
        time.sleep(0.01)
    return httpx.get(base + "/ctxengine/sessions").json()  # type: ignore[no-any-return]


@pytest.fixture
def rig(tmp_path: Path) -> Iterator[tuple[Upstream, str, Proxy]]:
    up = Upstream()
    with serve(up.app()) as up_url:
        cfg = ProxyConfig(  # notes in line, as in the reference engine: their projections are comparable
            anthropic_upstream=up_url,
            openai_upstream=up_url + "/v1",
            window=WINDOW,
            store=tmp_path / "store",
            background_notes=False,
        )
        app = create_app(cfg)
        with serve(app) as base:
            yield up, base, app.state.proxy


def _drive(
    session: Session,
    calls: int,
    send: Callable[[list[Message]], tuple[list[Any], list[Any]]],
    reference: Callable[[list[Any]], list[Any]],
    upstream: Upstream,
    ref: ContextEngine,
) -> int:
    """Replay ``calls`` recorded calls; returns how many upstream requests differed from the
    client's (i.e. the engine changed something)."""
    history: list[Message] = []
    changed = 0
    for msg in session.messages:
        if msg.role == "assistant" and calls > 0:
            calls -= 1
            client_msgs, sent_prefix = send(history)
            seen = upstream.seen[-1]
            assert seen.problems == [], seen.problems[:3]
            assert seen.input_tokens <= WINDOW * 1.15
            expected = sent_prefix + reference(client_msgs)
            assert seen.body["messages"] == expected
            changed += seen.body["messages"] != sent_prefix + client_msgs
            ref.after_turn(Usage(input_tokens=seen.input_tokens, output_tokens=7))
        history.append(msg)
    assert calls == 0
    return changed


class _Reference:
    """The reference engine fed the client's messages as the proxy's reader reads them, under the
    policy the proxy gives its engines (``Proxy.policy``: default, placeholders naming no tool the
    client lacks)."""

    def __init__(self, model: str, reader: Any, policy: Policy) -> None:
        self.engine = ContextEngine(policy, model=model, window=WINDOW)
        self.engine.bootstrap(system="", fixed_prefix_tokens=0)
        self.reader, self.n = reader, 0

    def project(self, client_msgs: list[Any]) -> list[Message]:
        for m in self.reader.read(client_msgs[self.n :], self.n):
            self.engine.ingest(m)
        self.n = len(client_msgs)
        proj = self.engine.assemble()
        assert proj.tokens <= WINDOW
        return with_recovery_hints(self.engine, proj.messages)


def test_claude_code_session_through_proxy(rig: tuple[Upstream, str, Proxy], transcripts: Path) -> None:
    upstream, base, proxy = rig
    (session,) = load(CC_FILE)
    model = "claude-opus-4-5"
    ref = _Reference(model, AnthropicReader(), proxy.policy)
    http = httpx.Client(base_url=base, headers={"x-api-key": "sk-cc"}, timeout=60)

    def send(history: list[Message]) -> tuple[list[Any], list[Any]]:
        msgs = to_anthropic(history, model=model, cache_breakpoints=False)["messages"]
        r = http.post("/v1/messages", json={"model": model, "max_tokens": 1024, "messages": msgs})
        assert r.status_code == 200, r.text
        return msgs, []

    def reference(msgs: list[Any]) -> list[Any]:
        out: list[Any] = to_anthropic(ref.project(msgs), model=model, system_messages="inline")["messages"]
        return out

    changed = _drive(session, len(session.calls), send, reference, upstream, ref.engine)
    assert changed > 0  # the window forced the engine to act: the comparison is not trivial
    report = _report(base, proxy)
    assert len(report["sessions"]) == 1 and report["sessions"][0]["calls"] == len(session.calls)
    assert report["totals"]["fail_open"] == 0
    # its compactions were rehearsed ahead (``engine.ahead``), and what went upstream is the reference's
    (s,) = proxy.table.sessions.values()
    assert s.ahead.rehearsals > 0 and s.stats.compactions == ref.engine.compactor.compactions > 0


def test_mini_swe_agent_session_through_proxy(rig: tuple[Upstream, str, Proxy], transcripts: Path) -> None:
    upstream, base, proxy = rig
    (session,) = load(MINI_FILE)
    model = "deepseek-chat"
    ref = _Reference(model, OpenAIReader(), proxy.policy)
    system = [{"role": "system", "content": session.system}]
    ref.engine.bootstrap(system="", fixed_prefix_tokens=ref.engine.counter.count_text(session.system))
    http = httpx.Client(base_url=base, headers={"authorization": "Bearer sk-mini"}, timeout=60)

    def send(history: list[Message]) -> tuple[list[Any], list[Any]]:
        msgs = to_openai_chat(history, model=model)["messages"]
        r = http.post("/v1/chat/completions", json={"model": model, "messages": system + msgs})
        assert r.status_code == 200, r.text
        return msgs, system

    def reference(msgs: list[Any]) -> list[Any]:
        out: list[Any] = to_openai_chat(ref.project(msgs), model=model, system_messages="inline")["messages"]
        return out

    changed = _drive(session, MINI_CALLS, send, reference, upstream, ref.engine)
    assert changed > 0
    (s,) = _report(base, proxy)["sessions"]
    assert s["calls"] == MINI_CALLS and s["upstream_tokens"] < s["client_tokens"]
    (t,) = proxy.table.sessions.values()
    assert t.ahead.rehearsals > 0 and t.stats.compactions == ref.engine.compactor.compactions > 0
