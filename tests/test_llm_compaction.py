"""Summary compaction with a real LLM client: the ``anthropic`` / ``openai`` SDK clients talk over
HTTP to the scripted loopback server (``tests/llm_server.py``) while a ``ContextEngine`` compacts
the head of a real Claude Code transcript.

Every path of issue 3 is asserted: a good summary (analysis stripped, continuation message, audit,
quality figures), a summary missing sections or identifiers (one retry with the reasons; the better
one kept), prompt too long with and without the token gap, 429 then success, 500s until the
circuit breaker opens (and a manual success closing it), a timeout, manual instructions, prefix
reuse with the session's own model, chunking with a partial summary, and OpenClaw's staged summary
(parts summarized apart, then merged). After every failure the session is exactly as it was.

Sizes: the session model is ``claude-sonnet-4-5`` at a 60,000-token window, so summary compaction
runs above 24,000 tokens (``compact_at_share`` 0.4) and keeps the newest 10,000.
"""

from __future__ import annotations

import re
import warnings
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from conftest import CLAUDE_CODE
from ctxengine.engine.core import CompactionError, ContextEngine
from ctxengine.formats import load
from ctxengine.formats.anthropic_writer import to_anthropic
from ctxengine.layers.base import LayerEvent
from ctxengine.layers.pairing import find_violations, tool_groups
from ctxengine.llm import AnthropicClient, OpenAIClient, ProviderClient, ToolDefinition
from ctxengine.messages import identifiers
from ctxengine.messages.model import Message
from ctxengine.models.registry import Registry, WindowWarning
from ctxengine.policy.registry import CacheClear, IdleClear, SessionMemory, ToolResultBudget, get_policy
from ctxengine.summary.audit import latest_user_request, span_text
from ctxengine.summary.llm.summarizer import (
    CHUNK_ATTEMPTS,
    CONTINUATION,
    MERGE_INSTRUCTIONS,
    NINE_SECTIONS,
    LLMSummarizer,
    SummaryError,
    split_by_token_share,
    strip_analysis,
)
from ctxengine.summary.notes import serialize
from ctxengine.summary.structured import STYLE_SECTIONS
from ctxengine.tokens.counter import counter_for
from llm_server import (
    Recorded,
    ScriptedLLMServer,
    anthropic_prompt_too_long,
    openai_context_length_exceeded,
    rate_limited,
    server_error,
)
from policies import PRE_SKELETON, off

SONNET = CLAUDE_CODE / "cc_sonnet-4.5_long-290-tools_redacted_3cfce0ff.jsonl"
SESSION_MODEL = "claude-sonnet-4-5"
LLM_MODELS = {"anthropic": "claude-sonnet-4-6", "openai": "gpt-4o"}
PROVIDERS = ["anthropic", "openai"]
WINDOW = 60_000
THRESHOLD = 24_000  # summary compaction runs above this (0.4 of the window)
HEAD_TOKENS = 32_000  # content ingested before the first call: over the 24,000-token threshold
SYSTEM_PROMPT = "You are a coding agent. Work in the user's repository."
# the LLM summary path (no session notes), nothing else in the way, every result shown as is
POLICY = off(PRE_SKELETON, SessionMemory, CacheClear, IdleClear, ToolResultBudget)
COUNTER = counter_for(Registry.default().get(SESSION_MODEL))
ANALYSIS = "PRIVATE-DRAFT-7f3a: thinking out loud about the conversation"


# --------------------------------------------------------------------------------------------
# Fixtures and helpers
# --------------------------------------------------------------------------------------------


# no real credentials or base URLs reach the clients
pytestmark = pytest.mark.usefixtures("clean_llm_env")


@pytest.fixture(scope="module")
def sonnet() -> list[Message]:
    sessions = load(SONNET)
    assert sessions and len(sessions[0].messages) > 100
    return sessions[0].messages


def head(messages: list[Message], tokens: int) -> list[Message]:
    """The first messages of ``messages`` holding at least ``tokens`` tokens."""
    total = 0
    for i, m in enumerate(messages):
        total += COUNTER.count_message(m)
        if total >= tokens:
            return messages[: i + 1]
    raise AssertionError(f"the transcript has fewer than {tokens} tokens")


@pytest.fixture(scope="module")
def convo(sonnet: list[Message]) -> list[Message]:
    return head(sonnet, HEAD_TOKENS)


