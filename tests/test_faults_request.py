"""Issue 9, items 1-3: the latest user request survives every compaction, whole, whichever
summarizer ran; a request too large to fit keeps head and tail and says "partial".

Inputs are built here (the kinds of ``../shared/cases/m1_*`` and ``m6_*``): a request, then tool
rounds large enough to compact several times at a small window."""

from __future__ import annotations

import random
import string
import warnings
from pathlib import Path
from typing import Any

import pytest

from ctxengine.engine.core import ContextEngine
from ctxengine.llm.base import LLMRequest, LLMResponse
from ctxengine.messages.model import Message, Text, ToolCall, ToolResult, Usage
from ctxengine.models.registry import WindowWarning
from ctxengine.policy.registry import SessionMemory, get_policy
from ctxengine.summary.llm.summarizer import NINE_SECTIONS
from policies import off

MODEL = "claude-sonnet-4-5"
T0 = 1_760_000_000.0


def words(n: int, seed: int) -> str:
    rnd = random.Random(seed)
    return " ".join(
        "".join(rnd.choice(string.ascii_lowercase) for _ in range(rnd.randint(3, 8))) for _ in range(n)
    )


def session(
    request: str, rounds: int = 40, result_words: int = 900, beside_results: bool = False
) -> list[Message]:
    """A request at round 5, then tool rounds. ``beside_results``: the request is typed in the
    user message that carries round 4's tool result (one user message, as an API request puts
    a user's words after the tool results)."""
    msgs = [Message("user", (Text("set up the project " + words(30, 1)),), "u0", timestamp=T0)]
    for i in range(rounds):
        if i == 5 and beside_results:
            last = msgs[-1]
            msgs[-1] = Message("user", (*last.blocks, Text(request)), "u-latest", timestamp=last.timestamp)
        elif i == 5:  # the latest request comes early: later compactions summarize it away
            msgs.append(Message("user", (Text(request),), "u-latest", timestamp=T0 + i))
        msgs.append(
            Message(
                "assistant",
                (Text(f"step {i}"), ToolCall(f"c{i}", "Bash", {"command": f"run step {i}"})),
                f"a{i}",
                timestamp=T0 + i + 0.5,
                model=MODEL,
            )
        )
        msgs.append(
            Message(
                "user",
                (ToolResult(f"c{i}", (Text(words(result_words, i)),)),),
                f"r{i}",
                timestamp=T0 + i + 0.7,
            )
        )
    msgs.append(Message("assistant", (Text("done"),), "a-end", timestamp=T0 + rounds + 1, model=MODEL))
    return msgs


class FakeLLM:
    """An in-process LLM client: a summary in Claude Code's nine sections whose "next step" is a
    stale task, never the latest request (what a model may write)."""

    provider = "anthropic"

    def __init__(self) -> None:
        self.model = MODEL
        self.calls: list[Any] = []
        self.timeout = 1.0
        self.max_retries = 0
        self.max_retry_wait_s = 0.0

    def complete(self, request: LLMRequest) -> LLMResponse:
        body = "\n".join(
            f"{i + 1}. {s}\n- set up the project (stale next step)" for i, s in enumerate(NINE_SECTIONS)
        )
        return LLMResponse(
            text=f"<summary>\n{body}\n</summary>",
            usage=Usage(input_tokens=1000, output_tokens=200),
            model=MODEL,
            cost_usd=0.0,
            latency_s=0.0,
            stop_reason="end_turn",
        )


def drive(engine: ContextEngine, msgs: list[Message]) -> list[Any]:
    """Like the replay: assemble before each assistant message; returns every quality figure of
    the compaction events, with the projection after it."""
    found = []
    for m in msgs:
        if m.role == "assistant":
            p = engine.assemble(now=m.timestamp)
            for e in p.events:
                q = e.details.get("quality")
                if q is not None:
                    found.append((e.layer, q, p.messages))
            engine.ingest(m)
            engine.after_turn(Usage(input_tokens=p.tokens, output_tokens=50))
        else:
            engine.ingest(m)
    return found


