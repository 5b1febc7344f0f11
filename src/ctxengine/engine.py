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

The cascade in ``assemble`` (cheapest first, each only if still needed): idle clear ->
cache-TTL pruning (OpenClaw's, off unless the policy asks) -> cache-aware clear -> summary
compaction (with the policy's cut strategy and summary style; OpenClaw's memory flush first) ->
overflow guard; the tool-result budget runs on ingest. Layers see the policy resolved for the
window (``Policy.for_window``: window-relative sizes). A context warning (Letta's, off unless the
policy asks) is an event that changes nothing. Pairing is validated and repaired after every
change.

Session notes are updated on a cadence after a turn (``after_turn``): in line by default (the
replay: deterministic), or in the background for a live agent (``background_notes``): a worker
thread computes the update while the agent goes on, and the engine applies it on the caller's
thread at its next step (see ``ContextEngine``).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import msgspec

from ctxengine.audit import quality
from ctxengine.compaction import CompactionFailed, Compactor
from ctxengine.layers.base import (
    Cut,
    LayerContext,
    LayerEvent,
    Replacements,
    artifact_id,
    message_with_results,
    part_artifact_id,
    result_text,
)
from ctxengine.layers.cache_clear import cache_clear
from ctxengine.layers.cache_ttl_prune import cache_ttl_prune
from ctxengine.layers.history_limit import evict_under_pressure, history_limit
from ctxengine.layers.idle_clear import idle_clear
from ctxengine.layers.overflow_guard import fit_results, guard_limit, overflow_guard, unfit_event
from ctxengine.layers.pairing import find_violations
from ctxengine.layers.pairing_cache import RepairCache
from ctxengine.layers.tool_result_budget import budget_message
from ctxengine.messages import Document, Image, Message, RecordedCompaction, Text, ToolResult, Usage
from ctxengine.models import ModelInfo, Registry, check_model_window, check_window, resolve_window
from ctxengine.policy import Policy
from ctxengine.store import SessionStore, SQLiteStore
from ctxengine.tokens.counter import TokenCounter, counter_for
from ctxengine.tokens.ledger import Ledger

if TYPE_CHECKING:
    from ctxengine.llm import LLMClient, ToolDefinition
    from ctxengine.subagents.spawn import SubagentContext, SubagentResult
    from ctxengine.subagents.spec import AgentSpec, SpawnMode

log = logging.getLogger(__name__)

RECORDED_ORIGINS = ("compact_summary", "compact_restore")


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


class Projection(msgspec.Struct, kw_only=True):
    """What the engine would send at a call.

    ``messages``: the conversation (neutral model); ``system``: system prompt; ``tokens``: the
    ledger's predicted input tokens of the request (fixed prefix included); ``content_estimate``:
    raw counter tokens of ``messages``; ``events``: decisions made while assembling.
    """

    messages: list[Message]
    system: str
    tokens: int
    content_estimate: int
    window: int
    events: list[LayerEvent]


class CompactionError(Exception):
    """A compaction could not be made; the session is unchanged."""


class ContextEngine:
    """The core engine (id ``ctxengine``, owner ``core``).

    ``model`` names the model (registry lookup for window, max output, prices, tokenizer);
    ``window`` overrides the model's context window and ``agent_cap`` caps it (tokens).
    Raises ``WindowTooSmallError`` when the resolved window is under 16,000 tokens.

    ``background_notes``: session-notes updates do not block the agent loop. When the cadence
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
    do not depend on thread timing).

    Thread safety: the engine itself is single-threaded (call it from one thread). The worker
    only computes new notes from its snapshot (``compaction.run_notes_update``) and returns them;
    it never reads or writes engine or compactor state, which only the caller's thread changes.
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
        self.store: SessionStore = store or SQLiteStore()
        self.session_id = session_id
        self.system = ""
        self.ledger = Ledger()
        self.history: list[Message] = []
        self._ingested: dict[str, Message] = {}  # message id -> the message, for idempotent ingest
        self.reingested = 0  # messages ingested again under the same id (ignored)
        self.recorded: dict[int, RecordedCompaction] = {}
        self._recorded_done: set[int] = set()
        self._recorded_before = 0
        self._recorded_dropped: list[Message] = []
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
        self._history_tokens = 0
        # the projection, kept incrementally
        self._view: list[Message] = []
        self._src: list[int] = []
        self._tok: list[int] = []
        self._block: tuple[int, str] | None = None  # (history index carrying it, text)
        self._tok_total = 0
        self._view_call_ids: set[str] = set()
        self._needs_repair = False
        self._projection: list[Message] | None = None
        self._pairing = RepairCache()  # the view's repair, its closed turns checked once
        self._last_call: float | None = None
        self._last_estimate = 0
        self._pending_events: list[LayerEvent] = []
        self.events: list[LayerEvent] = []
        self.failures = 0
        self._policies: dict[tuple[int, int], Policy] = {}  # resolved per window (``for_window``)
        self._warned = False  # the context-warning event fired and the context is still above it
        self.evicted: set[int] = set()  # history indices evicted without a summary (``_evict``)

    # ---------------------------------------------------------------- lifecycle

    def bootstrap(
        self,
        *,
        system: str = "",
        fixed_prefix_tokens: int | None = None,
        recorded_compactions: Sequence[RecordedCompaction] = (),
        tools: Sequence[ToolDefinition] = (),
    ) -> None:
        """Start a session. ``fixed_prefix_tokens``: tokens of system prompt + tool definitions
        when known (else counted from ``system``); ``recorded_compactions`` feed policy
        ``recorded``; ``tools``: the tools the agent sends with every call, repeated by a summary
        request that reuses the conversation's cached prefix (Claude Code's forked agent)."""
        self.system = system
        self.compactor.system = system
        self.compactor.tools = tuple(tools)
        prefix = fixed_prefix_tokens if fixed_prefix_tokens is not None else self.counter.count_text(system)
        self.ledger = Ledger(fixed_prefix=prefix)
        self.recorded = {c.index: c for c in recorded_compactions}

    def ingest(self, message: Message) -> list[LayerEvent]:
        """Append a message to the session (and the store). Runs the tool-result budget on it.
        Returns the events of decisions made.

        Idempotent by message id (OpenClaw's ``ingest`` answers ``{ingested: false}`` for a
        duplicate): a message whose id was already ingested with the same role and blocks (a
        harness retrying a turn) changes nothing, returns no event and is counted in
        ``reingested``; an empty id is never a duplicate. Raises ``ValueError`` for an id already
        ingested with other content, and ``StoreError`` when the store cannot take the message
        (nothing is changed then)."""
        if message.id:
            known = self._ingested.get(message.id)
            if known is not None:
                if (known.role, known.blocks) != (message.role, message.blocks):
                    raise ValueError(
                        f"message id {message.id!r} was already ingested with other content; "
                        "message ids must be unique within a session"
                    )
                self.reingested += 1
                log.info("ingest: message %r already ingested; ignored", message.id)
                return []
        self.store.append(self.session_id, "message", msgspec.to_builtins(message))
        if message.id:
            self._ingested[message.id] = message
        if message.origin in RECORDED_ORIGINS and self.policy.compaction != "recorded":
            return []  # a recorded compaction's own messages: only policy ``recorded`` keeps them
        idx = len(self.history)
        self.history.append(message)
        self.compactor.on_ingest(message)
        self._history_tokens += self._count(message)
        events: list[LayerEvent] = []
        if self.policy.compaction == "recorded" and message.compaction is not None:
            if message.compaction not in self._recorded_done:
                self._recorded_done.add(message.compaction)
                self._recorded_cut(idx)  # the rebuilt view already ends with this message
            if message.origin == "compact_summary":
                events.append(self._recorded_event(message))
            self._pending_events.extend(events)
            if self._src and self._src[-1] == idx:
                return events
        before = self._predict()
        try:
            decision = budget_message(
                message,
                self._policy_at(self.window),
                before,
                media_tokens=self.counter.count_block,
                free_window=self.window - self.ledger.state.fixed_prefix,
            )
            if decision is not None:
                self._store_replacements(decision)
        except Exception as exc:  # the message still reaches the projection, unbudgeted
            log.warning("layer tool_result_budget failed: %s", exc)
            self.failures += 1
            decision = None
        if decision is not None:
            self.replacements.update(decision.results)
        self._append_view(self._shown(idx, message), idx)
        if decision is not None:
            for listener in self.compaction_listeners:
                listener()
            decision.event.tokens_before = before + self._count(message)
            decision.event.tokens_after = self._predict()
            events.append(decision.event)
        self._pending_events.extend(events)
        return events

    def assemble(self, budget: int | None = None, *, now: float | None = None) -> Projection:
        """The projection to send at the next call, after running the cascade.

        ``budget`` (tokens) caps the window for this call; ``now`` (epoch seconds) is the call's
        time, used by the idle clear. The messages are pairing-valid (repaired if needed).
        """
        window = min(self.window, budget) if budget else self.window
        self._settle_notes()
        ctx = self._context(window, now)
        for layer in (
            self._warn,
            self._idle,
            self._ttl_prune,
            self._cache_clear,
            self._evict,
            self._compaction,
            self._overflow,
        ):
            try:
                event = layer(ctx)
            except Exception as exc:  # a failing layer leaves the session as it was
                log.warning("layer %s failed: %s", getattr(layer, "__name__", layer), exc)
                self.failures += 1
                continue
            if event is not None:
                self._pending_events.append(event)
                ctx = self._context(window, now)  # the view changed
        self._last_estimate = self._tok_total
        if now is not None:
            self._last_call = now
        events, self._pending_events = self._pending_events, []
        self.events.extend(events)
        return Projection(
            messages=self._projected(),
            system=self.system,
            tokens=self._predict(),
            content_estimate=self._tok_total,
            window=window,
            events=events,
        )

    def after_turn(self, usage: Usage | None) -> None:
        """Record the provider's usage for the call just made (anchors the ledger), then run the
        background upkeep: the session notes when due, in line, or with ``background_notes``
        started on a worker thread (a finished earlier update is applied first)."""
        if usage is not None and usage.total_input > 0:
            self.ledger.observe(usage.total_input, self._last_estimate)
        self._settle_notes()
        conversation = round(self._history_tokens * self.ledger.scale)
        event = self.compactor.maybe_update_notes(self.history, conversation)
        if event is not None:
            self._pending_events.append(event)

    def compact(
        self, force: bool = True, reason: str = "manual", instructions: str = ""
    ) -> LayerEvent | None:
        """Compact now (``force`` ignores the threshold); ``instructions`` is the caller's focus,
        appended to the summary prompt (OpenClaw's ``/compact [instructions]``). Returns the
        event, or None when there is nothing to compact. Raises ``CompactionError`` on failure;
        the session is then unchanged."""
        self._settle_notes()
        ctx = self._context(self.window, self._last_call)
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
            self._take_notes_events()  # a background update the compaction waited for
        if result is None:
            return None
        self.events.extend(result.events)
        event = self._commit_cut(result.cut)
        self.compactor.commit(result)
        self.events.append(event)
        return event

    def maintain(self) -> list[LayerEvent]:
        """Background upkeep: events of upkeep done since the last ``assemble`` (notes updates run
        in ``after_turn``; a finished background update is applied here); nothing is repaired
        here, since a tool call may still await its result."""
        self._settle_notes()
        return list(self._pending_events)

    @property
    def notes_update_pending(self) -> bool:
        """A background notes update has started and is not applied yet (it may have finished:
        the next lifecycle call applies it)."""
        return self.compactor.notes_running

    def dispose(self) -> None:
        """End the session: end its live sub-agents (``released``), apply a finished background
        notes update, abandon a running one (without waiting for it; an event says so), release
        the store."""
        from ctxengine.subagents.spawn import release_children

        release_children(self)
        self.compactor.stop_notes()
        self._take_notes_events()
        self.store.close()

    # ---------------------------------------------------------------- sub-agents (``subagents.spawn``)

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
        """Prepare a sub-agent of this session for ``prompt`` (OpenClaw's ``prepareSubagentSpawn``):
        its own engine, ``isolated`` (its system prompt, allow-listed instruction files, the
        prompt alone) or ``fork`` (this projection as a cache-sharing prefix, open calls closed);
        ``call_id`` is the tool call it answers. Raises ``SubagentDepthError`` past
        ``spec.max_depth`` and ``SpawnError`` (everything rolled back) when a step fails."""
        from ctxengine.subagents.spawn import prepare_spawn

        return prepare_spawn(
            self, self._view, spec, prompt, mode=mode, call_id=call_id, workspace=workspace, ttl_s=ttl_s
        )

    def on_subagent_ended(self, result: SubagentResult) -> list[LayerEvent]:
        """Take back a sub-agent's final report and the files it read (nothing else of its
        history), as the result of the call that spawned it; the sub-agent is disposed. Raises
        ``SubagentError`` for a sub-agent that is not live or not this session's."""
        from ctxengine.subagents.spawn import end_subagent

        return end_subagent(self, result)

    def set_block(self, text: str) -> bool:
        """Show a managed block (e.g. the open-files working set) with the newest user turn.

        Unlike Letta's system-prompt blocks it rides with a turn, so the cached prefix before
        that turn stays valid; it moves to the newest user turn only when ``text`` changes (the
        previous copy disappears from the projection then: one cache miss per change, not per
        call). Empty ``text`` removes it. Returns True when the projection changed.
        """
        anchor = next(
            (
                i
                for i in range(len(self.history) - 1, self.kept_from - 1, -1)
                if self.history[i].role == "user"
            ),
            None,
        )
        current = self._block[1] if self._block else ""
        if text == current and (self._block is None or self._block[0] >= self.kept_from):
            return False
        self._block = (anchor, text) if (text and anchor is not None) else None
        self._rebuild()
        return True

    def _shown(self, i: int, msg: Message) -> Message:
        """History message ``i`` as the projection shows it (decisions and the block applied)."""
        shown = message_with_results(msg, self.replacements)
        if self._block is not None and self._block[0] == i:
            shown = msgspec.structs.replace(shown, blocks=(*shown.blocks, Text(self._block[1])))
        return shown

    # ---------------------------------------------------------------- retrieval

    def retrieve(self, artifact: str) -> str:
        """The original content of an offloaded or cleared tool result, or with
        ``message:<id>`` the text of a message of the transcript (a long user request quoted in
        part after a compaction). Raises ``StoreError`` (``KeyError`` for an unknown message)."""
        if artifact.startswith("message:"):
            wanted = artifact.removeprefix("message:")
            for msg in reversed(self.history):
                if msg.id == wanted:
                    return msg.text()
            raise KeyError(f"no message {wanted!r} in this session")
        content, _ = self.store.get_artifact(self.session_id, artifact)
        return content

    def latest_request_verbatim(self) -> bool | str:
        """Whether the newest user-typed request of the history is in the projection whole
        (``True``), as its quoted head and tail (``"partial"``: it did not fit, see
        ``Compactor._quote_latest_request``) or not at all (``False``). ``True`` when the
        session has no user request yet. Set on every compaction event's quality figures."""
        found = self.compactor.latest_request
        if found is None:
            return True
        latest = found[0]
        texts = [m.text() for m in self._view if m.role == "user"]
        if any(latest in t for t in texts):
            return True
        head = latest[:200]
        if any(head in t and f"message {found[1]} of the transcript" in t for t in texts):
            return "partial"
        return False

    def retrieve_part(self, artifact: str) -> Image | Document:
        """The image or document kept whole as ``artifact`` (``tool-result/<call id>/part-<k>``),
        for a harness to attach again. Raises ``StoreError`` when there is none, ``ValueError``
        when the artifact is not an image or document."""
        content, meta = self.store.get_artifact(self.session_id, artifact)
        fields = {k: v for k, v in meta.items() if k not in ("layer", "call_id", "part")}
        kind = fields.get("type")
        if kind not in ("image", "document"):
            raise ValueError(f"artifact {artifact!r} is not an image or a document")
        part: Image | Document = msgspec.convert(fields | {"data": content}, Image | Document)
        return part

    # ---------------------------------------------------------------- internals

    def _settle_notes(self) -> None:
        """Apply a finished background notes update (never waits); its event is reported."""
        self.compactor.settle_notes()
        self._take_notes_events()

    def _take_notes_events(self) -> None:
        if self.compactor.notes_events:
            self._pending_events.extend(self.compactor.notes_events)
            self.compactor.notes_events.clear()

    def _predict(self) -> int:
        return self.ledger.predict(self._tok_total)

    def _count(self, msg: Message) -> int:
        return self.counter.count_message(msg)

    def _append_view(self, msg: Message, src: int) -> None:
        n = self._count(msg)
        self._view.append(msg)
        self._src.append(src)
        self._tok.append(n)
        self._tok_total += n
        self._projection = None
        for c in msg.tool_calls:
            if c.id in self._view_call_ids:
                self._needs_repair = True
            self._view_call_ids.add(c.id)
        if not self._needs_repair:
            self._needs_repair = self._tail_violates()

    def _tail_violates(self) -> bool:
        """Whether the newest turn breaks pairing (checked from the last assistant message on)."""
        start = len(self._view) - 1
        while start > 0 and self._view[start].role != "assistant":
            start -= 1
        return bool(find_violations(self._view[start:]))

    def _projected(self) -> list[Message]:
        """The view, repaired when it breaks pairing (the repair is cached, never stored: the
        view keeps what was ingested, so a late tool result still finds its call). Closed turns
        are checked once (``RepairCache``); messages repair makes stay the same objects from
        call to call, since the prompt-cache model compares the prefix by identity."""
        if self._projection is None:
            if self._needs_repair:
                self._projection = self._pairing.project(self._view)
                self._needs_repair = not self._pairing.valid
            else:
                self._projection = list(self._view)
        return list(self._projection)

    def _context(self, window: int, now: float | None) -> LayerContext:
        scale = self.ledger.scale
        return LayerContext(
            view=self._view,
            tokens=[round(t * scale) for t in self._tok] if scale != 1.0 else self._tok,
            src=self._src,
            predicted=self._predict(),
            window=window,
            max_output=self.model.max_output,
            policy=self._policy_at(window),
            now=now,
            last_call=self._last_call,
            frozen=self.replacements,
            count_text=self.counter.count_text,
            scale=scale,
        )

    def _policy_at(self, window: int) -> Policy:
        key = (window, self.ledger.state.fixed_prefix)
        found = self._policies.get(key)
        if found is None:
            found = self._policies[key] = self.policy.for_window(*key)
        return found

    def _warn(self, ctx: LayerContext) -> LayerEvent | None:
        """Letta's memory warning (``warn_at_share``): an event when the context first passes
        that share of the window; nothing sent changes."""
        share = ctx.policy.warn_at_share
        if share <= 0:
            return None
        line = int(ctx.window * share)
        if ctx.predicted <= line:
            self._warned = False
            return None
        if self._warned:
            return None
        self._warned = True
        self._pending_events.append(
            LayerEvent(
                layer="context_warning",
                reason=f"context {ctx.predicted:,} > {share:.0%} of the window ({line:,} tokens)",
                tokens_before=ctx.predicted,
                tokens_after=ctx.predicted,
            )
        )
        return None  # nothing changed: the cascade's view stays as it is

    def _ttl_prune(self, ctx: LayerContext) -> LayerEvent | None:
        d = cache_ttl_prune(ctx)
        return self._commit_replacements(d) if d else None

    def _idle(self, ctx: LayerContext) -> LayerEvent | None:
        d = idle_clear(ctx)
        return self._commit_replacements(d) if d else None

    def _cache_clear(self, ctx: LayerContext) -> LayerEvent | None:
        d = cache_clear(ctx)
        return self._commit_replacements(d) if d else None

    def _evict(self, ctx: LayerContext) -> LayerEvent | None:
        """The user-turn limit of this session's key, then pressure eviction (``layers.history_limit``;
        both off unless the policy sets them): evicted messages leave the projection for good."""
        limit = ctx.policy.history_limits.limit_for(self.session_id)
        d = history_limit(ctx, limit) if limit else evict_under_pressure(ctx)
        if d is None:
            return None
        before = self._predict()
        removed = [self.history[ctx.src[i]] for i in d.indices]
        entry = {"layer": d.event.layer, "evicted": [m.id for m in removed]}
        self.store.append(self.session_id, "event", entry)
        self.evicted.update(ctx.src[i] for i in d.indices)
        self._rebuild()
        for listener in self.compaction_listeners:
            listener()
        d.event.tokens_before, d.event.tokens_after = before, self._predict()
        self._add_quality(d.event, removed)
        return d.event

    def _compaction(self, ctx: LayerContext) -> LayerEvent | None:
        if self.policy.compaction != "summary":
            return None
        flush = self.compactor.maybe_memory_flush(ctx, self.history)
        self._take_notes_events()  # a background update the flush waited for comes first
        if flush is not None:
            self._pending_events.append(flush)
            if "error" not in flush.details:
                self.store.append(
                    self.session_id, "notes", {"memory_flush": True, "notes": self.compactor.notes_text()}
                )
        try:
            result = self.compactor.compact(ctx, self.history, system=self.system)
        except CompactionFailed as exc:
            log.warning("compaction failed: %s", exc)
            return exc.event  # the session is unchanged; the overflow guard still runs
        finally:
            self._take_notes_events()  # a background update the compaction waited for
        if result is None:
            return None
        self._pending_events.extend(result.events)
        event = self._commit_cut(result.cut)
        self.compactor.commit(result)
        return event

    def _overflow(self, ctx: LayerContext) -> LayerEvent | None:
        """The guard: drop the oldest rounds; if the request still does not fit, cut the largest
        tool results to fit (originals in the artifact store); if even that is not enough, an
        event says why (``overflow_guard.unfit_event``)."""
        if not ctx.policy.overflow_guard or ctx.predicted <= guard_limit(ctx):
            return None  # the request fits: nothing to do (the case at almost every call)
        d = overflow_guard(ctx)
        event = self._commit_cut(d) if d else None
        if event is not None:
            ctx = self._context(ctx.window, ctx.now)
        fitted = fit_results(ctx)
        if fitted is not None:
            if event is not None:
                self._pending_events.append(event)
            event = self._commit_replacements(fitted)
            ctx = self._context(ctx.window, ctx.now)
        unfit = unfit_event(ctx, self.ledger.state.fixed_prefix)
        if unfit is not None:
            if event is not None:
                self._pending_events.append(event)
            event = unfit
        return event

    def _store_replacements(self, d: Replacements) -> None:
        """Write a decision's artifacts and entry; raises ``StoreError`` before any state changes."""
        for key in d.results:
            msg_id, call_id = key.split("\x00", 1)
            result = self._find_result_block(msg_id, call_id)
            if result is None:
                continue
            parts = [(k, p) for k, p in enumerate(result.content, 1) if isinstance(p, Image | Document)]
            text = result_text(result)
            if text or not parts:
                self.store.put_artifact(
                    self.session_id, artifact_id(call_id), text, {"layer": d.event.layer, "call_id": call_id}
                )
            for k, part in parts:  # images and documents whole, each under its own id
                meta: dict[str, Any] = {"layer": d.event.layer, "call_id": call_id, "part": k}
                meta |= msgspec.to_builtins(part)
                content = meta.pop("data", "")
                self.store.put_artifact(self.session_id, part_artifact_id(call_id, k), content, meta)
        self.store.append(
            self.session_id,
            "clear" if d.event.layer != "tool_result_budget" else "offload",
            {"layer": d.event.layer, "call_ids": sorted(k.split("\x00", 1)[1] for k in d.results)},
        )

    def _commit_replacements(self, d: Replacements) -> LayerEvent:
        before = self._predict()
        self._store_replacements(d)
        originals = [  # the cleared results, as tool results (no user request among them)
            Message("user", (ToolResult(key.split("\x00", 1)[1], (Text(text),)),), f"original:{key}")
            for key in d.results
            if (text := self._find_result(*key.split("\x00", 1))) is not None
        ]
        self.replacements.update(d.results)
        self._rebuild()
        for listener in self.compaction_listeners:  # content left the context: re-reads must show it
            listener()
        d.event.tokens_before = before
        d.event.tokens_after = self._predict()
        if d.event.layer != "tool_result_budget":  # a clearing is a compaction: its quality figures
            self._add_quality(d.event, originals)
        return d.event

    def _add_quality(self, event: LayerEvent, removed: list[Message]) -> None:
        """Quality figures of a compaction that made no summary (clearing, the overflow guard):
        how much it saved, and which identifiers of what it removed the projection still shows
        (placeholders listing them, the tool calls, later messages)."""
        shown = "\n".join(
            [m.text() for m in self._view]
            + [json.dumps(c.input, ensure_ascii=False) for m in self._view for c in m.tool_calls]
        )
        q = quality(
            tokens_before=event.tokens_before,
            tokens_after=event.tokens_after,
            span=removed,
            summary=shown,
            kept=self._view,
        )
        event.details["quality"] = msgspec.to_builtins(q) | {
            "latest_request_verbatim": self.latest_request_verbatim()
        }

    def _find_result(self, message_id: str, call_id: str) -> str | None:
        r = self._find_result_block(message_id, call_id)
        return result_text(r) if r is not None else None

    def _find_result_block(self, message_id: str, call_id: str) -> ToolResult | None:
        for msg in reversed(self.history):
            if msg.id != message_id:
                continue
            for r in msg.tool_results:
                if r.call_id == call_id:
                    return r
        return None

    def _commit_cut(self, cut: Cut) -> LayerEvent:
        before = self._predict()
        src = self._src[cut.keep_from] if cut.keep_from < len(self._src) else len(self.history)
        if src < 0:
            src = next((s for s in self._src[cut.keep_from :] if s >= 0), len(self.history))
        self.store.append(
            self.session_id,
            "compaction",
            {
                "layer": cut.event.layer,
                "kept_from": src,
                "prefix": [msgspec.to_builtins(m) for m in cut.prefix],
            },
        )
        self.kept_from = src
        self.prefix = list(cut.prefix)
        self._rebuild()
        self.ledger.reset()  # usage from before a compaction no longer applies
        for listener in self.compaction_listeners:
            listener()
        cut.event.tokens_before = before
        cut.event.tokens_after = self._predict()
        q = cut.event.details.get("quality")
        if q is None:
            self._add_quality(cut.event, cut.summarized)
        elif isinstance(q, dict):
            q.update(
                tokens_before=before,
                tokens_after=cut.event.tokens_after,
                tokens_saved=before - cut.event.tokens_after,
                compression_ratio=round(cut.event.tokens_after / before, 4) if before else 1.0,
                latest_request_verbatim=self.latest_request_verbatim(),
            )
        return cut.event

    def _recorded_cut(self, idx: int) -> None:
        """Policy ``recorded``: the recorded session compacted here; the projection restarts at
        the compaction's first message (its summary and restore attachments)."""
        self._recorded_before = self._predict()
        self._recorded_dropped = [m for m in self._view if m.origin in ("message", "attachment")]
        self.kept_from = idx
        self.prefix = []
        self._rebuild()
        self.ledger.reset()

    def _recorded_event(self, summary: Message) -> LayerEvent:
        """The summarization call the recorded session made (the transcript does not log it):
        priced as a cache read of ``preTokens`` plus the summary as output."""
        rec = self.recorded.get(summary.compaction or 0)
        before = self._recorded_before
        pre = rec.pre_tokens if rec and rec.pre_tokens else before
        out = self._count(summary)
        return LayerEvent(
            layer="recorded_compaction",
            reason=f"recorded {rec.trigger if rec else 'auto'} compaction",
            tokens_before=before,
            tokens_after=self._predict(),
            llm_calls=1,
            llm_input_tokens=pre,
            llm_output_tokens=out,
            llm_cost_usd=self.model.cost_usd(cache_read_tokens=pre, output_tokens=out),
            details={
                "pre_tokens": pre,
                "post_tokens": rec.post_tokens if rec else None,
                "quality": msgspec.to_builtins(
                    quality(
                        tokens_before=before,
                        tokens_after=self._predict(),
                        span=self._recorded_dropped,
                        summary=summary.text(),
                        kept=[],
                    )
                )
                | {"latest_request_verbatim": self.latest_request_verbatim()},
            },
        )

    def _rebuild(self) -> None:
        self._view, self._src, self._tok = [], [], []
        self._tok_total = 0
        self._view_call_ids = set()
        self._needs_repair = False
        self._projection = None
        self._pairing.reset()
        for m in self.prefix:
            self._append_view(m, -1)
        for i in range(self.kept_from, len(self.history)):
            if i not in self.evicted:
                self._append_view(self._shown(i, self.history[i]), i)
