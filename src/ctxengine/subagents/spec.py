"""Typed sub-agent definitions and the errors a spawn can raise.

A sub-agent is a context-isolation tool: the work it does (searches, reads, dead ends) stays in
its own context and only its final report comes back to the parent (Claude Code's Explore and
Task agents, OpenClaw's ``prepareSubagentSpawn``, pi's sub-agent extension). ``AgentSpec`` is the
definition a host registers, after Claude Code's agent files: a name, the model, the tools it may
call, how deep it may be spawned, how many turns it may take, skills preloaded whole, the
workspace instruction files it sees (OpenClaw's minimal allowlist, ``AGENTS.md`` and
``TOOLS.md``), and a cap on the report it hands back (tokens).

``EXPLORE`` is Claude Code's Explore agent: read-only tools (``read``, ``grep``, ``glob``,
``search``), a cheap model, no sub-agents of its own (``max_depth=1``: only the main agent may
spawn it), and a report capped at 2,000 tokens.
"""

from __future__ import annotations

from typing import Literal

import msgspec

SpawnMode = Literal["isolated", "fork"]
EndReason = Literal["completed", "deleted", "swept", "released"]  # OpenClaw's onSubagentEnded reasons

DEFAULT_INSTRUCTION_FILES: tuple[str, ...] = ("AGENTS.md", "TOOLS.md")  # OpenClaw's sub-agent allowlist
READ_ONLY_TOOLS: tuple[str, ...] = ("read", "grep", "glob", "search")
CHEAP_MODELS = {"anthropic": "claude-haiku-4-5", "openai": "gpt-4o-mini"}  # Claude Code: Haiku for Explore
EXPLORE_REPORT_TOKENS = 2_000
EXPLORE_SYSTEM = (
    "You are a read-only search agent. Find what the task asks for in the workspace with the "
    "read, grep, glob and search tools; you cannot edit files or start other agents. When you are "
    "done, answer with a concise report: the facts found, each with the exact file path (and line) "
    "it comes from, and the paths you read. Your report is all the caller will see."
)


class SubagentError(Exception):
    """A sub-agent operation was refused or failed (the parent is unchanged)."""


class SubagentDepthError(SubagentError):
    """The spawn would nest sub-agents deeper than the definition's ``max_depth``."""


class SpawnError(SubagentError):
    """A spawn failed while it was being prepared; everything it had done was rolled back."""


class AgentSpec(msgspec.Struct, frozen=True, kw_only=True):
    """A sub-agent definition, after Claude Code's agent files.

    Attributes:
        name: the agent's name (required).
        system_prompt: its system prompt in ``isolated`` mode.
        model: the model of its calls in ``isolated`` mode (None: the parent's); a ``fork`` always
            uses the parent's model, whose prompt cache it reads.
        tools: the tool names it may call (an allowlist; ``()`` allows none).
        max_depth: the deepest nesting level it may run at (1: spawned by a main agent only; 2:
            also by a sub-agent of depth 1).
        max_turns: model calls it may make.
        skills: workspace-relative paths of skill files preloaded whole into its system prompt (a
            missing one fails the spawn).
        instruction_files: the workspace instruction files it sees (absent ones are left out;
            OpenClaw's allowlist ``AGENTS.md``, ``TOOLS.md`` by default).
        report_max_tokens: the report that reaches the parent is cut to this many tokens (the
            full text stays in the parent's artifact store).
        mode: the default spawn mode, "isolated" or "fork".

    Raises:
        ValueError: at construction, for an empty name or a ``max_depth``, ``max_turns`` or
            ``report_max_tokens`` under 1.
    """

    name: str
    system_prompt: str = "You are a sub-agent. Do the task you are given and report the result concisely."
    model: str | None = None
    tools: tuple[str, ...] = READ_ONLY_TOOLS
    max_depth: int = 1
    max_turns: int = 20
    skills: tuple[str, ...] = ()
    instruction_files: tuple[str, ...] = DEFAULT_INSTRUCTION_FILES
    report_max_tokens: int = 4_000
    mode: SpawnMode = "isolated"

    def __post_init__(self) -> None:
        if not self.name:
            raise ValueError("an agent definition needs a name")
        for field in ("max_depth", "max_turns", "report_max_tokens"):
            value = getattr(self, field)
            if value < 1:
                raise ValueError(f"agent {self.name!r}: {field} must be at least 1, not {value}")

    def with_(self, **changes: object) -> AgentSpec:
        """A copy with ``changes`` applied (e.g. the cheap model of a provider), validated again.

        Args:
            **changes: new values by field name.

        Returns:
            The new definition.

        Raises:
            TypeError: for a name that is not a field.
            ValueError: for a value out of range.
        """
        return msgspec.structs.replace(self, **changes)


EXPLORE = AgentSpec(
    name="explore",
    system_prompt=EXPLORE_SYSTEM,
    model=CHEAP_MODELS["anthropic"],
    tools=READ_ONLY_TOOLS,
    max_depth=1,
    max_turns=15,
    report_max_tokens=EXPLORE_REPORT_TOKENS,
)
"""Claude Code's Explore agent: read-only, cheap (Haiku; ``explore_for("openai")`` for
gpt-4o-mini), never spawns sub-agents, report capped at 2,000 tokens."""


def explore_for(provider: str, model: str | None = None) -> AgentSpec:
    """Claude Code's Explore agent (``EXPLORE``) for one provider.

    Args:
        provider: "anthropic" (Haiku) or "openai" (gpt-4o-mini), whose cheap model it takes.
        model: the model to use instead (None: the provider's cheap model).

    Returns:
        ``EXPLORE`` with that model.

    Raises:
        KeyError: for another provider without a model.
    """
    return EXPLORE.with_(model=model or CHEAP_MODELS[provider])
