"""Usage that does not describe the request the engine assembled is said once, not believed silently
(``engine.usage_gap``), on the README's library loop over the real Claude Code session shipped
with the package."""

from __future__ import annotations

import re
import warnings
from collections.abc import Callable

import pytest

from ctxengine import ContextEngine, Message, get_policy, load
from ctxengine.demo import demo_dir
from ctxengine.engine.core import Projection
from ctxengine.engine.usage_gap import GAP_MIN_TOKENS, UsageGapCheck, UsageGapWarning
from ctxengine.messages.model import Usage

SESSION = demo_dir() / "cc_opus-4.5_thinking_redacted_43391f62.jsonl"

Report = Callable[[Message, Projection], Usage | None]


def _figures(said: warnings.WarningMessage) -> tuple[int, int]:
    """(reported, assembled) tokens, as the warning names them."""
    found = re.search(r"reported ([\d,]+) input tokens .* assembled at ([\d,]+)", str(said.message))
    assert found is not None, said.message
    reported, assembled = (int(x.replace(",", "")) for x in found.groups())
    return reported, assembled


def _loop(report: Report) -> tuple[ContextEngine, list[warnings.WarningMessage]]:
    """The README's loop at 32,000 tokens, ``report`` giving the usage fed to ``after_turn``."""
    recorded = load(SESSION)[0].messages
    engine = ContextEngine(get_policy("default"), model="claude-opus-4-5", window=32_000)
    engine.bootstrap(system="You are a coding agent.")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for message in recorded:
            if message.role != "assistant":
                engine.ingest(message)
                continue
            projection = engine.assemble()
            engine.ingest(message)
            engine.after_turn(report(message, projection))
    return engine, [w for w in caught if issubclass(w.category, UsageGapWarning)]


def test_the_recorded_runs_usage_fed_back_is_said_once_with_its_cause() -> None:
    # the recorded requests carried Claude Code's system prompt and tools, which this loop never
    # gave the engine: the first report is ~25,000 tokens over what the engine sent
    engine, said = _loop(lambda message, _: message.usage)
    assert len(said) == 1, [str(w.message) for w in said]
    text = str(said[0].message)
    assert "bootstrap" in text and "another request" in text
    assert said[0].filename == __file__  # points at the caller's after_turn
    reported, assembled = _figures(said[0])
    assert engine.usage_gaps.gaps >= 1 and reported - assembled > 20_000


def test_usage_without_its_cache_reads_is_said_with_that_cause() -> None:
    # what the engine sent, reported as a provider does with 90% of it read from the cache, and the
    # caller passing input_tokens alone
    engine, said = _loop(lambda _, proj: Usage(input_tokens=proj.tokens // 10, output_tokens=50))
    assert len(said) == 1
    assert "cache" in str(said[0].message)
    reported, assembled = _figures(said[0])
    assert engine.usage_gaps.gaps >= 1 and reported - assembled < -GAP_MIN_TOKENS


@pytest.mark.parametrize("report", ["none", "whole"])
def test_usage_of_the_assembled_request_says_nothing(report: str) -> None:
    def usage(_: Message, proj: Projection) -> Usage | None:
        if report == "none":
            return None  # the README's offline loop
        return Usage(input_tokens=proj.tokens // 10, cache_read_tokens=proj.tokens - proj.tokens // 10)

    engine, said = _loop(usage)
    assert said == [] and engine.usage_gaps.gaps == 0


def test_the_gap_is_a_share_of_the_larger_figure_and_a_floor() -> None:
    check = UsageGapCheck()
    assert not check.check(50_000)  # nothing assembled: nothing to compare
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for predicted, reported, gap in [
            (1_000, 2_900, False),  # under GAP_MIN_TOKENS
            (20_000, 39_000, False),  # under twice the prediction: a tokenizer could be that far off
            (10_000, 21_000, True),  # over twice
            (21_000, 10_000, True),  # under half
        ]:
            check.predicted = predicted
            assert check.check(reported) is gap, (predicted, reported)
            assert check.predicted is None  # one report per assembled request
    assert check.gaps == 2
    assert len(caught) == 1 and _figures(caught[0]) == (21_000, 10_000)  # warned at the first gap only
