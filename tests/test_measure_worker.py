"""The replay's measures in a forked worker process (``replay.measure_worker``) give the report the
measures give in-process, say how the worker failed, and leave no worker behind."""

from __future__ import annotations

import multiprocessing
import threading
from pathlib import Path

import msgspec
import pytest

from conftest import CLAUDE_CODE, CODEX, OPENAI_CHAT, SWE_AGENT
from ctxengine.formats import load
from ctxengine.models.registry import Registry
from ctxengine.policy.registry import get_policy
from ctxengine.replay import driver
from ctxengine.replay.measure_set import LocalMeasures
from ctxengine.replay.measure_worker import ForkedMeasures, MeasureWorkerError, can_fork
from ctxengine.tokens.counter import EstimateCounter, counter_for

SIDECHAIN = CLAUDE_CODE / "cc_mimo-v2.5-pro_subagent-sidechain_of-4530697c_agent-aee292b61a7ab9367.jsonl"
SESSIONS = [
    SIDECHAIN,  # Anthropic requests checked
    SWE_AGENT / "sweagent-0.x_gpt-4_pydicom__pydicom-1458.traj",  # OpenAI Chat requests checked
    CODEX / "codex_gpt-5.2-codex_cli-0.98_rollout-2026-02-09T16-41-33-019c44c8.jsonl",
    OPENAI_CHAT / "mini-swe-agent-2.2.7_deepseek-chat_tool_calls_django__django-13265.traj.json",
]


@pytest.fixture
def forced_fork(monkeypatch: pytest.MonkeyPatch) -> list[ForkedMeasures]:
    """The worker used wherever ``measure_worker`` is asked for (a test process may run other
    threads, which ``can_fork`` declines); the list holds the measures that started one."""
    started: list[ForkedMeasures] = []
    init = ForkedMeasures.__init__

    def counted(self: ForkedMeasures, *args: object, **kwargs: object) -> None:
        started.append(self)
        init(self, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(driver, "can_fork", lambda: True)
    monkeypatch.setattr(ForkedMeasures, "__init__", counted)
    return started


def _report(path: Path, policy: str, window: int, *, worker: bool) -> bytes:
    session = load(path)[0]
    report = driver.replay_session(session, get_policy(policy), window=window, measure_worker=worker)
    return msgspec.json.encode(report)


POLICIES = [("default", 64_000), ("claude-code", 200_000), ("pi", 64_000)]


@pytest.mark.parametrize("path", SESSIONS, ids=lambda p: p.name[:40])
@pytest.mark.parametrize(("policy", "window"), POLICIES)
# the deepseek-chat session (a 128,000-token model) at 200,000 tokens, on purpose
@pytest.mark.filterwarnings("ignore::ctxengine.models.registry.ModelWindowWarning")
def test_forked_measures_give_the_report_of_local_measures(
    path: Path, policy: str, window: int, forced_fork: list[ForkedMeasures]
) -> None:
    """The same report, byte for byte, with the session's token counts counted ahead by the
    worker (most of them arrive in time to be used here)."""
    forked = _report(path, policy, window, worker=True)
    assert len(forced_fork) == 1
    assert forked == _report(path, policy, window, worker=False)
    assert multiprocessing.active_children() == []


def test_a_failing_measure_in_the_worker_is_raised_with_its_traceback(
    forced_fork: list[ForkedMeasures], monkeypatch: pytest.MonkeyPatch
) -> None:
    def fails(self: LocalMeasures, call: object, proj: object) -> None:
        raise ZeroDivisionError("a measure that fails")

    monkeypatch.setattr(LocalMeasures, "measure", fails)  # the worker, forked after, has it too
    with pytest.raises(MeasureWorkerError, match=r"(?s)failed:.*ZeroDivisionError: a measure that fails"):
        driver.replay_session(load(SIDECHAIN)[0], get_policy("default"), measure_worker=True)
    assert len(forced_fork) == 1
    assert multiprocessing.active_children() == []


def test_a_replay_that_fails_leaves_no_worker_behind(
    forced_fork: list[ForkedMeasures], monkeypatch: pytest.MonkeyPatch
) -> None:
    calls = 0
    call = driver._Replay.call

    def third_fails(self: driver._Replay, msg: object) -> None:
        nonlocal calls
        calls += 1
        if calls == 3:
            raise KeyError("the engine failed")
        call(self, msg)  # type: ignore[arg-type]

    monkeypatch.setattr(driver._Replay, "call", third_fails)
    with pytest.raises(KeyError, match="the engine failed"):
        driver.replay_session(load(SIDECHAIN)[0], get_policy("default"), measure_worker=True)
    assert len(forced_fork) == 1
    assert multiprocessing.active_children() == []


def test_the_worker_counts_the_sessions_texts_ahead(forced_fork: list[ForkedMeasures]) -> None:
    """Counts arrive and are learnt; each learnt count is the count made here."""
    session = load(SIDECHAIN)[0]
    model = Registry.default().get(session.model or "unknown")
    counter = counter_for(model)
    learnt: list[tuple[str, bool, int]] = []
    learn = type(counter).learn

    def recorded(self: object, text: str, as_json: bool, tokens: int) -> None:
        learnt.append((text, as_json, tokens))
        learn(self, text, as_json, tokens)  # type: ignore[arg-type]

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(type(counter), "learn", recorded)
        driver.replay_session(session, get_policy("default"), measure_worker=True)
    assert forced_fork[0].learned == len(learnt) > 100
    assert isinstance(counter, EstimateCounter)  # a MiMo session: Claude's estimate
    fresh = EstimateCounter(counter.profile)  # its memos empty
    assert all(fresh.counted(text, as_json) == tokens for text, as_json, tokens in learnt)


def test_no_worker_while_another_thread_runs() -> None:
    release = threading.Event()
    other = threading.Thread(target=release.wait)
    other.start()
    try:
        assert not can_fork()
    finally:
        release.set()
        other.join()


def test_forked_measures_take_the_sessions_own_messages() -> None:
    session = load(SIDECHAIN)[0]
    counter = counter_for(Registry.default().get(session.model or "unknown"))
    measures = ForkedMeasures(session, "anthropic", "claude-sonnet-4-5", counter, validate=True)
    try:
        with pytest.raises(ValueError, match="own messages"):
            measures.observe(msgspec.structs.replace(session.messages[0]))
    finally:
        measures.close()
    assert multiprocessing.active_children() == []
