"""The compaction executor: ``Compactor`` runs one session's fallback chain of compactions and
hands back the ``Compaction`` that ``commit`` applies.

One place owns the chain (after Letta's ``compact.py``): the plan (``compaction.plan``, pure) ->
session-memory compaction (the notes as the summary, $0, after a last notes update;
``compaction.notes``, ``compaction.session_memory``) -> summary compaction (the LLM summarizer
when a model is configured, else the structured summary, $0; a preset's cut and style,
``compaction.styled``) -> the user's latest request quoted (``compaction.summary``) -> restore
(``compaction.restore``) -> audit (``compaction.audit``). The overflow guard stays in the engine
as the last resort. A failed summary counts toward the circuit breaker (``compaction.breaker``).

A failure never changes the session: every decision is computed first and handed back as a
``Compaction`` for the engine to commit.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import msgspec

from ctxengine.compaction.audit import SKIPPED_LAYER, grows, record_quality, retry
from ctxengine.compaction.breaker import Breaker
from ctxengine.compaction.notes import SessionNotes
from ctxengine.compaction.pinned import PinnedFacts, pinned_messages
from ctxengine.compaction.plan import CompactionPlan, cache_cold, history_cut, plan_compaction
from ctxengine.compaction.records import Compaction, CompactionFailed, SummaryCall
from ctxengine.compaction.restore import fit, place, skeleton_lead, working_set
from ctxengine.compaction.session_memory import sm_compaction, sm_policy_changes
from ctxengine.compaction.styled import StyledSummarizer, make_summarizers, styled_cut
from ctxengine.compaction.summary import llm_tail_summary, prepend_focus, quote_latest_request
from ctxengine.layers.base import Cut, LayerContext, LayerEvent
from ctxengine.layers.session_memory_compact import session_memory_compact
from ctxengine.layers.summary_compact import summary_compact
from ctxengine.messages.model import Message
from ctxengine.models.registry import ModelInfo
from ctxengine.policy.compaction_settings import Restore, SessionMemory
from ctxengine.policy.registry import Policy
from ctxengine.summary import structured as summarize
from ctxengine.summary.audit import user_request
from ctxengine.summary.llm.summarizer import LLMSummarizer
from ctxengine.summary.skeleton import Segment

if TYPE_CHECKING:
    from ctxengine.llm import LLMClient, ToolDefinition


class Compactor(SessionNotes):
    """Notes, summaries and the breaker for one session (the notes in the background: see
    ``compaction.notes``)."""

    def __init__(
        self,
        policy: Policy,
        *,
        count_text: Callable[[str], int],
        count_message: Callable[[Message], int],
        model: ModelInfo,
        llm: LLMClient | None = None,
        llm_model: ModelInfo | None = None,
        workspace: Path | None = None,
        restore_from_transcript: bool = False,
    ) -> None:
        self.policy = policy
        self.count_text = count_text
        self.count_message = count_message
        self.model = model
        self.llm = llm if policy.summarizer != "structured" else None
        self.llm_model = llm_model
        self.workspace = workspace
        # the main conversation's system prompt and tools (``ContextEngine.bootstrap``): a summary
        # request that reuses the conversation's prefix repeats them so the prompt cache serves it
        self.system = ""
        self.tools: tuple[ToolDefinition, ...] = ()
        self.restore_from_transcript = restore_from_transcript
        self.summary_state = summarize.SummaryState()
        self._init_notes(policy, llm_model)
        self.summarizer: LLMSummarizer | None
        self.turn_summarizer: StyledSummarizer | None
        self.summarizer, self.turn_summarizer = make_summarizers(policy, self.llm, count_message, llm_model)
        self.breaker = Breaker()
        self.compactions = 0  # compactions made (the memory flush runs once per compaction)
        self._derived: dict[tuple[int, bool], tuple[Policy, Policy]] = {}
        self._segments: tuple[Message, ...] = ()  # the identifier index, in append-only segments
        self._segment_ids: set[str] = set()
        self._restored: dict[tuple[str, str], Message] = {}
        # the transcript skeleton's segments (``restore_skeleton_tokens``) and the history index
        # they cover up to; a compaction's new segments wait in ``_pending_skeleton`` for ``commit``
        self.pinned = PinnedFacts()  # the rules, the file ledger, the restore's folds (``compaction.pinned``)
        self._skeleton: tuple[Segment, ...] = ()
        self._skeleton_upto = 0
        self._pending_skeleton: tuple[list[Segment], int] | None = None
        # the newest user-typed request and its message id (``on_ingest``): once summarized away the
        # view no longer holds it as a user message, so every later compaction takes it from here
        self.latest_request: tuple[str, str] | None = None
        self._skipped_at: int | None = None  # the context when a compaction was skipped (``audit.retry``)

    @property
    def failures(self) -> int:
        """Consecutive failed compactions (``Breaker.failures``)."""
        return self.breaker.failures

    @property
    def breaker_open(self) -> bool:
        """Automatic compaction has stopped for the session (``Breaker.open``)."""
        return self.breaker.open

    def on_ingest(self, msg: Message) -> None:
        """Count a new message's tool calls toward the notes cadence; keep the latest request."""
        self.cadence.tool_calls_since += len(msg.tool_calls)
        self.pinned.observe(msg, text := user_request(msg))
        if text:
            self.latest_request = (text, msg.id)

    # ------------------------------------------------------------ plan

    def plan(self, ctx: LayerContext, *, force: bool = False, instructions: str = "") -> CompactionPlan:
        """The plan of a compaction of ``ctx`` now (``plan_compaction`` with this session's facts;
        changes nothing but the cache of derived policies)."""
        return self._plan(ctx, force=force, instructions=instructions)[0]

    def _plan(
        self, ctx: LayerContext, *, force: bool, instructions: str
    ) -> tuple[CompactionPlan, LayerContext]:
        sm_ctx = self._sm_context(ctx, cold=not force and cache_cold(ctx))
        plan = plan_compaction(
            ctx,
            sm_ctx=sm_ctx,
            force=force,
            instructions=instructions,
            # a model that declines to send is no model: the $0 summary, which the breaker of
            # failed model summaries does not stop
            breaker_open=self.breaker.open and not self.llm_declines,
            llm_summarizer=self.summarizer is not None and not self.llm_declines,
            latest_request=self.latest_request,
        )
        return plan, sm_ctx

    def _sm_context(self, ctx: LayerContext, *, cold: bool) -> LayerContext:
        """The context the session-memory compaction sees: its own minimum of kept text messages
        (``sm_keep_min_messages``), and on a cold cache the lower threshold
        (``cold_compact_at_share``): the request is written in full anyway, so compacting now
        costs no extra cache miss. The derived policy is made once per policy."""
        p = ctx.policy
        cold = cold and 0 < p.cold_compact_at_share < p.compact_at_share
        s = SessionMemory.of(p)
        if s.keep_min_messages is None and s.gain_factor == 1.0 and not cold:
            return ctx
        key = (id(p), cold)
        derived = self._derived.get(key)
        if derived is None or derived[0] is not p:
            # the flat fields the layers read, set directly (not ``with_``'s deprecated keys)
            derived = (p, msgspec.structs.replace(p, **sm_policy_changes(p, cold)))
            self._derived[key] = derived
        return dataclasses.replace(ctx, policy=derived[1])

    def _counted(self, ctx: LayerContext) -> Callable[[str], int]:
        """Tokens of a text on the basis of ``ctx``'s figures: the counter's tokens times the
        ledger's calibration (``ctx.scale``). What a compaction adds (the summary, the quoted
        request, the restores) is weighed against what it removes (``ctx.tokens``, calibrated):
        counted raw, with a provider that counts 13% more than the counter, a compaction that
        restored into the room it freed grew the context."""
        scale = ctx.scale
        if scale == 1.0:
            return self.count_text
        count = self.count_text
        return lambda text: round(count(text) * scale)

    # ------------------------------------------------------------ the chain

    def compact(
        self,
        ctx: LayerContext,
        history: Sequence[Message],
        *,
        force: bool = False,
        reason: str = "",
        instructions: str = "",
        system: str = "",
    ) -> Compaction | None:
        """Run the chain. Returns the compaction to commit (then pass it to ``commit``); None
        when nothing should or could be done. Raises ``CompactionFailed`` when a compaction was
        attempted and failed (the breaker is updated; the session is unchanged)."""
        instructions = instructions.strip()  # blank focus: none (the session-memory path stays open)
        if not force and not retry(self._skipped_at, ctx.predicted, ctx.window):
            return None  # skipped as growing the context a moment ago: wait for more to summarize
        events: list[LayerEvent] = []
        # a CompactionFailed raised here carries the events before it
        done = self._chain(
            ctx, history, events, force=force, reason=reason, instructions=instructions, system=system
        )
        if done is None:
            # a pre-compaction flush made an LLM call, then no compaction followed (the cut
            # freed too little): its event is reported all the same
            self.notes_events.extend(events)
            if any(e.layer == SKIPPED_LAYER for e in events):
                self._skipped_at = ctx.predicted
        return done

    def commit(self, done: Compaction) -> None:
        """Keep the state of a compaction the caller has committed (the structured-summary facts,
        the identifier-index segments, the breaker)."""
        self.summary_state = done.state
        if done.segments is not None:
            self._segments = done.segments
            self._segment_ids = set(done.segment_ids)
        if self._pending_skeleton is not None:
            segments, self._skeleton_upto = self._pending_skeleton
            self._skeleton = tuple(segments)
            self._pending_skeleton = None
        if done.closes_breaker:
            self.breaker.close()
        self.compactions += 1
        self._skipped_at = None

    def _chain(
        self,
        ctx: LayerContext,
        history: Sequence[Message],
        events: list[LayerEvent],
        *,
        force: bool,
        reason: str,
        instructions: str,
        system: str,
    ) -> Compaction | None:
        plan, sm_ctx = self._plan(ctx, force=force, instructions=instructions)
        if plan.skip:
            return None
        if plan.session_memory:
            self.await_notes()  # a background notes update: the notes are needed now
            # the pre-compaction flush runs only when a session-memory compaction can follow
            # (else every call over the threshold would pay for a notes update)
            probe_notes = self.notes_text() or "(notes pending)"  # the plan's path needs session memory on
            probe = session_memory_compact(sm_ctx, probe_notes, self._counted(ctx), force=force)
            if plan.early and probe is not None and not plan.leaves_room(probe.event.tokens_after):
                # no room under the threshold after it: no flush and no compaction yet (the next
                # call would compact again); wait for the reserve threshold, since a summary,
                # which keeps more, would leave even less room
                return None
            if probe is not None:
                flush = self.flush_notes(history)
                if flush is not None:
                    events.append(flush)
            notes = self.notes_within(ctx.policy.notes_max_tokens)
            sm = session_memory_compact(sm_ctx, notes, self._counted(ctx), force=force, reason=reason)
            p = ctx.policy  # a session-memory compaction that would grow the context gives way
            if sm is not None and (done := self._session_memory(plan, sm, p, sm_ctx, history, events)):
                return done
        if not plan.summary_due:
            return None  # only the session-memory compaction runs below the threshold (cold cache)
        if plan.route == "styled":
            return self._styled(plan, ctx, events, history, reason=reason, instructions=instructions)
        if plan.route == "llm" and not self.llm_declines:  # (a notes flush may just have tripped it)
            return self._llm(
                plan, ctx, events, history, reason=reason, instructions=instructions, system=system
            )
        return self._structured(plan, ctx, events, history, reason=reason, instructions=instructions)

    def _session_memory(
        self,
        plan: CompactionPlan,
        sm: Cut,
        p: Policy,
        ctx: LayerContext,
        history: Sequence[Message],
        events: list[LayerEvent],
    ) -> Compaction | None:
        """Finish a session-memory compaction: the notes cover the whole session; the exact
        identifiers of what left the context are listed after them (newest first), as the
        structured summary does (``p``: the policy resolved for the window; ``ctx``: the
        session-memory path's context). None when it would grow the context (``audit.grows``)."""
        done, notes_at = sm_compaction(
            sm,
            p,
            ctx.window,
            events,
            self.summary_state,
            segments=self._segments,
            segment_ids=self._segment_ids,
            count=self.count_text,
            identifiers_max=self.policy.summary_identifiers_max,
            compactions=self.compactions,
        )
        quote_latest_request(sm, ctx, notes_at, plan, self._counted(ctx))
        if grows(sm, plan.force, events):
            return None
        self._finish(sm, ctx, done.state, history, plan)
        return done

    def _call(self) -> SummaryCall:
        """What the summary steps are made with, now."""
        return SummaryCall(
            summarizer=None if self.llm_declines else self.summarizer,
            turn_summarizer=None if self.llm_declines else self.turn_summarizer,
            count=self.count_text,
            model=self.model,
            llm_model=self.llm_model,
            system=self.system,
            tools=self.tools,
            state=self.summary_state,
        )

    def _llm(
        self,
        plan: CompactionPlan,
        ctx: LayerContext,
        events: list[LayerEvent],
        history: Sequence[Message],
        *,
        reason: str,
        instructions: str,
        system: str,
    ) -> Compaction | None:
        """Ours with a model: the LLM summary of the span before the kept tail."""
        assert self.summarizer is not None and self.llm is not None
        try:
            made = llm_tail_summary(
                ctx, plan, self._call(), reason=reason, instructions=instructions, system=system
            )
        except CompactionFailed as exc:
            self.breaker.record_failure(exc, events, ctx.policy.breaker_failures)
            raise
        if made is None:
            return None
        cut, state = made
        quote_latest_request(cut, ctx, 0, plan, self._counted(ctx))  # whichever summarizer ran
        if grows(cut, plan.force, events):
            return None
        self._finish(cut, ctx, state, history, plan)
        return Compaction(cut, events, state, closes_breaker=True)

    def _structured(
        self,
        plan: CompactionPlan,
        ctx: LayerContext,
        events: list[LayerEvent],
        history: Sequence[Message],
        *,
        reason: str,
        instructions: str,
    ) -> Compaction | None:
        """Ours without a model: the structured summary ($0)."""
        counted = self._counted(ctx)
        result = summary_compact(ctx, self.summary_state, counted, force=plan.force, reason=reason)
        if result is None:
            return None
        cut, state = result
        quote_latest_request(cut, ctx, 0, plan, counted)
        if instructions:  # the $0 summary cannot be focused: the caller's focus leads it instead
            prepend_focus(cut, instructions, counted)
        if grows(cut, plan.force, events):
            return None
        self._finish(cut, ctx, state, history, plan)
        return Compaction(cut, events, state)

    def _styled(
        self,
        plan: CompactionPlan,
        ctx: LayerContext,
        events: list[LayerEvent],
        history: Sequence[Message],
        *,
        reason: str,
        instructions: str,
    ) -> Compaction | None:
        """A summary compaction with the policy's cut strategy and summary style (the presets):
        the planned cut summarized (LLM or $0 structured, in the style's format), and for Letta
        redone as summarize-all when the sliding window left the context over the trigger."""
        cut_plan = plan.cut_plan
        if cut_plan is None:
            return None
        call = self._call()
        try:
            cut, state = styled_cut(
                ctx, cut_plan, call, previous=plan.previous, reason=reason, instructions=instructions
            )
            again = plan.fallback  # Letta: summarize-all when the sliding window left too much
            if cut_plan.mode == "sliding" and cut.event.tokens_after >= plan.threshold and again is not None:
                cut, state = styled_cut(
                    ctx, again, call, previous=plan.previous, reason=reason, instructions=instructions
                )
        except CompactionFailed as exc:
            self.breaker.record_failure(exc, events, ctx.policy.breaker_failures)
            raise
        quote_latest_request(cut, ctx, 0, plan, self._counted(ctx))  # whichever summarizer ran
        if grows(cut, plan.force, events):
            return None
        self._finish(cut, ctx, state, history, plan)
        return Compaction(cut, events, state, closes_breaker=True)

    # ------------------------------------------------------------ restore and audit

    def _finish(
        self,
        cut: Cut,
        ctx: LayerContext,
        state: summarize.SummaryState,
        history: Sequence[Message],
        plan: CompactionPlan,
    ) -> None:
        """Add the restore messages and the quality figures to a cut (``history``: the whole
        session, for ``restore_from_history``; ``plan``: its threshold, and whether the user asked
        for this compaction)."""
        force = plan.force
        p = ctx.policy
        kept = list(ctx.view[cut.keep_from :])
        upto = history_cut(ctx, cut.keep_from, len(history))
        before_cut = history[:upto] if Restore.of(p).from_history else cut.summarized
        lead = self._skeleton_restore(p, history, upto)
        restored = working_set(
            p,
            before_cut,
            kept,
            self.count_text,
            shown="\n".join(m.text() for m, _ in lead),
            workspace=self.workspace,
            from_transcript=self.restore_from_transcript,
            notes_facts=self.notes.facts,
            state=state,
            scans=self.pinned.scans,
        )
        # restored again with the same content: the same message, which the prompt cache keeps serving
        restored = [self._restored.setdefault((m.id, m.text()), m) for m in restored]
        # no compaction leaves the context larger than before it, nor an automatic one over the threshold
        # less the room it must leave to grow (a forced one may): what is restored fits, the rest named
        limit = cut.event.tokens_before - 1
        limit = limit if force else min(limit, plan.threshold - Restore.of(p).room_tokens)
        room = limit - cut.event.tokens_after
        counted = self._counted(ctx)
        pinned = pinned_messages(p, self.pinned, history, kept, self.count_text)
        lead_tokens, restored, skipped = fit(lead, restored, room, counted, pinned)
        restored_tokens = place(cut, lead, restored, lead_tokens, skipped, counted)
        record_quality(cut, kept)
        cut.event.details["restored"] = [m.id for m, _ in lead] + [m.id for m in restored]
        cut.event.details["restored_tokens"] = restored_tokens

    def _skeleton_restore(self, p: Policy, history: Sequence[Message], upto: int) -> list[Segment]:
        """The transcript skeleton of a compaction (``ctxengine.summary.skeleton``) as append-only segments
        to lead the prefix (kept at ``commit``); none when ``restore_skeleton_tokens`` is 0."""
        if Restore.of(p).skeleton_tokens <= 0:
            return []
        new = history[self._skeleton_upto : upto]
        lead = skeleton_lead(p, self._skeleton, new, self.count_text, part=self.compactions + 1)
        self._pending_skeleton = (lead, max(upto, self._skeleton_upto))
        return lead
