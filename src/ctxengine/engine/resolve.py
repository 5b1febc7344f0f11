"""What every engine resolves first (``ContextEngine``, ``HistoryEngine``): the model registry, the
model's entry, the window and the token counter."""

from __future__ import annotations

from ctxengine.models.registry import ModelInfo, Registry, check_model_window, check_window, resolve_window
from ctxengine.tokens.counter import TokenCounter, counter_for


def resolve_model(
    model: str | None,
    *,
    window: int | None = None,
    agent_cap: int | None = None,
    registry: Registry | None = None,
    counter: TokenCounter | None = None,
) -> tuple[Registry, ModelInfo, int, TokenCounter]:
    """What every engine resolves first: the registry (default: the shipped one), the model's
    entry (the flagged fallback when unknown), the window in tokens (user override > model >
    200,000, then min with ``agent_cap``) and the token counter (default: the model's).
    Raises ``WindowTooSmallError`` under 16,000 tokens; warns (``WindowWarning``) under 32,000,
    and (``ModelWindowWarning``) above the known model's own window."""
    reg = registry or Registry.default()
    info = reg.get(model or "unknown")
    resolved = resolve_window(info, user_override=window, agent_cap=agent_cap)
    check_window(resolved)
    check_model_window(resolved, info, known=reg.known(model or "unknown"))
    return reg, info, resolved, counter or counter_for(info)
