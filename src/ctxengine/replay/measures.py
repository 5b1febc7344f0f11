"""Measure each call: reference recall, content fidelity, and the request body's validity.

- ``RecallTracker``: the identifiers a call's output uses that the session showed earlier, and
  which of them were absent from what the policy sent (``forgotten``);
- ``FidelityMeter``: content recall, the probes after a compaction and the re-fetch charges
  (``ctxengine.eval.fidelity``), with the count of compactions that kept the latest request whole;
- ``request_violations`` (``RequestMeter`` call after call): the real request body (Anthropic
  Messages or OpenAI Chat, by provider) checked against the provider's rules (``formats.validate``).

Each follows the session in transcript order; none touches the engine.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, NamedTuple

import msgspec

from ctxengine.eval.content_recall import ContentRecall
from ctxengine.eval.fidelity import CallFidelity, FidelityTracker
from ctxengine.formats.anthropic_memo import BlockMemo
from ctxengine.formats.anthropic_writer import to_anthropic
from ctxengine.formats.openai_writer import RunMemo, to_openai_chat
from ctxengine.formats.validate import validate_anthropic, validate_openai_chat
from ctxengine.formats.validate_incremental import RequestChecker
from ctxengine.messages import identifiers
from ctxengine.messages.model import Block, Message, Session, Text, Thinking, ToolCall, ToolResult
from ctxengine.messages.view_counts import BlockKeys, ViewCounts
from ctxengine.models.registry import ModelInfo
from ctxengine.replay.records import COMPACTION_LAYERS

if TYPE_CHECKING:
    from ctxengine.engine.core import Projection


class _Ids:
    """Identifier sets per block and per message, cached by object identity (messages and their
    blocks outlive the replay)."""

    def __init__(self) -> None:
        # the identifiers a block shows (thinking included)
        self.shown: BlockKeys[str] = BlockKeys(
            lambda b: frozenset(identifiers.extract_all(_block_texts(b, include_thinking=True)))
        )
        self._used: dict[int, tuple[Message, frozenset[str]]] = {}

    def used(self, msg: Message) -> frozenset[str]:
        """The identifiers ``msg`` uses (its output: thinking left out), cached per message."""
        hit = self._used.get(id(msg))
        if hit is not None and hit[0] is msg:
            return hit[1]
        ids = frozenset(
            identifiers.extract_all(t for b in msg.blocks for t in _block_texts(b, include_thinking=False))
        )
        self._used[id(msg)] = (msg, ids)
        return ids


def _block_texts(b: Block, *, include_thinking: bool) -> Iterable[str]:
    if isinstance(b, Text):
        yield b.text
    elif isinstance(b, ToolCall):
        yield b.input if isinstance(b.input, str) else msgspec.json.encode(b.input).decode()
    elif isinstance(b, ToolResult):
        for p in b.content:
            if isinstance(p, Text):
                yield p.text
    elif include_thinking and isinstance(b, Thinking):
        yield b.thinking


class Recall(NamedTuple):
    """Reference recall at one call: identifiers used that the session showed earlier
    (``uses``), how many were in what was sent (``hits``), and the others, sorted."""

    hits: int
    uses: int
    forgotten: list[str]


class RecallTracker:
    """The identifiers the session has shown so far and those in the policy's current view."""

    def __init__(self) -> None:
        self.ids = _Ids()
        self.seen: set[str] = set()
        self._view_ids: ViewCounts[str] = ViewCounts(self.ids.shown.block)

    def observe(self, msg: Message) -> None:
        """``msg``'s identifiers are now known to the agent."""
        self.seen |= self.ids.shown.msg(msg)

    def measure(self, call: Message, proj: Projection) -> Recall:
        """The recall of ``call`` (the recorded output) given what the policy sent (``proj``):
        an identifier is there when a projected message or the system prompt carries it."""
        self._view_ids.move_to(proj.messages)
        uses = [x for x in self.ids.used(call) if x in self.seen]
        forgotten = sorted(x for x in uses if not self._view_ids.holds(x) and x not in proj.system)
        return Recall(len(uses) - len(forgotten), len(uses), forgotten)


class FidelityMeter:
    """``FidelityTracker`` over the replay (read recall, probes, re-fetches, on the files' words:
    a line-number gutter is not a word), ``ContentRecall`` for content recall as the shared
    anchor script counts it (a gutter is a word), and how many probed compactions kept the latest
    user request whole. ``count_text``: tokens of a text."""

    def __init__(self, system: str, count_text: Callable[[str], int]) -> None:
        self.tracker = FidelityTracker(system, count_text)
        self.content = ContentRecall(system)  # content recall alone, gutters as words
        self.requests_whole = 0
        self.requests_probed = 0

    def observe(self, msg: Message) -> None:
        """Fold ``msg`` into what later calls can reuse."""
        self.tracker.observe(msg)
        self.content.observe(msg)

    def measure(self, call: Message, proj: Projection) -> CallFidelity:
        """The fidelity figures of ``call`` given ``proj``, probed when ``proj``'s events hold a
        compaction that did not fail: content recall's ``hits`` / ``grounded`` from the anchor's
        count, the rest from the files' words."""
        compacted = any(e.layer in COMPACTION_LAYERS and "error" not in e.details for e in proj.events)
        fid = self.tracker.measure(call, proj.messages, proj.system, compaction=compacted)
        anchored = self.content.measure(call, proj.messages, proj.system)
        fid.hits, fid.grounded = anchored.hits, anchored.grounded
        if fid.request_whole is not None:
            self.requests_probed += 1
            self.requests_whole += fid.request_whole
        return fid


def _provider(session: Session, model: ModelInfo) -> str:
    if model.provider == "anthropic" or (session.format == "claude-code" and model.provider != "openai"):
        return "anthropic"
    return "openai"


def _validate(provider: str, messages: list[Message], system: str, model: str) -> list[str]:
    if provider == "anthropic":
        return validate_anthropic(to_anthropic(messages, system=system, model=model))
    return validate_openai_chat(to_openai_chat(messages, system=system, model=model))


def request_violations(provider: str, proj: Projection, model: str) -> int:
    """The rule violations of the request the policy would send for ``proj`` to ``provider``
    (``"anthropic"``: the Messages API; else OpenAI Chat Completions) for ``model``."""
    return len(_validate(provider, proj.messages, proj.system, model))


class RequestMeter:
    """``request_violations`` at call after call of one session, each request body checked from
    its first message that differs from the previous call's (``formats.validate_incremental``:
    the same problems as checking it whole)."""

    def __init__(self, provider: str, model: str) -> None:
        self.provider = provider
        self.model = model
        self.checker = RequestChecker("anthropic" if provider == "anthropic" else "openai")
        # the blocks and messages already encoded, reused as they are (a body is only read here)
        self.memo = BlockMemo(share_messages=True)
        self.runs = RunMemo()  # the same for OpenAI's runs of messages

    def violations(self, proj: Projection) -> int:
        """The rule violations of the request the policy would send for ``proj``."""
        if self.provider == "anthropic":
            body = to_anthropic(proj.messages, system=proj.system, model=self.model, memo=self.memo)
        else:
            body = to_openai_chat(proj.messages, system=proj.system, model=self.model, memo=self.runs)
        return len(self.checker.validate(body))
