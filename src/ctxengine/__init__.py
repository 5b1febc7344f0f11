"""ctxengine: context-window management for LLM agents.

The public API, importable from the package itself::

    from ctxengine import ContextEngine, get_policy, load, replay_session, to_anthropic

- ``ContextEngine``: one conversation's engine (``bootstrap``, ``ingest``, ``assemble``,
  ``compact``, ``after_turn``, ``retrieve``).
- ``Policy`` and the built-in policies: ``DEFAULT`` (ours), ``NONE``, ``RECORDED``; the presets
  of other harnesses by name through ``get_policy`` (``"claude-code"``, ``"openclaw"``,
  ``"pi"``, ``"letta"``); their definitions are in the module ``ctxengine.policy.harnesses``.
- The neutral message model: ``Message`` and its blocks ``Text``, ``Thinking``, ``ToolCall``,
  ``ToolResult``, ``Image``, ``Document``; ``Usage``; ``Session`` (what a reader returns).
- ``load(path)``: read any transcript format the project knows (Claude Code, Codex,
  mini-swe-agent / SWE-agent, OpenAI chat) into sessions.
- ``replay_session``: replay a recorded session under a policy and window.
- ``to_anthropic`` / ``to_openai_chat``: write messages as a provider's request.
- Policy settings, one record per layer (validated when built; ``Policy.compose(...)`` and
  ``policy.with_(...)`` take them, ``policy.settings(Record)`` returns one): ``ToolResultBudget``,
  ``ClearedResults``, ``IdleClear``, ``TtlPrune``, ``CacheClear``, ``EvictionSettings``,
  ``OverflowGuard``, ``PromptCache``; the compaction's ``CompactionSettings``,
  ``SummarySettings``, ``SlidingWindow``, ``HistoryShare``, ``SessionNotes``, ``SessionMemory``,
  ``MemoryFlush``, ``MemoryWarning``, ``Restore``.
- Building an agent loop: ``Projection`` (what ``assemble`` returns), ``Block``, ``SQLiteStore``
  (sessions on disk), ``make_client`` / ``ToolDefinition`` (an LLM client),
  ``anthropic_usage`` / ``normalise_usage`` (a provider's usage as ``Usage``), ``usage_cost_usd``
  and ``Registry`` (prices in USD per MTok, windows in tokens), ``counter_for`` (a token counter),
  ``build_tools`` / ``load_bootstrap`` (ctxengine's agent tools and instruction files).
- Gateways: ``SessionKey``, ``SessionKeyError``, ``HistoryLimits``.
- Sub-agents: ``AgentSpec``, ``EXPLORE``, ``explore_for``, ``run_subagent``, ``task_tool``,
  ``SubagentResult``, ``SubagentError``.
- Framework integrations (need the ``all`` extra): ``ContextEngineMiddleware`` (LangChain),
  ``EngineSession`` (OpenAI Agents SDK), ``ContextEngineProcessor`` (PydanticAI).

Names are imported on first use (PEP 562), so ``import ctxengine`` (and the CLI) stays light.
"""

from __future__ import annotations

import importlib