def make(policy: str = "default", window: int = 32_000, fixed: int = 2_000, **kw: Any) -> ContextEngine:
    """An engine under ``policy`` with the layers ``off=(...)`` turned off, at ``window`` tokens,
    with a ``fixed``-token prefix (system prompt and tools)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", WindowWarning)
        e = ContextEngine(off(get_policy(policy), *kw.pop("off", ())), model=MODEL, window=window, **kw)
    e.bootstrap(system="You are a coding agent.", fixed_prefix_tokens=fixed)
    return e


def whole_in(request: str, messages: list[Message]) -> bool:
    return any(request in m.text() for m in messages if m.role == "user")


@pytest.mark.parametrize("summarizer", ["notes", "structured"])
def test_latest_request_whole_after_every_compaction(summarizer: str) -> None:
    request = "Please refactor the parser so quoted fields work: " + words(60, 7)
    layers = () if summarizer == "notes" else (SessionMemory,)
    found = drive(make(off=layers), session(request, rounds=80))
    compactions = [f for f in found if f[0] in ("session_memory_compact", "summary_compact")]
    assert len(compactions) >= 2  # the second one no longer sees the request as a user message
    for layer, q, shown in found:
        assert q["latest_request_verbatim"] is True, layer
        assert whole_in(request, shown), layer


def test_a_request_over_8000_chars_that_fits_is_quoted_whole() -> None:
    request = "Implement the following spec exactly.\n" + words(2_200, 3)  # ~13,000 chars
    assert len(request) > 8_000
    found = drive(make(window=64_000), session(request, rounds=120))
    assert any(f[0] in ("session_memory_compact", "summary_compact") for f in found)
    for layer, q, shown in found:
        assert q["latest_request_verbatim"] is True, layer
        assert whole_in(request, shown), layer


def test_a_request_too_large_to_fit_keeps_head_and_tail_and_says_partial() -> None:
    request = "Here is the whole log to analyse:\n" + words(14_000, 5)  # more than half the free window
    e = make(window=32_000)
    found = drive(e, session(request, rounds=40, result_words=300))
    cuts = [f for f in found if f[0] in ("session_memory_compact", "summary_compact")]
    assert cuts
    for _layer, q, shown in cuts:
        assert q["latest_request_verbatim"] == "partial"
        text = "\n".join(m.text() for m in shown)
        assert request[:500] in text and request[-200:] in text
        assert "'message:u-latest'" in text
    assert e.retrieve("message:u-latest") == request  # the middle is retrievable


def test_llm_summary_path_quotes_the_request_over_a_stale_next_step() -> None:
    request = "Now switch to the CSV exporter and make it stream rows: " + words(40, 9)
    e = make(llm=FakeLLM(), off=(SessionMemory,))
    found = drive(e, session(request))
    cuts = [f for f in found if f[0] == "summary_compact"]
    assert cuts, [f[0] for f in found]
    for _layer, q, shown in cuts:
        assert q["latest_request_verbatim"] is True
        assert whole_in(request, shown)


@pytest.mark.parametrize("summarizer", ["notes", "structured"])
def test_a_request_typed_beside_tool_results_is_the_latest_request(summarizer: str) -> None:
    """A user message holding tool results and the user's new words: the words are the latest
    request, quoted after every compaction (they were taken for tool output, and the older
    request quoted instead while the flag said true)."""
    request = "Stop deploying. Rename handler_3 to dispatch_3 everywhere and rerun the tests: " + words(
        1_500, 4
    )
    layers = () if summarizer == "notes" else (SessionMemory,)
    found = drive(make(off=layers), session(request, rounds=60, beside_results=True))
    compactions = [f for f in found if f[0] in ("session_memory_compact", "summary_compact")]
    assert len(compactions) >= 2
    for layer, q, shown in found:
        assert q["latest_request_verbatim"] is True, layer
        assert any(request in m.text() for m in shown), layer


@pytest.mark.parametrize("summarizer", ["notes", "structured"])
def test_a_paste_larger_than_the_room_is_cut_at_once_and_never_overflows(summarizer: str) -> None:
    """A 60,000-char paste at a 32,000-token window with a 20,000-token fixed prefix: the first
    compaction summarizes the paste itself (the newest message) and quotes its head and tail
    ("partial"); no request is over the window and the guard never says it cannot fit. Before,
    the kept tail had to hold the paste: no compaction freed anything and the guard fired on
    every call, leaving requests over its limit (or the window)."""
    paste = "Here is the whole log:\n" + words(9_000, 6)
    layers = () if summarizer == "notes" else (SessionMemory,)
    e = make(window=32_000, fixed=20_000, off=layers)
    msgs = session(paste, rounds=30, result_words=300)
    sent: list[int] = []
    unfit: list[str] = []
    flags: list[Any] = []
    for m in msgs:
        if m.role == "assistant":
            p = e.assemble(now=m.timestamp)
            sent.append(p.tokens)
            unfit += [ev.reason for ev in p.events if ev.details.get("unfit")]
            flags += [
                ev.details["quality"]["latest_request_verbatim"] for ev in p.events if "quality" in ev.details
            ]
            e.ingest(m)
            e.after_turn(Usage(input_tokens=p.tokens, output_tokens=50))
        else:
            e.ingest(m)
    assert max(sent) <= 32_000, sent
    assert unfit == []
    assert flags and set(flags) == {"partial"}
    assert e.retrieve("message:u-latest") == paste


def test_a_compaction_is_measured_on_one_basis_when_the_provider_counts_differently() -> None:
    """The provider counts 3,000 tokens fewer than our fixed prefix + estimate (another
    tokenizer, a fixed prefix declared too large): every prediction, the one right after a
    compaction included, is what the provider then reports, and a compaction is measured as
    freeing what it frees. The ledger dropped that offset at the compaction, so the prediction
    after it was 3,000 tokens over the provider's count (a small compaction read as growth)."""
    request = "Implement the following spec exactly.\n" + words(1_400, 3)
    e = make(window=48_000, fixed=20_000, off=(SessionMemory,))
    events = []
    off_by = []
    for m in session(request, rounds=60, result_words=300):
        if m.role == "assistant":
            p = e.assemble(now=m.timestamp)
            events += [ev for ev in p.events if ev.layer == "summary_compact"]
            reported = 20_000 + p.content_estimate - 3_000  # what the provider counts
            off_by.append(p.tokens - reported)
            e.ingest(m)
            e.after_turn(Usage(input_tokens=reported, output_tokens=50))
        else:
            e.ingest(m)
    assert events
    assert all(abs(d) <= 2 for d in off_by[1:]), sorted(set(off_by[1:]))
    for ev in events:
        assert ev.tokens_after < ev.tokens_before, (ev.tokens_before, ev.tokens_after)


