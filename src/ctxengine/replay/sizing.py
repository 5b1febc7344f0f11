"""Size the call: the session's fixed prefix and window, and the tokens each call sends.

The engine track's size at call k is the fixed prefix plus the projection's estimate in the
recorded call's own units: ``fixed + estimate(projection) x (recorded_total - fixed) /
estimate(recorded context)``, so the recorded context replays at exactly its recorded size and a
smaller projection shrinks in proportion (never below the fixed prefix). When the recorded total
disagrees with the transcript's estimate by more than ``ANCHOR_TOLERANCE`` of it, the ledger's
learned scale is used instead (``_units``). Pure functions over messages and counts. Tokens.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, NamedTuple

from ctxengine.messages.model import Message, Session
from ctxengine.models.registry import ModelInfo, Registry, resolve_window, window_above_model
from ctxengine.replay.records import ANCHOR_TOLERANCE, RESPONSE_ROOM_TOKENS, PrefixTooLargeError
from ctxengine.tokens.counter import TokenCounter

if TYPE_CHECKING:
    from ctxengine.engine.core import Projection


class _Counts:
    """Token estimates per message, cached by object identity."""

    def __init__(self, counter: TokenCounter) -> None:
        self.counter = counter
        self._cache: dict[int, tuple[Message, int]] = {}

    def __call__(self, msg: Message) -> int:
        hit = self._cache.get(id(msg))
        if hit is not None and hit[0] is msg:
            return hit[1]
        n = self.counter.count_message(msg)
        self._cache[id(msg)] = (msg, n)
        return n


def is_call(msg: Message) -> bool:
    """Whether ``msg`` is a recorded model call (an assistant message the harness did not make up)."""
    return msg.role == "assistant" and not msg.meta.get("synthetic")


def infer_fixed_prefix(
    session: Session, count: Callable[[Message], int], count_text: Callable[[str], int]
) -> int:
    """Tokens of system prompt + tool definitions: the first recorded usage minus our estimate of
    the messages before that call (``count``: tokens of a message). Falls back to counting
    ``session.system`` (``count_text``)."""
    est = 0
    for msg in session.messages:
        if is_call(msg) and msg.usage is not None and msg.usage.total_input > 0:
            return max(0, msg.usage.total_input - est)
        if msg.origin not in ("compact_summary", "compact_restore"):
            est += count(msg)
    return count_text(session.system) if session.system else 0


class SessionSize(NamedTuple):
    """The replay's frame: the fixed prefix and the window (tokens), and what to warn about."""

    fixed: int
    window: int
    warnings: list[str]


def size_session(
    session: Session,
    model: ModelInfo,
    registry: Registry,
    window: int | None,
    count: Callable[[Message], int],
    count_text: Callable[[str], int],
) -> SessionSize:
    """The fixed prefix (``infer_fixed_prefix``), the window (``window`` or the model's) and the
    warnings (no known price; a window above the model's).

    Raises ``WindowTooSmallError`` for a window under 16,000 tokens and ``PrefixTooLargeError``
    when the fixed prefix leaves less than ``RESPONSE_ROOM_TOKENS`` of the window.
    """
    warnings: list[str] = []
    if not model.price_known:
        warnings.append(
            f"no known price for model {session.model!r}: priced at fallback rates"
            if session.model
            else "the transcript names no model (give one with --model): priced at fallback rates"
        )

    fixed = infer_fixed_prefix(session, count, count_text)
    resolved_window = resolve_window(model, user_override=window)
    if fixed + RESPONSE_ROOM_TOKENS > resolved_window:
        raise PrefixTooLargeError(session.source, resolved_window, fixed)
    above = window_above_model(resolved_window, model, known=registry.known(session.model or "unknown"))
    if above is not None:
        warnings.append(above)
    return SessionSize(fixed, resolved_window, warnings)


def _units(recorded: int, fixed: int, estimated_content: int, scale: float) -> float:
    """Reported tokens per estimated token of content for the engine track at one call: the
    recorded call's own ratio, ``(recorded - fixed) / estimated_content``; or ``scale`` (the
    ledger's learned ratio) when the recorded total is off ``fixed + estimated_content x scale``
    by more than ``ANCHOR_TOLERANCE`` of it (the recorded context is not the transcript's:
    something unlogged was cleared or added)."""
    expected = fixed + estimated_content * scale
    if (
        estimated_content <= 0
        or recorded <= fixed  # the fixed prefix was inferred larger than this call: no ratio
        or abs(recorded - expected) > ANCHOR_TOLERANCE * recorded
    ):
        return scale
    return (recorded - fixed) / estimated_content


def recorded_input(msg: Message) -> int | None:
    """The call's recorded total input tokens, None when it recorded no usage (or zero)."""
    usage = msg.usage
    return usage.total_input if usage is not None and usage.total_input > 0 else None


def size_call(
    proj: Projection,
    count: Callable[[Message], int],
    *,
    fixed: int,
    recorded: int | None,
    recorded_estimate: int,
    scale: float,
) -> tuple[list[int], int]:
    """The tokens of each projected message (``count``) and the tokens the call sends: with a
    recorded total, ``fixed`` plus the projection in the recorded call's units (``_units`` over
    ``recorded_estimate``, the transcript's estimate of the recorded context, and the ledger's
    ``scale``); without one, the engine's own prediction (``proj.tokens``)."""
    p_tok = [count(m) for m in proj.messages]
    if recorded is not None:
        sent = fixed + max(0, round(sum(p_tok) * _units(recorded, fixed, recorded_estimate, scale)))
    else:
        sent = proj.tokens
    return p_tok, sent


def output_tokens(msg: Message, count: Callable[[Message], int]) -> int:
    """The call's output tokens: recorded, else our estimate of the message (``count``)."""
    usage = msg.usage
    return usage.output_tokens if usage is not None and usage.output_tokens else count(msg)
