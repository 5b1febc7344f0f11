"""Baseline engines that prove the metrics, not policies anyone should run.

``identifiers-only`` sends the fixed prefix, the latest user request (the human's text, not tool
results) and a list of every identifier seen so far, nothing else. It scores high on *reference
recall* (every identifier is in the list) and low on *content recall* (no file, command output or
edit text survives): a metric that rewards it measures names, not what a model can work from.

``own-words-only`` sends the fixed prefix, the latest user request and, newest first within the
window, every earlier text and tool-call input of the agent's own, nothing it read (no tool result,
no other user message). What it scores on *read recall* is what that figure gives the agent's own
words: on the shared corpus 0.58 at 64,000 and 200,000, below every preset (what it holds of what
the agent read is what the agent quoted). When read recall also counted the current text of files
the agent wrote it scored 0.86 at 64,000, above every preset: its own Write and Edit inputs hold
that text, so it is a figure of its own (``fidelity``: file-state recall).

Registered as core engines; ``bench`` runs them under their names.
"""

from __future__ import annotations

from typing import Any

from ctxengine.engine.core import Projection
from ctxengine.engine.history import HistoryEngine
from ctxengine.layers.base import LayerEvent
from ctxengine.messages.file_writes import input_strings
from ctxengine.messages.model import Message, Text, ToolCall
from ctxengine.policy.registry import NONE, Policy
from ctxengine.summary.audit import latest_user_request, span_identifiers

BASELINES: dict[str, str] = {
    "identifiers-only": "baseline: the latest user request and a list of every identifier seen, nothing else",
    "own-words-only": (
        "baseline: the latest user request and the agent's own earlier text and tool calls, nothing read"
    ),
}
"""Baseline engine ids (each runs under the policy of the same name) and what each sends."""


def policy_for(name: str) -> Policy:
    """The policy record a baseline runs under (ours does nothing; the engine decides).
    Raises ``KeyError``."""
    if name not in BASELINES:
        raise KeyError(f"unknown baseline {name!r}; known: {', '.join(BASELINES)}")
    return NONE.with_(name=name, description=BASELINES[name])


class IdentifiersOnlyEngine(HistoryEngine):
    """The ``identifiers-only`` baseline (see the module docstring): one user message with the
    latest user request and every identifier seen so far, in first-seen order. Tokens."""

    engine_id = "identifiers-only"

    def __init__(self, policy: Policy, **kwargs: Any) -> None:
        super().__init__(policy, **kwargs)
        self._ids: dict[str, None] = {}  # first-seen order

    def ingest(self, message: Message) -> list[LayerEvent]:
        n = len(self.history)
        super().ingest(message)
        if len(self.history) > n:
            for ident in sorted(span_identifiers([message])):
                self._ids.setdefault(ident, None)
        return []

    def assemble(self, budget: int | None = None, *, now: float | None = None) -> Projection:
        window = min(self.window, budget) if budget else self.window
        request = latest_user_request(self.history) or "(no user request yet)"
        listing = "Identifiers seen so far:\n" + "\n".join(self._ids)
        msg = Message(role="user", blocks=(Text(request), Text(listing)), id="identifiers-only")
        return self.projection([msg], self.counter.count_message(msg), window, [])

    def dispose(self) -> None:
        super().dispose()
        self._ids.clear()


OWN_WORDS_RESERVE = 8_000  # tokens left free of the window for the response and the estimate's error


OWN_WORDS_HEADER = "Your own earlier messages and tool calls:"


class OwnWordsOnlyEngine(HistoryEngine):
    """The ``own-words-only`` baseline (see the module docstring): one user message with the
    agent's own earlier output (its text blocks, each tool call as its name and every string of
    its input, verbatim; a text block each), newest first within the window less the fixed prefix
    and ``OWN_WORDS_RESERVE``, placed oldest first, under ``OWN_WORDS_HEADER``, then the latest
    user request. Tokens.

    Each piece of output is one ``Text`` block made once, at ingest, and sent as the same object
    at every call (as the request's block while the request is the same): the message is rebuilt
    at each call, its blocks are not, so what reads it block by block (the replay's measures, the
    writers' memos) reads only the new ones."""

    engine_id = "own-words-only"

    def __init__(self, policy: Policy, **kwargs: Any) -> None:
        super().__init__(policy, **kwargs)
        self._entries: list[tuple[Text, int]] = []  # (block, tokens), oldest first
        self._fixed = 0
        self._header = Text(OWN_WORDS_HEADER)
        self._request = Text("(no user request yet)")

    def bootstrap(self, *, fixed_prefix_tokens: int | None = None, **kwargs: Any) -> None:
        super().bootstrap(fixed_prefix_tokens=fixed_prefix_tokens, **kwargs)
        self._fixed = self.ledger.state.fixed_prefix

    def ingest(self, message: Message) -> list[LayerEvent]:
        n = len(self.history)
        super().ingest(message)
        if len(self.history) > n and message.role == "assistant":
            for b in message.blocks:
                if isinstance(b, Text) and b.text.strip():
                    text = b.text
                elif isinstance(b, ToolCall):
                    # each string of the input verbatim (JSON would escape its newlines and quotes,
                    # and the baseline would lose words it does hold)
                    text = "\n".join([f"[tool call {b.name}]", *input_strings(b.input)])
                else:
                    continue
                self._entries.append((Text(text), self.counter.count_text(text)))
        return []

    def assemble(self, budget: int | None = None, *, now: float | None = None) -> Projection:
        window = min(self.window, budget) if budget else self.window
        request = latest_user_request(self.history) or "(no user request yet)"
        if request != self._request.text:
            self._request = Text(request)
        room = window - self._fixed - OWN_WORDS_RESERVE - self.counter.count_text(OWN_WORDS_HEADER)
        room -= self.counter.count_text(request)
        kept: list[Text] = []
        for block, tokens in reversed(self._entries):
            if tokens > room:
                break
            room -= tokens
            kept.append(block)
        msg = Message(role="user", blocks=(self._header, *reversed(kept), self._request), id="own-words-only")
        return self.projection([msg], self.counter.count_message(msg), window, [])

    def dispose(self) -> None:
        super().dispose()
        self._entries.clear()
