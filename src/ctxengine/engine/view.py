"""The engine's projection, kept incrementally: ``Projection`` (what is sent at a call) and
``EngineView``, the state ``ContextEngine`` holds and the upkeep of its view.

The view is history from ``kept_from`` on (evicted messages left out) behind the engine-made
``prefix``, each message shown with the decisions applied (``replacements``) and the managed block
on its anchor turn. Ingesting appends to it; a decision rebuilds it once (``_rebuild``). Token
figures per message are the counter's (tokens); ``_predict`` is the ledger's prediction of the
request's input tokens. The view is repaired for pairing only when it is read (``_projected``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import msgspec

from ctxengine.layers.base import LayerContext, LayerEvent, message_with_results
from ctxengine.layers.pairing import find_violations
from ctxengine.layers.pairing_cache import RepairCache
from ctxengine.messages.model import Message, RecordedCompaction, Text
from ctxengine.tokens.ledger import Ledger

if TYPE_CHECKING:
    from ctxengine.compaction import Compactor
    from ctxengine.models.registry import ModelInfo, Registry
    from ctxengine.policy.registry import Policy
    from ctxengine.store import SessionStore
    from ctxengine.tokens.counter import TokenCounter


class Projection(msgspec.Struct, kw_only=True):
    """What the engine would send at a call (``ContextEngine.assemble``).

    Attributes:
        messages: the conversation (neutral model).
        system: the system prompt.
        tokens: the ledger's predicted input tokens of the request (fixed prefix included).
        content_estimate: raw counter tokens of ``messages``.
        window: the window this call was assembled for, tokens (the engine's, or the budget).
        events: the decisions made while assembling.
    """

    messages: list[Message]
    system: str
    tokens: int
    content_estimate: int
    window: int
    events: list[LayerEvent]


class EngineView:
    """The state of a ``ContextEngine`` and the upkeep of its projection (see the module
    docstring). ``ContextEngine.__init__`` sets every attribute declared here."""

    policy: Policy
    registry: Registry
    model: ModelInfo
    window: int
    counter: TokenCounter
    store: SessionStore
    session_id: str
    system: str
    ledger: Ledger
    history: list[Message]
    recorded: dict[int, RecordedCompaction]
    _recorded_before: int
    _recorded_dropped: list[Message]
    replacements: dict[str, Any]
    kept_from: int
    prefix: list[Message]
    compactor: Compactor
    compaction_listeners: list[Callable[[], None]]

    def _init_view(self) -> None:
        """The projection's state, empty (the end of ``ContextEngine.__init__``)."""
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
        self._turn_limits: tuple[Policy, int] | None = None  # (policy, this session's turn limit)

    def set_block(self, text: str) -> bool:
        """Show a managed block (e.g. the open-files working set) with the newest user turn.

        Unlike Letta's system-prompt blocks it rides with a turn, so the cached prefix before
        that turn stays valid; it moves to the newest user turn only when ``text`` changes (the
        previous copy disappears from the projection then: one cache miss per change, not per
        call).

        Args:
            text: the block's text (empty: remove it).

        Returns:
            True when the projection changed.
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
