"""The engine's projection, kept incrementally: ``Projection`` (what is sent at a call) and
``EngineView``, the part of ``ContextEngine`` that keeps its view and repairs its pairing.

The view is history from ``kept_from`` on (evicted messages left out) behind the engine-made
``prefix``, each message shown with the decisions applied (``replacements``) and the managed block
on its anchor turn. Ingesting appends to it; a decision rebuilds it once (``rebuild``). Token
figures per message are the counter's (tokens); ``predict`` is the ledger's prediction of the
request's input tokens. The view is repaired for pairing only when it is read (``projected``).
The session's state (history, decisions, ledger, policy) is the engine's; the view reads it there.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import msgspec

from ctxengine.layers.base import LayerContext, LayerEvent, message_with_results
from ctxengine.layers.pairing import find_violations
from ctxengine.layers.pairing_cache import RepairCache
from ctxengine.messages.model import Message, Text

if TYPE_CHECKING:
    from ctxengine.engine.state import SessionState
    from ctxengine.policy.registry import Policy


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
    """The projection of one session, kept incrementally, and its pairing repair (see the module
    docstring): ``messages`` with, per message, its history index (``src``, -1 for the prefix)
    and its tokens (``tokens``), ``total`` tokens in all.

    Args:
        state: the session (history, decisions, ledger, policy) the view shows.
    """

    def __init__(self, state: SessionState) -> None:
        self.state = state
        self._view: list[Message] = []
        self._src: list[int] = []
        self._tok: list[int] = []
        self._block: tuple[int, str] | None = None  # (history index carrying it, text)
        self._tok_total = 0
        self._view_call_ids: set[str] = set()
        self._needs_repair = False
        self._projection: list[Message] | None = None
        self._pairing = RepairCache()  # the view's repair, its closed turns checked once
        self._policies: dict[tuple[int, int], Policy] = {}  # resolved per window (``for_window``)

    @property
    def messages(self) -> list[Message]:
        """The view as kept (not repaired): read it, do not change it."""
        return self._view

    @property
    def src(self) -> list[int]:
        """The history index of each message of the view (-1: the engine-made prefix)."""
        return self._src

    @property
    def tokens(self) -> list[int]:
        """The counter's tokens of each message of the view."""
        return self._tok

    @property
    def total(self) -> int:
        """The counter's tokens of the whole view."""
        return self._tok_total

    def set_block(self, text: str) -> bool:
        """``ContextEngine.set_block`` (documented there).

        Unlike Letta's system-prompt blocks it rides with a turn, so the cached prefix before
        that turn stays valid; it moves to the newest user turn only when ``text`` changes (the
        previous copy disappears from the projection then: one cache miss per change, not per
        call).
        """
        history, kept_from = self.state.history, self.state.kept_from
        anchor = next(
            (i for i in range(len(history) - 1, kept_from - 1, -1) if history[i].role == "user"),
            None,
        )
        current = self._block[1] if self._block else ""
        if text == current and (self._block is None or self._block[0] >= kept_from):
            return False
        self._block = (anchor, text) if (text and anchor is not None) else None
        self.rebuild()
        return True

    def shown(self, i: int, msg: Message) -> Message:
        """History message ``i`` as the projection shows it (decisions and the block applied)."""
        shown = message_with_results(msg, self.state.replacements)
        if self._block is not None and self._block[0] == i:
            shown = msgspec.structs.replace(shown, blocks=(*shown.blocks, Text(self._block[1])))
        return shown

    def predict(self) -> int:
        """The ledger's prediction of the request's input tokens (fixed prefix included)."""
        return self.state.ledger.predict(self._tok_total)

    def count(self, msg: Message) -> int:
        """The counter's tokens of ``msg``."""
        return self.state.counter.count_message(msg)

    def append(self, msg: Message, src: int) -> None:
        """Append ``msg`` (history index ``src``, -1 for the prefix) to the view."""
        n = self.count(msg)
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

    def projected(self) -> list[Message]:
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

    def context(self, window: int, now: float | None) -> LayerContext:
        """What a layer sees of the view at a call of ``window`` tokens at time ``now``."""
        state = self.state
        scale = state.ledger.scale
        return LayerContext(
            view=self._view,
            tokens=[round(t * scale) for t in self._tok] if scale != 1.0 else self._tok,
            src=self._src,
            predicted=self.predict(),
            window=window,
            max_output=state.model.max_output,
            policy=self.policy_at(window),
            now=now,
            last_call=state.last_call,
            frozen=state.replacements,
            count_text=state.counter.count_text,
            scale=scale,
        )

    def policy_at(self, window: int) -> Policy:
        """The engine's policy resolved for ``window`` and the current fixed prefix (cached)."""
        key = (window, self.state.ledger.state.fixed_prefix)
        found = self._policies.get(key)
        if found is None:
            found = self._policies[key] = self.state.policy.for_window(*key)
        return found

    def rebuild(self) -> None:
        """The view computed again from the prefix, the history and the decisions."""
        self._view, self._src, self._tok = [], [], []
        self._tok_total = 0
        self._view_call_ids = set()
        self._needs_repair = False
        self._projection = None
        self._pairing.reset()
        state = self.state
        for m in state.prefix:
            self.append(m, -1)
        for i in range(state.kept_from, len(state.history)):
            if i not in state.evicted:
                self.append(self.shown(i, state.history[i]), i)
