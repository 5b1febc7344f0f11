"""The LLM clients drive the real ``anthropic`` / ``openai`` SDKs over HTTP against a scripted
loopback server (``tests/llm_server.py``) and the acceptance stub."""

from __future__ import annotations

import itertools
import logging
import os
import re
import socket
import subprocess
import sys
import time
import traceback
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from conftest import SHARED
from ctxengine.llm import (
    AnthropicClient,
    AuthError,
    BadRequestError,
    LLMClient,
    LLMConnectionError,
    LLMError,
    LLMRequest,
    LLMTimeoutError,
    OpenAIClient,
    PromptTooLongError,
    ProviderClient,
    RateLimitError,
    SDKNotInstalledError,
    ServerError,
    ToolDefinition,
    call_stats,
    make_client,
    parse_prompt_too_long,
    parse_spec,
    redact,
)
from ctxengine.messages.model import Message, Text, ToolCall, ToolResult, Usage
from ctxengine.models.registry import Registry, usage_cost_usd
from llm_server import (
    ScriptedLLMServer,
    anthropic_error,
    anthropic_prompt_too_long,
    auth_failed,
    openai_context_length_exceeded,
    openai_error,
    rate_limited,
    server_error,
)

KEY = "sk-test-SECRET-123"
PROVIDERS = ["anthropic", "openai"]
MODELS = {"anthropic": "claude-sonnet-4-6", "openai": "gpt-4o"}
STUB = SHARED / "acceptance" / "llm_stub.py"

# no real credentials, base URLs or profiles leak into the tests
pytestmark = pytest.mark.usefixtures("clean_llm_env")


def conversation() -> list[Message]:
    return [
        Message("user", (Text("Fix the crash in /srv/app/main.py"),), id="u1"),
        Message(
            "assistant",
            (Text("Reading it."), ToolCall("call_1", "read_file", {"path": "/srv/app/main.py"})),
            id="a1",
        ),
        Message("user", (ToolResult("call_1", (Text("def main():\n    raise KeyError('port')"),)),), id="u2"),
        Message("assistant", (Text("The KeyError comes from a missing config key."),), id="a2"),
        Message("user", (Text("Summarize the session."),), id="u3"),
    ]


def request(**kw: object) -> LLMRequest:
    args: dict[str, object] = {
        "system": "You summarize coding sessions.",
        "messages": conversation(),
        "max_tokens": 256,
        "purpose": "summary",
    }
    args.update(kw)
    return LLMRequest(**args)  # type: ignore[arg-type]


def client_for(
    provider: str, server: ScriptedLLMServer, *, timeout: float = 5.0, max_retries: int = 2, model: str = ""
) -> ProviderClient:
    model = model or MODELS[provider]
    if provider == "anthropic":
        return AnthropicClient(
            model, api_key=KEY, base_url=server.url, timeout=timeout, max_retries=max_retries
        )
    return OpenAIClient(
        model, api_key=KEY, base_url=server.openai_url, timeout=timeout, max_retries=max_retries
    )


@pytest.fixture(params=PROVIDERS)
def provider(request: pytest.FixtureRequest) -> str:
    return str(request.param)


# --------------------------------------------------------------------------------------------
# Success
# --------------------------------------------------------------------------------------------


def test_good_reply_text_usage_cost_latency(provider: str) -> None:
    with (
        ScriptedLLMServer([("ok", "<summary>all good</summary>")]) as server,
        client_for(provider, server) as c,
    ):
        assert isinstance(c, LLMClient)
        resp = c.complete(request())
    assert resp.text == "<summary>all good</summary>"
    assert resp.usage.input_tokens > 0 and resp.usage.output_tokens > 0
    assert resp.cost_usd > 0
    assert resp.cost_usd == pytest.approx(
        usage_cost_usd(Registry.default().get(MODELS[provider]), resp.usage)
    )
    assert resp.latency_s > 0
    assert resp.model == MODELS[provider]
    assert resp.stop_reason in ("end_turn", "stop") and not resp.truncated
    [rec] = c.calls
    assert (rec.outcome, rec.attempts, rec.purpose, rec.provider) == ("ok", 1, "summary", provider)
    assert rec.usage == resp.usage and rec.cost_usd == resp.cost_usd and rec.error == ""


