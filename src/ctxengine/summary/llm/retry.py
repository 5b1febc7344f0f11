"""The tries of one chunk of a rolling LLM summary, with backoff (``tenacity``).

OpenClaw ``summarizeChunks``: a chunk is tried 3 times (``CHUNK_ATTEMPTS``) before the summary is
left partial, waiting 0.5 s, doubling, at most 5 s between tries (``CHUNK_BACKOFF_S``), each wait
scaled by a factor drawn uniformly in 1 +- 0.2 (``CHUNK_JITTER``). Only ``SummaryError`` is
retried; any other exception goes through at once. The caller passes the sleep (tests: none)
and a seeded random source, so the waits are reproducible. ``tenacity`` is imported when the first
retry policy is built (a replay without ``--llm`` never builds one).
"""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import TYPE_CHECKING

from ctxengine.summary.llm.result import SummaryError

if TYPE_CHECKING:
    from tenacity import RetryCallState, Retrying

CHUNK_ATTEMPTS = 3  # OpenClaw summarizeChunks: tries per chunk before the summary is left partial
CHUNK_BACKOFF_S = (0.5, 5.0)  # ... waiting 0.5 s, doubling, at most 5 s between tries ...
CHUNK_JITTER = 0.2  # ... +-20%


class JitteredBackoff:
    """The wait before the next try: 0.5 s, 1 s, ... at most 5 s (``wait_exponential``), times a
    factor drawn from ``rng`` uniformly in [1 - ``CHUNK_JITTER``, 1 + ``CHUNK_JITTER``].

    No wait, and no draw, after the last try: tenacity computes the wait before it checks the
    stop, and one draw per real wait keeps ``rng``'s sequence of waits what it was before
    tenacity (one draw per wait, across all the chunks of a summarizer). A callable tenacity takes
    as its ``wait``."""

    def __init__(self, rng: random.Random, attempts: int = CHUNK_ATTEMPTS) -> None:
        from tenacity import wait_exponential

        low, high = CHUNK_BACKOFF_S
        self.backoff = wait_exponential(multiplier=low, max=high)
        self.rng = rng
        self.attempts = attempts

    def __call__(self, retry_state: RetryCallState) -> float:
        """The wait in seconds after try ``retry_state.attempt_number`` (1-based) failed."""
        if retry_state.attempt_number >= self.attempts:
            return 0.0
        return self.backoff(retry_state) * self.rng.uniform(1 - CHUNK_JITTER, 1 + CHUNK_JITTER)


def chunk_retrying(sleep: Callable[[float], None], rng: random.Random) -> Retrying:
    """The retry policy of one chunk: ``CHUNK_ATTEMPTS`` tries of a call that raises
    ``SummaryError``, ``JitteredBackoff`` waits between them, given to ``sleep`` (seconds).

    Args:
        sleep: waits the given seconds (``time.sleep``; tests pass one that does not wait).
        rng: the source of the jitter (the summarizer's, seeded).

    Returns:
        A ``tenacity.Retrying``; calling it with a function returns the function's result.
        After the last try it raises the last ``SummaryError`` itself (``reraise``)."""
    from tenacity import Retrying, retry_if_exception_type, stop_after_attempt

    return Retrying(
        stop=stop_after_attempt(CHUNK_ATTEMPTS),
        wait=JitteredBackoff(rng),
        retry=retry_if_exception_type(SummaryError),
        sleep=sleep,
        reraise=True,
    )
