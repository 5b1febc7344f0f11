"""A provider's usage that does not describe the request the engine assembled, said out loud.

The ledger anchors the engine's token count on the provider's reported input of the latest call
(``tokens.ledger``: pi's and Claude Code's rule), so a caller that reports the usage of another
request steers every later decision. Two mistakes a library loop makes, each silent until now:

- usage *over* what was sent: a recorded transcript's usage fed back while the engine sent its
  own projection, or a system prompt and tool definitions sent but never given to ``bootstrap``.
  The engine then takes its context for that much bigger, and the overflow guard drops the
  history to make room that is already there (the README's loop fed its recorded session's usage
  at a 32,000-token window: from its 14th message on, every call sent 2 to 7 messages);
- usage *under* what was sent: Anthropic's ``input_tokens`` alone, without the cache reads and
  writes (``Usage.cache_read_tokens`` / ``cache_write_tokens``: ``anthropic_usage`` fills them).
  The engine then takes its context for smaller than it is, and the provider refuses the request
  that outgrows the window.

``UsageGapCheck.check`` compares each report with the ledger's prediction for the projection the
engine assembled last (the same figure ``Projection.tokens`` gave). A report over twice the
prediction or under half of it (a gap over ``GAP_SHARE`` of the larger figure), by at least
``GAP_MIN_TOKENS``, is counted (``gaps``) and, the first time in a session, warned about
(``UsageGapWarning``). The engine still anchors on the report: the provider's count is right when
content the engine does not see was really sent (a server-side conversation state, a harness's
hidden prompt), and an engine that disbelieved it would overflow then. A tokenizer's error is
under that share once anchored (the prediction is the last report plus the scaled growth); the
replay of the shared corpus (policies default, claude-code and recorded, at each model's window
and at 64,000 tokens) checks 20,646 reports and finds no gap.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass

GAP_SHARE = 0.5  # a report over twice the prediction, or under half, is not a tokenizer's error
GAP_MIN_TOKENS = 2_000  # ... nor is any gap under this many tokens worth a warning


class UsageGapWarning(UserWarning):
    """The provider's reported input differs from what the engine assembled by more than a
    tokenizer's error (``engine.usage_gap``)."""


@dataclass
class UsageGapCheck:
    """One session's check of reported usage against the request the engine assembled.

    Attributes:
        predicted: the ledger's prediction for the latest projection (``Projection.tokens``,
            tokens), set by ``assemble``; None once a report was checked against it (a report
            with no projection assembled since is not checked).
        gaps: reports that differed by more than ``GAP_SHARE`` (and ``GAP_MIN_TOKENS``).
        warn: whether the first gap is warned about (False: only counted; the replay's usage is
            simulated from the recorded run's, so a gap there is the recording's, not a caller's).
    """

    predicted: int | None = None
    gaps: int = 0
    warn: bool = True

    def check(self, reported: int) -> bool:
        """Whether ``reported`` (the provider's total input, tokens) is a gap from ``predicted``.
        Counts it and, the first time, warns (``UsageGapWarning``, naming both figures and the
        likely cause)."""
        predicted, self.predicted = self.predicted, None
        if predicted is None:
            return False
        gap = reported - predicted
        if abs(gap) < GAP_MIN_TOKENS or abs(gap) <= GAP_SHARE * max(reported, predicted):
            return False
        self.gaps += 1
        if self.warn and self.gaps == 1:
            warnings.warn(UsageGapWarning(_message(reported, predicted)), stacklevel=3)
        return True


def _message(reported: int, predicted: int) -> str:
    if reported > predicted:
        cause = (
            "content the engine was not given (a system prompt or tool definitions: pass them to "
            "bootstrap) or the usage of another request (e.g. a recorded transcript's)"
        )
    else:
        cause = (
            "usage without its prompt-cache reads and writes (Anthropic's input_tokens alone: "
            "use anthropic_usage, or set Usage.cache_read_tokens / cache_write_tokens) or the "
            "usage of another request"
        )
    return (
        f"the provider reported {reported:,} input tokens for a request the engine assembled at "
        f"{predicted:,}: {cause}. The engine counts its context from the report all the same; "
        "pass after_turn the usage of the call that sent the engine's projection"
    )