def test_anthropic_request_body_is_messages_format() -> None:
    with ScriptedLLMServer() as server, client_for("anthropic", server) as c:
        c.complete(request(temperature=0.2))
        c.complete(request(cache_prefix=True, tools=(ToolDefinition("read_file", "Read a file"),)))
    plain, cached = (r.body for r in server.requests)
    assert server.requests[0].path == "/v1/messages"
    assert "x-api-key" not in server.requests[0].headers  # recorded without auth; sent by the SDK
    assert plain["model"] == "claude-sonnet-4-6" and plain["max_tokens"] == 256
    assert "temperature" not in plain  # API 2026-10-21 rejects sampling parameters
    assert plain["system"] == [{"type": "text", "text": "You summarize coding sessions."}]
    roles = [m["role"] for m in plain["messages"]]
    assert roles[0] == "user" and all(a != b for a, b in itertools.pairwise(roles))
    assert plain["messages"][2]["content"][0]["type"] == "tool_result"
    assert "cache_control" not in str(plain)
    assert "cache_control" in cached["system"][-1]
    assert cached["tools"][0]["name"] == "read_file" and "input_schema" in cached["tools"][0]
    assert "cache_control" in cached["messages"][-1]["content"][-1]
    assert "temperature" not in cached


def test_openai_request_body_is_chat_format() -> None:
    with ScriptedLLMServer() as server, client_for("openai", server) as c:
        c.complete(request(tools=(ToolDefinition("read_file", "Read a file"),)))
    [rec] = server.requests
    assert rec.path == "/v1/chat/completions"
    body = rec.body
    assert body["messages"][0] == {"role": "system", "content": "You summarize coding sessions."}
    assert [m["role"] for m in body["messages"]] == [
        "system",
        "user",
        "assistant",
        "tool",
        "assistant",
        "user",
    ]
    assert body["messages"][2]["tool_calls"][0]["id"] == "call_1"
    assert body["max_tokens"] == 256 and "max_completion_tokens" not in body  # a custom base_url
    assert body["tools"][0]["function"]["name"] == "read_file"
    assert "stream" not in body or body["stream"] is False


def test_concurrent_calls_are_recorded_separately(provider: str) -> None:
    with (
        ScriptedLLMServer([rate_limited(provider)]) as server,
        client_for(provider, server) as c,
        ThreadPoolExecutor(4) as pool,
    ):
        texts = list(pool.map(lambda _: c.complete(request()).text, range(4)))
    assert texts == ["ok"] * 4 and len(server.requests) == 5
    assert sorted(r.attempts for r in c.calls) == [1, 1, 1, 2]


def test_dynamic_reply_sees_the_request(provider: str) -> None:
    def echo(body: dict[str, object]) -> str:
        return " ".join(sorted(set(re.findall(r"/srv/[\w/.]+", str(body)))))

    with ScriptedLLMServer([echo]) as server, client_for(provider, server) as c:
        assert c.complete(request()).text == "/srv/app/main.py"


def test_openai_usage_normalised_with_cached_tokens() -> None:
    usage = {
        "prompt_tokens": 1000,
        "completion_tokens": 50,
        "total_tokens": 1050,
        "prompt_tokens_details": {"cached_tokens": 800},
    }
    with ScriptedLLMServer([("ok", "hi", usage)]) as server, client_for("openai", server) as c:
        resp = c.complete(request())
    assert resp.usage == Usage(input_tokens=200, cache_read_tokens=800, output_tokens=50)
    info = Registry.default().get("gpt-4o")
    assert resp.cost_usd == pytest.approx((200 * info.input + 800 * info.cache_read + 50 * info.output) / 1e6)


def test_anthropic_usage_with_cache_fields() -> None:
    usage = {
        "input_tokens": 12,
        "output_tokens": 30,
        "cache_read_input_tokens": 5000,
        "cache_creation_input_tokens": 700,
        "cache_creation": {"ephemeral_5m_input_tokens": 500, "ephemeral_1h_input_tokens": 200},
    }
    with ScriptedLLMServer([("ok", "hi", usage)]) as server, client_for("anthropic", server) as c:
        resp = c.complete(request(cache_prefix=True))
    assert resp.usage == Usage(12, 5000, 500, 200, 30)