@pytest.mark.parametrize("summarizer", ["notes", "structured"])
def test_harness_text_in_user_messages_is_not_the_latest_request(summarizer: str) -> None:
    """Claude Code's interruption marker (a user message of its own) and a <system-reminder>
    beside tool results are not typed by the user: the request quoted after every compaction
    stays the one the user typed (the marker was quoted in its place, and the request lost)."""
    request = "Port the CSV exporter to streaming writes and keep the header order: " + words(1_500, 8)
    msgs = session(request, rounds=60)
    at = next(i for i, m in enumerate(msgs) if m.id == "u-latest") + 3
    interrupted = Text("[Request interrupted by user for tool use]")
    msgs.insert(at, Message("user", (interrupted,), "u-int", timestamp=T0 + 5.9))
    last = msgs[at + 2]  # a tool-result message after the marker
    reminder = Text("<system-reminder>\nThe TodoWrite tool hasn't been used recently.\n</system-reminder>")
    msgs[at + 2] = Message("user", (*last.blocks, reminder), last.id, timestamp=last.timestamp)
    found = drive(make(off=() if summarizer == "notes" else (SessionMemory,)), msgs)
    compactions = [f for f in found if f[0] in ("session_memory_compact", "summary_compact")]
    assert len(compactions) >= 2
    for layer, q, shown in found:
        assert q["latest_request_verbatim"] is True, layer
        assert whole_in(request, shown), layer


