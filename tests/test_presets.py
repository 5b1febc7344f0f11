"""The presets of Claude Code, OpenClaw, pi and Letta: constants pinned to the reference numbers
(``../shared/reference/``), and each preset's behaviour on hand-built and real sessions.

Tokens are the engine's tokens (``claude-sonnet-4-5``: the calibrated Claude estimate, no usage
reported, so the ledger's scale is 1); chars are Python characters.
"""

from __future__ import annotations

import itertools
import json
import random
import warnings
from collections.abc import Iterator
from typing import Any

import pytest

from conftest import CLAUDE_CODE, CODEX
from ctxengine.compaction import clamp_summary_input
from ctxengine.engine.core import ContextEngine
from ctxengine.formats import load
from ctxengine.layers.base import LayerContext
from ctxengine.layers.cache_ttl_prune import PLACEHOLDER, cache_ttl_prune
from ctxengine.layers.cut_plans import history_start, pi_plan, sliding_plan
from ctxengine.layers.history_share import prune_history_for_context_share
from ctxengine.layers.pairing import find_violations, safe_cut_points
from ctxengine.messages.model import Message, Session, Text, ToolCall, ToolResult
from ctxengine.models.registry import WindowWarning
from ctxengine.policy.harnesses import CLAUDE_CODE as CC
from ctxengine.policy.harnesses import LETTA, OPENCLAW, PI, PRESETS
from ctxengine.policy.registry import (
    BUILTIN,
    DEFAULT,
    CompactionSettings,
    OverflowGuard,
    Policy,
    SessionMemory,
    ToolResultBudget,
    get_policy,
)
from ctxengine.replay import SessionReport, replay_session
from ctxengine.summary import structured as summarize

MODEL = "claude-sonnet-4-5"  # window 200,000, max output 64,000
MIMO = CLAUDE_CODE / "cc_mimo-v2.5-pro_2x-autocompact_db3f6604.jsonl"
SONNET = CLAUDE_CODE / "cc_sonnet-4.5_long-290-tools_redacted_3cfce0ff.jsonl"
OPUS = CLAUDE_CODE / "cc_opus-4.5_general-tool-calls_2-comment-header-lines.jsonl"
CODEX_54 = CODEX / "codex_gpt-5.4_cli-0.104_rollout-2026-03-09T18-28-04-019cd524.jsonl"
SMALL = 64_000
WORDS = ("alpha", "beta", "gamma", "delta", "file", "value", "result", "line", "output", "check")