# typing.TYPE_CHECKING without importing typing (which ``import ctxengine`` would otherwise pay
# for, with the ``re`` and ``collections`` it imports); type checkers treat this name alike
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from ctxengine.engine.core import ContextEngine, Projection
    from ctxengine.formats import load
    from ctxengine.formats.anthropic_writer import to_anthropic
    from ctxengine.formats.openai_writer import to_openai_chat
    from ctxengine.integrations.langchain import ContextEngineMiddleware
    from ctxengine.integrations.openai_agents import EngineSession
    from ctxengine.integrations.pydantic_ai import ContextEngineProcessor
    from ctxengine.llm import ToolDefinition, make_client
    from ctxengine.llm.anthropic_client import anthropic_usage
    from ctxengine.llm.openai_client import normalise_usage
    from ctxengine.messages.model import (
        Block,
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
    from ctxengine.models.registry import Registry, usage_cost_usd
    from ctxengine.policy.compaction_settings import (
        CompactionSettings,
        HistoryShare,
        MemoryFlush,
        MemoryWarning,
        Restore,
        SessionMemory,
        SessionNotes,
        SlidingWindow,
        SummarySettings,
    )
    from ctxengine.policy.layer_settings import (
        CacheClear,
        ClearedResults,
        EvictionSettings,
        IdleClear,
        OverflowGuard,
        PromptCache,
        ToolResultBudget,
        TtlPrune,
    )
    from ctxengine.policy.registry import DEFAULT, NONE, RECORDED, Policy, get_policy
    from ctxengine.policy.session_keys import HistoryLimits, SessionKey, SessionKeyError
    from ctxengine.replay import replay_session
    from ctxengine.store import SQLiteStore
    from ctxengine.subagents.runner import run_subagent, task_tool
    from ctxengine.subagents.spawn import SubagentResult
    from ctxengine.subagents.spec import EXPLORE, AgentSpec, SubagentError, explore_for
    from ctxengine.tokens.counter import counter_for
    from ctxengine.tools.bootstrap import load_bootstrap
    from ctxengine.tools.registry import build_tools

_WHERE = {
    "ContextEngine": "ctxengine.engine.core",
    "Policy": "ctxengine.policy.registry",
    "DEFAULT": "ctxengine.policy.registry",
    "NONE": "ctxengine.policy.registry",
    "RECORDED": "ctxengine.policy.registry",
    "get_policy": "ctxengine.policy.registry",
    "Message": "ctxengine.messages.model",
    "Text": "ctxengine.messages.model",
    "Thinking": "ctxengine.messages.model",
    "ToolCall": "ctxengine.messages.model",
    "ToolResult": "ctxengine.messages.model",
    "Image": "ctxengine.messages.model",
    "Document": "ctxengine.messages.model",
    "Usage": "ctxengine.messages.model",
    "Session": "ctxengine.messages.model",
    "load": "ctxengine.formats",
    "replay_session": "ctxengine.replay",
    "to_anthropic": "ctxengine.formats.anthropic_writer",
    "to_openai_chat": "ctxengine.formats.openai_writer",
    "Projection": "ctxengine.engine.core",
    "Block": "ctxengine.messages.model",
    "Registry": "ctxengine.models.registry",
    "usage_cost_usd": "ctxengine.models.registry",
    "counter_for": "ctxengine.tokens.counter",
    "SQLiteStore": "ctxengine.store",
    "HistoryLimits": "ctxengine.policy.session_keys",
    "SessionKey": "ctxengine.policy.session_keys",
    "SessionKeyError": "ctxengine.policy.session_keys",
    "ToolDefinition": "ctxengine.llm",
    "make_client": "ctxengine.llm",
    "anthropic_usage": "ctxengine.llm.anthropic_client",
    "normalise_usage": "ctxengine.llm.openai_client",
    "build_tools": "ctxengine.tools.registry",
    "load_bootstrap": "ctxengine.tools.bootstrap",
    "AgentSpec": "ctxengine.subagents.spec",
    "EXPLORE": "ctxengine.subagents.spec",
    "SubagentError": "ctxengine.subagents.spec",
    "explore_for": "ctxengine.subagents.spec",
    "SubagentResult": "ctxengine.subagents.spawn",
    "run_subagent": "ctxengine.subagents.runner",
    "task_tool": "ctxengine.subagents.runner",
    "ContextEngineMiddleware": "ctxengine.integrations.langchain",
    "EngineSession": "ctxengine.integrations.openai_agents",
    "ContextEngineProcessor": "ctxengine.integrations.pydantic_ai",
    "ToolResultBudget": "ctxengine.policy.layer_settings",
    "ClearedResults": "ctxengine.policy.layer_settings",
    "IdleClear": "ctxengine.policy.layer_settings",
    "TtlPrune": "ctxengine.policy.layer_settings",
    "CacheClear": "ctxengine.policy.layer_settings",
    "EvictionSettings": "ctxengine.policy.layer_settings",
    "OverflowGuard": "ctxengine.policy.layer_settings",
    "PromptCache": "ctxengine.policy.layer_settings",
    "CompactionSettings": "ctxengine.policy.compaction_settings",
    "SummarySettings": "ctxengine.policy.compaction_settings",
    "SlidingWindow": "ctxengine.policy.compaction_settings",
    "HistoryShare": "ctxengine.policy.compaction_settings",
    "SessionNotes": "ctxengine.policy.compaction_settings",
    "SessionMemory": "ctxengine.policy.compaction_settings",
    "MemoryFlush": "ctxengine.policy.compaction_settings",
    "MemoryWarning": "ctxengine.policy.compaction_settings",
    "Restore": "ctxengine.policy.compaction_settings",
}

__all__ = [
    "DEFAULT",
    "EXPLORE",
    "NONE",
    "RECORDED",
    "AgentSpec",
    "Block",
    "CacheClear",
    "ClearedResults",
    "CompactionSettings",
    "ContextEngine",
    "ContextEngineMiddleware",
    "ContextEngineProcessor",
    "Document",
    "EngineSession",
    "EvictionSettings",
    "HistoryLimits",
    "HistoryShare",
    "IdleClear",
    "Image",
    "MemoryFlush",
    "MemoryWarning",
    "Message",
    "OverflowGuard",
    "Policy",
    "Projection",
    "PromptCache",
    "Registry",
    "Restore",
    "SQLiteStore",
    "Session",
    "SessionKey",
    "SessionKeyError",
    "SessionMemory",
    "SessionNotes",
    "SlidingWindow",
    "SubagentError",
    "SubagentResult",
    "SummarySettings",
    "Text",
    "Thinking",
    "ToolCall",
    "ToolDefinition",
    "ToolResult",
    "ToolResultBudget",
    "TtlPrune",
    "Usage",
    "__version__",
    "anthropic_usage",
    "build_tools",
    "counter_for",
    "explore_for",
    "get_policy",
    "load",
    "load_bootstrap",
    "make_client",
    "normalise_usage",
    "replay_session",
    "run_subagent",
    "task_tool",
    "to_anthropic",
    "to_openai_chat",
    "usage_cost_usd",
]


def _version() -> str:
    """The installed distribution's version; "0+unknown" for a source tree never installed.
    Read on first use: ``importlib.metadata`` costs ~40 ms to import, a third of what a one-shot
    ``ctxengine tool grep`` otherwise imports."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("ctxengine")
    except PackageNotFoundError:
        return "0+unknown"


def __getattr__(name: str) -> Any:
    """Import a public name on first use. Raises ``AttributeError`` for any other name."""
    if name == "__version__":
        globals()[name] = value = _version()
        return value
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module 'ctxengine' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_WHERE, "__version__"})
