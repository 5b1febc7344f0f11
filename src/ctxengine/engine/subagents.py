"""Sub-agent spawning, a part of ``ContextEngine`` (OpenClaw's ``prepareSubagentSpawn`` /
``onSubagentEnded``): ``SubagentSpawner``, the work itself in ``ctxengine.subagents.spawn``."""

from __future__ import annotations

import sys
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
        """``ContextEngine.prepare_subagent_spawn`` (documented there).

        The sub-agent gets its own engine, ``isolated`` (its system prompt, allow-listed
        instruction files, the prompt alone) or ``fork`` (this projection as a cache-sharing
        prefix, open calls closed).
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
        """``ContextEngine.on_subagent_ended`` (documented there).

        Nothing else of its history comes back: the report (capped at ``report_max_tokens``) and
        the files read are ingested as the result of the call that spawned it (or a notice).
        """
        from ctxengine.subagents.spawn import end_subagent

        return end_subagent(self.engine, result)

    def release_children(self) -> list[str]:
        """End the session's live sub-agents (it is being disposed; ``spawn.release_children``):
        their ids. None was spawned when ``ctxengine.subagents.spawn``, where every spawn is
        made and registered, was never imported; a session without sub-agents (a replay) does
        not import it then (~8 ms)."""
        spawn = sys.modules.get("ctxengine.subagents.spawn")
        return [] if spawn is None else list(spawn.release_children(self.engine))
