"""``ContextEngine``: decides, before every model call, what the model sees.

Lifecycle (after OpenClaw's context-engine interface, filled in): ``bootstrap`` once, ``ingest``
every message as it happens, ``assemble`` before every model call (returns the ``Projection``),
``after_turn`` with the provider's usage after it, ``compact`` on demand, ``maintain`` for upkeep,
``dispose`` at the end. The replay drives exactly this interface.

State is append-only: ``history`` holds every ingested message unchanged (and the store has them);
decisions are data (tool results shown differently, frozen per call id; where the projection
restarts and behind which summary). The projection is computed from history and decisions, kept
incrementally: ingesting appends, a decision rebuilds once. A decision that fails leaves the engine
as it was (decisions are computed first, committed after).

The cascade in ``assemble`` runs the steps ``ctxengine.policy.cascade`` names, cheapest first; the
tool-result budget runs on ingest. Session notes are updated after a turn, in line or in the
background (``ContextEngine``). The engine holds the session's state and its parts, one job each
(``view``, ``commits``, ``ingestor``, ``cascade``, ``subagents``; see ``ctxengine.engine``); this
module holds construction, the lifecycle calls and the public calls the parts answer.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ctxengine.compaction import CompactionFailed, Compactor
from ctxengine.engine.cascade import Cascade
from ctxengine.engine.commit import Commits
from ctxengine.engine.ingest import RECORDED_ORIGINS as RECORDED_ORIGINS  # re-exported
from ctxengine.engine.ingest import Ingest
from ctxengine.engine.resolve import resolve_model as resolve_model  # re-exported
from ctxengine.engine.state import take_notes_events
from ctxengine.engine.steps.base import EngineParts
from ctxengine.engine.subagents import SubagentSpawner
from ctxengine.engine.usage_gap import UsageGapCheck
from ctxengine.engine.view import EngineView
from ctxengine.engine.view import Projection as Projection  # re-exported: ``engine.core.Projection``
from ctxengine.layers.base import LayerEvent
from ctxengine.messages.model import Document, Image, Message, RecordedCompaction, Usage
from ctxengine.models.registry import Registry
from ctxengine.models.window import ReserveTooLargeError
from ctxengine.policy.registry import Policy
from ctxengine.store import SessionStore, SQLiteStore
from ctxengine.tokens.counter import TokenCounter
from ctxengine.tokens.ledger import Ledger

if TYPE_CHECKING:
    from ctxengine.llm import LLMClient, ToolDefinition
    from ctxengine.subagents.spawn import SubagentContext, SubagentResult
    from ctxengine.subagents.spec import AgentSpec, SpawnMode

log = logging.getLogger(__name__)  # a child of the engine package's logger


class CompactionError(Exception):
    """A compaction could not be made; the session is unchanged."""


class ContextEngine:
    """The core engine (id ``ctxengine``, owner ``core``): one conversation's context.

    The window resolves as user override > model > 200,000 tokens, then at most ``agent_cap``.

    With ``background_notes``, session-notes updates do not block the agent loop. When the cadence
    fires, ``after_turn`` starts the update on a worker thread over a snapshot (the messages new
    since the last update and a copy of the notes) and returns at once; one update at a time (a
    cadence due while one runs is skipped: the next one catches up, since the notes advance only
    when an update is applied). The outcome is applied on the caller's thread at the next
    ``assemble``, ``compact``, ``after_turn``, ``maintain`` or ``dispose`` if it has finished; where
    the notes are needed (session-memory compaction, the pre-compaction flushes) the engine waits
    for it first (at most the LLM client's timeout, retries included). Its event (layer
    ``session_notes``, with the LLM spend; an ``error`` detail on failure, the notes then
    unchanged) is reported as in line: by ``maintain`` and the next projection's events.
    ``dispose`` applies a finished update and abandons a running one (never waits for it).
    Default (False): in line, the whole update inside ``after_turn`` (the replay uses it: results
    do not depend on thread timing). A ``compactor.notes_runner`` (``proxy.jobs``) replaces the thread.

    Thread safety: the engine itself is single-threaded (call it from one thread). The worker
    only computes new notes from its snapshot (``compaction.run_notes_update``) and returns them;
    it never reads or writes engine or compactor state, which only the caller's thread changes.

    Args:
        policy: the layers' settings (``DEFAULT``, ``get_policy(...)``, ``Policy.compose(...)``).
        model: the model's name, looked up in ``registry`` for window, max output, prices and
            tokenizer (None or unknown: a flagged fallback entry).
        window: overrides the model's context window, tokens.
        agent_cap: caps the window, tokens.
        registry: the model registry (default: the shipped one, ``Registry.default()``).
        store: where entries and artifacts go (default: an in-memory ``SQLiteStore``).
        counter: the token counter (default: the model's, ``counter_for``).
        session_id: the session's id in the store.
        llm: the LLM client of LLM summaries and notes updates (None: the $0 structured summary).
        workspace: the agent's working directory, where a compaction's restored files are re-read.
        restore_from_transcript: whether a restored file not on this machine (a replay) takes
            the latest content the session read of it.
        background_notes: whether session-notes updates run on a worker thread (above).

    Raises:
        WindowTooSmallError: when the resolved window is under 16,000 tokens (a
            ``WindowWarning`` under 32,000, a ``ModelWindowWarning`` above the known model's own
            window); ``ReserveTooLargeError`` when the overflow guard's reserve is half of it.
    """

    engine_id = "ctxengine"

    def __init__(
        self,
        policy: Policy,
        *,
        model: str | None = None,
        window: int | None = None,
        agent_cap: int | None = None,
        registry: Registry | None = None,
        store: SessionStore | None = None,
        counter: TokenCounter | None = None,
        session_id: str = "session",
        llm: LLMClient | None = None,
        workspace: Path | None = None,
        restore_from_transcript: bool = False,
        background_notes: bool = False,
    ) -> None:
        self.policy = policy
        self.registry, self.model, self.window, self.counter = resolve_model(
            model, window=window, agent_cap=agent_cap, registry=registry, counter=counter
        )
        if policy.overflow_guard and policy.overflow_reserve * 2 >= self.window:
            raise ReserveTooLargeError(self.window, policy.overflow_reserve)
        self.store: SessionStore = store or SQLiteStore()
        self.session_id = session_id
        self.system = ""
        self.ledger = Ledger()
        self.history: list[Message] = []
        self.recorded: dict[int, RecordedCompaction] = {}
        # decisions
        self.replacements: dict[str, Any] = {}  # call id -> ToolResult shown instead
        self.kept_from = 0  # history index where the projection's verbatim part starts
        self.prefix: list[Message] = []  # engine-made messages before it (summary, notices)
        self.llm = llm
        self.compactor = Compactor(
            policy,
            count_text=self.counter.count_text,
            count_message=self.counter.count_message,
            model=self.model,
            llm=llm,
            llm_model=self.registry.get(llm.model) if llm is not None else None,
            workspace=workspace,
            restore_from_transcript=restore_from_transcript,
        )
        self.background_notes = background_notes
        self.compactor.background_notes = background_notes
        # called whenever content leaves the context (compaction, clearing, offload): e.g. the
        # read tool's dedup cache, whose "unchanged since last read" stub would point at nothing
        self.compaction_listeners: list[Callable[[], None]] = []
        self.evicted: set[int] = set()  # history indices evicted without a summary
        self.pending_events: list[LayerEvent] = []  # made since the last ``assemble``
        self.events: list[LayerEvent] = []
        self.failures = 0  # layers that raised (the session unchanged each time)
        self.last_call: float | None = None
        self._last_estimate = 0
        self.usage_gaps = UsageGapCheck()  # reported usage against the assembled request
        # the parts, one job each
        self.view = EngineView(self)
        self.commits = Commits(self, self.view)
        self.cascade = Cascade(EngineParts(self, self.view, self.commits))
        self.subagents = SubagentSpawner(self, self.view)
        self.ingestor = Ingest(self, self.view, self.commits)

    # ---------------------------------------------------------------- lifecycle

    def _settle_notes(self) -> None:
        """Apply a finished background notes update (never waits); its event is reported."""
        self.compactor.settle_notes()
        take_notes_events(self)

    def bootstrap(
        self,
        *,
        system: str = "",
        fixed_prefix_tokens: int | None = None,
        recorded_compactions: Sequence[RecordedCompaction] = (),
        tools: Sequence[ToolDefinition] = (),
    ) -> None:
        """Start a session.

        Args:
            system: the system prompt.
            fixed_prefix_tokens: tokens of system prompt + tool definitions when known (None:
                counted from ``system``).
            recorded_compactions: the recorded session's compactions, which policy ``recorded``
                replays.
            tools: the tools the agent sends with every call, repeated by a summary request that
                reuses the conversation's cached prefix (Claude Code's forked agent).
        """
        self.system = system
        self.compactor.system = system
        self.compactor.tools = tuple(tools)
        prefix = fixed_prefix_tokens if fixed_prefix_tokens is not None else self.counter.count_text(system)
        self.ledger = Ledger(fixed_prefix=prefix)
        self.recorded = {c.index: c for c in recorded_compactions}

    def ingest(self, message: Message) -> list[LayerEvent]:
        """Append a message to the session (and the store), running the tool-result budget on it.

        Idempotent by message id (OpenClaw's ``ingest`` answers ``{ingested: false}`` for a
        duplicate): a message whose id was already ingested with the same role and blocks (a
        harness retrying a turn) changes nothing, returns no event and is counted in
        ``reingested``; an empty id is never a duplicate.

        Args:
            message: the message, as it happened.

        Returns:
            The events of the decisions made (the tool-result budget's offload, a recorded
            compaction); empty for none.

        Raises:
            ValueError: for an id already ingested with other content.
            StoreError: when the store cannot take the message (nothing is changed then).
        """
        return self.ingestor.ingest(message)

    @property
    def reingested(self) -> int:
        """Messages ingested again under the same id (ignored)."""
        return self.ingestor.reingested

    def assemble(self, budget: int | None = None, *, now: float | None = None) -> Projection:
        """The projection to send at the next call, after running the cascade.

        A layer that fails is logged and skipped; the session stays as it was.

        Args:
            budget: caps the window for this call, tokens (None: the engine's window).
            now: the call's time, epoch seconds, used by the idle clear and the prompt-cache
                model (None: unknown).

        Returns:
            The ``Projection``: its messages pairing-valid (repaired if needed), with the events
            of the decisions made since the last ``assemble``.
        """
        window = min(self.window, budget) if budget else self.window
        self._settle_notes()
        self.failures += self.cascade.run(window, now)
        self._last_estimate = self.view.total
        if now is not None:
            self.last_call = now
        events, self.pending_events = self.pending_events, []
        self.events.extend(events)
        tokens = self.usage_gaps.predicted = self.view.predict()
        return Projection(
            messages=self.view.projected(),
            system=self.system,
            tokens=tokens,
            content_estimate=self.view.total,
            window=window,
            events=events,
        )

    def after_turn(self, usage: Usage | None) -> None:
        """Record the provider's usage for the call just made, then run the background upkeep.

        The usage anchors the ledger; one far from the assembled request warns once
        (``UsageGapWarning``, ``engine.usage_gap``). The upkeep is the session notes when due, in
        line, or with ``background_notes`` on a worker thread (a finished update applied first).

        Args:
            usage: the provider's usage of the call (None or zero input: nothing to anchor).
        """
        if usage is not None and usage.total_input > 0:
            self.usage_gaps.check(usage.total_input)
            self.ledger.observe(usage.total_input, self._last_estimate)
        self._settle_notes()
        conversation = round(self.ingestor.history_tokens * self.ledger.scale)
        event = self.compactor.maybe_update_notes(self.history, conversation)
        if event is not None:
            self.pending_events.append(event)

    def compact(
        self, force: bool = True, reason: str = "manual", instructions: str = ""
    ) -> LayerEvent | None:
        """Compact now.

        Args:
            force: whether to ignore the compaction threshold.
            reason: why, recorded in the event ("manual", ...).
            instructions: the caller's focus, appended to the summary prompt (OpenClaw's
                ``/compact [instructions]``).

        Returns:
            The compaction's event, or None when there is nothing to compact.

        Raises:
            CompactionError: when the compaction fails; the session is then unchanged.
        """
        self._settle_notes()
        ctx = self.view.context(self.window, self.last_call)
        try:
            result = self.compactor.compact(
                ctx, self.history, force=force, reason=reason, instructions=instructions, system=self.system
            )
        except CompactionFailed as exc:
            self.events.append(exc.event)
            raise CompactionError(f"compaction failed: {exc}") from exc
        except Exception as exc:
            raise CompactionError(f"compaction failed: {exc}") from exc
        finally:
            take_notes_events(self)  # a background update the compaction waited for
        if result is None:
            return None
        self.events.extend(result.events)
        event = self.commits.commit_cut(result.cut)
        self.compactor.commit(result)
        self.events.append(event)
        return event

    def maintain(self) -> list[LayerEvent]:
        """Background upkeep: a finished background notes update is applied.

        Notes updates run in ``after_turn``; nothing is repaired here, since a tool call may still
        await its result.

        Returns:
            The events of upkeep done since the last ``assemble`` (they stay pending for it).
        """
        self._settle_notes()
        return list(self.pending_events)

    # ---------------------------------------------------------------- the parts' calls

    def set_block(self, text: str) -> bool:
        """Show a managed block (e.g. the open-files working set) with the newest user turn.

        Args:
            text: the block's text (empty: remove it).

        Returns:
            True when the projection changed.
        """
        return self.view.set_block(text)

    def retrieve(self, artifact: str) -> str:
        """The original content of an offloaded or cleared tool result, image, document or message.

        Args:
            artifact: ``tool-result/<call id>``, a part of it (``.../part-<k>``), a user message's
                part (``user-media/<message id>/part-<k>``) or ``message:<id>`` (a message's text).

        Returns:
            The original text; for an image or document its data as sent (base64 for an image
            or a PDF; ``retrieve_part`` gives the part whole).

        Raises:
            StoreError: when the store has no such artifact.
            KeyError: for an unknown message id.
        """
        return self.commits.retrieve(artifact)

    def retrieve_part(self, artifact: str) -> Image | Document:
        """The image or document kept whole as ``artifact``, for a harness to attach again.

        Args:
            artifact: the artifact id, ``tool-result/<call id>/part-<k>`` (a tool result's part)
                or ``user-media/<message id>/part-<k>`` (a user message's).

        Returns:
            The ``Image`` or ``Document``.

        Raises:
            StoreError: when there is no such artifact.
            ValueError: when the artifact is not an image or document.
        """
        return self.commits.retrieve_part(artifact)

    def latest_request_verbatim(self) -> bool | str:
        """Whether the newest user-typed request of the history is in the projection whole.

        Set on every compaction event's quality figures.

        Returns:
            ``True`` when whole (or no user request yet), ``"partial"`` when only its quoted head
            and tail are (``Compactor._quote_latest_request``), ``False`` when it is not there.
        """
        return self.commits.latest_request_verbatim()

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
        return self.subagents.prepare_subagent_spawn(
            spec, prompt, mode=mode, call_id=call_id, workspace=workspace, ttl_s=ttl_s
        )

    def on_subagent_ended(self, result: SubagentResult) -> list[LayerEvent]:
        """Take back a sub-agent's final report and the files it read, then dispose of it.

        Args:
            result: what the sub-agent hands back.

        Returns:
            The events of ingesting the report into this session.

        Raises:
            SubagentError: for a sub-agent that is not live or not this session's.
        """
        return self.subagents.on_subagent_ended(result)

    @property
    def notes_update_pending(self) -> bool:
        """Whether a background notes update has started and is not applied yet.

        It may have finished: the next lifecycle call applies it.
        """
        return self.compactor.notes_running

    def dispose(self) -> None:
        """End the session.

        Ends its live sub-agents (``released``), applies a finished background notes update,
        abandons a running one (without waiting for it; an event says so), releases the store.
        """
        self.subagents.release_children()
        self.compactor.stop_notes()
        take_notes_events(self)
        self.store.close()