# --------------------------------------------------------------------------------------------
# Errors
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("provider", "reply", "gap", "actual", "limit"),
    [
        ("anthropic", anthropic_prompt_too_long(), 8380, 208380, 200000),
        ("anthropic", anthropic_prompt_too_long(None, None), None, None, None),
        ("openai", openai_context_length_exceeded(), 2000, 130000, 128000),
        ("openai", openai_context_length_exceeded(None, None), None, None, None),
    ],
)
def test_prompt_too_long(
    provider: str, reply: tuple[object, ...], gap: int | None, actual: int | None, limit: int | None
) -> None:
    with (
        ScriptedLLMServer([reply]) as server,
        client_for(provider, server) as c,
        pytest.raises(PromptTooLongError) as info,
    ):
        c.complete(request())
    err = info.value
    assert (err.gap_tokens, err.actual, err.limit, err.status) == (gap, actual, limit, 400)
    assert len(server.requests) == 1  # a 400 is not retried
    assert c.calls[0].outcome == "prompt_too_long" and c.calls[0].cost_usd == 0


def test_rate_limit_then_success_retries_once(provider: str) -> None:
    with (
        ScriptedLLMServer([rate_limited(provider), ("ok", "done")]) as server,
        client_for(provider, server) as c,
    ):
        t0 = time.perf_counter()
        resp = c.complete(request())
        elapsed = time.perf_counter() - t0
    assert resp.text == "done"
    assert len(server.requests) == 2
    assert server.requests[1].headers.get("x-stainless-retry-count") == "1"
    [rec] = c.calls
    assert rec.outcome == "ok" and rec.attempts == 2
    assert elapsed < 2.0


def test_server_errors_until_retries_exhausted(provider: str) -> None:
    with (
        ScriptedLLMServer(default=server_error(provider)) as server,
        client_for(provider, server) as c,
        pytest.raises(ServerError) as info,
    ):
        c.complete(request())
    assert info.value.status == 500
    assert len(server.requests) == 3  # 1 + max_retries
    assert c.calls[0].outcome == "server_error" and c.calls[0].attempts == 3


def test_anthropic_overloaded_is_server_error() -> None:
    with (
        ScriptedLLMServer(default=server_error("anthropic", 529)) as server,
        client_for("anthropic", server, max_retries=1) as c,
        pytest.raises(ServerError) as info,
    ):
        c.complete(request())
    assert info.value.status == 529 and len(server.requests) == 2


def test_long_retry_after_fails_fast_without_waiting(provider: str) -> None:
    script = [rate_limited(provider, {"retry-after": "3600"}), ("ok", "never")]
    with ScriptedLLMServer(script) as server, client_for(provider, server) as c:
        t0 = time.perf_counter()
        with pytest.raises(RateLimitError) as info:
            c.complete(request())
        assert time.perf_counter() - t0 < 2.0
    assert info.value.retry_after_s == 3600 and info.value.status == 429
    assert len(server.requests) == 1


def test_timeout(provider: str) -> None:
    with (
        ScriptedLLMServer([("sleep", 3)]) as server,
        client_for(provider, server, timeout=0.3, max_retries=0) as c,
    ):
        t0 = time.perf_counter()
        with pytest.raises(LLMTimeoutError) as info:
            c.complete(request())
        assert time.perf_counter() - t0 < 2.0
    assert "0.3 s" in str(info.value)
    assert c.calls[0].outcome == "timeout" and c.calls[0].attempts == 1


def test_connection_refused() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    c = OpenAIClient("gpt-4o", api_key=KEY, base_url=f"http://127.0.0.1:{port}/v1", max_retries=0, timeout=2)
    with c, pytest.raises(LLMConnectionError):
        c.complete(request())


