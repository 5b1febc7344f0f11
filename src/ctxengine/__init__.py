"""ctxengine: context-window management for LLM agents.

The public API, importable from the package itself::

    from ctxengine import ContextEngine, get_policy, load, replay_session, to_anthropic

- ``ContextEngine``: one conversation's engine (``bootstrap``, ``ingest``, ``assemble``,
  ``compact``, ``after_turn``, ``retrieve``).
- ``Policy`` and the built-in policies: ``DEFAULT`` (ours), ``NONE``, ``RECORDED``; the presets
  of other harnesses by name through ``get_policy`` (``"claude-code"``, ``"openclaw"``,
  ``"pi"``, ``"letta"``); their definitions are in the module ``ctxengine.presets``.
- The neutral message model: ``Message`` and its blocks ``Text``, ``Thinking``, ``ToolCall``,
  ``ToolResult``, ``Image``, ``Document``; ``Usage``; ``Session`` (what a reader returns).
- ``load(path)``: read any transcript format the project knows (Claude Code, Codex,
  mini-swe-agent / SWE-agent, OpenAI chat) into sessions.
- ``replay_session``: replay a recorded session under a policy and window.
- ``to_anthropic`` / ``to_openai_chat``: write messages as a provider's request.

Names are imported on first use (PEP 562), so ``import ctxengine`` (and the CLI) stays light.
"""

from __future__ import annotations

import importlib
from importlib.metadata import PackageNotFoundError, version
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ctxengine.engine import ContextEngine
    from ctxengine.formats import load
    from ctxengine.formats.anthropic_writer import to_anthropic
    from ctxengine.formats.openai_writer import to_openai_chat
    from ctxengine.messages import (
        Document,
        Image,
        Message,
        Session,
        Text,
        Thinking,
        ToolCall,
        ToolResult,
        Usage,
    )
    from ctxengine.policy import DEFAULT, NONE, RECORDED, Policy, get_policy
    from ctxengine.replay import replay_session

try:
    __version__ = version("ctxengine")
except PackageNotFoundError:  # a source tree that was never installed
    __version__ = "0+unknown"

_WHERE = {
    "ContextEngine": "ctxengine.engine",
    "Policy": "ctxengine.policy",
    "DEFAULT": "ctxengine.policy",
    "NONE": "ctxengine.policy",
    "RECORDED": "ctxengine.policy",
    "get_policy": "ctxengine.policy",
    "Message": "ctxengine.messages",
    "Text": "ctxengine.messages",
    "Thinking": "ctxengine.messages",
    "ToolCall": "ctxengine.messages",
    "ToolResult": "ctxengine.messages",
    "Image": "ctxengine.messages",
    "Document": "ctxengine.messages",
    "Usage": "ctxengine.messages",
    "Session": "ctxengine.messages",
    "load": "ctxengine.formats",
    "replay_session": "ctxengine.replay",
    "to_anthropic": "ctxengine.formats.anthropic_writer",
    "to_openai_chat": "ctxengine.formats.openai_writer",
}

__all__ = [
    "DEFAULT",
    "NONE",
    "RECORDED",
    "ContextEngine",
    "Document",
    "Image",
    "Message",
    "Policy",
    "Session",
    "Text",
    "Thinking",
    "ToolCall",
    "ToolResult",
    "Usage",
    "__version__",
    "get_policy",
    "load",
    "replay_session",
    "to_anthropic",
    "to_openai_chat",
]


def __getattr__(name: str) -> Any:
    """Import a public name on first use. Raises ``AttributeError`` for any other name."""
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module 'ctxengine' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *_WHERE])