def test_a_compaction_never_grows_the_context_when_the_provider_counts_more() -> None:
    """The provider counts 13% more tokens than the counter (the ledger's scale learns it): what
    a compaction adds (notes, the quoted request, the skeleton and files it restores) is weighed
    on that basis against what it removes, and the context after it is smaller. Counted raw, a
    session-memory compaction that restored a 6,800-token skeleton part into the room it had
    freed grew the context by 777 tokens."""
    first = "Here is the first log to keep in mind:\n" + words(5_000, 11)
    request = "And here is the second one; compare them line by line: " + words(5_000, 12)
    msgs = session(request, rounds=30, result_words=300)
    msgs.insert(1, Message("user", (Text(first),), "u-first", timestamp=T0 + 0.1))
    e = make(window=64_000, fixed=20_000)
    events = []
    for m in msgs:
        if m.role == "assistant":
            p = e.assemble(now=m.timestamp)
            events += [ev for ev in p.events if ev.layer in ("session_memory_compact", "summary_compact")]
            e.ingest(m)
            e.after_turn(Usage(input_tokens=20_000 + round(p.content_estimate * 1.13), output_tokens=50))
        else:
            e.ingest(m)
    assert events
    for ev in events:
        assert ev.tokens_after < ev.tokens_before, (ev.layer, ev.tokens_before, ev.tokens_after)


@pytest.mark.parametrize("summarizer", ["notes", "structured"])
def test_a_paste_beside_tool_results_is_cut_in_place_at_the_call_it_arrives(summarizer: str) -> None:
    """A 120,000-char paste typed in the user message that carries a tool result, at a 24,000-token
    window with a 10,000-token prefix: no compaction can summarize it without parting the tool
    call from its result, so the guard cuts the request itself in place to its head and tail
    (the middle retrievable); no request is over the window. Before, the guard said it could
    not fit and sent 26,000 tokens."""
    paste = "Here is the whole log:\n" + words(20_000, 6)
    layers = () if summarizer == "notes" else (SessionMemory,)
    e = make(window=24_000, fixed=10_000, off=layers)
    sent: list[int] = []
    cut_at: list[int] = []
    for m in session(paste, rounds=12, result_words=300, beside_results=True):
        if m.role == "assistant":
            p = e.assemble(now=m.timestamp)
            sent.append(p.tokens)
            text = "\n".join(x.text() for x in p.messages)
            if any("u-latest" in ev.details.get("request_cut", ()) for ev in p.events):
                cut_at.append(len(sent))
                assert paste[:300] in text and paste[-150:] in text and "'message:u-latest'" in text
            e.ingest(m)
            e.after_turn(Usage(input_tokens=p.tokens, output_tokens=50))
        else:
            e.ingest(m)
    assert max(sent) <= 24_000, sent
    assert cut_at, "the request was never cut"
    assert e.retrieve("message:u-latest").endswith(paste)


@pytest.mark.parametrize("policy", ["default", "openclaw", "pi"])
def test_two_pastes_in_a_row_never_push_a_request_past_the_window(policy: str) -> None:
    """Two large pastes in a row (no reply between) at 48,000 tokens with a 20,000-token
    prefix, the first not the latest request: no request goes past the window and the earlier
    paste stays retrievable (the guard drops it, or cuts it in place when it cannot be dropped:
    a replay of such a file under openclaw and pi sent 49,354 tokens to the 48,000 window)."""
    first = "First, the old log:\n" + words(3_700, 21)
    second = "Now the new log; compare them: " + words(3_700, 22)
    e = make(policy, window=48_000, fixed=20_000)
    msgs = [
        Message("user", (Text("set up the project"),), "u0", timestamp=T0),
        Message("assistant", (Text("ready"),), "a0", timestamp=T0 + 1, model=MODEL),
        Message("user", (Text(first),), "u-first", timestamp=T0 + 2),
        Message("user", (Text(second),), "u-second", timestamp=T0 + 3),
        Message("assistant", (Text("comparing"),), "a1", timestamp=T0 + 4, model=MODEL),
    ]
    sent = []
    for m in msgs:
        if m.role == "assistant":
            p = e.assemble(now=m.timestamp)
            sent.append(p.tokens)
            e.ingest(m)
            e.after_turn(Usage(input_tokens=p.tokens, output_tokens=50))
        else:
            e.ingest(m)
    assert max(sent) <= 48_000, sent
    assert e.retrieve("message:u-first").endswith(first[-200:])


