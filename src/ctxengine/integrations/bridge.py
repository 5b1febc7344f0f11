"""``EngineBridge``: one conversation's ``ContextEngine`` behind a framework's model-input hook.

Every framework hands its hook the whole history before each model call (LangChain's state
messages, the Agents SDK's input items, PydanticAI's message list). The bridge works out which
items are new, ingests them into the engine as neutral messages (one message per framework item,
built by the framework's ``Converter``), assembles the projection and hands the framework its own
items back: the original object wherever the engine left a message as it was (so everything the
framework keeps beside our blocks survives), a converted one where the engine changed it (an
offloaded tool result, a summary).

Which items are new: the list extends the transcript the bridge has seen (LangChain, the Agents
SDK: the framework keeps the full history), or extends what the bridge returned last time
(PydanticAI keeps a history processor's output as the run's history). Anything else is another
conversation: the bridge starts a new engine session over the new list (``stats.resets``).

Failure (DESIGN: fail loudly, lose nothing): an exception anywhere inside (conversion, engine,
the pairing check) sends the framework's input to the model unchanged, warns once
(``IntegrationWarning``), logs every time and counts in ``stats.fallbacks``; the engine is then
rebuilt from the transcript at the next call. Before the model sees the items, the bridge converts
them back to neutral messages and checks pairing (``layers.pairing.find_violations`` and the
OpenAI Chat rules O2/O3 of ``formats.validate``): a breach is such a failure.

Usage: an assistant message that carries the provider's usage (the converter fills
``Message.usage`` from the framework's own report) anchors the engine's ledger before the next
assembly (``ContextEngine.after_turn``); a framework whose items carry none reports it with
``report_usage``.
"""

from __future__ import annotations

import logging
import threading
import time
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Generic, Protocol, TypeVar

from ctxengine.engine.core import ContextEngine, Projection
from ctxengine.formats.openai_writer import to_openai_chat
from ctxengine.formats.validate import validate_openai_chat
from ctxengine.layers.pairing import find_violations
from ctxengine.llm import LLMClient
from ctxengine.messages.model import Message, Usage
from ctxengine.policy.registry import Policy, get_policy
from ctxengine.replay import COMPACTION_LAYERS
from ctxengine.store import SessionStore, SQLiteStore

log = logging.getLogger(__name__)

F = TypeVar("F")

# find_violations kinds that are about pairing (an empty message is the framework's own business)
PAIRING_KINDS = frozenset(
    {
        "missing_result",
        "misplaced_result",
        "duplicate_result",
        "orphan_result",
        "duplicate_call",
        "misplaced_call",
    }
)
PAIRING_RULES = ("(O2)", "(O3)")  # formats.validate: a tool call answered right after, a result has its call


class IntegrationWarning(UserWarning):
    """The engine failed inside a framework hook; the model got the framework's input unchanged."""


class PairingError(Exception):
    """The items about to be handed to the model break tool-call / tool-result pairing."""


class Converter(Protocol[F]):
    """A framework's message conversion (one framework item <-> one neutral ``Message``)."""

    def to_message(self, item: F, message_id: str) -> Message:
        """The neutral message of ``item`` with id ``message_id``; ``usage`` filled when the
        framework reports it on the item. Raises on an item it cannot read."""
        ...

    def from_message(self, message: Message, original: F | None) -> list[F]:
        """Framework items for ``message``; ``original`` is the item it was built from when the
        engine changed it (carry over what the neutral model does not hold), else None."""
        ...


@dataclass
class BridgeStats:
    """What the bridge did. Tokens are counted by the engine's counter (system prompt and tool
    definitions included in ``largest_input``)."""

    calls: int = 0  # model calls whose input the engine shaped
    fallbacks: int = 0  # model calls that got the framework's input unchanged (an engine failure)
    resets: int = 0  # the history did not extend the one seen: a new engine session started
    largest_input: int = 0  # tokens of the largest model input handed over
    compactions: int = 0  # compaction events (clearing, summary, overflow guard)
    offloads: int = 0  # tool results offloaded to the artifact store (tool-result budget)
    usage_reports: int = 0  # provider usage reports fed to the engine's ledger
    last_error: str = ""


