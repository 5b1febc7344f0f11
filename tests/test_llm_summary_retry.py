"""The tries of a chunk of a rolling LLM summary (``llm_summary_retry``): 3 tries, 0.5 s then 1 s
apart (at most 5 s), each wait +-20% from the summarizer's seeded random source, only
``SummaryError`` retried, the last error raised as is."""

from __future__ import annotations

import random
from typing import Any

import pytest

from ctxengine.messages.model import Message
from ctxengine.summary.llm.result import Spend, SummaryError
from ctxengine.summary.llm.retry import CHUNK_ATTEMPTS, CHUNK_BACKOFF_S, CHUNK_JITTER, chunk_retrying
from ctxengine.summary.llm.summarizer import LLMSummarizer


def _summarizer(waits: list[float]) -> LLMSummarizer:
    client: Any = object()  # never called: the tries below do not reach a model

    def count(m: Message) -> int:
        return 1

    s = LLMSummarizer(client, count, window=10_000)
    s.sleep = waits.append
    return s


def _expected_waits(failed_chunks: int) -> list[float]:
    """The waits of the hand-written loop this replaced: ``min(5, 0.5 * 2**attempt)`` times
    ``uniform(0.8, 1.2)`` from ``Random(0)``, one draw per wait, none after the last try."""
    rng = random.Random(0)
    low, high = CHUNK_BACKOFF_S
    return [
        min(high, low * 2**attempt) * rng.uniform(1 - CHUNK_JITTER, 1 + CHUNK_JITTER)
        for _ in range(failed_chunks)
        for attempt in range(CHUNK_ATTEMPTS - 1)
    ]


def test_a_failing_chunk_is_tried_three_times_with_the_same_waits_as_before() -> None:
    waits: list[float] = []
    s = _summarizer(waits)
    errors: list[SummaryError] = []

    def ask() -> tuple[str, int]:
        errors.append(SummaryError(f"try {len(errors) + 1}", Spend()))
        raise errors[-1]

    for chunk in (1, 2):  # the random source runs on across chunks, one draw per wait
        with pytest.raises(SummaryError) as info:
            s._attempts(ask)
        assert info.value is errors[-1] and len(errors) == CHUNK_ATTEMPTS * chunk
    assert waits == _expected_waits(2)
    assert 0.4 <= waits[0] <= 0.6 and 0.8 <= waits[1] <= 1.2


def test_a_chunk_that_succeeds_on_a_later_try_returns_its_answer() -> None:
    waits: list[float] = []
    s = _summarizer(waits)
    answers: list[tuple[str, int] | None] = [None, ("summary", 2)]

    def ask() -> tuple[str, int]:
        answer = answers.pop(0)
        if answer is None:
            raise SummaryError("first try failed", Spend())
        return answer

    assert s._attempts(ask) == ("summary", 2)
    assert waits == _expected_waits(1)[:1]


def test_other_errors_are_not_retried() -> None:
    waits: list[float] = []
    s = _summarizer(waits)
    calls: list[int] = []

    def ask() -> tuple[str, int]:
        calls.append(1)
        raise ValueError("a bug, not a failed summary")

    with pytest.raises(ValueError):
        s._attempts(ask)
    assert calls == [1] and waits == []


def test_chunk_retrying_waits_through_the_given_sleep() -> None:
    waits: list[float] = []
    tries: list[int] = []

    def ask() -> str:
        tries.append(1)
        if len(tries) < CHUNK_ATTEMPTS:
            raise SummaryError("not yet", Spend())
        return "done"

    assert chunk_retrying(waits.append, random.Random(0))(ask) == "done"
    assert len(tries) == CHUNK_ATTEMPTS and waits == _expected_waits(1)
