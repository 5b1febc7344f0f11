"""Ingesting a message, a part of ``ContextEngine``: ``Ingest`` appends it to the history and the
store (idempotent by message id), replays a recorded compaction under policy ``recorded``, runs the
tool-result budget on it (Claude Code's per-tool and per-message caps) and appends it to the view;
``take_out`` takes messages the client moved out of the view (``engine.ingestor.take_out``)."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING

import msgspec

from ctxengine.engine.state import content_left
from ctxengine.layers.base import LayerEvent, Replacements
from ctxengine.layers.tool_result_budget import budget_message
from ctxengine.messages.model import Message
from ctxengine.policy.layer_settings import ToolResultBudget

if TYPE_CHECKING:
    from ctxengine.engine.commit import Commits
    from ctxengine.engine.state import SessionState
    from ctxengine.engine.view import EngineView

log = logging.getLogger(__name__)  # a child of the engine package's logger

RECORDED_ORIGINS = ("compact_summary", "compact_restore")


class Ingest:
    """The ingest of one session's messages.

    Args:
        state: the session the messages join.
        view: its projection, which each message joins as budgeted.
        commits: where the budget's decision and a recorded compaction are committed.

    Attributes:
        reingested: messages ingested again under the same id (ignored).
        history_tokens: the counter's tokens of the history (the notes' cadence reads them).
    """

    def __init__(self, state: SessionState, view: EngineView, commits: Commits) -> None:
        self.state, self.view, self.commits = state, view, commits
        self._ingested: dict[str, Message] = {}  # message id -> the message, for idempotent ingest
        self._at: dict[str, int] = {}  # message id -> its history index (``take_out``)
        self._recorded_done: set[int] = set()
        self.reingested = 0
        self.history_tokens = 0
        self._deferred: list[Replacements] = []  # budget offloads waiting for the model's answer
        # the latest ``take_out``'s messages the view did not show (id -> message): a copy of one
        # ingested again stays behind its summary (``take_out``)
        self._covered: dict[str, Message] = {}

    def ingest(self, message: Message) -> list[LayerEvent]:
        """``ContextEngine.ingest`` (documented there)."""
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
        self.state.store.append(self.state.session_id, "message", msgspec.to_builtins(message))
        if message.id:
            self._ingested[message.id] = message
        if message.origin in RECORDED_ORIGINS and self.state.policy.compaction != "recorded":
            return []  # a recorded compaction's own messages: only policy ``recorded`` keeps them
        idx = len(self.state.history)
        if message.id:
            self._at[message.id] = idx
            covered = self._covered.pop(message.id, None)
            if covered is not None and (covered.role, covered.blocks) == (message.role, message.blocks):
                self.state.history.append(message)  # where it stood, unchanged: still summarized
                self.state.evicted.add(idx)
                self.history_tokens += self.view.count(message)
                return []
        self.state.history.append(message)
        self.state.compactor.on_ingest(message)
        self.history_tokens += self.view.count(message)
        events: list[LayerEvent] = []
        if self.state.policy.compaction == "recorded" and message.compaction is not None:
            if message.compaction not in self._recorded_done:
                self._recorded_done.add(message.compaction)
                self.commits.recorded_cut(idx)  # the rebuilt view already ends with this message
            if message.origin == "compact_summary":
                events.append(self.commits.recorded_event(message))
            self.state.pending_events.extend(events)
            if self.view.src and self.view.src[-1] == idx:
                return events
        return self._ingest_budgeted(message, idx, events)

    def ingested(self, mid: str) -> Message | None:
        """The message ingested under id ``mid`` (and not taken out), or None."""
        return self._ingested.get(mid)

    def live_ids(self) -> list[str]:
        """The ids of the messages ingested and not taken out, in the order they were ingested."""
        return list(self._ingested)

    def take_out(self, ids: Sequence[str], reason: str) -> int:
        """Take ingested messages out of the view: the client moved them (the proxy's ``align``:
        aider's files message) and sends them again where they now stand.

        They stay in ``history`` and the store (an ``event`` entry ``{"layer": "take_out",
        "reason": reason, "ids": ids}`` records it, so a restore knows); their ids are forgotten
        by the idempotent ingest, so the same ids can be ingested again (their new copies join the
        view at the end). A message no longer in the verbatim view (in a summary, below
        ``kept_from``, evicted) is taken out all the same: the view does not change for it. A copy
        of it ingested again under the same id (the proxy's ids are client positions: it stands
        where it stood) with the same content, before the next ``take_out``, stays out of the view
        (its summary still holds it: a client that rewrote an earlier message, aider's repo map,
        does not bring back what was compacted); any other copy is shown (a message the client
        moved: it means it to be). The caller keeps pairing: the tool calls and results it takes
        out come back together.

        Args:
            ids: the ids of the messages, as ingested.
            reason: why, recorded in the entry.

        Returns:
            How many of them the view showed (0: the view is unchanged).

        Raises:
            ValueError: for an id not ingested (or taken out already); nothing is changed then.
            StoreError: when the store cannot take the entry (nothing is changed then).
        """
        state = self.state
        unknown = [i for i in ids if i not in self._ingested]
        if unknown:
            raise ValueError(f"take_out: message id(s) never ingested or already taken out: {unknown[:3]}")
        indices = [self._at[i] for i in ids if i in self._at]
        entry = {"layer": "take_out", "reason": reason, "ids": list(ids)}
        state.store.append(state.session_id, "event", entry)
        hidden = [i for i in ids if i in self._at and not self._shows(self._at[i])]
        self._covered = {i: self._ingested[i] for i in hidden}
        for i in ids:
            del self._ingested[i]
            self._at.pop(i, None)
        shown = [i for i in indices if self._shows(i)]
        state.evicted.update(indices)
        if shown:
            self.view.rebuild()
            content_left(state)
        return len(shown)

    def _shows(self, idx: int) -> bool:
        """Whether the view shows history index ``idx`` verbatim (not summarized nor evicted)."""
        return idx >= self.state.kept_from and idx not in self.state.evicted

    def _ingest_budgeted(self, message: Message, idx: int, events: list[LayerEvent]) -> list[LayerEvent]:
        """The end of ``ingest``: the tool-result budget on history message ``idx``, then the
        message (as budgeted) appended to the view; returns ``events`` with the budget's."""
        before = self.view.predict()
        try:
            decision = budget_message(
                message,
                self.view.policy_at(self.state.window),
                before,
                media_tokens=self.state.counter.count_block,
                free_window=self.state.window - self.state.ledger.state.fixed_prefix,
                text_tokens=self.state.counter.count_text,
            )
            if decision is not None and self._defers(message, decision, before):
                decision = None
            if decision is not None:
                self.commits.store_replacements(decision)
        except Exception as exc:  # the message still reaches the projection, unbudgeted
            log.warning("layer tool_result_budget failed: %s", exc)
            self.state.failures += 1
            decision = None
        if decision is not None:
            self.commits.apply_replacements(decision)
        self.view.append(self.view.shown(idx, message), idx)
        if decision is not None:
            content_left(self.state)
            decision.event.tokens_before = before + self.view.count(message)
            decision.event.tokens_after = self.view.predict()
            events.append(decision.event)
        if message.role == "assistant":  # after it joined the view: the commit rebuilds the view
            events.extend(self._commit_deferred())  # from the history, which holds it already
        self.state.pending_events.extend(events)
        return events

    def _defers(self, message: Message, d: Replacements, before: int) -> bool:
        """Whether the budget's offload ``d`` of ``message`` waits until the model has answered
        (``ToolResultBudget.defer_unseen``): only tool results, and only while the context with
        ``message`` whole stays under the compaction threshold (``before``: tokens without it)."""
        policy = self.view.policy_at(self.state.window)
        if not ToolResultBudget.of(policy).defer_unseen or d.parts or d.calls:
            return False
        threshold = policy.compact_threshold(self.state.window, self.state.model.max_output)
        if before + self.view.count(message) > threshold:
            return False
        self._deferred.append(d)
        return True

    def _commit_deferred(self) -> list[LayerEvent]:
        """Offload the results the model has now seen (``_defers``); their events. One that
        fails (the store refused it) is logged and counted, and its result stays whole."""
        done, self._deferred = self._deferred, []
        events = []
        for d in done:
            try:
                events.append(self.commits.commit_replacements(d))
            except Exception as exc:
                log.warning("layer tool_result_budget failed on a deferred offload: %s", exc)
                self.state.failures += 1
        return events