def filler(chars: int, seed: int = 0) -> str:
    rnd = random.Random(seed)
    return " ".join(rnd.choice(WORDS) for _ in range(chars // 4 + 2))[:chars]


class Chat:
    """A hand-built conversation: user prompts and rounds of (assistant call, its result)."""

    def __init__(self, t0: float = 1_700_000_000.0) -> None:
        self.t = t0
        self.messages: list[Message] = []
        self._n = itertools.count()

    def add(self, role: str, blocks: tuple[Any, ...], dt: float = 1.0) -> Message:
        self.t += dt
        msg = Message(role, blocks, f"{role[0]}{next(self._n)}", timestamp=self.t)  # type: ignore[arg-type]
        self.messages.append(msg)
        return msg

    def user(self, text: str, dt: float = 1.0) -> Message:
        return self.add("user", (Text(text),), dt)

    def round(self, result: str, *, name: str = "Read", path: str = "/srv/app/x.py", dt: float = 1.0) -> str:
        cid = f"toolu_{next(self._n)}"
        self.add("assistant", (Text(f"Reading {path}."), ToolCall(cid, name, {"file_path": path})), dt)
        self.add("user", (ToolResult(cid, (Text(result),), name=name),), 1.0)
        return cid


def engine_for(policy: Policy, window: int | None = None, fixed: int = 0) -> ContextEngine:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", WindowWarning)
        engine = ContextEngine(policy, model=MODEL, window=window, restore_from_transcript=True)
    engine.bootstrap(system="You are a coding agent.", fixed_prefix_tokens=fixed)
    return engine


def replay(path: Any, policy: Policy, window: int = SMALL) -> SessionReport:
    (session,) = load(path)
    return replay_session(session, policy, window=window)


def events(report: SessionReport, layer: str) -> Iterator[dict[str, Any]]:
    for c in report.calls:
        for e in c.events:
            if e["layer"] == layer:
                yield e


def first_context_over(session: Session, policy: Policy, window: int) -> tuple[ContextEngine, LayerContext]:
    """Ingest ``session`` into an engine that never compacts until the context first passes
    ``policy``'s threshold; returns the engine and its layer context at that call."""
    engine = ContextEngine(
        policy.with_(policy.settings(CompactionSettings).with_(mode="none"), OverflowGuard(enabled=False)),
        model=session.model,
        window=window,
    )
    engine.bootstrap(system=session.system)
    threshold = policy.compact_threshold(window, engine.model.max_output)
    for m in session.messages:
        if m.role == "assistant" and engine.assemble().tokens > threshold:
            ctx = engine.view.context(window, None)
            ctx.policy = policy
            return engine, ctx
        engine.ingest(m)
    raise AssertionError("the session never passed the threshold")


# ================================================================ registry


def test_presets_are_found_by_name_and_kept_apart_from_ours() -> None:
    assert sorted(PRESETS) == ["claude-code", "letta", "openclaw", "pi"]
    for name, policy in PRESETS.items():
        assert get_policy(name) is policy
        assert policy.name == name and policy.description
    assert sorted(BUILTIN) == ["default", "evict-importance", "evict-oldest", "none", "recorded"]
    with pytest.raises(KeyError, match="presets: claude-code, letta, openclaw, pi"):
        get_policy("cursor")


def test_presets_leave_out_our_own_features() -> None:
    for policy in PRESETS.values():
        assert policy.keep_identifiers is False  # identifier lines on cleared results are ours
        assert policy.cache_clear is False
        assert policy.shares_of_free_window is False
        assert policy.cold_compact_at_share == 0.0
        assert policy.summary_style == policy.name
    assert DEFAULT.summary_style == "ctxengine" and DEFAULT.compact_cut == "tail"


# ================================================================ Claude Code


def test_claude_code_constants() -> None:
    assert CC.compact_threshold(200_000, 64_000) == 167_000  # 200,000 - 20,000 - 13,000
    assert CC.compact_threshold(200_000, 8_192) == 178_808  # max output below the 20,000 reserve
    assert CC.compact_threshold(SMALL, 32_000) == 31_000
    assert (CC.tool_result_max_chars, CC.message_results_max_chars, CC.preview_chars) == (
        50_000,
        200_000,
        2_000,
    )
    assert CC.budget_exempt_tools == ("read",)
    assert (CC.idle_clear, CC.idle_gap_s, CC.idle_keep_recent) == (True, 3_600.0, 5)
    assert (CC.session_memory, CC.sm_keep_min_tokens, CC.sm_keep_max_tokens) == (True, 10_000, 40_000)
    assert CC.keep_recent_min_messages == 5
    assert (CC.restore_files, CC.restore_file_tokens, CC.restore_total_tokens) == (5, 5_000, 50_000)
    assert CC.breaker_failures == 3
    assert (CC.compact_cut, CC.summary_style, CC.summary_budget(200_000)) == ("all", "claude-code", 20_000)
    assert CC.sm_identifier_index is False


def test_claude_code_full_compaction_keeps_only_the_unseen_round_and_writes_nine_sections() -> None:
    # the reference threshold at 40,000 is 7,000; derived for the window, 20,000 (issue 9, item 4)
    engine = engine_for(CC.with_(CC.settings(SessionMemory).with_(enabled=False)), window=40_000)
    chat = Chat()
    chat.user("Please fix the parser bug in /srv/app/parser.py and run the tests.")
    for i in range(40):
        chat.round(filler(3_000, i), path=f"/srv/app/mod{i}.py")
    for m in chat.messages:
        engine.ingest(m)
    proj = engine.assemble()
    (event,) = [e for e in proj.events if e.layer == "summary_compact"]
    # nothing kept but the newest round, whose result the model has not seen yet (summarized
    # unseen, the $0 summary would lose it: issue 9, the kind of L23)
    assert event.details["strategy"] == "all" and event.details["kept_messages"] == 2
    kept = [m for m in proj.messages if m.origin not in ("summary", "restore")]
    assert [m.id for m in kept] == [m.id for m in chat.messages[-2:]]
    text = proj.messages[0].text()
    assert text.startswith(summarize.CC_CONTINUE)
    for n, title in enumerate(
        (
            "Primary Request and Intent",
            "Key Technical Concepts",
            "Files and Code Sections",
            "Errors and fixes",
            "Problem Solving",
            "All user messages",
            "Pending Tasks",
            "Current Work",
            "Optional Next Step",
        ),
        1,
    ):
        assert f"{n}. {title}:" in text
    assert "/srv/app/mod11.py" in text  # the files section
    assert text.rstrip().endswith(summarize.CC_RESUME)
    restored = [m for m in proj.messages if m.origin == "restore"]
    assert 0 < len(restored) <= 5  # the recently read files, re-attached
    assert find_violations(proj.messages) == []


def test_claude_code_exempts_read_from_the_tool_result_budget() -> None:
    engine = engine_for(CC)
    chat = Chat()
    chat.user("read and grep")
    big_read = chat.round(filler(60_000, 1), name="Read")
    big_grep = chat.round(filler(60_000, 2), name="Grep")
    for m in chat.messages:
        engine.ingest(m)
    proj = engine.assemble()
    shown = {r.call_id: r for m in proj.messages for r in m.tool_results}
    assert len(shown[big_read].content[0].text) == 60_000  # type: ignore[union-attr]
    assert shown[big_grep].content[0].text.startswith("<persisted-output>")  # type: ignore[union-attr]


# ================================================================ OpenClaw


def test_openclaw_constants() -> None:
    assert OPENCLAW.compact_threshold(200_000, 64_000) == 180_000  # window - max(16,384, 20,000)
    assert OPENCLAW.compact_threshold(SMALL, 32_000) == 44_000
    assert OPENCLAW.for_window(200_000).tool_result_max_chars == 16_000  # min(16,000, 240,000)
    assert OPENCLAW.for_window(10_000).tool_result_max_chars == 12_000  # floor(0.3 x 10,000) x 4
    assert OPENCLAW.keep_recent_tokens == 20_000 and OPENCLAW.compact_cut == "pi"
    assert OPENCLAW.history_max_share == 0.5 and OPENCLAW.history_share_margin == 1.2
    assert OPENCLAW.summary_budget(200_000) == 16_000  # floor(0.8 x 20,000)
    assert OPENCLAW.summary_stages == 2  # summarizeInStages DEFAULT_PARTS, then a merge call
    assert PI.summary_stages == 1 and CC.summary_stages == 1 and LETTA.summary_stages == 1
    assert (
        OPENCLAW.ttl_prune,
        OPENCLAW.ttl_prune_ttl_s,
        OPENCLAW.ttl_prune_keep_last_assistants,
        OPENCLAW.ttl_prune_soft_ratio,
        OPENCLAW.ttl_prune_hard_ratio,
        OPENCLAW.ttl_prune_min_prunable_chars,
        OPENCLAW.ttl_prune_soft_max_chars,
        OPENCLAW.ttl_prune_head_chars,
        OPENCLAW.ttl_prune_tail_chars,
    ) == (True, 300.0, 3, 0.3, 0.5, 50_000, 4_000, 1_500, 1_500)
    assert OPENCLAW.memory_flush and OPENCLAW.memory_flush_soft_tokens == 4_000
    assert OPENCLAW.session_memory is False and OPENCLAW.restore_files == 0


def ttl_context(chat: Chat, policy: Policy, window: int, idle: float) -> LayerContext:
    engine = engine_for(policy.with_(policy.settings(ToolResultBudget).with_(enabled=False)), window=window)
    for m in chat.messages:
        engine.ingest(m)
    return LayerContext(
        view=engine.view.messages,
        tokens=engine.view.tokens,
        src=engine.view.src,
        predicted=engine.assemble().tokens,
        window=window,
        max_output=engine.model.max_output,
        policy=policy,
        now=chat.t + idle,
        last_call=chat.t,
        frozen={},
        count_text=engine.counter.count_text,
    )


def ttl_chat(results: int, chars: int) -> Chat:
    chat = Chat()
    chat.user("look around /srv/app")
    for i in range(results):
        chat.round(filler(chars, i), path=f"/srv/app/f{i}.py")
    for i in range(3):  # the protected tail: three assistant messages with small results
        chat.round("ok", path=f"/srv/app/tail{i}.py")
    return chat


def test_cache_ttl_pruning_waits_for_the_cache_to_expire() -> None:
    chat = ttl_chat(8, 12_000)  # ~96,000 chars of results
    window = 60_000  # character window 240,000: ratio ~0.4, between soft and hard
    assert cache_ttl_prune(ttl_context(chat, OPENCLAW, window, idle=299)) is None  # warm cache
    decision = cache_ttl_prune(ttl_context(chat, OPENCLAW, window, idle=301))
    assert decision is not None
    assert decision.event.details["soft_trimmed"] == 8 and decision.event.details["hard_cleared"] == 0
    for r in decision.results.values():
        text = r.content[0].text  # type: ignore[union-attr]
        head, _, rest = text.partition("\n...\n")
        assert len(head) == 1_500 and rest.startswith(rest[:1_500])
        assert "kept first 1,500 chars and last 1,500 chars of 12,000 chars" in text
    # the three newest assistant messages' results are protected
    protected = {m.tool_results[0].call_id for m in chat.messages[-6:] if m.tool_results}
    assert not protected & {k.split("\x00")[1] for k in decision.results}


def test_cache_ttl_pruning_thresholds() -> None:
    chat = ttl_chat(8, 12_000)
    # below 30% of the character window nothing happens
    assert cache_ttl_prune(ttl_context(chat, OPENCLAW, 90_000, idle=400)) is None  # ratio ~0.27
    # at 50% and more, with >= 50,000 prunable chars after the soft trim, results are hard-cleared
    # oldest first until the ratio drops below 50%
    many = ttl_chat(40, 12_000)  # 480,000 chars; soft trim leaves 40 x ~3,100 = ~124,000
    decision = cache_ttl_prune(ttl_context(many, OPENCLAW, 55_000, idle=400))  # 220,000 chars
    assert decision is not None
    cleared = [k for k, r in decision.results.items() if r.content[0].text == PLACEHOLDER]  # type: ignore[union-attr]
    assert decision.event.details["hard_cleared"] == len(cleared) > 0
    order = [m.tool_results[0].call_id for m in many.messages if m.tool_results]
    ids = [k.split("\x00")[1] for k in cleared]
    assert ids == order[: len(ids)]  # oldest first
    # too few prunable chars: soft trim only, however high the ratio
    few = ttl_chat(12, 4_500)  # after the trim 12 x ~3,100 = ~37,000 < 50,000
    d = cache_ttl_prune(ttl_context(few, OPENCLAW, 20_000, idle=400))
    assert d is not None and d.event.details["hard_cleared"] == 0


def test_openclaw_on_a_real_session_prunes_only_after_idle_gaps_and_writes_required_headings() -> None:
    report = replay(MIMO, OPENCLAW, window=SMALL)
    assert report.summary.pairing_violations == 0
    prunes = list(events(report, "cache_ttl_prune"))
    assert prunes and all("idle" in e["reason"] or "cache expired" in e["reason"] for e in prunes)
    compactions = list(events(report, "summary_compact"))
    assert compactions and all(e["details"]["style"] == "openclaw" for e in compactions)
    flushes = list(events(report, "memory_flush"))
    assert 0 < len(flushes) <= len(compactions) + 1  # once per compaction


def test_openclaw_summary_has_the_required_headings_and_twelve_identifiers() -> None:
    chat = Chat()
    chat.user("Deploy the service to host db-7.internal:5432 and never touch /etc/passwd.")
    for i in range(20):
        chat.round(f"commit {i:02d}deadbeef{i:04d} at /srv/app/pkg{i}/mod.py", path=f"/srv/app/pkg{i}/mod.py")
    state = summarize.update(summarize.SummaryState(), chat.messages, user_message_chars=2_000)
    si = summarize.StyleInput(span=chat.messages)
    text = summarize.render_style("openclaw", state, si, max_tokens=16_000, count=len)
    for heading in summarize.OPENCLAW_HEADINGS:
        assert heading in text
    exact = text.split("## Exact identifiers\n", 1)[1].split("\n\n", 1)[0].splitlines()
    assert 0 < len(exact) <= 12
    tail_ids = summarize.ordered_identifiers(chat.messages[-10:])
    assert [line.removeprefix("- ") for line in exact] == tail_ids[:12]
    assert "never touch /etc/passwd" in text  # a constraint
    assert "<read-files>" in text and "/srv/app/pkg19/mod.py" in text


def test_history_share_pruning_drops_the_oldest_chunk_and_keeps_pairs() -> None:
    chat = Chat()
    chat.user("start")
    for i in range(10):
        chat.round(filler(400, i))
    tokens = [100 if m.role == "user" and not m.tool_results else 50 for m in chat.messages]
    pruned = prune_history_for_context_share(chat.messages, tokens, budget=500)
    assert pruned.chunks >= 1
    kept_tokens = sum(
        t for m, t in zip(chat.messages, tokens, strict=True) if any(m is k for k in pruned.kept)
    )
    assert kept_tokens <= 500
    assert pruned.dropped + pruned.kept == chat.messages  # the oldest part dropped, order kept
    assert find_violations(pruned.kept) == [] and not pruned.kept[0].tool_results
    assert not pruned.repaired


# ================================================================ pi


def test_pi_constants() -> None:
    assert PI.compact_threshold(200_000, 64_000) == 183_616  # window - 16,384
    assert PI.compact_threshold(SMALL, 32_000) == 47_616
    assert PI.keep_recent_tokens == 20_000 and PI.compact_cut == "pi"
    assert PI.summary_budget(200_000) == 13_107  # 0.8 x 16,384
    assert PI.turn_prefix_max_tokens == 8_192  # 0.5 x 16,384
    assert PI.tool_result_budget is False and PI.restore_files == 0 and PI.session_memory is False


def test_pi_keeps_the_newest_20000_tokens_cut_at_a_user_or_assistant_message() -> None:
    (session,) = load(SONNET)
    _engine, ctx = first_context_over(session, PI, SMALL)
    start = history_start(ctx)
    plan = pi_plan(ctx, start)
    assert plan is not None
    # walking back from the newest message, ``reach`` is where 20,000 tokens are reached; the cut
    # is the first user or assistant message at or after it (never a tool result)
    acc, reach = 0, len(ctx.view)
    while acc < 20_000:
        reach -= 1
        acc += ctx.tokens[reach]
    assert plan.cut == min(c for c in safe_cut_points(ctx.view) if c >= reach and c > start)
    assert sum(ctx.tokens[plan.cut + 1 :]) < 20_000 <= sum(ctx.tokens[reach:])
    assert ctx.view[plan.cut].role in ("user", "assistant") and not ctx.view[plan.cut].tool_results
    # everything before the cut is summarized: history plus the split turn's prefix
    assert plan.span + plan.turn_prefix == list(ctx.view[start : plan.cut])
    if plan.turn_prefix:
        assert ctx.view[plan.cut].role == "assistant"
        assert plan.turn_prefix[0].role == "user" and plan.turn_prefix[0].text().strip()


def test_pi_on_a_real_session_summary_is_a_user_message_with_file_lists() -> None:
    report = replay(SONNET, PI)
    assert report.summary.pairing_violations == 0
    compactions = list(events(report, "summary_compact"))
    assert compactions
    for e in compactions:
        assert e["details"]["strategy"] == "pi"
    (session,) = load(MIMO)
    engine = ContextEngine(PI, model=session.model, window=SMALL)
    engine.bootstrap()
    summaries = 0
    for m in session.messages:
        if m.role == "assistant":
            proj = engine.assemble()
            head = proj.messages[0]
            if head.origin == "summary":
                summaries += 1
                assert head.role == "user"
                assert head.text().startswith(summarize.PI_INTRO + "\n\n<summary>\n## Goal")
                for section in summarize.PI_SECTIONS:
                    assert section in head.text()
        engine.ingest(m)
    assert summaries
    # the file lists accumulate across compactions: the last summary lists the first one's files
    assert "<read-files>" in head.text() and "<modified-files>" in head.text()


def test_pi_split_turn_summarizes_the_prefix_apart() -> None:
    chat = Chat()
    chat.user("Refactor /srv/app/a.py, then /srv/app/b.py.")
    for i in range(24):  # one long turn: no user message after the first
        chat.round(filler(2_400, i), path=f"/srv/app/m{i}.py")
    # the reference threshold at 20,000 is 3,616; derived for the window, 10,000 (issue 9, item 4)
    engine = engine_for(
        PI.with_(PI.settings(CompactionSettings).with_(keep_recent_tokens=3_000)), window=20_000
    )
    for m in chat.messages:
        engine.ingest(m)
    proj = engine.assemble()
    (event,) = [e for e in proj.events if e.layer == "summary_compact"]
    assert event.details["split_turn"] is True
    text = proj.messages[0].text()
    assert "**Turn Context (split turn):**" in text
    assert "## Original Request\nRefactor /srv/app/a.py, then /srv/app/b.py." in text
    assert "## Early Progress" in text and "## Context for Suffix" in text
    assert find_violations(proj.messages) == []


# ================================================================ Letta


def test_letta_constants() -> None:
    assert LETTA.compact_threshold(200_000, 64_000) == 180_000  # 90% of the window
    assert LETTA.compact_threshold(SMALL, 32_000) == 57_600
    assert (LETTA.sliding_start_share, LETTA.sliding_step_share, LETTA.sliding_goal_share) == (0.3, 0.1, 0.7)
    assert (LETTA.summary_max_words, LETTA.summary_all_max_words) == (300, 500)
    assert (LETTA.summary_tool_return_chars, LETTA.summary_input_share, LETTA.summary_middle_keep) == (
        5_000,
        0.6,
        0.3,
    )
    assert LETTA.warn_at_share == 0.75
    assert LETTA.tool_result_max_chars == 50_000


def test_letta_first_cut_is_40_percent_searched_back_to_an_assistant_message() -> None:
    (session,) = load(OPUS)
    _engine, ctx = first_context_over(session, LETTA, SMALL)
    start = history_start(ctx)
    plan = sliding_plan(ctx, start)
    assert plan is not None
    n = len(ctx.view) + 1  # the system prompt is message 0
    first = round(0.4 * n) - 1
    safe = set(safe_cut_points(ctx.view))
    expected = max(c for c in range(start + 1, first + 1) if ctx.view[c].role == "assistant" and c in safe)
    fixed = ctx.predicted - sum(ctx.tokens)
    if fixed + sum(ctx.tokens[expected:]) <= 0.7 * SMALL:
        assert plan.details["evicted_share"] == 0.4 and plan.details["tries"] == 1
        assert plan.cut == expected
    else:  # 40% was not enough: a later try, never an earlier cut
        assert plan.details["evicted_share"] > 0.4 and plan.cut >= expected
    assert ctx.view[plan.cut].role == "assistant"
    assert fixed + sum(ctx.tokens[plan.cut :]) <= 0.7 * SMALL or plan.mode == "sliding->all"


def test_letta_grows_the_share_until_the_rest_fits_70_percent() -> None:
    chat = Chat()
    chat.user("go")
    for i in range(30):
        chat.round(filler(4_000, i))
    engine = engine_for(LETTA, window=20_000)
    for m in chat.messages:
        engine.ingest(m)
    ctx = engine.view.context(20_000, None)
    plan = sliding_plan(ctx, 0)
    assert plan is not None and plan.mode == "sliding"
    fixed = ctx.predicted - sum(ctx.tokens)
    assert fixed + sum(ctx.tokens[plan.cut :]) <= 14_000
    share = plan.details["evicted_share"]
    assert share in (0.4, 0.5, 0.6, 0.7, 0.8, 0.9)


def test_letta_summary_is_a_system_alert_within_300_words_and_warns_at_75_percent() -> None:
    report = replay(OPUS, LETTA)
    assert report.summary.pairing_violations == 0
    compactions = list(events(report, "summary_compact"))
    assert compactions and compactions[0]["details"]["evicted_share"] >= 0.4
    warnings_ = list(events(report, "context_warning"))
    assert warnings_ and all(e["tokens_before"] > 0.75 * SMALL for e in warnings_)
    chat = Chat()
    chat.user("Fix the build of /srv/app and keep the API stable. " + "Details follow. " * 200)
    for i in range(10):
        chat.round(filler(2_000, i), path=f"/srv/app/src/module_{i}.py")
    state = summarize.update(summarize.SummaryState(), chat.messages, user_message_chars=2_000)
    si = summarize.StyleInput(span=chat.messages, hidden_messages=21, max_words=300, timestamp=1.7e9)
    alert = json.loads(summarize.render_style("letta", state, si, max_tokens=12_000, count=len))
    assert alert["type"] == "system_alert"
    assert alert["message"].startswith("Note: 21 prior messages have been hidden")
    body = alert["message"].split("summary of the previous messages:\n", 1)[1]
    assert len(body.split()) <= 300
    for section in summarize.LETTA_SECTIONS:
        assert f"## {section}" in body


def test_letta_summary_input_fallbacks() -> None:
    chat = Chat()
    chat.user("start")
    for i in range(10):
        chat.round(filler(20_000, i))
    fits, done = clamp_summary_input(
        chat.messages, tool_return_chars=5_000, overflow_chars=10**6, budget_chars=10_000, keep_share=0.3
    )
    assert done == {} and fits == chat.messages  # under the summarizer's window: sent whole
    clamped, done = clamp_summary_input(
        chat.messages, tool_return_chars=5_000, overflow_chars=100_000, budget_chars=200_000, keep_share=0.3
    )
    assert done["tool_returns_clamped_to"] == 5_000 and "middle_dropped_chars" not in done
    for m in clamped:
        for r in m.tool_results:
            text = r.content[0].text  # type: ignore[union-attr]
            assert text.startswith(filler(20_000, 0)[:0]) and text.endswith("... [truncated 15000 chars]")
    cut, done = clamp_summary_input(
        chat.messages, tool_return_chars=5_000, overflow_chars=20_000, budget_chars=40_000, keep_share=0.3
    )
    assert done["middle_dropped_chars"] > 0
    marker = next(m for m in cut if m.origin == "notice")
    assert marker.text().startswith("[TRUNCATED: dropped ")
    head = cut[: cut.index(marker)]
    tail = cut[cut.index(marker) + 1 :]
    assert head and tail and head[0] is not None


# ================================================================ every preset on real sessions


@pytest.mark.parametrize("name", sorted(PRESETS))
@pytest.mark.parametrize("path", [MIMO, CODEX_54], ids=["mimo", "codex"])
def test_presets_keep_pairing_on_real_sessions(name: str, path: Any) -> None:
    report = replay(path, get_policy(name))
    assert report.summary.pairing_violations == 0
    assert report.summary.compactions  # the 64,000-token window makes every preset work
    assert report.summary.reference_recall is not None