def test_a_request_cut_in_place_keeps_what_the_harness_added_beside_it() -> None:
    """The guard's cut of a request replaces the user's words only: a <system-reminder> block
    beside them (and the tool result) stays as it was; it was dropped with the cut."""
    from ctxengine.layers.base import message_with_results, request_key

    reminder = Text("<system-reminder>\nthe user opened foo.py\n</system-reminder>")
    msg = Message(
        "user",
        (ToolResult("c1", (Text("ok"),)), reminder, Text("the long paste " + words(50, 3))),
        "u2",
    )
    shown = message_with_results(msg, {request_key("u2"): Text("head [... cut ...] tail")})
    assert shown.blocks == (msg.blocks[0], reminder, Text("head [... cut ...] tail"))


def test_the_guard_cuts_an_earlier_paste_it_cannot_drop_after_the_request() -> None:
    """``fit_request`` on a view it cannot drop from (two user pastes and nothing else: no safe
    cut point between them): the latest request fits its room and stays whole; the earlier paste
    is cut to what the limit leaves, its head and tail kept and its middle named as
    ``'message:<id>'``."""
    from ctxengine.layers.base import LayerContext, request_key
    from ctxengine.layers.overflow_guard import fit_request, guard_limit

    first = "the old log " + words(15_000, 31)
    second = "compare with this one " + words(1_000, 32)
    view = [Message("user", (Text(first),), "u-first"), Message("user", (Text(second),), "u-second")]
    tokens = [len(first) // 4, len(second) // 4]
    policy = get_policy("openclaw").for_window(48_000, 20_000)
    ctx = LayerContext(
        view=view,
        tokens=tokens,
        src=[0, 1],
        predicted=20_000 + sum(tokens),
        window=48_000,
        max_output=8_000,
        policy=policy,
        count_text=lambda t: len(t) // 4,
    )
    assert ctx.predicted > guard_limit(ctx)
    fitted = fit_request(ctx)
    assert fitted is not None and list(fitted.parts) == [request_key("u-first")]
    cut = fitted.parts[request_key("u-first")].text
    assert cut.startswith(first[:200]) and cut.endswith(first[-100:]) and "'message:u-first'" in cut
    assert ctx.predicted - (len(first) - len(cut)) // 4 <= guard_limit(ctx)


def test_no_harness_text_of_the_real_claude_code_sessions_is_a_request() -> None:
    """On the shared Claude Code sessions: their interruption markers, IDE notices, task
    notifications and local command output (user messages the harness wrote) are never taken for
    the user's request, and the user's typed requests still are."""
    from conftest import CLAUDE_CODE
    from ctxengine.formats import load
    from ctxengine.summary.audit import harness_text, user_request

    messages = [m for f in sorted(CLAUDE_CODE.glob("*.jsonl")) for s in load(f) for m in s.messages]
    harness = [m for m in messages if m.role == "user" and m.text().strip() and harness_text(m.text())]
    assert sum("[Request interrupted" in m.text() for m in harness) >= 10  # the corpus has 12
    assert all(user_request(m) == "" for m in harness)
    assert sum(1 for m in messages if user_request(m)) > 50


@pytest.mark.parametrize("policy", ["claude-code", "openclaw", "pi", "letta"])
@pytest.mark.parametrize("summarizer", ["structured", "llm"])
def test_the_presets_summaries_keep_the_latest_request_too(policy: str, summarizer: str) -> None:
    """The presets' summaries (their cut strategy and summary style) quote the latest request
    like ours: it was lost at every summary compaction of the four presets, $0 or with a model."""
    request = "Implement the following spec exactly.\n" + words(1_650, 4)  # ~9,800 chars
    assert len(request) > 8_000
    kw: dict[str, Any] = {"off": (SessionMemory,)}
    if summarizer == "llm":
        kw["llm"] = FakeLLM()
    found = drive(make(policy, **kw), session(request, rounds=80))
    summaries = [f for f in found if f[0] == "summary_compact"]
    assert len(summaries) >= 2
    for layer, q, shown in found:
        assert q["latest_request_verbatim"] is True, layer
        assert whole_in(request, shown), layer


@pytest.mark.parametrize("policy", ["claude-code", "letta"])
def test_a_forced_compaction_keeps_the_request_it_ends_with(policy: str) -> None:
    """``compact(force=True)`` (a user's /compact) right after the request, three times in a row:
    the request stays whole (the presets summarized it away)."""
    request = "Now rename the loader to reader everywhere: " + words(50, 6)
    e = make(policy, window=64_000, off=(SessionMemory,))
    for m in session(request, rounds=10)[:-1]:
        e.ingest(m)
    e.ingest(Message("user", (Text(request),), "u-newest", timestamp=T0 + 50))
    for k in range(3):
        event = e.compact(force=True)
        assert event is not None
        assert event.details["quality"]["latest_request_verbatim"] is True
        assert whole_in(request, e.assemble(now=T0 + 60 + k).messages)
        e.ingest(Message("assistant", (Text("ok"),), f"ax{k}", timestamp=T0 + 61 + k, model=MODEL))
        e.ingest(Message("user", (Text(f"go on {k}"),), f"ux{k}", timestamp=T0 + 61.5 + k))


@pytest.mark.parametrize("summarizer", ["notes", "structured"])
def test_a_request_split_by_a_harness_block_counts_as_whole_where_it_is_kept(summarizer: str) -> None:
    """A request typed in two text blocks with a <system-reminder> block between them (as Claude
    Code sends one): where its message is kept as it was, the flag says ``True`` (it said
    ``False`` at every clearing, since the typed text joined without the reminder is not a
    substring of the message), and no compaction quotes it a second time."""
    first, second = "Part one of the task: " + words(400, 11), "Part two of the task: " + words(400, 12)
    reminder = "<system-reminder>\nThe user opened src/app.py in the IDE.\n</system-reminder>"
    msgs = session("placeholder", rounds=80)
    at = next(i for i, m in enumerate(msgs) if m.id == "u-latest")
    msgs[at] = Message("user", (Text(first), Text(reminder), Text(second)), "u-latest", timestamp=T0 + 5)
    found = drive(make(off=() if summarizer == "notes" else (SessionMemory,)), msgs)
    assert len(found) >= 2
    for layer, q, shown in found:
        assert q["latest_request_verbatim"] is True, layer
        text = "\n".join(m.text() for m in shown if m.role == "user")
        assert first in text and second in text, layer
        assert text.count(first) == 1, layer


def test_a_mini_swe_agent_task_survives_compaction_in_text_mode(tmp_path: Path) -> None:
    """mini-swe-agent's text mode sends command outputs as user messages: the task (9,800 chars)
    is the latest request at every compaction, not the newest output (the flag said ``True``
    while the task was gone, since an output stood for the request)."""
    import json

    from ctxengine.formats import openai_chat

    task = "Implement the following spec exactly.\n" + words(1_650, 21) + "\n"
    msgs: list[dict[str, str]] = [{"role": "system", "content": "You are a coding agent."}]
    msgs.append({"role": "user", "content": task})
    for k in range(60):
        msgs.append({"role": "assistant", "content": f"THOUGHT: step {k}\n\n```bash\nrun step {k}\n```"})
        out = f"<returncode>0</returncode>\n<output>\n{words(900, 100 + k)}\n</output>"
        msgs.append({"role": "user", "content": out})
    path = tmp_path / "mini.traj.json"
    path.write_text(json.dumps({"messages": msgs, "trajectory_format": "mini-swe-agent-1"}))
    s = openai_chat.read(path)[0]
    found = drive(make(), s.messages)
    assert len([f for f in found if f[0] in ("session_memory_compact", "summary_compact")]) >= 2
    for layer, q, shown in found:
        assert q["latest_request_verbatim"] is True, layer
        assert whole_in(task, shown), layer


def _as_the_users_words(request: str, messages: list[Message]) -> bool:
    """The request whole where a model reads it as the user's: its own message (typed text, a
    harness block beside it left out), or a summary that quotes it or lists it as a line."""
    for m in messages:
        if m.role != "user":
            continue
        if m.origin == "message":
            typed = [
                b.text for b in m.blocks if isinstance(b, Text) and not b.text.startswith("<system-reminder>")
            ]
            if "\n".join(typed) == request:
                return True
        elif m.origin == "summary":
            text = m.text()
            lines = [ln.removeprefix("- ") for ln in text.split("\n")]
            if f"The user's latest request (verbatim):\n{request}" in text or request in lines:
                return True
    return False


@pytest.mark.parametrize("echo", ["agent", "reminder"])
@pytest.mark.parametrize("policy", ["default", "claude-code", "openclaw", "pi", "letta"])
def test_a_short_request_whose_words_recur_later_is_still_quoted(policy: str, echo: str) -> None:
    """A short request's words in later assistant text ("Now I will run the tests for step 9")
    or in a harness reminder beside later tool results ("Remember: run the tests before you
    commit") are not the request: a compaction that summarizes the request away quotes it, and
    the flag says True only then (both took the substring for the request: the request was
    dropped, and the flag said True beside a reminder)."""
    request = "run the tests"
    msgs = session(request, rounds=60, result_words=500)
    out: list[Message] = []
    for m in msgs:
        if echo == "agent" and m.role == "assistant" and m.id.startswith("a") and m.id[1:].isdigit():
            k = int(m.id[1:])
            if k > 5:
                m = Message(
                    "assistant",
                    (Text(f"Now I will run the tests for step {k}."), *m.blocks[1:]),
                    m.id,
                    timestamp=m.timestamp,
                    model=MODEL,
                )
        if echo == "reminder" and m.id.startswith("r") and int(m.id[1:]) > 5:
            reminder = Text("<system-reminder>Remember: run the tests before you commit.</system-reminder>")
            m = Message("user", (*m.blocks, reminder), m.id, timestamp=m.timestamp)
        out.append(m)
    found = drive(make(policy, window=32_000), out)
    assert len(found) >= 2, "the session compacts more than once"
    for layer, q, projection in found:
        assert q["latest_request_verbatim"] is True, layer
        assert _as_the_users_words(request, projection), f"{layer}: the request is not in the context"


@pytest.mark.parametrize(
    "meta",
    [{"context": "environment_context"}, {"context": "turn_aborted"}, {"role": "developer"}],
    ids=["environment_context", "turn_aborted", "developer"],
)
@pytest.mark.parametrize("policy", ["default", "claude-code", "openclaw", "pi", "letta"])
def test_a_message_the_reader_tagged_as_injected_is_not_the_latest_request(
    policy: str, meta: dict[str, str]
) -> None:
    """Codex's reader tags the user messages its harness injects (``<environment_context>``,
    ``<turn_aborted>``) and its developer messages; one after the typed request became "the latest
    request": the typed one was summarized away by pi, openclaw and letta while the flag said True
    (it checked the injected text)."""
    request = "Rename the helper parse_cfg to load_config everywhere under src/."
    msgs = session(request, rounds=70, result_words=500)
    at = next(i for i, m in enumerate(msgs) if m.id == "a10")
    injected = Message(
        "user",
        (Text("<environment_context>\n  <cwd>/srv</cwd>\n</environment_context>"),),
        "ctx",
        timestamp=msgs[at].timestamp - 0.1,
        meta=dict(meta),
    )
    msgs.insert(at, injected)
    found = drive(make(policy, window=32_000), msgs)
    assert len(found) >= 2, "the session compacts more than once"
    for layer, q, projection in found:
        assert q["latest_request_verbatim"] is True, layer
        assert _as_the_users_words(request, projection), f"{layer}: the typed request is not in the context"


def _bash_rounds(n: int, tag: str, say: str, cmd: str, t0: float, size: int, seed: int) -> list[Message]:
    """``n`` rounds: the assistant's text and a Bash call ``<cmd><k>`` (ids ``<tag><k>``), then its
    ``size``-word result; ten seconds apart from ``t0``."""
    out: list[Message] = []
    for k in range(n):
        call = ToolCall(f"{tag}{k}", "Bash", {"command": f"{cmd}{k}"})
        text = Text(f"{say} {k}")
        out.append(Message("assistant", (text, call), f"a{tag}{k}", timestamp=t0 + 10 * k, model=MODEL))
        result = ToolResult(f"{tag}{k}", (Text(words(size, seed + k)),))
        out.append(Message("user", (result,), f"r{tag}{k}", timestamp=t0 + 1 + 10 * k))
    return out


@pytest.mark.parametrize("policy", ["default", "claude-code", "openclaw", "pi", "letta"])
def test_a_request_shown_with_its_offloaded_attachment_is_kept_and_quoted_once(policy: str) -> None:
    """The line the tool-result budget shows for an offloaded document of the request's own message
    was read as part of the user's text: the request, whole in the kept tail, counted as not kept,
    so each compaction quoted it again (a second copy of ~1,800 tokens at 32,000)."""
    from ctxengine.messages.model import Document

    request = "REQ_BEGIN implement section 3 of the attached spec: " + words(1_200, 11) + " REQ_END"
    msgs = [Message("user", (Text("first task: profile the importer"),), "q0", timestamp=T0)]
    msgs += _bash_rounds(25, "t", "step", "pytest -k p", T0 + 10, 700, 100)
    msgs.append(Message("assistant", (Text("Profiling done."),), "b0", timestamp=T0 + 400, model=MODEL))
    spec = Document("text/plain", words(20_000, 3), title="spec.txt")
    msgs.append(Message("user", (Text(request), spec), "ureq", timestamp=T0 + 401))
    msgs += _bash_rounds(14, "s", "impl", "cat part", T0 + 410, 500, 500)
    msgs.append(Message("assistant", (Text("done"),), "a-end", timestamp=T0 + 500, model=MODEL))
    engine = make(policy, window=32_000)
    at = next(i for i, m in enumerate(msgs) if m.id == "ureq")
    drive(engine, msgs[:at])
    found = drive(engine, msgs[at:])
    assert found, "the session compacts after the request"
    for layer, q, projection in found:
        assert q["latest_request_verbatim"] is True, layer
        kept = any(m.id == "ureq" and request in m.text() for m in projection)
        quoted = any("The user's latest request (verbatim):\nREQ_BEGIN" in m.text() for m in projection)
        assert kept != quoted, f"{layer}: kept {kept}, quoted {quoted}"  # once: kept, or else quoted


@pytest.mark.parametrize("policy", ["default", "claude-code", "openclaw", "pi", "letta"])
def test_a_prompt_queued_while_tools_ran_is_the_latest_request(policy: str) -> None:
    """Claude Code records a prompt the user types while the agent works as an attachment
    (``queued_command``) and sends it as the user's text at the next call; it was not a request,
    so compactions quoted the older one and the flag said True with the newest prompt gone (the
    shared sessions 4530697c and db3f6604 hold 13 such prompts)."""
    queued = "QUEUED REQUEST typed while tools ran: also switch the output format to YAML"
    msgs = session("Write the exporter in src/export.py.", rounds=70, result_words=500)
    at = next(i for i, m in enumerate(msgs) if m.id == "a10")
    msgs.insert(
        at,
        Message(
            "user",
            (Text(queued),),
            "q1",
            timestamp=msgs[at].timestamp - 0.1,
            origin="attachment",
            meta={"attachment_type": "queued_command"},
        ),
    )
    engine = make(policy, window=32_000)
    drive(engine, msgs[: at + 1])
    found = drive(engine, msgs[at + 1 :])
    assert len(found) >= 2, "the session compacts more than once after the prompt"
    for layer, q, projection in found:
        assert q["latest_request_verbatim"] is True, layer
        shown = [m for m in projection if m.role == "user" and queued in m.text()]
        assert shown, f"{layer}: the queued prompt is not in the context"


def test_the_queued_prompts_of_the_real_sessions_are_requests() -> None:
    from conftest import CLAUDE_CODE
    from ctxengine.formats import load
    from ctxengine.summary.audit import user_request

    [session] = load(CLAUDE_CODE / "cc_mimo-v2.5-pro_2x-autocompact_db3f6604.jsonl")[:1]
    queued = [m for m in session.messages if m.meta.get("attachment_type") == "queued_command"]
    typed = [user_request(m) for m in queued if user_request(m)]
    assert len(queued) == 7 and len(typed) >= 4  # the rest are <task-notification> wrappers
    assert all("<task-notification>" not in t for t in typed)
