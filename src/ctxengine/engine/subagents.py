"""Sub-agent spawning, a part of ``ContextEngine`` (OpenClaw's ``prepareSubagentSpawn`` /
``onSubagentEnded``): ``SubagentSpawner``, the work itself in ``ctxengine.subagents.spawn``."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ctxengine.engine.view import EngineView
    from ctxengine.layers.base import LayerEvent
    from ctxengine.subagents.host import Engine
    from ctxengine.subagents.spawn import SubagentContext, SubagentResult
    from ctxengine.subagents.spec import AgentSpec, SpawnMode


class SubagentSpawner:
    """``prepare_subagent_spawn`` and ``on_subagent_ended``: a session's sub-agents.

    Args:
        engine: the session's engine (the parent of its sub-agents).
        view: its projection (a ``fork`` sub-agent starts from it).
    """

    def __init__(self, engine: Engine, view: EngineView) -> None:
        self.engine = engine
        self.view = view

    def prepare_subagent_spawn(
        self,
        spec: AgentSpec,
        prompt: str,
        *,
        mode: SpawnMode | None = None,
        call_id: str | None = None,
        workspace: Path | None = None,
        ttl_s: float | None = None,
    ) -> SubagentContext:
        """Prepare a sub-agent of this session for ``prompt`` (OpenClaw's ``prepareSubagentSpawn``).

        The sub-agent gets its own engine, ``isolated`` (its system prompt, allow-listed
        instruction files, the prompt alone) or ``fork`` (this projection as a cache-sharing
        prefix, open calls closed).

        Args:
            spec: the sub-agent's definition.
            prompt: the task delegated to it.
            mode: "isolated" or "fork" (None: ``spec.mode``).
            call_id: the tool call it answers, if any.
            workspace: where its skills and instruction files are read.
            ttl_s: seconds after which a sub-agent never ended is swept (None: never).

        Returns:
            The prepared ``SubagentContext``: its engine, bootstrapped with the initial messages
            ingested, and what its calls need.

        Raises:
            SubagentDepthError: past ``spec.max_depth`` (nothing is done).
            SpawnError: when the prompt is empty or a step fails (everything rolled back).
        """
        from ctxengine.subagents.spawn import prepare_spawn

        return prepare_spawn(
            self.engine,
            self.view.messages,
            spec,
            prompt,
            mode=mode,
            call_id=call_id,
            workspace=workspace,
            ttl_s=ttl_s,
        )

    def on_subagent_ended(self, result: SubagentResult) -> list[LayerEvent]:
        """Take back a sub-agent's final report and the files it read, then dispose of it.

        Nothing else of its history comes back: the report (capped at ``report_max_tokens``) and
        the files read are ingested as the result of the call that spawned it (or a notice).

        Args:
            result: what the sub-agent hands back.

        Returns:
            The events of ingesting the report into this session.

        Raises:
            SubagentError: for a sub-agent that is not live or not this session's.
        """
        from ctxengine.subagents.spawn import end_subagent

        return end_subagent(self.engine, result)
