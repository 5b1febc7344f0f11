"""LangChain as plugin engines: ``trim_messages`` and ``ClearToolUsesEdit``, run as they are.

Both engines keep the session in our neutral messages, convert each ingested message to LangChain
messages once (an assistant message becomes one ``AIMessage`` with its ``tool_calls``; a user
message becomes one ``ToolMessage`` per tool result followed by a ``HumanMessage`` for the rest),
run the peer on the whole list before every call, and convert what comes back to neutral messages
(each kept LangChain message maps back to the blocks it came from; a cleared ``ToolMessage``
becomes a result holding the peer's placeholder). Nothing is repaired: a tool result whose call was
trimmed away is sent as the peer left it, and the replay's request validation counts it.

- ``langchain-trim``: ``trim_messages(messages, strategy="last", token_counter=<approximate>,
  max_tokens=budget)``, every other argument at its default (no ``start_on``, no
  ``include_system``: the system prompt is sent apart). The approximate counter is LangChain's
  ``count_tokens_approximately`` (4 chars per token, 3 tokens per message), memoized per message:
  it is additive per message, so the memo changes no figure, only the time.
- ``langchain-clear``: ``ContextEditingMiddleware(edits=[ClearToolUsesEdit(trigger=...)])`` as its
  ``wrap_model_call`` applies it: on a copy of the whole history before every call (the clear is
  never persisted, as with the middleware), ``clear_at_least=0``, ``keep=3``, placeholder
  ``[cleared]``, approximate counting. The trigger is the middleware's default 100,000 tokens,
  lowered to the budget when the window is smaller (at 64,000 the default would never fire).

The budget is what a user would give the peer for this window: window - system prompt and tools
(the fixed prefix) - min(max output, 20,000) kept for the response.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import msgspec
from langchain.agents.middleware.context_editing import ClearToolUsesEdit
from langchain_core.messages import (
    AIMessage,
    BaseMessage,
    HumanMessage,
    SystemMessage,
    ToolMessage,
    trim_messages,
)
from langchain_core.messages.utils import count_tokens_approximately

from ctxengine.engine.core import Projection
from ctxengine.engine.history import HistoryEngine
from ctxengine.layers.base import LayerEvent
from ctxengine.messages.model import Block, Message, Text, Thinking, ToolCall, ToolResult
from ctxengine.policy.registry import Policy

OUTPUT_RESERVE = 20_000  # tokens kept for the response (min with the model's max output)
CLEAR_DEFAULT_TRIGGER = 100_000  # ClearToolUsesEdit's default trigger


class _Part(msgspec.Struct, frozen=True):
    """Where a LangChain message came from: history index and block indices."""

    index: int
    blocks: tuple[int, ...]


class _LangChainEngine(HistoryEngine):
    """Shared machinery: neutral history (``HistoryEngine``), its LangChain twin, the way back."""

    engine_id = "langchain"
    layer = "langchain"

    def __init__(self, policy: Policy, **kwargs: Any) -> None:
        super().__init__(policy, **kwargs)
        self.lc: list[BaseMessage] = []
        self.parts: dict[str, _Part] = {}  # LangChain message id -> origin
        self._approx: dict[int, tuple[BaseMessage, int]] = {}
        self._rebuilt: dict[tuple[int, tuple[int, ...], tuple[str, ...]], Message] = {}
        self._counts: dict[int, tuple[Message, int]] = {}
        self._last_start: int | None = None
        self._last_changed: frozenset[str] = frozenset()

    # ------------------------------------------------------------ lifecycle

    def ingest(self, message: Message) -> list[LayerEvent]:
        idx = len(self.history)
        super().ingest(message)
        if len(self.history) > idx:  # not a recorded compaction's own message
            for lc, part in _to_langchain(message, idx):
                self.lc.append(lc)
                assert lc.id is not None
                self.parts[lc.id] = part
        return []

    def assemble(self, budget: int | None = None, *, now: float | None = None) -> Projection:
        window = min(self.window, budget) if budget else self.window
        token_budget = max(
            1, window - self.ledger.state.fixed_prefix - min(self.model.max_output, OUTPUT_RESERVE)
        )
        before = self.approx_tokens(self.lc)
        kept = self.apply(list(self.lc), token_budget)
        messages = self._back(kept)
        content = sum(self._count(m) for m in messages)
        events = self._events(kept, before, token_budget)
        return self.projection(messages, content, window, events)

    def dispose(self) -> None:
        self._approx.clear()
        self._rebuilt.clear()
        self._counts.clear()

    # ------------------------------------------------------------ the peer

    def apply(self, messages: list[BaseMessage], budget: int) -> list[BaseMessage]:
        """The peer's transformation of the whole history (LangChain messages)."""
        raise NotImplementedError

    def approx_tokens(self, messages: Sequence[BaseMessage]) -> int:
        """LangChain's ``count_tokens_approximately``, memoized per message (it is additive)."""
        total = 0
        for m in messages:
            hit = self._approx.get(id(m))
            if hit is None or hit[0] is not m:
                hit = (m, count_tokens_approximately([m]))
                self._approx[id(m)] = hit
            total += hit[1]
        return total

    # ------------------------------------------------------------ internals

    def _count(self, msg: Message) -> int:
        hit = self._counts.get(id(msg))
        if hit is None or hit[0] is not msg:
            hit = (msg, self.counter.count_message(msg))
            self._counts[id(msg)] = hit
        return hit[1]

    def _back(self, kept: Sequence[BaseMessage]) -> list[Message]:
        """Neutral messages for the LangChain messages the peer kept (in order)."""
        out: list[Message] = []
        group: list[tuple[int, BaseMessage]] = []
        current = -1

        def flush() -> None:
            if group:
                out.append(self._rebuild(current, group))

        for m in kept:
            assert m.id is not None
            part = self.parts[m.id]
            if part.index != current:
                flush()
                group = []
                current = part.index
            group.extend((b, m) for b in part.blocks)
        flush()
        return out

    def _rebuild(self, index: int, group: list[tuple[int, BaseMessage]]) -> Message:
        original = self.history[index]
        cleared = tuple(
            sorted({m.id or "" for _, m in group if isinstance(m, ToolMessage) and _is_cleared(m)})
        )
        blocks = tuple(b for b, _ in group)
        if not cleared and blocks == tuple(range(len(original.blocks))):
            return original
        key = (index, blocks, cleared)
        found = self._rebuilt.get(key)
        if found is not None:
            return found
        new_blocks: list[Block] = []
        for b, m in group:
            block = original.blocks[b]
            if isinstance(block, ToolResult) and isinstance(m, ToolMessage) and _is_cleared(m):
                block = ToolResult(block.call_id, (Text(str(m.content)),), block.is_error, block.name)
            new_blocks.append(block)
        rebuilt = msgspec.structs.replace(original, blocks=tuple(new_blocks))
        self._rebuilt[key] = rebuilt
        return rebuilt

    def _events(self, kept: Sequence[BaseMessage], before: int, budget: int) -> list[LayerEvent]:
        """One event when the peer changed what is sent in a way that is not an append: a new
        first message kept, or results newly cleared."""
        start = self.parts[kept[0].id or ""].index if kept else len(self.history)
        changed = frozenset(m.id or "" for m in kept if isinstance(m, ToolMessage) and _is_cleared(m))
        events: list[LayerEvent] = []
        if (self._last_start is not None and start != self._last_start and start > 0) or (
            changed - self._last_changed
        ):
            after = self.approx_tokens(kept)
            events.append(
                LayerEvent(
                    layer=self.layer,
                    reason=f"approximate history {before:,} > {budget:,} tokens",
                    tokens_before=before,
                    tokens_after=after,
                    details={
                        "dropped_messages": start,  # neutral history messages before the first kept
                        "cleared_results": len(changed),
                        "newly_cleared": len(changed - self._last_changed),
                    },
                )
            )
        self._last_start = start
        self._last_changed = changed
        return events


