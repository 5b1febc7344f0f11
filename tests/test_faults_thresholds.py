"""Issue 9, items 4 and 5: thresholds that make sense for every window, and an overflow guard
that fits the request (or says why) without dropping the latest request.

The inputs are built here, after the idea of ``../shared/cases/m3_compact_every_call.jsonl``
(a 20,000-token fixed prefix at a 32,000-token window, a file read per call)."""

from __future__ import annotations

import itertools
import json
import random
import warnings
from pathlib import Path
from typing import Any

import pytest

from ctxengine.engine.core import ContextEngine
from ctxengine.formats import load
from ctxengine.layers.base import artifact_id
from ctxengine.messages.model import Message, Text, ToolCall, ToolResult, Usage
from ctxengine.models.registry import ModelWindowWarning, WindowWarning
from ctxengine.policy.registry import (
    CacheClear,
    CompactionSettings,
    IdleClear,
    Restore,
    SessionMemory,
    ToolResultBudget,
    get_policy,
)
from ctxengine.replay import replay_session
from ctxengine.tokens.counter import tool_input_text
from policies import off

MODEL = "claude-sonnet-4-5"
POLICIES = ("default", "claude-code", "openclaw", "pi", "letta")
REQUEST = "Read the modules under /home/dev/proj/app and tell me which one opens the database."

pytestmark = pytest.mark.filterwarnings("ignore::ctxengine.models.registry.WindowWarning")


