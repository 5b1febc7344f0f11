"""The error every tool raises to refuse or fail, in a module of its own so that a one-shot tool
(``ctxengine tool grep``) can raise it without importing the tool registry (``tools.base`` and
its dataclasses, ~8 ms of a ~130 ms search)."""

from __future__ import annotations

__all__ = ["ToolError"]


class ToolError(Exception):
    """A refusal or failure, with a message meant for the model (what went wrong, what to do)."""