@pytest.fixture(params=PROVIDERS)
def provider(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def server() -> Iterator[ScriptedLLMServer]:
    with ScriptedLLMServer() as s:
        yield s


def make_client(
    provider: str,
    server: ScriptedLLMServer,
    *,
    model: str | None = None,
    timeout: float = 5.0,
    max_retries: int = 1,
) -> ProviderClient:
    name = model or LLM_MODELS[provider]
    if provider == "anthropic":
        return AnthropicClient(
            name, api_key="test-key", base_url=server.url, timeout=timeout, max_retries=max_retries
        )
    return OpenAIClient(
        name, api_key="test-key", base_url=server.openai_url, timeout=timeout, max_retries=max_retries
    )


def make_engine(
    client: ProviderClient | None, messages: list[Message], *, model: str = SESSION_MODEL, **kw: Any
) -> ContextEngine:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", WindowWarning)
        engine = ContextEngine(POLICY, model=model, window=WINDOW, llm=client, **kw)
    engine.bootstrap(system=SYSTEM_PROMPT)
    for m in messages:
        engine.ingest(m)
    return engine


def strings(node: Any) -> Iterator[str]:
    """Every string inside a decoded JSON value."""
    if isinstance(node, str):
        yield node
    elif isinstance(node, dict):
        for v in node.values():
            yield from strings(v)
    elif isinstance(node, list):
        for v in node:
            yield from strings(v)


def summary_text(
    ids: set[str] | list[str], latest: str, *, sections: tuple[str, ...] = NINE_SECTIONS, mark: str = ""
) -> str:
    body = "\n".join(f"## {i}. {h}\n- covered" for i, h in enumerate(sections, 1))
    return (
        f"<analysis>{ANALYSIS}</analysis>\n<summary>\n{mark}\n{body}\n"
        f"Latest request: {latest}\nIdentifiers: {' '.join(sorted(ids))}\n</summary>"
    )


def good_summary(latest: str) -> Callable[[dict[str, Any]], str]:
    """A reply in the nine sections that echoes every identifier of the request (as the
    acceptance stub does) and restates ``latest``, the latest user request."""

    def reply(body: dict[str, Any]) -> str:
        found: set[str] = set()
        for s in strings(body):
            found |= identifiers.extract(s)
        return summary_text(found, latest)

    return reply


def prompt_of(rec: Recorded) -> str:
    """The text of the last message of a recorded request (the summary instruction)."""
    content = rec.body["messages"][-1]["content"]
    if isinstance(content, str):
        return content
    return "\n".join(b.get("text", "") for b in content if isinstance(b, dict))


def conversation_of(rec: Recorded) -> str:
    text = prompt_of(rec)
    m = re.search(r"(?s)<conversation>\n(.*)\n</conversation>", text)
    assert m, "the summary request carries no <conversation>"
    return m.group(1)


def summary_events(events: list[LayerEvent]) -> list[LayerEvent]:
    return [e for e in events if e.layer == "summary_compact"]


def only_summary_event(events: list[LayerEvent]) -> LayerEvent:
    found = summary_events(events)
    assert len(found) == 1, [e.layer for e in events]
    return found[0]


def snapshot(engine: ContextEngine) -> tuple[list[Message], list[Message], int, list[Message]]:
    """What a failure must not change: history, the projection, the cut, the prefix."""
    return list(engine.history), list(engine.view.messages), engine.kept_from, list(engine.prefix)


def span_of(engine: ContextEngine, event: LayerEvent) -> list[Message]:
    """The summarized span of a first compaction (the projection started at history[0])."""
    return engine.history[: event.details["messages_summarized"]]


# --------------------------------------------------------------------------------------------
# A good summary
# --------------------------------------------------------------------------------------------


def test_good_summary(provider: str, server: ScriptedLLMServer, convo: list[Message]) -> None:
    latest = latest_user_request(convo)
    server.default = good_summary(latest)
    client = make_client(provider, server)
    engine = make_engine(client, convo)
    proj = engine.assemble(now=1_800_000_000.0)

    event = only_summary_event(proj.events)
    assert event.llm_calls >= 1
    assert event.llm_calls == len(server.requests) == 1
    assert event.llm_input_tokens > 0 and event.llm_output_tokens > 0 and event.llm_cost_usd > 0
    assert event.tokens_after < event.tokens_before
    d = event.details
    assert d["audit"]["passed"] is True
    assert d["audit"]["missing_sections"] == [] and d["audit"]["missing_identifiers"] == []
    assert d["prefix_reused"] is False and d["chunks"] == 1 and d["partial"] is False
    q = d["quality"]
    assert 0 < q["compression_ratio"] < 1
    assert q["tokens_saved"] == event.tokens_before - event.tokens_after > 0
    assert q["identifier_retention"] is not None and 0 < q["identifier_retention"] <= 1
    assert isinstance(q["latest_request_verbatim"], bool)

    # the summary: a user message opening with the continuation sentence, analysis stripped
    summary = proj.messages[0]
    assert summary.role == "user" and summary.origin == "summary"
    assert summary.text().startswith(CONTINUATION)
    assert ANALYSIS not in summary.text() and "<analysis>" not in summary.text()
    assert "<summary>" not in summary.text()
    for section in NINE_SECTIONS:
        assert section in summary.text()
    # the kept tail is the history's tail, verbatim
    kept = d["kept_messages"]
    assert proj.messages[-kept:] == convo[-kept:]
    assert d["messages_summarized"] + kept == len(convo)
    assert engine.history == convo

    # the request: the summarizer's own prompt with the span as labelled text
    prompt = prompt_of(server.requests[0])
    for section in NINE_SECTIONS:
        assert section in prompt
    assert "<analysis>" in prompt
    assert conversation_of(server.requests[0]).startswith("[User]: ")
    # the call is recorded by the client
    assert [c.outcome for c in client.calls] == ["ok"]
    assert client.calls[0].purpose == "summary"
    assert event in engine.events


# --------------------------------------------------------------------------------------------
# The audit: one retry with the reasons, the better one kept
# --------------------------------------------------------------------------------------------


def test_missing_sections_retried_with_reasons(
    provider: str, server: ScriptedLLMServer, convo: list[Message]
) -> None:
    latest = latest_user_request(convo)
    good = good_summary(latest)
    partial_sections = NINE_SECTIONS[:4]
    server.script = [
        lambda body: summary_text(_ids(body), latest, sections=partial_sections),
        good,
    ]
    engine = make_engine(make_client(provider, server), convo)
    proj = engine.assemble()
    event = only_summary_event(proj.events)

    assert len(server.requests) == 2 and event.llm_calls == 2
    first, second = prompt_of(server.requests[0]), prompt_of(server.requests[1])
    assert "previous attempt was rejected" not in first
    assert "A previous attempt was rejected" in second
    assert "Missing required sections: " in second
    for missing in NINE_SECTIONS[4:]:
        assert missing in second.split("A previous attempt was rejected", 1)[1]
    # the second (good) summary is used
    assert event.details["audit"]["passed"] is True
    assert "Optional Next Step" in proj.messages[0].text()


def _ids(body: dict[str, Any]) -> set[str]:
    found: set[str] = set()
    for s in strings(body):
        found |= identifiers.extract(s)
    return found


def test_missing_identifiers_retried_with_them(
    provider: str, server: ScriptedLLMServer, convo: list[Message]
) -> None:
    latest = latest_user_request(convo)
    server.script = [("ok", summary_text(set(), latest)), good_summary(latest)]
    engine = make_engine(make_client(provider, server), convo)
    event = only_summary_event(engine.assemble().events)

    assert len(server.requests) == 2
    second = prompt_of(server.requests[1])
    reasons = second.split("A previous attempt was rejected: ", 1)[1]
    assert reasons.startswith("These exact identifiers must appear verbatim: ")
    listed = reasons.split(": ", 1)[1].split(".\n")[0]
    named = [x.strip() for x in listed.rstrip(".").split(", ") if x.strip()]
    assert named, reasons[:400]
    # every identifier named is one of the summarized span's
    span_ids = identifiers.extract(span_text(span_of(engine, event)))
    assert all(n in span_ids or n in span_text(span_of(engine, event)) for n in named[:12])
    assert event.details["audit"]["passed"] is True


def test_both_attempts_fail_the_better_one_is_kept(server: ScriptedLLMServer, convo: list[Message]) -> None:
    latest = latest_user_request(convo)
    # the first misses only identifiers; the second misses everything: the first is kept
    server.script = [
        ("ok", summary_text(set(), latest, mark="MARK-FIRST")),
        ("ok", "MARK-SECOND nothing useful"),
    ]
    engine = make_engine(make_client("anthropic", server), convo)
    proj = engine.assemble()
    event = only_summary_event(proj.events)
    assert len(server.requests) == 2 and event.llm_calls == 2
    audit = event.details["audit"]
    assert audit["passed"] is False
    assert audit["missing_sections"] == [] and audit["missing_identifiers"]
    assert "MARK-FIRST" in proj.messages[0].text() and "MARK-SECOND" not in proj.messages[0].text()
    # a kept summary is still a summary: the compaction is committed
    assert proj.messages[0].text().startswith(CONTINUATION)
    assert event.tokens_after < event.tokens_before


def test_both_attempts_fail_second_better_is_kept(server: ScriptedLLMServer, convo: list[Message]) -> None:
    latest = latest_user_request(convo)
    server.script = [
        ("ok", "MARK-FIRST nothing useful"),
        ("ok", summary_text(set(), latest, mark="MARK-SECOND")),
    ]
    engine = make_engine(make_client("openai", server), convo)
    proj = engine.assemble()
    event = only_summary_event(proj.events)
    audit = event.details["audit"]
    assert audit["passed"] is False and audit["missing_sections"] == []
    assert "MARK-SECOND" in proj.messages[0].text() and "MARK-FIRST" not in proj.messages[0].text()


# --------------------------------------------------------------------------------------------
# Prompt too long
# --------------------------------------------------------------------------------------------


def _dropped_note(conversation: str) -> int:
    m = re.match(r"\[(\d+) older messages were dropped to fit the summarizer\]\n", conversation)
    return int(m.group(1)) if m else 0


def _too_long(provider: str, gap: int | None) -> Any:
    if provider == "anthropic":
        return (
            anthropic_prompt_too_long(210_000 + gap, 210_000)
            if gap
            else anthropic_prompt_too_long(None, None)
        )
    return (
        openai_context_length_exceeded(128_000 + gap, 128_000)
        if gap
        else openai_context_length_exceeded(None, None)
    )


def test_prompt_too_long_with_gap_drops_just_enough(
    provider: str, server: ScriptedLLMServer, convo: list[Message]
) -> None:
    latest = latest_user_request(convo)
    # the LLM summary cuts where the structured one does: a $0 probe tells the span
    probe = make_engine(None, convo)
    probe_event = probe.compact(force=True)
    assert probe_event is not None and probe_event.layer == "summary_compact"
    span = probe.history[: probe_event.details["messages_summarized"]]
    groups = tool_groups(span)
    sizes = [sum(COUNTER.count_message(m) for m in span[s:e]) for s, e in groups]
    # a gap that needs the first three groups: more than two cover, at most three
    gap = int(sum(sizes[:3]) / 1.2)
    assert sum(sizes[:2]) < gap * 1.2 <= sum(sizes[:3]), sizes[:4]

    server.script = [_too_long(provider, gap), good_summary(latest)]
    engine = make_engine(make_client(provider, server), convo)
    event = only_summary_event(engine.assemble().events)
    assert event.details["messages_summarized"] == len(span)
    assert len(server.requests) == 2
    first, second = conversation_of(server.requests[0]), conversation_of(server.requests[1])
    assert _dropped_note(first) == 0
    assert _dropped_note(second) == groups[3][0]  # the three oldest groups went, no more
    assert len(second) < len(first)
    assert event.details["ptl_retries"] == 1
    assert event.llm_calls == 1  # the rejected request is not billed
    assert event.details["audit"]["passed"] is True


def test_prompt_too_long_small_gap_drops_one_group(server: ScriptedLLMServer, convo: list[Message]) -> None:
    latest = latest_user_request(convo)
    server.script = [anthropic_prompt_too_long(200_001, 200_000), good_summary(latest)]
    engine = make_engine(make_client("anthropic", server), convo)
    event = only_summary_event(engine.assemble().events)
    span = span_of(engine, event)
    groups = tool_groups(span)
    assert _dropped_note(conversation_of(server.requests[1])) == groups[1][0]


def test_prompt_too_long_without_gap_drops_a_fifth_of_the_groups(
    provider: str, server: ScriptedLLMServer, convo: list[Message]
) -> None:
    latest = latest_user_request(convo)
    server.script = [_too_long(provider, None), _too_long(provider, None), good_summary(latest)]
    engine = make_engine(make_client(provider, server), convo)
    event = only_summary_event(engine.assemble().events)
    span = span_of(engine, event)
    groups = tool_groups(span)
    n = len(groups)
    first_drop = max(1, int(n * 0.2))
    second_drop = max(1, int((n - first_drop) * 0.2))
    convs = [conversation_of(r) for r in server.requests]
    assert len(convs) == 3
    assert _dropped_note(convs[0]) == 0
    assert _dropped_note(convs[1]) == groups[first_drop][0]
    assert _dropped_note(convs[2]) == groups[first_drop + second_drop][0]
    assert len(convs[0]) > len(convs[1]) > len(convs[2])
    assert event.details["ptl_retries"] == 2


def test_prompt_too_long_more_than_three_times_fails_and_changes_nothing(
    provider: str, server: ScriptedLLMServer, convo: list[Message]
) -> None:
    server.default = _too_long(provider, None)
    engine = make_engine(make_client(provider, server), convo)
    before = snapshot(engine)
    proj = engine.assemble()
    assert len(server.requests) == 4  # the first try and 3 retries
    event = only_summary_event(proj.events)
    assert "error" in event.details and "prompt too long after 3 retries" in event.details["error"]
    assert event.tokens_after == event.tokens_before
    assert snapshot(engine) == before
    assert proj.messages == convo
    # manually: a typed error, still nothing changed
    with pytest.raises(CompactionError, match="prompt too long"):
        engine.compact(force=True)
    assert len(server.requests) == 8
    assert snapshot(engine) == before


# --------------------------------------------------------------------------------------------
# Rate limit, server errors and the circuit breaker, timeout
# --------------------------------------------------------------------------------------------


def test_rate_limited_then_success(provider: str, server: ScriptedLLMServer, convo: list[Message]) -> None:
    server.script = [rate_limited(provider), good_summary(latest_user_request(convo))]
    client = make_client(provider, server, max_retries=2)
    engine = make_engine(client, convo)
    proj = engine.assemble()
    event = only_summary_event(proj.events)
    assert "error" not in event.details
    assert len(server.requests) == 2
    assert event.llm_calls == 1 and event.llm_cost_usd > 0
    assert len(client.calls) == 1
    assert client.calls[0].outcome == "ok" and client.calls[0].attempts == 2
    assert proj.messages[0].origin == "summary"


def test_server_errors_open_the_breaker_and_a_manual_success_closes_it(
    provider: str, server: ScriptedLLMServer, sonnet: list[Message], convo: list[Message]
) -> None:
    server.default = server_error(provider)
    engine = make_engine(make_client(provider, server, max_retries=1), convo)
    before = snapshot(engine)
    failures: list[LayerEvent] = []
    for k in range(1, 4):
        proj = engine.assemble()
        event = only_summary_event(proj.events)
        failures.append(event)
        assert "error" in event.details and event.details["consecutive_failures"] == k
        assert proj.messages == convo  # the session is exactly as it was
        assert snapshot(engine) == before
        assert len(server.requests) == 2 * k  # one try and one SDK retry per compaction
    assert "breaker" not in failures[1].details
    assert "3 consecutive failures" in failures[2].details["breaker"]
    assert "automatic compaction stops" in failures[2].details["breaker"]
    assert engine.compactor.breaker_open

    # the breaker is open: automatic compaction asks nothing more
    for _ in range(2):
        proj = engine.assemble()
        assert summary_events(proj.events) == []
        assert proj.messages == convo
    assert len(server.requests) == 6

    # a manual compaction succeeds and resets it
    server.default = good_summary(latest_user_request(convo))
    event = engine.compact(force=True)
    assert event is not None and event.layer == "summary_compact" and "error" not in event.details
    assert not engine.compactor.breaker_open and engine.compactor.failures == 0
    assert len(server.requests) == 7
    # and automatic compaction works again once the context grows past the threshold
    proj = engine.assemble()
    assert summary_events(proj.events) == [] and len(server.requests) == 7
    # and automatic compaction asks the model again once the context has grown enough
    for m in sonnet[len(convo) :]:
        engine.ingest(m)
        found = summary_events(engine.assemble().events)
        if found:
            break
    assert found and "error" not in found[0].details
    assert len(server.requests) == 8


def test_timeout_fails_and_changes_nothing(server: ScriptedLLMServer, convo: list[Message]) -> None:
    server.default = ("sleep", 3.0)
    client = make_client("anthropic", server, timeout=0.4, max_retries=0)
    engine = make_engine(client, convo)
    before = snapshot(engine)
    proj = engine.assemble()
    event = only_summary_event(proj.events)
    assert "error" in event.details and "summary request failed" in event.details["error"]
    assert event.llm_calls == 0 and event.llm_cost_usd == 0
    assert proj.messages == convo and snapshot(engine) == before
    assert [c.outcome for c in client.calls] == ["timeout"]
    with pytest.raises(CompactionError):
        engine.compact(force=True)
    assert snapshot(engine) == before
    assert [c.outcome for c in client.calls] == ["timeout", "timeout"]
    # the failed manual compaction is recorded in the engine's events
    assert "error" in engine.events[-1].details


def test_openai_timeout(server: ScriptedLLMServer, convo: list[Message]) -> None:
    server.default = ("sleep", 3.0)
    engine = make_engine(make_client("openai", server, timeout=0.4, max_retries=0), convo)
    before = snapshot(engine)
    with pytest.raises(CompactionError, match="compaction failed"):
        engine.compact(force=True)
    assert snapshot(engine) == before


# --------------------------------------------------------------------------------------------
# Manual compaction with instructions
# --------------------------------------------------------------------------------------------


def test_manual_compaction_with_instructions(
    provider: str, server: ScriptedLLMServer, convo: list[Message]
) -> None:
    server.default = good_summary(latest_user_request(convo))
    engine = make_engine(make_client(provider, server), convo)
    event = engine.compact(force=True, instructions="focus on the database migration")
    assert event is not None and event.layer == "summary_compact"
    assert event.details["instructions"] == "focus on the database migration"
    assert len(server.requests) == 1
    assert "Additional focus: focus on the database migration" in prompt_of(server.requests[0])
    assert engine.assemble().messages[0].origin == "summary"


# --------------------------------------------------------------------------------------------
# Prefix reuse with the session's own model
# --------------------------------------------------------------------------------------------


def _strip_cache_control(node: Any) -> Any:
    if isinstance(node, dict):
        return {k: _strip_cache_control(v) for k, v in node.items() if k != "cache_control"}
    if isinstance(node, list):
        return [_strip_cache_control(v) for v in node]
    return node


def test_prefix_reuse_with_the_sessions_own_model(server: ScriptedLLMServer, convo: list[Message]) -> None:
    model = "claude-sonnet-4-6"
    latest = latest_user_request(convo)
    reply = summary_text(identifiers.extract(span_text(convo)), latest)
    server.script = [("ok", reply, {"input_tokens": 300, "cache_read_input_tokens": 25_000})]
    engine = make_engine(make_client("anthropic", server, model=model), convo, model=model)
    event = only_summary_event(engine.assemble().events)
    assert len(server.requests) == 1
    body = server.requests[0].body
    assert event.details["prefix_reused"] is True
    assert event.details["llm_cache_read_tokens"] == 25_000 > 0

    # the request is the conversation as the main call sends it, plus the summary instruction
    normal = _strip_cache_control(to_anthropic(convo, system=SYSTEM_PROMPT, model=model)["messages"])
    sent = _strip_cache_control(body["messages"])
    assert sent[: len(normal) - 1] == normal[:-1]
    last_normal, rest = normal[-1], sent[len(normal) - 1 :]
    if last_normal["role"] == "user":  # the instruction merged into the last user turn
        assert len(rest) == 1
        assert rest[0]["content"][: len(last_normal["content"])] == last_normal["content"]
    else:
        assert rest[0] == last_normal and len(rest) == 2
    assert "Primary Request and Intent" in prompt_of(server.requests[0])
    assert "<conversation>" not in prompt_of(server.requests[0])
    # same system prompt as the main conversation, with cache breakpoints
    assert [b["text"] for b in body["system"]] == [SYSTEM_PROMPT]
    assert any("cache_control" in b for m in body["messages"] for b in m["content"] if isinstance(b, dict))
    assert "tools" not in body  # the session was started without tools


@pytest.mark.parametrize("preset", ["default", "claude-code"])
def test_prefix_reuse_repeats_the_main_conversations_tools(
    preset: str, server: ScriptedLLMServer, convo: list[Message]
) -> None:
    """The cached prefix starts with the tools: a forked summary request carries the same tool
    definitions the agent sends, so the provider's cache serves it (Claude Code's forked agent)."""
    model = "claude-sonnet-4-6"
    tools = [
        ToolDefinition(
            "read", "Read a file.", {"type": "object", "properties": {"path": {"type": "string"}}}
        ),
        ToolDefinition(
            "grep", "Search files.", {"type": "object", "properties": {"pattern": {"type": "string"}}}
        ),
    ]
    server.default = good_summary(latest_user_request(convo))
    policy = POLICY if preset == "default" else off(get_policy(preset), SessionMemory)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", WindowWarning)
        engine = ContextEngine(
            policy, model=model, window=WINDOW, llm=make_client("anthropic", server, model=model)
        )
    engine.bootstrap(system=SYSTEM_PROMPT, tools=tools)
    for m in convo:
        engine.ingest(m)
    event = engine.compact(force=True)
    assert event is not None and event.details["prefix_reused"] is True
    body = server.requests[0].body
    assert [t["name"] for t in body["tools"]] == ["read", "grep"]
    assert body["tools"][0]["input_schema"] == tools[0].parameters
    assert "cache_control" in body["tools"][-1]  # the tools end a cached prefix segment
    assert [b["text"] for b in body["system"]] == [SYSTEM_PROMPT]


def test_prefix_reuse_without_reported_cache_reads_estimates_them(
    server: ScriptedLLMServer, convo: list[Message]
) -> None:
    model = "claude-sonnet-4-6"
    server.default = good_summary(latest_user_request(convo))
    engine = make_engine(make_client("anthropic", server, model=model), convo, model=model)
    event = only_summary_event(engine.assemble().events)
    assert event.details["prefix_reused"] is True
    assert event.details["llm_cache_read_tokens"] > 0
    # priced as cache reads: cheaper than the same tokens as plain input
    info = Registry.default().get(model)
    assert event.llm_cost_usd < info.cost_usd(
        input_tokens=event.llm_input_tokens, output_tokens=event.llm_output_tokens
    )


def test_different_model_does_not_reuse_the_prefix(server: ScriptedLLMServer, convo: list[Message]) -> None:
    server.default = good_summary(latest_user_request(convo))
    engine = make_engine(make_client("anthropic", server, model="claude-sonnet-4-6"), convo)
    event = only_summary_event(engine.assemble().events)
    assert event.details["prefix_reused"] is False
    assert len(server.requests[0].body["messages"]) == 1
    assert "<conversation>" in prompt_of(server.requests[0])


# --------------------------------------------------------------------------------------------
# Chunking
# --------------------------------------------------------------------------------------------


def rolling_replies() -> tuple[Callable[[dict[str, Any]], str], list[str]]:
    """A reply that numbers its summaries; the list records what was returned."""
    made: list[str] = []

    def reply(body: dict[str, Any]) -> str:
        text = f"ROLLING-{len(made) + 1}: " + "; ".join(NINE_SECTIONS)
        made.append(text)
        return f"<analysis>{ANALYSIS}</analysis><summary>{text}</summary>"

    return reply, made


def summarizer_for(
    server: ScriptedLLMServer, *, window: int, max_output: int, stages: int = 1, max_retries: int = 1
) -> LLMSummarizer:
    """An LLM summarizer on the Anthropic client against ``server``, counting with the session's
    counter."""
    client = make_client("anthropic", server, max_retries=max_retries)
    return LLMSummarizer(client, COUNTER.count_message, window=window, max_output=max_output, stages=stages)


def test_chunked_summary_is_rolling(server: ScriptedLLMServer, sonnet: list[Message]) -> None:
    span = head(sonnet, 60_000)
    reply, made = rolling_replies()
    server.default = reply
    summarizer = summarizer_for(server, window=20_000, max_output=2_000)
    result = summarizer.summarize(span)
    n = result.chunks
    # one request per chunk; the replies name no identifier, so the last chunk's summary fails the
    # audit (run against the whole span) and is asked once more with the reasons
    assert n > 1 and len(server.requests) == n + 1 and not result.partial
    retry = prompt_of(server.requests[-1])
    assert "A previous attempt was rejected" in retry
    assert conversation_of(server.requests[-1]) == conversation_of(server.requests[-2])
    assert result.text in (made[-1], made[-2])  # the better of the two is kept
    assert result.spent.llm_calls == n + 1
    for k, rec in enumerate(server.requests[:n]):
        prompt = prompt_of(rec)
        assert COUNTER.count_text(prompt) + summarizer.max_output < summarizer.window
        if k:
            assert f"<previous-summary>\n{made[k - 1]}\n</previous-summary>" in prompt
        else:
            assert "<previous-summary>" not in prompt
    # every message of the span went to exactly one chunk, in order, groups whole
    convs = [conversation_of(r) for r in server.requests[:n]]
    assert all(_dropped_note(c) == 0 for c in convs)
    assert "\n".join(convs) == serialize(span)
    assert result.audit is not None and not result.audit.passed


def test_chunk_failing_after_retries_leaves_a_partial_summary(
    server: ScriptedLLMServer, sonnet: list[Message]
) -> None:
    span = head(sonnet, 60_000)
    reply, made = rolling_replies()
    server.script = [reply, reply, *[server_error("anthropic")] * CHUNK_ATTEMPTS]
    server.default = reply
    summarizer = summarizer_for(server, window=20_000, max_output=2_000, max_retries=0)
    waits: list[float] = []
    summarizer.sleep = waits.append
    result = summarizer.summarize(span)
    assert len(server.requests) == 2 + CHUNK_ATTEMPTS == 5
    assert result.partial is True and result.chunks > 3
    assert result.text.startswith(made[1])
    assert result.text.endswith(f"[Partial summary: chunks 1-2 of {result.chunks} were summarized]")
    assert result.spent.llm_calls == 2
    # OpenClaw's backoff between the tries of a chunk: 0.5 s, then 1 s, each +-20%
    assert len(waits) == 2 and 0.4 <= waits[0] <= 0.6 and 0.8 <= waits[1] <= 1.2


def test_first_chunk_failing_is_an_error(server: ScriptedLLMServer, sonnet: list[Message]) -> None:
    server.default = server_error("anthropic")
    summarizer = summarizer_for(server, window=20_000, max_output=2_000, max_retries=0)
    summarizer.sleep = lambda _s: None
    with pytest.raises(SummaryError) as info:
        summarizer.summarize(head(sonnet, 60_000))
    assert info.value.spent.llm_calls == 0
    assert len(server.requests) == CHUNK_ATTEMPTS == 3  # three tries of the first chunk


def test_engine_records_a_partial_chunked_summary(server: ScriptedLLMServer, convo: list[Message]) -> None:
    reply, made = rolling_replies()
    client = make_client("anthropic", server, max_retries=0)
    engine = make_engine(client, convo)
    # a summarizer with a small window of its own: the span does not fit in one request
    engine.compactor.summarizer = LLMSummarizer(client, COUNTER.count_message, window=16_000)
    engine.compactor.summarizer.sleep = lambda _s: None
    server.script = [reply, *[server_error("anthropic")] * CHUNK_ATTEMPTS]
    server.default = reply
    proj = engine.assemble()
    event = only_summary_event(proj.events)
    assert event.details["partial"] is True and event.details["chunks"] > 1
    text = proj.messages[0].text()
    assert text.startswith(CONTINUATION + made[0])
    assert "[Partial summary: chunks 1-1 of" in text
    assert event.llm_calls == 1


# --------------------------------------------------------------------------------------------
# Staged summary with merge (OpenClaw summarizeInStages)
# --------------------------------------------------------------------------------------------


def staged_replies(
    latest: str, sections: tuple[str, ...] = NINE_SECTIONS
) -> tuple[Callable[[dict[str, Any]], str], list[str]]:
    """Summaries that pass the audit (every identifier of the request echoed, ``latest``
    restated), marked ``PART-k`` or, for the merge request, ``MERGED``; ``made`` records each
    summary as it enters the context (analysis stripped)."""
    made: list[str] = []

    def reply(body: dict[str, Any]) -> str:
        texts = list(strings(body))
        found: set[str] = set()
        for t in texts:
            found |= identifiers.extract(t)
        mark = "MERGED" if "<partial-summaries>" in "".join(texts) else f"PART-{len(made) + 1}"
        text = summary_text(found, latest, sections=sections, mark=mark)
        made.append(strip_analysis(text))
        return text

    return reply, made


def test_split_by_token_share_halves_a_real_span_on_tool_group_boundaries(sonnet: list[Message]) -> None:
    span = head(sonnet, 60_000)
    tokens = [COUNTER.count_message(m) for m in span]
    parts = split_by_token_share(span, tokens, 2)
    assert len(parts) == 2 and [m for p in parts for m in p] == span  # in order, nothing lost
    first = len(parts[0])
    assert any(s == first for s, _ in tool_groups(span))  # the cut is a tool-group boundary
    share = sum(tokens[:first]) / sum(tokens)
    assert 0.3 < share <= 0.5  # the first part stops before passing half of the tokens
    assert (
        split_by_token_share(span[:3], tokens[:3], 5)
        and len(split_by_token_share(span[:3], tokens[:3], 5)) <= 3
    )


def test_staged_summary_summarizes_the_parts_apart_then_merges(
    server: ScriptedLLMServer, sonnet: list[Message]
) -> None:
    span = head(sonnet, 60_000)
    reply, made = staged_replies(latest_user_request(span))
    server.default = reply
    summarizer = summarizer_for(server, window=200_000, max_output=8_000, stages=2)
    # the chunk budget comes from the session's window: 64,000 x 0.4 - 4,096 = 21,504 < 60,000
    result = summarizer.summarize(span, stage_window=64_000)
    prompts = [prompt_of(r) for r in server.requests]
    assert len(prompts) == 3 and result.stages == 2 and result.chunks == 2 and not result.partial
    assert result.text == made[-1] and made[-1].startswith("MERGED")
    assert result.spent.llm_calls == 3
    parts = split_by_token_share(span, [COUNTER.count_message(m) for m in span], 2)
    for prompt, part in zip(prompts[:2], parts, strict=True):  # each part alone, no previous summary
        assert "<previous-summary>" not in prompt
        assert re.search(r"(?s)<conversation>\n(.*)\n</conversation>", prompt).group(1) == serialize(part)  # type: ignore[union-attr]
    merge = prompts[2]
    assert "<conversation>" not in merge and MERGE_INSTRUCTIONS.strip() in merge
    one, two = merge.index("[Chunk 1/2 - oldest messages"), merge.index("[Chunk 2/2 - most recent messages")
    assert one < merge.index(made[0]) < two < merge.index(made[1])
    assert "UTC" in merge  # the parts carry their time ranges
    assert result.audit is not None


def test_staged_summary_of_a_small_span_is_one_call(server: ScriptedLLMServer, convo: list[Message]) -> None:
    reply, _ = staged_replies(latest_user_request(convo[:30]))
    server.default = reply
    summarizer = summarizer_for(server, window=200_000, max_output=8_000, stages=2)
    result = summarizer.summarize(convo[:30], stage_window=200_000)  # far under 75,904 tokens
    assert len(server.requests) == 1 and result.stages == 1
    assert "<conversation>" in prompt_of(server.requests[0])


def test_staged_summary_keeps_the_parts_done_when_a_later_part_fails(
    server: ScriptedLLMServer, sonnet: list[Message]
) -> None:
    span = head(sonnet, 60_000)
    reply, _ = staged_replies(latest_user_request(span))
    server.script = [reply, *[server_error("anthropic")] * CHUNK_ATTEMPTS]
    server.default = reply
    summarizer = summarizer_for(server, window=200_000, max_output=8_000, stages=2, max_retries=0)
    summarizer.sleep = lambda _s: None
    result = summarizer.summarize(span, stage_window=64_000)
    assert len(server.requests) == 5  # part 1, part 2 three times (failed), the merge of part 1
    merge = prompt_of(server.requests[-1])
    assert "[Chunk 1/2 - oldest messages" in merge and "[Chunk 2/2" not in merge
    assert result.partial and result.text.endswith("[Partial summary: parts 1-1 of 2 were summarized]")
    assert result.spent.llm_calls == 2


def test_staged_summary_fails_when_the_merge_fails(server: ScriptedLLMServer, sonnet: list[Message]) -> None:
    reply, _ = staged_replies("")
    server.script = [reply, reply]
    server.default = server_error("anthropic")
    summarizer = summarizer_for(server, window=200_000, max_output=8_000, stages=2, max_retries=0)
    with pytest.raises(SummaryError, match="merge"):
        summarizer.summarize(head(sonnet, 60_000), stage_window=64_000)


def test_openclaw_preset_compacts_with_a_staged_summary(
    provider: str, server: ScriptedLLMServer, sonnet: list[Message]
) -> None:
    """The OpenClaw preset, at a 64,000-token window, with an LLM: its compaction summarizes the
    span in two parts and a merge, under OpenClaw's required headings."""
    convo = head(sonnet, 70_000)
    reply, made = staged_replies(latest_user_request(convo), STYLE_SECTIONS["openclaw"])
    server.default = reply
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", WindowWarning)
        engine = ContextEngine(
            get_policy("openclaw"), model=SESSION_MODEL, window=64_000, llm=make_client(provider, server)
        )
    engine.bootstrap(system=SYSTEM_PROMPT)
    for m in convo:
        engine.ingest(m)
    proj = engine.assemble()
    event = only_summary_event(proj.events)
    assert event.details["stages"] == 2 and event.details["style"] == "openclaw"
    merges = [r for r in server.requests if "<partial-summaries>" in prompt_of(r)]
    assert len(merges) == 1 and server.requests[-1] is merges[0]
    flush = [e for e in proj.events if e.layer == "memory_flush"]  # the notes: one call before
    assert len(flush) == 1 and flush[0].llm_calls == 1
    assert event.llm_calls == len(server.requests) - 1 == 3  # two parts and the merge
    assert made[-1].startswith("MERGED") and made[-1] in proj.messages[0].text()
    assert event.details["audit"]["passed"]
    assert find_violations(proj.messages) == []


def test_staged_summary_with_a_chunk_lost_inside_a_part_is_partial(
    server: ScriptedLLMServer, sonnet: list[Message]
) -> None:
    """Part 1 is summarized in rolling chunks (a small summarizer window); its second chunk fails
    three times: the rest of part 1 is not in the summary, which must say so and be partial."""
    span = head(sonnet, 60_000)
    reply, _ = staged_replies(latest_user_request(span))
    server.script = [reply, *[server_error("anthropic")] * CHUNK_ATTEMPTS]
    server.default = reply
    summarizer = summarizer_for(server, window=20_000, max_output=2_000, stages=2, max_retries=0)
    summarizer.sleep = lambda _s: None
    result = summarizer.summarize(span, stage_window=64_000)
    assert result.stages == 2 and result.partial is True
    assert re.search(r"\[Partial summary: \d+ of \d+ chunks were not summarized\]$", result.text)
