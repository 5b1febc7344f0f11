"""The measures of one replay behind one interface, wherever they run.

The replay's measures (``replay.measures``: reference recall, content fidelity, the request
body's validity) follow the session in transcript order and never touch the engine: they see each
message the agent saw (``observe``) and, at each call, the recorded output and what the policy
sent (``measure``). Their figures are read once the session is over (``results``): one
``CallMeasures`` per call, in order, and the fidelity meter's ``FidelityTotals``.

``LocalMeasures`` runs them in this process, as they are called; ``replay.measure_worker``'s
``ForkedMeasures`` runs the same ``LocalMeasures`` in a forked worker process beside the engine
(the same figures: every measure is a deterministic function of what it is fed, in order).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, NamedTuple, Protocol

from ctxengine.eval.fidelity import CallFidelity
from ctxengine.messages.model import Message
from ctxengine.replay.measures import FidelityMeter, Recall, RecallTracker, RequestMeter

if TYPE_CHECKING:
    from ctxengine.engine.core import Projection

__all__ = ["CallMeasures", "FidelityTotals", "LocalMeasures", "MeasureResults", "Measures"]


class CallMeasures(NamedTuple):
    """The measures of one call: reference recall, fidelity, and the request's rule violations
    (0 when requests are not validated)."""

    recall: Recall
    fidelity: CallFidelity
    violations: int


class FidelityTotals(NamedTuple):
    """What the session summary reads from the fidelity meter once the session is over: the
    probed compactions that kept the latest request whole, and shingles by source kind."""

    requests_whole: int
    requests_probed: int
    grounded_by_kind: dict[str, int]
    read_hits_by_kind: dict[str, int]

    @classmethod
    def of(cls, meter: FidelityMeter) -> FidelityTotals:
        """The totals of ``meter`` (copies: the meter may go on)."""
        t = meter.tracker
        return cls(
            meter.requests_whole, meter.requests_probed, dict(t.grounded_by_kind), dict(t.read_hits_by_kind)
        )


class MeasureResults(NamedTuple):
    """Every call's measures, in call order, and the fidelity totals."""

    calls: list[CallMeasures]
    totals: FidelityTotals


class Measures(Protocol):
    """The measures of one replay (see the module docstring)."""

    def observe(self, msg: Message) -> None:
        """``msg`` (a message of the session) was seen by the agent."""

    def measure(self, call: Message, proj: Projection) -> None:
        """The recorded call ``call`` (a message of the session) was answered from ``proj``."""

    def results(self) -> MeasureResults:
        """The figures of every call measured, and the totals; call once, at the end."""

    def close(self) -> None:
        """Release what the measures hold (a worker process); safe to call more than once."""


class LocalMeasures:
    """The measures run in this process. ``provider`` and ``model_name`` name the request body
    checked (``RequestMeter``; not checked when ``validate`` is False); ``count_text`` counts a
    text's tokens (the fidelity meter's re-fetch charges)."""

    def __init__(
        self, system: str, provider: str, model_name: str, count_text: Callable[[str], int], *, validate: bool
    ) -> None:
        self.recall = RecallTracker()
        self.fidelity = FidelityMeter(system, count_text)
        self.requests = RequestMeter(provider, model_name) if validate else None
        self.calls: list[CallMeasures] = []

    def observe(self, msg: Message) -> None:
        self.recall.observe(msg)
        self.fidelity.observe(msg)

    def measure(self, call: Message, proj: Projection) -> None:
        recall = self.recall.measure(call, proj)
        fid = self.fidelity.measure(call, proj)
        violations = self.requests.violations(proj) if self.requests is not None else 0
        self.calls.append(CallMeasures(recall, fid, violations))

    def results(self) -> MeasureResults:
        return MeasureResults(self.calls, FidelityTotals.of(self.fidelity))

    def close(self) -> None:
        return None
