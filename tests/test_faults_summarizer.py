"""Issue 9, items 6-8: the summarizer's own request. Inputs built here after the ideas of
``../shared/cases/L12`` (dangling tool calls), ``L18`` (an unbounded request) and ``L23`` (a call
in flight during a compaction)."""

from __future__ import annotations

import random
import warnings
from typing import Any

import pytest

from ctxengine.engine.core import ContextEngine
from ctxengine.formats.anthropic_writer import to_anthropic
from ctxengine.formats.validate import validate_anthropic
from ctxengine.llm.base import LLMRequest, LLMResponse
from ctxengine.llm.errors import BadRequestError
from ctxengine.messages.model import Message, Text, ToolCall, ToolResult, Usage
from ctxengine.models.registry import Registry
from ctxengine.policy.registry import SessionMemory, Settings, SummarizerKind, SummarySettings, get_policy
from ctxengine.summary.llm.summarizer import NINE_SECTIONS
from ctxengine.summary.notes import SECTIONS as NOTES_SECTIONS
from ctxengine.tokens.counter import counter_for

MODEL = "claude-sonnet-4-5"
POLICIES = ("default", "claude-code", "openclaw", "pi", "letta")
T0 = 1_760_000_000.0


def prose(chars: int, seed: int) -> str:
    rnd = random.Random(seed)
    words = ("the", "of", "and", "query", "table", "index", "error", "value", "row", "column", "cache")
    return " ".join(rnd.choice(words) for _ in range(chars // 5))[:chars]


class StrictLLM:
    """A stand-in model that answers 400 to a request body breaking Anthropic's pairing rules
    (as a strict provider does) and records every request."""

    provider = "anthropic"

    def __init__(self) -> None:
        self.model = MODEL
        self.requests: list[LLMRequest] = []
        self.rejected: list[str] = []
        self.timeout = 1.0
        self.max_retries = 0
        self.max_retry_wait_s = 0.0

    def complete(self, request: LLMRequest) -> LLMResponse:
        self.requests.append(request)
        problems = validate_anthropic(to_anthropic(request.messages, system=request.system, model=MODEL))
        if problems:
            self.rejected.append(problems[0])
            raise BadRequestError("tool_use ids were found without tool_result blocks", status=400)
        if request.purpose == "notes":
            text = "\n".join(f"# {s}\n- noted" for s in NOTES_SECTIONS)
        else:
            text = (
                "<summary>\n"
                + "\n".join(f"{i}. {s}\n- done" for i, s in enumerate(NINE_SECTIONS, 1))
                + "\n</summary>"
            )
        return LLMResponse(
            text=text,
            usage=Usage(input_tokens=1_000, output_tokens=200),
            model=MODEL,
            cost_usd=0.0,
            latency_s=0.0,
            stop_reason="end_turn",
        )


def make_engine(
    policy: str,
    window: int,
    llm: Any,
    *,
    session_memory: bool = True,
    summarizer: SummarizerKind | None = None,
) -> ContextEngine:
    """An engine under the policy ``policy``, with session-memory compaction turned off
    (``session_memory=False``) or another summarizer chosen (``summarizer``)."""
    p = get_policy(policy)
    changes: list[Settings] = []
    if not session_memory:
        changes.append(p.settings(SessionMemory).with_(enabled=False))
    if summarizer is not None:
        changes.append(p.settings(SummarySettings).with_(summarizer=summarizer))
    if changes:
        p = p.with_(*changes)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        engine = ContextEngine(p, model=MODEL, window=window, llm=llm)
    engine.bootstrap(system="You are a coding agent.", fixed_prefix_tokens=2_000)
    return engine


def call(cid: str, cmd: str, mid: str, ts: float) -> Message:
    return Message(
        "assistant", (Text("step"), ToolCall(cid, "bash", {"cmd": cmd})), mid, timestamp=ts, model=MODEL
    )


def result(cid: str, text: str, mid: str, ts: float, name: str = "bash") -> Message:
    return Message("user", (ToolResult(cid, (Text(text),), name=name),), mid, timestamp=ts)


@pytest.mark.parametrize("policy", POLICIES)
def test_summary_requests_are_pairing_valid_with_interrupted_and_pending_calls(policy: str) -> None:
    """L12's kind: an interrupted call mid-history and a call pending at the end; every summary
    request a strict provider gets must be valid, and the compaction succeed."""
    llm = StrictLLM()
    engine = make_engine(policy, 64_000, llm, session_memory=False, summarizer="llm")
    engine.ingest(Message("user", (Text("Upgrade the ORM in /app/db to v2."),), "u0", timestamp=T0))
    for k in range(24):
        ts = T0 + 10 * k
        engine.assemble(now=ts)
        if k == 3:  # interrupted: no result, the user typed instead
            engine.ingest(call("toolu_int", "psql -c 'drop table legacy'", "a3", ts))
            engine.ingest(
                Message("user", (Text("[Request interrupted by user] keep it"),), "u3", timestamp=ts + 1)
            )
            continue
        engine.ingest(call(f"toolu_{k}", f"grep -rn query /app/db/m{k}.py", f"a{k}", ts))
        engine.ingest(result(f"toolu_{k}", prose(16_000, k), f"r{k}", ts + 1))
    engine.ingest(call("toolu_pending", "alembic upgrade head", "a_last", T0 + 300))
    event = engine.compact(
        force=True, instructions="focus on the failing queries" if policy == "default" else ""
    )
    assert llm.rejected == []
    assert any(r.purpose == "summary" for r in llm.requests)
    assert event is not None and "error" not in event.details


@pytest.mark.parametrize("summarizer_model", ["claude-sonnet-4-5", "gpt-4"])
@pytest.mark.parametrize("policy", ["default", "claude-code"])
def test_a_prefix_reuse_request_is_bounded_by_the_summarizers_window(
    policy: str, summarizer_model: str
) -> None:
    """L18's kind: ~1.2M chars of history at a 200,000-token window; no request to the
    summarizer may be larger than its window, its output budget included (bounded before
    sending): the 200,000-token model, and an 8,192-token one for which the policy's output
    budget (claude-code's 20,000) alone is larger than the window."""
    llm = StrictLLM()
    llm.model = summarizer_model
    engine = make_engine(policy, 200_000, llm, session_memory=False, summarizer="llm")
    for k in range(60):
        engine.ingest(
            Message(
                "user",
                (Text(f"log {k} /var/log/b/{k}.log:\n" + prose(20_000, k)),),
                f"u{k}",
                timestamp=T0 + k,
            )
        )
        engine.ingest(
            Message("assistant", (Text(f"noted {k}"),), f"a{k}", timestamp=T0 + k + 0.5, model=MODEL)
        )
    engine.ingest(Message("user", (Text("Which log shows the first timeout?"),), "ulast", timestamp=T0 + 100))
    engine.assemble(now=T0 + 101)
    info = Registry.default().get(summarizer_model)
    counter = counter_for(info)
    sizes = [
        counter.count_text(r.system) + sum(counter.count_message(m) for m in r.messages) + r.max_tokens
        for r in llm.requests
    ]
    assert sizes and max(sizes) <= info.input_window, (info.input_window, sizes)


def compact_with_a_call_in_flight(engine: ContextEngine) -> Any:
    """L23's input: 14 rounds of large results, a long-running call pending during a manual
    compaction, its result 20 minutes later; returns the projection when the result arrives."""
    engine.ingest(Message("user", (Text("Export Q3 orders to parquet, then validate."),), "u0", timestamp=T0))
    for k in range(14):
        ts = T0 + 10 * k
        engine.assemble(now=ts)
        engine.ingest(call(f"t{k}", f"psql -c 'select count(*) from o{k}'", f"a{k}", ts))
        engine.ingest(result(f"t{k}", prose(9_000, k), f"r{k}", ts + 1))
    engine.assemble(now=T0 + 200)
    engine.ingest(
        Message(
            "assistant",
            (ToolCall("call_export", "export_job", {"table": "orders"}),),
            "a_long",
            timestamp=T0 + 201,
            model=MODEL,
        )
    )
    assert engine.compact(force=True) is not None
    engine.ingest(
        result("call_export", "export complete: 48213 rows", "r_long", T0 + 1_400, name="export_job")
    )
    proj = engine.assemble(now=T0 + 1_401)
    return proj


@pytest.mark.parametrize("policy", ["claude-code", "letta", "openclaw", "pi"])
@pytest.mark.parametrize("with_llm", [False, True])
def test_a_call_in_flight_during_a_compaction_keeps_its_result_visible(policy: str, with_llm: bool) -> None:
    """L23's kind: a long-running call is pending when a manual full compaction runs; its result
    arrives later and must reach the model (not summarized away and then dropped as an orphan)."""
    llm = StrictLLM() if with_llm else None
    engine = make_engine(policy, 64_000, llm, session_memory=False)
    proj = compact_with_a_call_in_flight(engine)
    shown = [r for m in proj.messages for r in m.tool_results if r.call_id == "call_export"]
    assert shown and "48213 rows" in shown[0].content[0].text  # type: ignore[union-attr]
    assert any(c.id == "call_export" for m in proj.messages for c in m.tool_calls)


@pytest.mark.parametrize("window", [16_000, 18_000, 24_000])
@pytest.mark.parametrize("policy", POLICIES)
@pytest.mark.parametrize("with_llm", [False, True])
def test_a_result_that_just_arrived_is_never_summarized_unseen(
    policy: str, window: int, with_llm: bool
) -> None:
    """The kind of L23 once the call has answered: 14 rounds of work, then ``cat export.log``
    returns 0.6x-1.5x the window. letta at 16,000 and 18,000 summarized everything, the fresh
    result with it: the next request (2,233 tokens) held no line of it. The newest round stays
    (the guard cuts it to fit), every request within the window and valid."""
    llm = StrictLLM() if with_llm else None
    engine = make_engine(policy, window, llm)
    engine.ingest(Message("user", (Text("Export Q3 orders to parquet, then validate."),), "u0", timestamp=T0))
    for k in range(14):
        proj = engine.assemble(now=T0 + 10 * k)
        engine.ingest(call(f"t{k}", f"psql -c 'select {k}'", f"a{k}", T0 + 10 * k))
        engine.ingest(result(f"t{k}", prose(5_000, k), f"r{k}", T0 + 10 * k + 1))
        engine.after_turn(Usage(input_tokens=proj.tokens, output_tokens=100))
    for n, mult in enumerate((0.6, 1.5)):
        ts = T0 + 200 + 100 * n
        engine.ingest(call(f"x{n}", "cat export.log", f"ax{n}", ts))
        head = f"export complete: 48213 rows, part {n}"
        text = head + "\n" + prose(int(window * 4.5 * mult), 77)
        engine.ingest(result(f"x{n}", text, f"rx{n}", ts + 1))
        proj = engine.assemble(now=ts + 2)
        shown = "\n".join(str(b) for m in proj.messages for r in m.tool_results for b in r.content)
        assert head in shown, [e.layer for e in proj.events]
        assert proj.tokens <= window
        assert validate_anthropic(to_anthropic(proj.messages, system="sys", model=MODEL)) == []


@pytest.mark.parametrize("with_llm", [False, True])
def test_default_keeps_compacting_after_a_call_in_flight(with_llm: bool) -> None:
    """L23's kind under ``default``: a manual compaction while a long-running call is pending,
    its result visible when it arrives, and automatic compactions afterwards once the context
    grows to the threshold again (every request pairing-valid). ``default`` keeps these
    9,000-char results whole and clears the old ones from 70% of the window, until a batch can no
    longer bring it down to 60% (``CacheClear.reach_target``): then it compacts."""
    llm = StrictLLM() if with_llm else None
    engine = make_engine("default", 64_000, llm)
    proj = compact_with_a_call_in_flight(engine)
    assert any("48213 rows" in r.content[0].text for m in proj.messages for r in m.tool_results)  # type: ignore[union-attr]
    compactions = 0
    for j in range(90):
        ts = T0 + 1_410 + 10 * j
        engine.ingest(call(f"v{j}", f"python check.py --part {j}", f"b{j}", ts))
        engine.ingest(result(f"v{j}", prose(9_000, 300 + j), f"rv{j}", ts + 1))
        proj = engine.assemble(now=ts + 2)
        compactions += sum(e.layer in ("session_memory_compact", "summary_compact") for e in proj.events)
        assert validate_anthropic(to_anthropic(proj.messages, system="sys", model=MODEL)) == []
    assert compactions >= 1


@pytest.mark.parametrize("summarizer_model", ["claude-3-haiku-20240307", "claude-3-5-haiku-20241022"])
@pytest.mark.parametrize("policy", ["default", "claude-code", "pi", "letta"])  # openclaw's forced one is $0
def test_no_summarizer_request_asks_for_more_output_than_its_model_gives(
    policy: str, summarizer_model: str
) -> None:
    """The output budget was capped at a quarter of the summarizer's window, never at its model's
    own maximum output: pi and letta asked claude-3-haiku (4,096) for 8,192 tokens, a 400 at
    Anthropic ("max_tokens > 4096"); claude-code's 20,000 would exceed claude-3.5-haiku's 8,192."""
    from ctxengine.models.registry import Registry

    most = Registry.default().get(summarizer_model).max_output
    llm = StrictLLM()
    llm.model = summarizer_model
    engine = make_engine(policy, 200_000, llm, session_memory=False, summarizer="llm")
    engine.ingest(Message("user", (Text("Please do the task " + prose(1_000, 1)),), "u0", timestamp=T0))
    for k in range(30):
        engine.ingest(call(f"c{k}", f"run {k}", f"a{k}", T0 + 10 * k + 2))
        engine.ingest(result(f"c{k}", prose(16_000, k), f"r{k}", T0 + 10 * k + 3))
    engine.compact(force=True)
    assert llm.requests, "a model summary was asked for"
    assert all(r.max_tokens <= most for r in llm.requests), [(r.purpose, r.max_tokens) for r in llm.requests]


@pytest.mark.parametrize("session_memory", [True, False], ids=["sm", "no-sm"])
@pytest.mark.parametrize("policy", POLICIES)
def test_a_rolling_summary_with_a_long_previous_part_stays_in_a_small_summarizers_window(
    policy: str, session_memory: bool
) -> None:
    """L18's kind on the chunked path: a small summarizer (gpt-4, 8,192 tokens shared by input and
    output), a 32,000-token main window and 30,000-char pastes every five rounds. Each chunk's
    body was cut to the window but the previous summary (quoting a paste) and the prompt were
    not counted: 7,711 + 2,048 tokens were asked of gpt-4 (claude-code, openclaw, pi, letta).
    Every request, with its output budget, fits the summarizer's window by its own tokenizer."""
    llm = StrictLLM()
    llm.model = "gpt-4"
    engine = make_engine(policy, 32_000, llm, session_memory=session_memory, summarizer="llm")
    engine.ingest(Message("user", (Text("Migrate the service to the new queue API."),), "u0", timestamp=T0))
    for k in range(40):
        ts = T0 + 10 * k
        proj = engine.assemble(now=ts)
        if k % 5 == 0:
            paste = f"paste {k}:\n" + prose(30_000, 500 + k)
            engine.ingest(Message("user", (Text(paste),), f"up{k}", timestamp=ts))
        engine.ingest(call(f"t{k}", f"cat m{k}.py", f"a{k}", ts))
        engine.ingest(result(f"t{k}", prose(12_000, k), f"r{k}", ts + 1))
        engine.after_turn(Usage(input_tokens=proj.tokens, output_tokens=100))
    info = Registry.default().get("gpt-4")
    counter = counter_for(info)
    sizes = [
        counter.count_text(r.system) + sum(counter.count_message(m) for m in r.messages) + r.max_tokens
        for r in llm.requests
    ]
    assert sizes and max(sizes) <= info.context_window, sorted(sizes)[-3:]
