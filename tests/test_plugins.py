"""The engine registry: core and plugin owners, entry-point loading, and the quarantine of a
plugin engine that raises (the core engine takes over with the session so far replayed)."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any, ClassVar

import pytest

import ctxengine.engine.plugins as plugins
from ctxengine.engine.core import ContextEngine, Projection
from ctxengine.engine.plugins import (
    CORE_OWNER,
    ENTRY_POINT_GROUP,
    EngineRegistry,
    GuardedEngine,
    RegistrationError,
)
from ctxengine.layers.base import LayerEvent
from ctxengine.llm import ToolDefinition
from ctxengine.messages.model import Message, RecordedCompaction, Text, ToolCall, ToolResult, Usage
from ctxengine.policy.registry import DEFAULT

MODEL = "claude-sonnet-4-5"
KW: dict[str, Any] = {"policy": DEFAULT, "model": MODEL}


def session(n: int = 4) -> list[Message]:
    msgs = [Message("user", (Text("fix /srv/app/parser.py"),), "u0")]
    for i in range(n):
        msgs.append(Message("assistant", (ToolCall(f"c{i}", "Read", {"file_path": f"/m{i}.py"}),), f"a{i}"))
        msgs.append(
            Message("user", (ToolResult(f"c{i}", (Text(f"contents of module {i} " * 40),)),), f"r{i}")
        )
    return msgs


class PluginEngine:
    """A third-party engine: delegates to a core engine, and raises where it is told to."""

    instances: ClassVar[list[PluginEngine]] = []

    def __init__(self, *, fail_in: str = "", fail_after: int = 0, **kwargs: Any) -> None:
        if fail_in == "__init__":
            raise RuntimeError("plugin cannot start")
        self.fail_in = fail_in
        self.fail_after = fail_after
        self.calls: dict[str, int] = {}
        self.inner = ContextEngine(**kwargs)
        PluginEngine.instances.append(self)

    def _tick(self, method: str) -> None:
        self.calls[method] = self.calls.get(method, 0) + 1
        if method == self.fail_in and self.calls[method] > self.fail_after:
            raise ValueError(f"plugin bug in {method}")

    def bootstrap(
        self,
        *,
        system: str = "",
        fixed_prefix_tokens: int | None = None,
        recorded_compactions: Sequence[RecordedCompaction] = (),
        tools: Sequence[ToolDefinition] = (),
    ) -> None:
        self._tick("bootstrap")
        self.inner.bootstrap(
            system=system,
            fixed_prefix_tokens=fixed_prefix_tokens,
            recorded_compactions=recorded_compactions,
            tools=tools,
        )

    def ingest(self, message: Message) -> list[LayerEvent]:
        self._tick("ingest")
        return self.inner.ingest(message)

    def assemble(self, budget: int | None = None, *, now: float | None = None) -> Projection:
        self._tick("assemble")
        return self.inner.assemble(budget, now=now)

    def after_turn(self, usage: Usage | None) -> None:
        self._tick("after_turn")
        self.inner.after_turn(usage)

    def compact(
        self, force: bool = True, reason: str = "manual", instructions: str = ""
    ) -> LayerEvent | None:
        self._tick("compact")
        return self.inner.compact(force, reason, instructions)

    def maintain(self) -> list[LayerEvent]:
        self._tick("maintain")
        return self.inner.maintain()

    def dispose(self) -> None:
        self._tick("dispose")
        self.inner.dispose()


def plugin_factory(fail_in: str = "", fail_after: int = 0) -> Any:
    def factory(**kwargs: Any) -> PluginEngine:
        return PluginEngine(fail_in=fail_in, fail_after=fail_after, **kwargs)

    return factory


# ================================================================ registration


def test_core_engine_is_registered_under_core() -> None:
    reg = EngineRegistry()
    assert "ctxengine" in reg.ids()
    assert reg.owner("ctxengine") == CORE_OWNER == "core"
    engine = reg.create("ctxengine", **KW)
    assert type(engine) is ContextEngine  # core engines are not wrapped


def test_a_plugin_cannot_take_the_core_id() -> None:
    reg = EngineRegistry()
    with pytest.raises(RegistrationError, match="core"):
        reg.register("ctxengine", plugin_factory(), owner="plugin:evil")
    assert reg.owner("ctxengine") == "core"
    assert type(reg.create("ctxengine", **KW)) is ContextEngine


@pytest.mark.parametrize("owner", ["plugin:", "vendor", "", "Plugin:x", "core:x", "plugins:x"])
def test_the_owner_must_be_core_or_plugin_name(owner: str) -> None:
    reg = EngineRegistry()
    with pytest.raises(RegistrationError, match="owner"):
        reg.register("fast", plugin_factory(), owner=owner)
    assert "fast" not in reg.ids()


def test_a_plugin_id_cannot_be_taken_by_another_owner() -> None:
    reg = EngineRegistry()
    first, second = plugin_factory(), plugin_factory()
    reg.register("fast", first, owner="plugin:acme")
    with pytest.raises(RegistrationError, match="plugin:acme"):
        reg.register("fast", second, owner="plugin:other")
    with pytest.raises(RegistrationError):
        reg.register("fast", second, owner="core")
    assert reg.owner("fast") == "plugin:acme"
    reg.register("fast", second, owner="plugin:acme")  # its own owner may replace it
    assert reg.ids() == ["ctxengine", "fast", "identifiers-only", "own-words-only"]


def test_an_unknown_engine_id_names_the_known_ones() -> None:
    reg = EngineRegistry()
    with pytest.raises(KeyError, match="ctxengine"):
        reg.create("nope", **KW)


# ================================================================ quarantine


def test_a_healthy_plugin_engine_answers_itself() -> None:
    reg = EngineRegistry()
    reg.register("fast", plugin_factory(), owner="plugin:acme")
    PluginEngine.instances.clear()
    engine = reg.create("fast", **KW)
    assert isinstance(engine, GuardedEngine)
    engine.bootstrap()
    for m in session():
        engine.ingest(m)
    proj = engine.assemble()
    assert engine.quarantined is None
    assert [m.id for m in proj.messages] == [m.id for m in session()]
    assert PluginEngine.instances[-1].calls["assemble"] == 1


@pytest.mark.parametrize(
    ("fail_in", "fail_after"),
    [("__init__", 0), ("ingest", 3), ("assemble", 0), ("after_turn", 0), ("maintain", 0)],
)
def test_a_raising_plugin_is_quarantined_and_core_takes_over_with_the_session(
    fail_in: str, fail_after: int, caplog: pytest.LogCaptureFixture
) -> None:
    reg = EngineRegistry()
    reg.register("flaky", plugin_factory(fail_in, fail_after), owner="plugin:flaky")
    PluginEngine.instances.clear()
    caplog.set_level(logging.WARNING, logger="ctxengine.engine.plugins")
    engine = reg.create("flaky", **KW)
    assert isinstance(engine, GuardedEngine)
    engine.bootstrap(system="You are a coding agent.", fixed_prefix_tokens=500)
    msgs = session()
    for m in msgs[:5]:
        engine.ingest(m)
    engine.after_turn(Usage(input_tokens=2_000))
    engine.maintain()
    for m in msgs[5:]:
        engine.ingest(m)
    proj = engine.assemble()

    assert engine.quarantined is not None
    expected = "RuntimeError" if fail_in == "__init__" else "ValueError"
    assert engine.quarantined.startswith(expected)
    assert "quarantined" in caplog.text and "flaky" in caplog.text
    # the core engine has the whole session, in order, and the system prompt
    assert [m.id for m in proj.messages] == [m.id for m in msgs]
    assert proj.system == "You are a coding agent."
    # ... and answers from now on; the plugin is not called again
    calls_before = [dict(p.calls) for p in PluginEngine.instances]
    late = Message("user", (Text("and now the tests"),), "late")
    engine.ingest(late)
    assert engine.assemble().messages[-1] is late
    assert [p.calls for p in PluginEngine.instances] == calls_before


# the made-up usage (5,000 against ~2,100 predicted) is a gap, said by each engine that takes it,
# the take-over's included (tests/test_usage_gap.py); this test is about the prediction after it
@pytest.mark.filterwarnings("ignore::ctxengine.engine.usage_gap.UsageGapWarning")
def test_after_takeover_the_prediction_matches_the_core_engine() -> None:
    def drive(engine: Any) -> Projection:
        engine.bootstrap(system="sys", fixed_prefix_tokens=1_000)
        msgs = session()
        for m in msgs:
            engine.ingest(m)
        engine.assemble()
        engine.after_turn(Usage(input_tokens=5_000))
        engine.ingest(Message("user", (Text("more " * 80),), "more"))
        return engine.assemble()

    reg = EngineRegistry()
    reg.register("flaky", plugin_factory("assemble", 1), owner="plugin:flaky")  # fails on the 2nd call
    guarded = reg.create("flaky", **KW)
    taken_over = drive(guarded)
    assert guarded.quarantined is not None
    core = drive(reg.create("ctxengine", **KW))
    assert taken_over.tokens == core.tokens


def test_a_failing_core_engine_after_takeover_raises() -> None:
    """Nothing is left to fall back to: the error reaches the caller."""
    reg = EngineRegistry()
    reg.register("flaky", plugin_factory("ingest", 0), owner="plugin:flaky")
    engine = reg.create("flaky", **KW)
    engine.bootstrap()
    engine.ingest(Message("user", (Text("hi"),), "u0"))
    assert engine.quarantined is not None
    with pytest.raises(AttributeError):
        engine.ingest("not a message")  # type: ignore[arg-type]


# ================================================================ entry points


class FakeDist:
    def __init__(self, name: str) -> None:
        self.name = name


class FakeEntryPoint:
    def __init__(self, name: str, target: Any, dist: str | None = None, module: str = "thirdparty") -> None:
        self.name = name
        self._target = target
        self.dist = FakeDist(dist) if dist else None
        self.module = module

    def load(self) -> Any:
        if isinstance(self._target, Exception):
            raise self._target
        return self._target


def test_entry_points_register_plugins_and_refuse_core_ids(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    good = plugin_factory()
    points = [
        FakeEntryPoint("ctxengine", plugin_factory(), dist="hijack"),  # tries to take the core id
        FakeEntryPoint("fast", good, dist="acme-ctx"),
        FakeEntryPoint("broken", ImportError("no module named acme_broken"), dist="acme-broken"),
        FakeEntryPoint("nodist", plugin_factory(), module="loose_module"),
    ]
    groups: list[str] = []

    def fake_entry_points(*, group: str) -> list[FakeEntryPoint]:
        groups.append(group)
        return points if group == ENTRY_POINT_GROUP else []

    monkeypatch.setattr(plugins, "entry_points", fake_entry_points)
    caplog.set_level(logging.WARNING, logger="ctxengine.engine.plugins")
    reg = EngineRegistry()
    added = reg.load_entry_points()

    assert groups == ["ctxengine.engines"]
    assert added == ["fast", "nodist"]
    assert reg.owner("ctxengine") == "core"
    assert type(reg.create("ctxengine", **KW)) is ContextEngine
    assert reg.owner("fast") == "plugin:acme-ctx"
    assert reg.owner("nodist") == "plugin:loose_module"
    assert "broken" not in reg.ids()
    refused = [r for r in caplog.records if "ctxengine" in r.getMessage() and "hijack" in r.getMessage()]
    assert refused and refused[0].levelno == logging.WARNING
    assert any("broken" in r.getMessage() for r in caplog.records)
    engine = reg.create("fast", **KW)
    assert isinstance(engine, GuardedEngine)
    engine.bootstrap()
    engine.ingest(Message("user", (Text("hi"),), "u0"))
    assert [m.id for m in engine.assemble().messages] == ["u0"]
    assert engine.quarantined is None


@pytest.mark.parametrize("fail_in", [None, "compact"])
def test_manual_compaction_instructions_reach_the_engine_through_the_guard(fail_in: str | None) -> None:
    """``compact(instructions=...)`` (OpenClaw's ``/compact [focus]``) passes through a plugin
    engine, and through the core engine that takes over when the plugin raises there."""
    reg = EngineRegistry()
    reg.register("fast", plugin_factory(fail_in=fail_in or ""), owner="plugin:acme")
    engine = reg.create("fast", **KW)
    engine.bootstrap()
    for m in session(100):  # about 20,000 tokens: more than the 10,000 a compaction keeps
        engine.ingest(m)
    event = engine.compact(force=True, instructions="focus on the parser")
    assert event is not None and event.details["instructions"] == "focus on the parser"
    assert (engine.quarantined is not None) == (fail_in is not None)