def test_auth_error_and_the_key_never_leaks(provider: str, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    # a server that quotes the key back, as OpenAI's 401 does (partly masked)
    reply = auth_failed(provider, f"Incorrect API key provided: {KEY}. Bearer {KEY}")
    with ScriptedLLMServer([("ok", "fine"), reply]) as server, client_for(provider, server) as c:
        c.complete(request())
        with pytest.raises(AuthError) as info:
            c.complete(request())
    err = info.value
    assert err.status == 401 and len(server.requests) == 2
    texts = [str(err), repr(err), err.message, *(r.error for r in c.calls)]
    texts.append("".join(traceback.format_exception(err)))
    texts += [r.getMessage() for r in caplog.records]
    texts += [logging.Formatter().format(r) for r in caplog.records]
    assert any("llm call ok" in t for t in texts) and any("llm call failed" in t for t in texts)
    for text in texts:
        assert "SECRET" not in text, text
    assert err.__cause__ is None and err.__suppress_context__


def test_key_from_environment(monkeypatch: pytest.MonkeyPatch, provider: str) -> None:
    env = "ANTHROPIC_API_KEY" if provider == "anthropic" else "OPENAI_API_KEY"
    monkeypatch.setenv(env, KEY)
    with ScriptedLLMServer([auth_failed(provider, f"bad key {KEY}")]) as server:
        url = server.url if provider == "anthropic" else server.openai_url
        with (
            make_client(f"{provider}:{MODELS[provider]}", base_url=url) as c,
            pytest.raises(AuthError) as info,
        ):
            c.complete(request())
    assert "SECRET" not in str(info.value)


def test_missing_key_without_base_url_is_auth_error(provider: str) -> None:
    with pytest.raises(AuthError, match="API key"):
        make_client(f"{provider}:{MODELS[provider]}")


def test_local_server_needs_no_key(provider: str) -> None:
    with ScriptedLLMServer([("ok", "local")]) as server:
        url = server.url if provider == "anthropic" else server.openai_url
        with make_client(f"{provider}:llama3.1:8b", base_url=url) as c:
            assert c.complete(request()).text == "local"
    assert server.requests[0].body["model"] == "llama3.1:8b"


def test_other_4xx_is_bad_request(provider: str) -> None:
    reply = (
        anthropic_error(404, "not_found_error", "model: nope")
        if provider == "anthropic"
        else openai_error(404, "The model `nope` does not exist", err_code="model_not_found")
    )
    with (
        ScriptedLLMServer([reply]) as server,
        client_for(provider, server) as c,
        pytest.raises(BadRequestError) as info,
    ):
        c.complete(request())
    assert info.value.status == 404 and "nope" in str(info.value)
    assert isinstance(info.value, LLMError)


def test_openai_switches_to_max_completion_tokens() -> None:
    reject = openai_error(
        400,
        "Unsupported parameter: 'max_tokens' is not supported with this model. Use 'max_completion_tokens' "
        "instead.",
        err_code="unsupported_parameter",
    )
    with ScriptedLLMServer([reject, ("ok", "a"), ("ok", "b")]) as server, client_for("openai", server) as c:
        assert c.complete(request()).text == "a"
        assert c.complete(request()).text == "b"
    first, second, third = (r.body for r in server.requests)
    assert "max_tokens" in first and second["max_completion_tokens"] == 256 and "max_tokens" not in second
    assert "max_completion_tokens" in third  # remembered
    assert [r.attempts for r in c.calls] == [2, 1]


def test_openai_official_endpoint_uses_max_completion_tokens() -> None:
    c = OpenAIClient("gpt-5", api_key=KEY)
    assert c.token_param == "max_completion_tokens"
    c.close()


def test_sdk_not_installed(monkeypatch: pytest.MonkeyPatch, provider: str) -> None:
    monkeypatch.setitem(sys.modules, provider, None)
    with pytest.raises(SDKNotInstalledError, match=rf"pip install 'ctxengine\[{provider}\]'") as info:
        make_client(f"{provider}:m", base_url="http://127.0.0.1:9")
    assert isinstance(info.value, ImportError)


# --------------------------------------------------------------------------------------------
# Spec parsing, helpers
# --------------------------------------------------------------------------------------------


def test_parse_spec() -> None:
    assert parse_spec("anthropic:claude-sonnet-4-5") == ("anthropic", "claude-sonnet-4-5")
    assert parse_spec(" OpenAI:llama3.1:8b ") == ("openai", "llama3.1:8b")
    for bad in ("claude-sonnet-4-5", "anthropic:", ":gpt-4o", "", "gemini:gemini-2.5-pro"):
        with pytest.raises(ValueError, match=r"PROVIDER|provider"):
            parse_spec(bad)


def test_make_client_types() -> None:
    with make_client("anthropic:stub-model", base_url="http://127.0.0.1:9", timeout=3, max_retries=1) as a:
        assert isinstance(a, AnthropicClient) and (a.provider, a.model, a.timeout) == (
            "anthropic",
            "stub-model",
            3,
        )
    with make_client("openai:stub-model", base_url="http://127.0.0.1:9/v1") as o:
        assert isinstance(o, OpenAIClient) and o.provider == "openai" and o.max_retries == 2


@pytest.mark.parametrize(
    ("message", "expected"),
    [
        ("prompt is too long: 208380 tokens > 200000 maximum", (208380, 200000)),
        ("prompt is too long", (None, None)),
        (
            "input length and `max_tokens` exceed context limit: 188240 + 21333 > 200000, decrease",
            (209573, 200000),
        ),
        (
            "This model's maximum context length is 128000 tokens. However, your messages resulted in 130000 "
            "tokens. Please reduce the length of the messages.",
            (130000, 128000),
        ),
        (
            "This model's maximum context length is 4096 tokens. However, you requested 5000 tokens "
            "(4000 in the messages, 1000 in the completion).",
            (5000, 4096),
        ),
        (
            "This endpoint's maximum context length is 200000 tokens. "
            "However, you requested about 250,100 tokens",
            (250100, 200000),
        ),
        (
            "Input tokens exceed the configured limit of 272000 tokens. "
            "Your messages resulted in 300000 tokens.",
            (300000, 272000),
        ),
        ("the request exceeds the available context size, try increasing it", (None, None)),
        ("Rate limit reached for requests", None),
        ("max_tokens: 999999 > 64000, which is the maximum allowed", None),
    ],
)
def test_parse_prompt_too_long(message: str, expected: tuple[int | None, int | None] | None) -> None:
    assert parse_prompt_too_long(message) == expected


def test_parse_prompt_too_long_by_code() -> None:
    assert parse_prompt_too_long("Bad request", "context_length_exceeded") == (None, None)


def test_redact() -> None:
    assert redact(f"key {KEY} here", [KEY]) == "key [redacted] here"
    assert "abc" not in redact("Incorrect API key provided: sk-proj-abc*****xyz1")
    assert redact("Bearer tok123 rest") == "[redacted] rest"


def test_call_stats(provider: str) -> None:
    script = [
        ("ok", "a"),
        anthropic_prompt_too_long() if provider == "anthropic" else openai_context_length_exceeded(),
    ]
    with ScriptedLLMServer(script) as server, client_for(provider, server) as c:
        c.complete(request())
        with pytest.raises(PromptTooLongError):
            c.complete(request())
    stats = call_stats(c.calls)
    assert (stats.calls, stats.ok, stats.errors, stats.attempts) == (2, 1, {"prompt_too_long": 1}, 2)
    assert stats.usage == c.calls[0].usage and stats.cost_usd == c.calls[0].cost_usd


# --------------------------------------------------------------------------------------------
# The acceptance stub
# --------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def stub(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[int, Path]]:
    if not STUB.is_file():
        pytest.skip(f"acceptance stub not found at {STUB}")
    count = tmp_path_factory.mktemp("stub") / "count.txt"
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen([sys.executable, str(STUB), str(port), str(count)], env={**os.environ})
    try:
        deadline = time.monotonic() + 10
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                break
            except OSError:
                if time.monotonic() > deadline or proc.poll() is not None:
                    pytest.fail("the acceptance stub did not start")
                time.sleep(0.05)
        yield port, count
    finally:
        proc.terminate()
        proc.wait(timeout=5)


@pytest.mark.parametrize(("spec", "suffix"), [("anthropic:stub-model", ""), ("openai:stub-model", "/v1")])
def test_acceptance_stub(
    stub: tuple[int, Path], monkeypatch: pytest.MonkeyPatch, spec: str, suffix: str
) -> None:
    port, count = stub
    monkeypatch.setenv("ANTHROPIC_API_KEY", "x")
    monkeypatch.setenv("OPENAI_API_KEY", "x")
    with make_client(spec, base_url=f"http://127.0.0.1:{port}{suffix}", timeout=10) as c:
        resp = c.complete(request())
    assert "<summary>" in resp.text and "/srv/app/main.py" in resp.text
    assert resp.usage.input_tokens > 0 and resp.cost_usd > 0  # unknown model: fallback prices
    assert count.read_text().splitlines()[-1].endswith("/messages" if not suffix else "/chat/completions")