def _content(kind: str, chars: int, seed: int) -> str:
    rnd = random.Random(seed)
    if kind == "cjk":
        return "".join(
            rnd.choice("上下文管理的说明文档包含压缩摘要和缓存细节这是一个关于") for _ in range(chars)
        )
    words = ("the", "of", "and", "to", "in", "function", "value", "file", "error", "test", "build")
    return " ".join(rnd.choice(words) for _ in range(chars // 5))[:chars]


def _session_file(path: Path, kind: str, calls: int = 12, fixed: int = 20_000, chars: int = 3_700) -> Path:
    """A Claude Code session: one request, then one Read per call (a ``chars`` result), the
    recorded usage a ``fixed`` prefix plus ~1,000 tokens per round."""
    recs: list[dict[str, object]] = []
    parent = None

    def add(kind_: str, message: dict[str, object], n: int) -> None:
        nonlocal parent
        uid = f"00000000-0000-0000-0000-{n:012d}"
        recs.append(
            {
                "parentUuid": parent,
                "isSidechain": False,
                "type": kind_,
                "message": message,
                "uuid": uid,
                "timestamp": f"2026-05-01T09:{n // 60:02d}:{n % 60:02d}Z",
                "sessionId": "thresholds",
                "cwd": "/home/dev/proj",
                "version": "2.1.0",
                "userType": "external",
            }
        )
        parent = uid

    n = 1
    add("user", {"role": "user", "content": REQUEST}, n)
    for k in range(calls):
        n += 1
        usage = {"input_tokens": 5, "cache_read_input_tokens": fixed + 957 * k, "output_tokens": 200}
        tool_use = {
            "type": "tool_use",
            "id": f"toolu_{k:04d}",
            "name": "Read",
            "input": {"file_path": f"/home/dev/proj/app/m{k}.py"},
        }
        add(
            "assistant",
            {
                "id": f"msg_{k:04d}",
                "type": "message",
                "role": "assistant",
                "model": MODEL,
                "content": [tool_use],
                "stop_reason": "tool_use",
                "usage": usage,
            },
            n,
        )
        n += 1
        result = {"type": "tool_result", "tool_use_id": f"toolu_{k:04d}", "content": _content(kind, chars, k)}
        add("user", {"role": "user", "content": [result]}, n)
    path.write_text("\n".join(json.dumps(r, ensure_ascii=False) for r in recs) + "\n", encoding="utf-8")
    return path


@pytest.mark.parametrize("policy", POLICIES)
@pytest.mark.parametrize("window", [16_000, 20_000, 32_000, 48_000, 64_000, 128_000, 200_000])
@pytest.mark.parametrize("fixed_share", [0.0, 0.3, 0.62])
def test_every_window_gets_a_positive_threshold_with_room_for_a_summary(
    policy: str, window: int, fixed_share: float
) -> None:
    fixed = int(window * fixed_share)
    p = get_policy(policy).for_window(window, fixed)
    threshold = p.compact_threshold(window, 64_000)
    assert threshold > fixed  # above the fixed prefix: not every call over it
    assert threshold <= window - p.overflow_reserve  # compaction comes before the guard
    # room under the threshold for a summary and the kept tail, room above it for the output
    assert threshold - fixed >= p.summary_budget(window)
    assert window - threshold >= min(p.summary_llm_max_output, p.compact_reserve_output)


@pytest.mark.parametrize("kind", ["cjk", "prose"])
def test_a_small_window_with_a_large_prefix_compacts_a_handful_of_times(tmp_path: Path, kind: str) -> None:
    """m3's kind: at 32,000 tokens with a 20,000-token prefix the reference threshold is
    negative (32,000 - 20,000 - 13,000) and every call compacted. At most 4 compaction events
    (clearings and the guard included) in 12 calls, no overflow."""
    (session,) = load(_session_file(tmp_path / "s.jsonl", kind))
    report = replay_session(session, get_policy("default"), window=32_000)
    quality = [e for c in report.calls for e in c.events if "quality" in e["details"]]
    assert len(quality) <= 4, [(e["layer"], e["reason"]) for e in quality]
    assert report.summary.overflows == 0 and report.summary.pairing_violations == 0
    for e in quality:  # and no compaction leaves the context larger than it found it
        assert e["tokens_after"] < e["tokens_before"]


def tool_round(engine: ContextEngine, proj: Any, k: int, tool: str, args: dict[str, Any], chars: int) -> None:
    """Call ``k`` of a live loop: the model's tool call, the usage of ``proj``, the tool's result
    (``chars`` of prose)."""
    engine.ingest(Message("assistant", (ToolCall(f"t{k}", tool, args),), f"a{k}", timestamp=10.0 * k + 3))
    engine.after_turn(Usage(input_tokens=proj.tokens))
    result = ToolResult(f"t{k}", (Text(_content("prose", chars, k)),), name=tool)
    engine.ingest(Message("user", (result,), f"r{k}", timestamp=10.0 * k + 4))


def test_a_compaction_never_leaves_the_context_larger_than_before(tmp_path: Path) -> None:
    """Restoring large instruction files after a compaction that freed little made the
    context larger. What is restored fits in what the compaction freed."""
    workspace = tmp_path / "ws"
    workspace.mkdir()
    (workspace / "CLAUDE.md").write_text(_content("prose", 60_000, 7), encoding="utf-8")
    for policy in ("default", "claude-code"):
        engine = ContextEngine(get_policy(policy), model=MODEL, window=32_000, workspace=workspace)
        engine.bootstrap(system="You are a coding agent.", fixed_prefix_tokens=20_000)
        engine.ingest(Message("user", (Text(REQUEST),), "u0", timestamp=1.0))
        made = []
        for k in range(120):  # until two compactions (default's short previews take a while)
            proj = engine.assemble(now=10.0 * k + 2)
            made += [e for e in proj.events if e.layer.endswith("compact")]
            if len(made) >= 2:
                break
            tool_round(engine, proj, k, "Read", {"file_path": f"/w/m{k}.py"}, 8_000)
        assert made, policy
        for e in made:
            assert e.tokens_after < e.tokens_before, (policy, e.reason, e.details.get("restored"))


@pytest.mark.parametrize("window", [16_000, 20_000, 32_000])
@pytest.mark.parametrize("policy", POLICIES)
def test_a_compaction_of_a_session_that_is_one_long_task_never_grows_it(policy: str, window: int) -> None:
    """A SWE-agent-shaped session (one long task, the only user message, then tool rounds): the
    first compaction of claude-code, openclaw and pi summarized just the task under a kept tail
    that held the rest and quoted it back whole (16,000: 9,155 -> 9,857, 9,349 and 10,882
    tokens). An automatic compaction that would grow the context is not made (an event says so)."""
    engine = ContextEngine(get_policy(policy), model=MODEL, window=window)
    engine.bootstrap(system="You are a coding agent.", fixed_prefix_tokens=2_000)
    task = "<issue>\n" + _content("prose", window // 2, 1) + "\n</issue>\nFix the issue described above."
    engine.ingest(Message("user", (Text(task),), "u0", timestamp=1.0))
    made, skipped = [], []
    for k in range(60):
        proj = engine.assemble(now=10.0 * k + 2)
        made += [e for e in proj.events if e.details.get("quality") is not None]
        skipped += [e for e in proj.events if e.layer == "compaction_skipped"]
        tool_round(engine, proj, k, "Bash", {"command": f"run {k}"}, 2_500)
    assert made, "the session compacts"
    for e in made:
        assert e.tokens_after < e.tokens_before, (e.layer, e.tokens_before, e.tokens_after)
    assert all(e.tokens_after == e.tokens_before for e in skipped)
    # a skipped compaction (a summary, an LLM call, for nothing) is not tried again at every call:
    # only once the context has grown by 2% of the window (at least 1,000 tokens) since
    margin = max(1_000, int(0.02 * window))
    for a, b in itertools.pairwise(skipped):
        assert b.tokens_before >= a.tokens_before + margin or b.tokens_before < a.tokens_before


def test_a_compaction_never_leaves_the_context_over_its_threshold() -> None:
    """What a compaction restores fits under the compaction threshold as well as under what it
    freed: on the recorded Sonnet session at 64,000 tokens a restore filled the whole room it
    freed (51,356 -> 46,317 over a 44,758 threshold) and the next compactions came two calls
    apart. Checked against the (warm) threshold every compaction event names."""
    import re

    from conftest import CLAUDE_CODE

    session = load(CLAUDE_CODE / "cc_sonnet-4.5_long-290-tools_redacted_3cfce0ff.jsonl")[0]
    report = replay_session(session, get_policy("default"), window=64_000)
    made = [e for c in report.calls for e in c.events if e["layer"].endswith("_compact")]
    assert len(made) >= 5
    named = [m for e in made for m in re.findall(r"threshold ([\d,]+)", e["reason"])]
    threshold = max(int(m.replace(",", "")) for m in named)
    over = [(e["tokens_before"], e["tokens_after"]) for e in made if e["tokens_after"] > threshold]
    assert over == []
    assert any(e["details"].get("restored") for e in made)  # the working set still comes back


def test_a_compaction_leaves_room_to_grow_under_its_threshold() -> None:
    """``Restore.room_tokens`` (8,000 in ``ROUND2``, the default these thresholds were measured
    on): what a compaction restores gives way to room for
    the next turns under the threshold; with none, the restore filled up to the threshold and the
    next compaction came a turn or two later. On the recorded MiMo session at 64,000 tokens:
    fewer compactions, fewer tokens sent, every restore under the threshold less the room."""
    import re

    from conftest import CLAUDE_CODE

    session = load(CLAUDE_CODE / "cc_mimo-v2.5-pro_vscode_2x-autocompact_4530697c.jsonl")[0]
    from policies import ROUND2 as default

    assert Restore.of(default).room_tokens == 8_000
    no_room = default.with_(default.settings(Restore).with_(room_tokens=0))
    runs = [replay_session(session, p, window=64_000) for p in (default, no_room)]
    made = [[e for c in r.calls for e in c.events if e["layer"].endswith("_compact")] for r in runs]
    assert len(made[0]) < len(made[1])
    assert sum(c.sent_tokens for c in runs[0].calls) < sum(c.sent_tokens for c in runs[1].calls)
    named = [m for e in made[0] for m in re.findall(r"threshold ([\d,]+)", e["reason"])]
    threshold = max(int(m.replace(",", "")) for m in named)
    slack = threshold // 200  # the restore is fitted on the plan's count; the event reports the
    for e in made[0]:  # projection as predicted after it (message overheads: 25 tokens here)
        restored = e["details"].get("restored_tokens", 0)
        assert e["tokens_after"] <= threshold - 8_000 + slack or restored == 0, (e["tokens_after"], restored)


def test_a_window_above_the_models_own_window_warns() -> None:
    with pytest.warns(ModelWindowWarning, match="128,000"):
        ContextEngine(get_policy("default"), model="gpt-4o", window=200_000)
    with warnings.catch_warnings():
        warnings.simplefilter("error", ModelWindowWarning)
        ContextEngine(get_policy("default"), model="gpt-4o", window=100_000)  # within it: silent
        ContextEngine(get_policy("default"), model="no-such-model", window=500_000)  # unknown window


# ---------------------------------------------------------------- item 5: the overflow guard


def _guard_run(
    policy_name: str, *, result_chars: int, calls: int
) -> tuple[ContextEngine, list[list[str]], int]:
    """Rounds of big tool results after one request, at 32,000 tokens with a 20,000-token
    prefix; returns the engine, each call's guard reasons, and how many calls the guard left
    without the request."""
    if policy_name == "guard-only":
        policy = off(
            get_policy("default"), CompactionSettings, CacheClear, IdleClear, SessionMemory, ToolResultBudget
        )
    else:
        policy = get_policy(policy_name)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", WindowWarning)
        engine = ContextEngine(policy, model=MODEL, window=32_000)
    engine.bootstrap(system="You are a coding agent.", fixed_prefix_tokens=20_000)
    engine.ingest(Message("user", (Text(REQUEST),), "u0", timestamp=1.0))
    guards: list[list[str]] = []
    missing = 0
    for k in range(calls):
        proj = engine.assemble(now=10.0 * k + 2)
        guards.append([e.reason for e in proj.events if e.layer == "overflow_guard"])
        compacted = any(e.layer.endswith("compact") for e in proj.events)
        if guards[-1] and not compacted and not any(REQUEST in m.text() for m in proj.messages):
            missing += 1  # the guard dropped it (a compaction's quote is issue 9, items 1-3)
        assert proj.tokens <= 32_000 - policy.overflow_reserve or any(
            "cannot fit" in r for r in guards[-1]
        ), (k, proj.tokens)
        tool_round(engine, proj, k, "bash", {"cmd": f"cat m{k}"}, result_chars)
    return engine, guards, missing


@pytest.mark.parametrize("policy", ["guard-only", *POLICIES])
def test_the_guard_keeps_the_latest_request_and_does_not_fire_on_every_call(policy: str) -> None:
    _, guards, missing = _guard_run(policy, result_chars=6_000, calls=16)
    assert missing == 0  # the guard never dropped the request
    fired = [i for i, g in enumerate(guards) if g]
    consecutive = sum(1 for a, b in itertools.pairwise(fired) if b == a + 1)
    assert consecutive <= len(fired) // 2, fired  # it drops with room to spare, not just enough


@pytest.mark.parametrize("policy", POLICIES)
def test_a_tool_result_larger_than_the_window_is_cut_to_fit_and_stays_retrievable(policy: str) -> None:
    engine, _guards, missing = _guard_run(policy, result_chars=200_000, calls=3)
    assert missing == 0
    proj = engine.assemble(now=100.0)
    assert proj.tokens <= 32_000 - engine.policy.overflow_reserve
    shown = [r for m in proj.messages for r in m.tool_results if r.call_id == "t2"]
    if shown and len(shown[0].content[0].text) < 200_000:  # type: ignore[union-attr]
        assert len(engine.retrieve(artifact_id("t2"))) >= 190_000  # cut: the original is kept whole


def _big_call(shape: str) -> tuple[ToolCall, list[str]]:
    """A tool call whose input alone is larger than a 16,000-token window, and the pieces of it
    the whole kept input must hold."""
    code = _content("code", 80_000, 9)
    if shape == "write":
        return ToolCall("w1", "Write", {"file_path": "/w/parser.py", "content": code}), [code]
    if shape == "raw-patch":  # Codex's apply_patch: the input is one raw string
        patch = "*** Begin Patch\n*** Add File: parser.py\n" + "\n".join("+" + ln for ln in code.split("\n"))
        return ToolCall("w1", "apply_patch", patch), [patch[:5_000]]
    if shape == "nested":  # MultiEdit: the long strings are inside a list of objects
        edits = [
            {"old_string": code[:40_000], "new_string": code[40_000:]},
            {"old_string": "a", "new_string": "b"},
        ]
        return ToolCall("w1", "MultiEdit", {"file_path": "/w/p.py", "edits": edits}), [code[:40_000]]
    if shape == "many-lines":  # 800 strings, none long enough to cut alone
        lines = [f"{k:04d} " + code[k * 100 : k * 100 + 140] for k in range(800)]
        return ToolCall("w1", "WriteLines", {"path": "/w/p.py", "lines": lines}), [lines[400]]
    if shape == "many-keys":  # 2,000 short settings: no string and no list to cut
        settings = {f"key_{k}": code[k * 30 : k * 30 + 150] for k in range(2_000)}
        return ToolCall("w1", "Configure", {"settings": settings}), [settings["key_1000"]]
    values = {f"part_{k}": code[k * 1_000 : k * 1_000 + 1_500] for k in range(80)}  # many medium values
    return ToolCall("w1", "Store", values), [values["part_40"]]


@pytest.mark.parametrize("shape", ["write", "raw-patch", "nested", "many-lines", "many-values", "many-keys"])
@pytest.mark.parametrize("window", [16_000, 32_000])
@pytest.mark.parametrize("policy", POLICIES)
def test_a_tool_call_input_larger_than_the_window_is_cut_to_fit_and_stays_retrievable(
    policy: str, window: int, shape: str
) -> None:
    """A newest round the guard cannot drop whose tool call's input is larger than the window (an
    80,000-character Write; a raw apply_patch; a MultiEdit's nested edits; 800 short lines; 80
    medium values) was sent over the window with only an "unfit" event: the guard cuts the
    input's long strings (then long lists) in place, the whole input kept as artifact
    tool-call/<id>; the call keeps its id and name, and every request stays valid."""
    from ctxengine.formats.anthropic_writer import to_anthropic
    from ctxengine.formats.openai_writer import to_openai_chat
    from ctxengine.formats.validate import validate_anthropic, validate_openai_chat

    engine = ContextEngine(get_policy(policy), model=MODEL, window=window)
    engine.bootstrap(system="You are a coding agent.", fixed_prefix_tokens=2_000)
    engine.ingest(Message("user", (Text(REQUEST),), "u0", timestamp=1.0))
    for k in range(3):
        proj = engine.assemble(now=10.0 * k + 2)
        tool_round(engine, proj, k, "Read", {"file_path": f"/w/m{k}.py"}, 3_000)
    proj = engine.assemble(now=40.0)
    call, pieces = _big_call(shape)
    engine.ingest(Message("assistant", (call,), "aw"))
    engine.after_turn(Usage(input_tokens=proj.tokens))
    engine.ingest(Message("user", (ToolResult("w1", (Text("Done."),), name=call.name),), "rw"))
    proj = engine.assemble(now=50.0)
    assert proj.tokens <= window - engine.policy.overflow_reserve, proj.tokens
    assert validate_anthropic(to_anthropic(proj.messages, system=proj.system, model=MODEL)) == []
    assert validate_openai_chat(to_openai_chat(proj.messages, system=proj.system, model="gpt-4o")) == []
    shown = [c for m in proj.messages for c in m.tool_calls if c.id == "w1"]
    if not shown or shown[0].input == call.input:
        return  # it fits as it is (32,000), or the policy summarized the round (letta)
    assert shown[0].name == call.name
    assert "tool-call/w1" in tool_input_text(shown[0].input)
    kept = engine.retrieve("tool-call/w1")
    assert all(piece in kept for piece in pieces)  # the whole input, kept


def test_a_real_session_of_large_writes_no_longer_overflows_a_small_window(transcripts: Path) -> None:
    """The shared Claude Code session of 290 tool calls at 32,000 tokens (a 25,517-token fixed
    prefix): its newest rounds are Writes of 14,000-23,000 characters, which sent 32,058-33,639
    tokens on three calls; the guard now cuts those inputs to fit."""
    path = transcripts / "claude-code-jsonl" / "cc_sonnet-4.5_long-290-tools_redacted_3cfce0ff.jsonl"
    [session] = load(path)[:1]
    report = replay_session(session, get_policy("default"), window=32_000)
    assert report.summary.overflows == 0
    assert report.summary.pairing_violations == 0
    cut = [e for c in report.calls for e in c.events if "fitted_calls" in (e.get("details") or {})]
    assert cut, "the guard cut a tool-call input"


@pytest.mark.parametrize("policy", ["default", "claude-code", "openclaw"])
def test_the_guard_never_makes_a_cut_that_frees_nothing(transcripts: Path, policy: str) -> None:
    """On the shared 290-call session at 32,000 tokens the guard made cuts that freed nothing: a
    "drop" of nothing but the latest request behind a new notice (the context no smaller, or 26
    tokens larger), tool results "cut" to a head, tail and line no shorter, and an earlier user
    message kept in the compaction's prefix "cut in place" call after call (a prefix copy, which a
    decision on the history never changes: 0 tokens saved, 25 times). Every guard event that is not
    the "cannot fit" one now leaves the context smaller."""
    path = transcripts / "claude-code-jsonl" / "cc_sonnet-4.5_long-290-tools_redacted_3cfce0ff.jsonl"
    [session] = load(path)[:1]
    report = replay_session(session, get_policy(policy), window=32_000)
    guard = [e for c in report.calls for e in c.events if e["layer"] == "overflow_guard"]
    assert guard, "the guard acts on this session at this window"
    for e in guard:
        if not e["details"].get("unfit"):
            assert e["tokens_after"] < e["tokens_before"], (e["reason"], e["details"])


def test_the_tool_result_budget_never_offloads_a_result_into_a_longer_preview(transcripts: Path) -> None:
    """A result just over the cap became a preview plus its identifiers line and retrieval line,
    longer than the result itself (SWE-agent 0.x at 16,000: chars_saved -298)."""
    path = transcripts / "swe-agent-traj" / "sweagent-0.x_gpt-4_pydicom__pydicom-1458.traj"
    offloads = 0
    for window in (16_000, 32_000):
        for session in load(path):
            report = replay_session(session, get_policy("default"), window=window)
            for e in (e for c in report.calls for e in c.events if e["layer"] == "tool_result_budget"):
                offloads += 1
                assert e["details"]["chars_saved"] > 0, e["details"]
    assert offloads


# where the forced compaction has something to cut after the automatic ones (openclaw and pi keep
# all that is left as their recent tail at the smaller windows)
FORCED = [("default", 16_000), ("default", 32_000), ("claude-code", 16_000), ("claude-code", 32_000)]
FORCED += [("openclaw", 32_000), ("pi", 32_000), ("letta", 16_000), ("letta", 32_000)]


@pytest.mark.parametrize(("policy", "window"), FORCED)
def test_a_forced_compaction_never_leaves_the_context_larger_than_before(policy: str, window: int) -> None:
    """A forced compaction (the user's ``/compact``) restored the working set whatever it had
    freed: default at 16,000 after a 2,200-token pasted request went 5,651 -> 6,279 tokens. It may
    end above the threshold, never above where it started."""
    engine = ContextEngine(get_policy(policy), model=MODEL, window=window)
    engine.bootstrap(system="You are a coding agent.", fixed_prefix_tokens=2_000)
    engine.ingest(Message("user", (Text("Set up the project and run the build."),), "u0", timestamp=1.0))
    for k in range(8):
        proj = engine.assemble(now=10.0 * k + 2)
        tool_round(engine, proj, k, "Bash", {"command": f"cat src/f{k}.py"}, 6_000)
    paste = "Here is the log, find the root cause:\n" + _content("prose", 10_000, 99)
    engine.ingest(Message("user", (Text(paste),), "req", timestamp=100.0))
    for k in range(8, 14):
        proj = engine.assemble(now=10.0 * k + 2)
        tool_round(engine, proj, k, "Bash", {"command": f"grep -n err l{k}"}, 6_000)
    made = []
    for _ in range(3):
        before = engine.assemble(now=500.0).tokens if made else None
        event = engine.compact(force=True)
        if event is None:
            continue
        made.append(event)
        assert event.tokens_after <= event.tokens_before, event
        if before is not None:
            assert engine.assemble(now=501.0).tokens <= before
    assert made, "the forced compaction ran"


@pytest.mark.parametrize("policy", ["default", "claude-code", "openclaw", "pi", "letta"])
def test_the_codex_sessions_fit_a_16000_window_under_every_policy(policy: str) -> None:
    """letta at 16,000 on the recorded Codex session sent 16,089-16,295 tokens on 3 calls: the
    room for a quoted request ignored what the guard keeps for the response (letta reserves
    none), so its summary alone was over the guard's limit once the newest round was kept."""
    from conftest import CODEX

    for path in sorted(CODEX.glob("*.jsonl")):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", WindowWarning)
            [session] = load(path)
            report = replay_session(session, get_policy(policy), window=16_000)
        assert report.summary.overflows == 0, (path.name, policy)
        assert report.summary.pairing_violations == 0


@pytest.mark.parametrize("jobs", ["1", "2"])
def test_a_folder_replay_skips_only_the_sessions_its_window_cannot_take(tmp_path: Path, jobs: str) -> None:
    """A folder replayed at 24,000 stopped at the first session whose fixed prefix was larger
    than the window (one error, exit 2) and wrote nothing for the sessions that fit. Each refused
    session is one ``warning:`` line and the others are replayed; when none fits it is one error."""
    from typer.testing import CliRunner

    from ctxengine.cli.commands import app

    folder = tmp_path / "sessions"
    folder.mkdir()
    _session_file(folder / "a_big_prefix.jsonl", "prose", fixed=30_000)
    _session_file(folder / "b_small_prefix.jsonl", "prose", fixed=4_000)
    out = tmp_path / "r.json"
    args = ["replay", str(folder), "--window", "24000", "--jobs", jobs]
    res = CliRunner().invoke(app, [*args, "--json", str(out)])
    assert res.exit_code == 0, res.stderr
    names = [r["session"]["source"].rsplit("/", 1)[-1] for r in json.loads(out.read_text())]
    assert names == ["b_small_prefix.jsonl"]
    skipped = [x for x in " ".join(res.stderr.split()).split("warning: ") if x.startswith("skipped:")]
    assert len(skipped) == 1 and "a_big_prefix.jsonl" in skipped[0] and "--window" in skipped[0]
    (folder / "b_small_prefix.jsonl").unlink()
    res = CliRunner().invoke(app, args)
    assert res.exit_code == 2 and "error:" in res.stderr and "a_big_prefix.jsonl" in res.stderr


@pytest.mark.parametrize("policy", ["default", "claude-code", "openclaw", "pi", "letta"])
def test_a_forced_compaction_that_would_grow_the_context_is_not_made(policy: str) -> None:
    """pi at 32,000 with a one-line 8,557-token request (base64, no spaces) summarized it under a
    kept tail and quoted it back whole: 23,979 -> 28,489 tokens on the user's /compact. A
    compaction, forced or not, never leaves the context larger: it is not made and an event
    says so (or it is made and shrinks the context)."""
    import base64

    blob = base64.b64encode(random.Random(1).randbytes(8_000)).decode()
    engine = ContextEngine(get_policy(policy), model=MODEL, window=32_000)
    engine.bootstrap(system="You are a coding agent.", fixed_prefix_tokens=2_000)
    request = "Decode this payload and say its format: " + blob
    engine.ingest(Message("user", (Text(request),), "u0", timestamp=1.0))
    for k in range(14):
        proj = engine.assemble(now=10.0 * k + 2)
        tool_round(engine, proj, k, "Bash", {"command": f"cat f{k}.py"}, 4_000)
    before = engine.assemble(now=200.0).tokens
    event = engine.compact(force=True)
    after = engine.assemble(now=201.0)
    assert after.tokens <= before
    if event is None:
        assert any(e.layer == "compaction_skipped" for e in engine.events[-5:])
    else:
        assert event.tokens_after <= event.tokens_before