class TrimMessagesEngine(_LangChainEngine):
    """``langchain-trim``: ``trim_messages`` with strategy "last" and the approximate counter."""

    engine_id = "langchain-trim"
    layer = "langchain_trim"

    def apply(self, messages: list[BaseMessage], budget: int) -> list[BaseMessage]:
        counter: Callable[[list[BaseMessage]], int] = self.approx_tokens
        trimmed: list[BaseMessage] = trim_messages(
            messages, max_tokens=budget, token_counter=counter, strategy="last"
        )
        return trimmed


class ClearToolUsesEngine(_LangChainEngine):
    """``langchain-clear``: ``ClearToolUsesEdit`` applied to a copy of the history every call."""

    engine_id = "langchain-clear"
    layer = "langchain_clear"

    def apply(self, messages: list[BaseMessage], budget: int) -> list[BaseMessage]:
        edit = ClearToolUsesEdit(trigger=min(CLEAR_DEFAULT_TRIGGER, budget))
        # the middleware edits a deep copy; the edit only ever replaces list items (model_copy),
        # so a shallow copy of the list leaves the history as untouched as a deep copy would
        edited: list[Any] = messages
        edit.apply(edited, count_tokens=self.approx_tokens)
        return edited


# ---------------------------------------------------------------- conversion


def _is_cleared(m: ToolMessage) -> bool:
    meta = m.response_metadata.get("context_editing")
    return isinstance(meta, dict) and bool(meta.get("cleared"))


def _args(call: ToolCall) -> dict[str, Any]:
    return call.input if isinstance(call.input, dict) else {"input": call.input}


def _to_langchain(msg: Message, index: int) -> list[tuple[BaseMessage, _Part]]:
    """The LangChain messages of one neutral message, each with where it came from."""
    out: list[tuple[BaseMessage, _Part]] = []
    if msg.role == "assistant":
        text_parts: list[str] = []
        calls: list[dict[str, Any]] = []
        for b in msg.blocks:
            if isinstance(b, Text):
                text_parts.append(b.text)
            elif isinstance(b, Thinking):
                text_parts.append(b.thinking)
            elif isinstance(b, ToolCall):
                calls.append({"id": b.id, "name": b.name, "args": _args(b), "type": "tool_call"})
        ai = AIMessage(content="\n".join(text_parts), tool_calls=calls, id=f"{index}:ai")
        out.append((ai, _Part(index, tuple(range(len(msg.blocks))))))
        return out
    rest: list[int] = []
    for k, b in enumerate(msg.blocks):
        if isinstance(b, ToolResult):
            text = "\n".join(p.text for p in b.content if isinstance(p, Text))
            tm = ToolMessage(
                content=text,
                tool_call_id=b.call_id,
                name=b.name or None,
                status="error" if b.is_error else "success",
                id=f"{index}:tool:{k}",
            )
            out.append((tm, _Part(index, (k,))))
        else:
            rest.append(k)
    if rest:
        text = "\n".join(b.text for k in rest if isinstance(b := msg.blocks[k], Text))
        cls = SystemMessage if msg.role == "system" else HumanMessage
        out.append((cls(content=text, id=f"{index}:msg"), _Part(index, tuple(rest))))
    return out
