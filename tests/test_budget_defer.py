"""``ToolResultBudget.defer_unseen``: a result over the cap reaches the model whole once and is
offloaded after the model has answered, unless the window cannot take it (issue 26: "a result
the model has not yet seen stays whole unless the window cannot take it"). On a real Codex session."""

from __future__ import annotations

from pathlib import Path

from conftest import CODEX
from ctxengine.formats import load
from ctxengine.policy.layer_settings import ToolResultBudget
from ctxengine.policy.registry import DEFAULT
from ctxengine.replay import replay_session

WINDOW = 64_000


def _budget_calls(policy_defer: bool) -> tuple[list[int], list[int], float | None]:
    path = next(Path(CODEX).glob("codex_gpt-5.4_cli-0.104_*.jsonl"))
    (session,) = load(path)
    policy = DEFAULT.with_(DEFAULT.settings(ToolResultBudget).with_(defer_unseen=policy_defer))
    report = replay_session(session, policy, window=WINDOW)
    at = [i for i, c in enumerate(report.calls) for e in c.events or [] if e["layer"] == "tool_result_budget"]
    return at, [c.sent_tokens for c in report.calls], report.summary.read_recall


def test_an_over_cap_result_reaches_the_model_whole_once_then_is_offloaded() -> None:
    now, now_sent, _ = _budget_calls(False)
    later, later_sent, _ = _budget_calls(True)
    assert len(now) >= 8
    shifted = [i for i in now if i + 1 in later]
    at_arrival = [i for i in now if i in later]  # the context with it whole would pass the threshold
    assert len(shifted) >= 6 and shifted[0] == now[0]
    assert set(later) == {i + 1 for i in shifted} | set(at_arrival)
    # the call that saw the result whole sent more than the one that saw its preview ...
    first = now[0]
    assert later_sent[first] > now_sent[first] + 1_000
    # ... and once offloaded the two agree again until the next large result
    assert abs(later_sent[first + 1] - now_sent[first + 1]) < 0.02 * now_sent[first + 1]
    # results the window could not take whole (past the compaction threshold) go at arrival
    assert at_arrival and all(later_sent[i] < WINDOW for i in at_arrival)


def test_defer_unseen_is_off_in_every_built_in_policy() -> None:
    from ctxengine.policy.registry import BUILTIN, presets

    for policy in [*BUILTIN.values(), *presets().values()]:
        assert not ToolResultBudget.of(policy).defer_unseen, policy.name


def test_the_deferred_offload_leaves_each_message_once_in_the_projection() -> None:
    """The offload is committed when the model's answer arrives; it rebuilds the view from the
    history, which already holds that answer: the answer must not join the view a second time
    (it did, and through the proxy Claude Code's projection collapsed to its system message)."""
    from ctxengine.engine.core import ContextEngine
    from ctxengine.messages.model import Message, Text, ToolCall, ToolResult

    policy = DEFAULT.with_(DEFAULT.settings(ToolResultBudget).with_(defer_unseen=True))
    engine = ContextEngine(policy, model="claude-sonnet-4-6", window=WINDOW)
    engine.bootstrap(system="You are a coding agent.")
    big = "\n".join(f"    total_{i} = compute_{i}(value_{i * 7919 % 10007})" for i in range(600))
    engine.ingest(Message("user", (Text("Explain src/m0.py."),), "u0"))
    engine.ingest(Message("assistant", (ToolCall("c0", "Read", {"file_path": "src/m0.py"}),), "a0"))
    engine.ingest(Message("user", (ToolResult("c0", (Text(big),)),), "r0"))

    def shown(m: Message) -> str:
        blocks = [b for b in m.blocks if isinstance(b, ToolResult)]
        return "".join(t.text for b in blocks for t in b.content if isinstance(t, Text))

    seen = engine.assemble()
    assert shown(seen.messages[-1]) == big  # whole before the model has answered
    engine.ingest(Message("assistant", (Text("It computes totals."),), "a1"))
    engine.ingest(Message("user", (Text("Thanks. Now the tests?"),), "u1"))
    after = engine.assemble()
    assert [m.id for m in after.messages if m.role != "system"] == ["u0", "a0", "r0", "a1", "u1"]
    preview = shown(next(m for m in after.messages if m.id == "r0"))
    assert len(preview) < len(big) // 3 and "total_0 " in preview
