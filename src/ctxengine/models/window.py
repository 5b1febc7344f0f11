"""Context window resolution and its guard, after OpenClaw's ``src/agents/context-window-guard.ts``
(``shared/reference/openclaw.md`` section 3): user override > model window > 200,000 default,
then the agent cap applied last via ``min``; block below 16,000 tokens, warn below 32,000; warn
too when a window is set above the known model's own. Tokens.
"""

from __future__ import annotations

import warnings
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ctxengine.models.info import ModelInfo

MIN_WINDOW_TOKENS = 16_000  # OpenClaw CONTEXT_WINDOW_HARD_MIN_TOKENS: block a run below this
WARN_WINDOW_TOKENS = 32_000  # OpenClaw CONTEXT_WINDOW_WARN_BELOW_TOKENS: warn below this
DEFAULT_WINDOW_TOKENS = 200_000  # OpenClaw's fallback default window; also Claude's window


class WindowTooSmallError(ValueError):
    """The resolved context window is below ``MIN_WINDOW_TOKENS`` (16,000 tokens): too small to
    run an agent (OpenClaw blocks the run)."""

    def __init__(self, tokens: int) -> None:
        super().__init__(
            f"context window of {tokens:,} tokens is below the minimum of {MIN_WINDOW_TOKENS:,} tokens"
        )
        self.tokens = tokens

    def __reduce__(self) -> tuple[type, tuple[int]]:
        """Pickled by its arguments (a worker process hands it back to the parent whole)."""
        return (type(self), (self.tokens,))


class ReserveTooLargeError(WindowTooSmallError):
    """The overflow guard's reserve (``[overflow_guard] reserve``, tokens kept free for the
    response) is half the window or more: the guard would cut every request to (almost) nothing.
    A ``WindowTooSmallError`` whose message names the setting."""

    def __init__(self, tokens: int, reserve: int) -> None:
        ValueError.__init__(
            self,
            f"the overflow guard's reserve ([overflow_guard] reserve) of {reserve:,} tokens is half "
            f"the {tokens:,}-token window or more: give a reserve under {tokens // 2:,} tokens or a "
            "larger window",
        )
        self.tokens = tokens
        self.reserve = reserve

    def __reduce__(self) -> tuple[type, tuple[int, int]]:  # type: ignore[override]
        """Pickled by its arguments (a worker process hands it back to the parent whole)."""
        return (type(self), (self.tokens, self.reserve))


class WindowWarning(UserWarning):
    """Warning category for a context window below ``WARN_WINDOW_TOKENS`` (32,000 tokens)."""


def resolve_window(
    model: ModelInfo | None,
    *,
    user_override: int | None = None,
    agent_cap: int | None = None,
    default: int = DEFAULT_WINDOW_TOKENS,
) -> int:
    """The context window to budget against, in tokens.

    First of: ``user_override``, the model's input window (``ModelInfo.input_window``, i.e.
    ``max_input`` when set, else ``context_window``), ``default``. Then ``agent_cap`` is applied
    last and can only lower it (``min``), as OpenClaw's ``agents.defaults.contextTokens`` does.
    The result is not guarded: pass it to ``check_window``. Raises ``ValueError`` for a
    non-positive override, cap or default (a configuration error).
    """
    for label, value in (("user_override", user_override), ("agent_cap", agent_cap), ("default", default)):
        if value is not None and value <= 0:
            raise ValueError(f"{label} must be a positive number of tokens, got {value}")
    if user_override is not None:
        window = user_override
    elif model is not None:
        window = model.input_window
    else:
        window = default
    if agent_cap is not None:
        window = min(window, agent_cap)
    return window


def check_window(tokens: int) -> str | None:
    """Guard a resolved window (tokens), as OpenClaw does before a run.

    Raises ``WindowTooSmallError`` below ``MIN_WINDOW_TOKENS`` (16,000; OpenClaw ``shouldBlock``).
    Below ``WARN_WINDOW_TOKENS`` (32,000; ``shouldWarn``) it emits a ``WindowWarning`` and returns
    the warning text; otherwise returns None. Unlike OpenClaw, which treats 0 as "unknown" and
    lets it pass, a window of 0 or less is blocked: ``resolve_window`` never yields one.
    """
    if tokens < MIN_WINDOW_TOKENS:
        raise WindowTooSmallError(tokens)
    if tokens < WARN_WINDOW_TOKENS:
        message = (
            f"context window of {tokens:,} tokens is below {WARN_WINDOW_TOKENS:,} tokens: "
            "expect frequent compaction"
        )
        warnings.warn(message, WindowWarning, stacklevel=2)
        return message
    return None


class ModelWindowWarning(UserWarning):
    """Warning category for a window set above the model's own context window."""


def window_above_model(tokens: int, model: ModelInfo, *, known: bool) -> str | None:
    """The warning text when a window of ``tokens`` (e.g. ``--window 200000``) is above the
    known model's own input window (``ModelInfo.input_window``, e.g. 128,000 for gpt-4o):
    requests the engine lets grow past the model's window would be refused by the provider.
    None when it is not, or the model is unknown (its window is a default, not a fact)."""
    if not known or tokens <= model.input_window:
        return None
    return (
        f"window of {tokens:,} tokens is above {model.name}'s own context window of "
        f"{model.input_window:,} tokens: requests over {model.input_window:,} would be refused"
    )


def check_model_window(tokens: int, model: ModelInfo, *, known: bool) -> str | None:
    """``window_above_model``, emitted as a ``ModelWindowWarning`` (returns the text)."""
    message = window_above_model(tokens, model, known=known)
    if message is not None:
        warnings.warn(message, ModelWindowWarning, stacklevel=2)
    return message