class EngineBridge(Generic[F]):
    """See the module docstring. ``policy``: a ``Policy`` or a built-in name; ``model``,
    ``window`` (tokens) and ``llm`` as for ``ContextEngine``; ``store`` keeps the transcript and
    the offloaded originals (default: an in-memory ``SQLiteStore``); ``session_id`` names the
    engine's session in it. Thread-safe (one call at a time)."""

    def __init__(
        self,
        converter: Converter[F],
        *,
        policy: Policy | str = "default",
        model: str | None = None,
        window: int | None = None,
        store: SessionStore | None = None,
        session_id: str = "session",
        llm: LLMClient | None = None,
    ) -> None:
        self.converter = converter
        self.policy = get_policy(policy) if isinstance(policy, str) else policy
        self.model, self.window, self.llm = model, window, llm
        self._own_store = store is None
        self.store: SessionStore = store if store is not None else SQLiteStore()
        self.session_id = session_id
        self.stats = BridgeStats()
        self.transcript: list[F] = []  # every item seen, in order (the full history)
        self.messages: list[Message] = []  # their neutral twins
        self._transcript_tokens = 0
        self._output: list[F] = []  # what the last call handed the model
        self._sources: dict[str, tuple[Message, F]] = {}  # neutral id -> (message, its item)
        self._by_item: dict[int, tuple[F, Message]] = {}  # id(item) -> (item, its message)
        self._engine: ContextEngine | None = None
        self._ingested = 0  # transcript items the current engine has
        self._prefix: tuple[str, str] | None = None  # (system prompt, prefix text) bootstrapped
        self._assembled = False
        self._generation = 0
        self._warned = False
        self._lock = threading.Lock()
        self._serial = 0

    # ---------------------------------------------------------------- public

    @property
    def engine(self) -> ContextEngine:
        """The current engine (built on first use, rebuilt after a failure or a new conversation)."""
        if self._engine is None:
            sid = self.session_id if self._generation == 0 else f"{self.session_id}#{self._generation}"
            self._engine = ContextEngine(
                self.policy,
                model=self.model,
                window=self.window,
                store=self.store,
                session_id=sid,
                llm=self.llm,
            )
            self._ingested, self._prefix, self._assembled = 0, None, False
        return self._engine

    @property
    def transcript_tokens(self) -> int:
        """Tokens of the whole transcript as one request (system prompt and tools included)."""
        fixed = self._engine.ledger.state.fixed_prefix if self._engine is not None else 0
        return fixed + self._transcript_tokens

    def project(
        self,
        items: Sequence[F],
        *,
        system: str = "",
        prefix: str | None = None,
        finish: Callable[[list[F]], list[F]] | None = None,
    ) -> list[F]:
        """The items to hand the model instead of ``items`` (the framework's whole history).
        ``system``: the system prompt; ``prefix``: the text of everything sent before the
        messages (system prompt and tool definitions; default ``system``), whose tokens are the
        fixed prefix; ``finish``: the framework's last touch on the converted projection (before
        the pairing check). Never raises: on failure it returns ``items`` unchanged."""
        items = list(items)
        with self._lock:
            try:
                out = self._project(items, system, system if prefix is None else prefix, finish)
            except Exception as exc:
                self._fail(exc)
                out = items
            self._output = out
            return out

    def after_last_output(self, items: Sequence[F]) -> list[F]:
        """The items of ``items`` that came after the last call's input (``[]`` when ``items``
        does not start with it)."""
        with self._lock:
            for known in (self._output, self.transcript):
                n = len(known)
                if len(items) >= n and list(items[:n]) == known:
                    return list(items[n:])
            return []

    def report_usage(self, usage: Usage | None) -> None:
        """Feed the provider's usage of the call just made to the engine (``after_turn``)."""
        with self._lock:
            if self._engine is None or not self._assembled:
                return
            try:
                self._after_turn(usage)
            except Exception as exc:
                self._fail(exc)

    def close(self) -> None:
        """Release the store when the bridge made it."""
        if self._own_store:
            self.store.close()

    # ---------------------------------------------------------------- internals

    def _project(
        self, items: list[F], system: str, prefix: str, finish: Callable[[list[F]], list[F]] | None
    ) -> list[F]:
        tail = self._new_items(items)
        for item in tail:
            self._serial += 1
            msg = self.converter.to_message(item, f"m{self._serial}")
            self.transcript.append(item)
            self.messages.append(msg)
            self._sources[msg.id] = (msg, item)
            self._by_item[id(item)] = (item, msg)
            self._transcript_tokens += self.engine.counter.count_message(msg)
        engine = self.engine
        if self._prefix != (system, prefix):
            engine.bootstrap(system=system, fixed_prefix_tokens=engine.counter.count_text(prefix))
            self._prefix = (system, prefix)
        new = self.messages[self._ingested :]
        for msg in new:
            engine.ingest(msg)
            self._ingested += 1
        newest = next((m for m in reversed(new) if m.role == "assistant"), None)
        if newest is not None and newest.usage is not None and self._assembled:
            self._after_turn(newest.usage)
        proj = engine.assemble(now=time.time())
        self._assembled = True
        out = self._to_framework(proj.messages)
        if finish is not None:
            out = finish(out)
        self._check(out)
        self._record(proj, engine)
        return out

    def _new_items(self, items: list[F]) -> list[F]:
        for known in (self.transcript, self._output):
            n = len(known)
            if n and len(items) >= n and items[:n] == known:
                return items[n:]
        if self.transcript:
            log.info("history does not extend the one seen: a new engine session")
            self.stats.resets += 1
            self._restart()
            self.transcript, self.messages, self._transcript_tokens = [], [], 0
            self._sources, self._by_item = {}, {}
        return items

    def _after_turn(self, usage: Usage | None) -> None:
        assert self._engine is not None
        self._engine.after_turn(usage)
        if usage is not None:
            self.stats.usage_reports += 1

    def _to_framework(self, messages: list[Message]) -> list[F]:
        out: list[F] = []
        for m in messages:
            src = self._sources.get(m.id)
            if src is not None and m.role == src[0].role and m.blocks == src[0].blocks:
                out.append(src[1])
            else:
                out.extend(self.converter.from_message(m, src[1] if src is not None else None))
        return out

    def _check(self, out: list[F]) -> None:
        """Raise ``PairingError`` when the items for the model break pairing (read back as the
        model will get them)."""
        back: list[Message] = []
        for k, item in enumerate(out):
            known = self._by_item.get(id(item))
            back.append(
                known[1]
                if known is not None and known[0] is item
                else self.converter.to_message(item, f"out{k}")
            )
        problems = [f"{v.kind}: {v.detail}" for v in find_violations(back) if v.kind in PAIRING_KINDS]
        body = to_openai_chat(back, model=self.model or "unknown")
        problems += [p for p in validate_openai_chat(body) if p.endswith(PAIRING_RULES)]
        if problems:
            raise PairingError(f"{len(problems)} pairing problem(s): {'; '.join(problems[:3])}")

    def _record(self, proj: Projection, engine: ContextEngine) -> None:
        s = self.stats
        s.calls += 1
        s.largest_input = max(s.largest_input, engine.ledger.state.fixed_prefix + proj.content_estimate)
        for e in proj.events:
            if "error" in e.details:
                continue
            if e.layer in COMPACTION_LAYERS:
                s.compactions += 1
            elif e.layer == "tool_result_budget":
                s.offloads += 1

    def _fail(self, exc: Exception) -> None:
        self.stats.fallbacks += 1
        self.stats.last_error = f"{type(exc).__name__}: {exc}"
        log.warning("ctxengine failed; the model gets the input unchanged: %s", self.stats.last_error)
        if not self._warned:
            self._warned = True
            warnings.warn(
                f"ctxengine failed ({self.stats.last_error}); the model got the framework's input "
                "unchanged (further failures are logged and counted in stats.fallbacks)",
                IntegrationWarning,
                stacklevel=4,
            )
        self._restart()

    def _restart(self) -> None:
        """Drop the engine: the next call builds a new one from the transcript."""
        self._engine = None
        self._generation += 1
