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
