"""Property tests of the whole cascade: random agent sessions (``strategies.sessions``, valid and
corrupted) driven through ``ContextEngine`` under policies with thresholds small enough that every
layer fires. After EVERY ``assemble``:

- the projection keeps the pairing invariant (``find_violations == []``);
- both writers' request bodies pass the provider-rule validators with no problem;
- the engine's ``history`` is exactly what was ingested (same objects, unchanged content);
- on valid sessions, the newest ingested message is the projection's last message (shown with the
  frozen tool-result replacements, if any): nothing newest is lost.
"""

from __future__ import annotations

import json
import subprocess
import sys
import warnings
from collections import Counter
from pathlib import Path
from typing import Any

import msgspec
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from ctxengine.engine.core import RECORDED_ORIGINS, ContextEngine, Projection
from ctxengine.formats.anthropic_writer import to_anthropic
from ctxengine.formats.openai_writer import to_openai_chat
from ctxengine.formats.validate import validate_anthropic, validate_openai_chat
from ctxengine.layers.base import message_with_results
from ctxengine.layers.pairing import find_violations
from ctxengine.messages.model import Message, Usage
from ctxengine.models.registry import WindowWarning
from ctxengine.policy.registry import (
    NONE,
    CacheClear,
    CompactionSettings,
    IdleClear,
    OverflowGuard,
    Policy,
    SessionMemory,
    SessionNotes,
    Settings,
    ToolResultBudget,
)
from policies import LAYER_DEFAULT as DEFAULT
from policies import off
from strategies import sessions

MODEL = "claude-sonnet-4-5"

# ``default`` with thresholds small enough that the (small) random sessions trip every layer.
SMALL = DEFAULT.with_(
    DEFAULT.settings(CompactionSettings).with_(
        at_share=0.3, keep_recent_tokens=60, keep_recent_min_messages=1, min_gain=0.0
    ),
    DEFAULT.settings(ToolResultBudget).with_(
        max_chars=12, exempt_tools=(), message_max_chars=20, preview_chars=40, tail_chars=10
    ),
    DEFAULT.settings(IdleClear).with_(gap_s=100.0, keep_recent=1),
    DEFAULT.settings(CacheClear).with_(
        trigger=0.2, target=0.1, keep_recent=1, at_least=0, min_result_tokens=0
    ),
    DEFAULT.settings(OverflowGuard).with_(reserve=2_000),
    # session notes early, so session-memory compaction has notes to use
    DEFAULT.settings(SessionNotes).with_(first_tokens=100, every_tokens=50, every_tool_calls=1),
    DEFAULT.settings(SessionMemory).with_(keep_min_tokens=60, keep_max_tokens=400),
    name="small",
    shares_of_free_window=False,  # shares of the whole window, as the small sessions were sized for
)
SMALL_STRUCTURED = off(SMALL, SessionMemory).with_(name="small-structured")
_CASCADE: tuple[type[Settings], ...] = (
    ToolResultBudget,
    IdleClear,
    CacheClear,
    CompactionSettings,
    OverflowGuard,
)


def _alone(kind: type[Settings]) -> Policy:
    """``SMALL`` with ``kind``'s layer on and the other layers of ``_CASCADE`` off."""
    on = SMALL.settings(kind).with_(
        **({"mode": "summary"} if kind is CompactionSettings else {"enabled": True})
    )
    return off(SMALL, *(other for other in _CASCADE if other is not kind)).with_(
        on, name=f"only-{kind.table}"
    )


POLICIES: list[Policy] = [
    SMALL,
    SMALL_STRUCTURED,
    DEFAULT,
    NONE,
    _alone(ToolResultBudget),
    _alone(IdleClear),
    _alone(CacheClear),
    _alone(CompactionSettings),
    _alone(OverflowGuard),
]


def check_projection(proj: Projection, *, tolerate_reused_call_ids: bool = False) -> None:
    """The invariants every projection must hold, whatever the input.

    ``tolerate_reused_call_ids`` skips exactly one known bug (see
    ``test_corrupt_sessions_never_reuse_a_call_id_in_the_projection``): a tool call id used again
    in a later turn is not renamed by the engine's incremental repair."""
    violations = find_violations(proj.messages)
    anthropic = validate_anthropic(to_anthropic(proj.messages, system=proj.system, model=MODEL))
    if tolerate_reused_call_ids:
        violations = [v for v in violations if v.kind != "duplicate_call"]
        anthropic = [p for p in anthropic if "used twice (A3)" not in p]
    assert violations == []
    assert anthropic == []
    openai = to_openai_chat(proj.messages, system=proj.system, model="gpt-4o")
    assert validate_openai_chat(openai) == []


def drive(
    msgs: list[Message],
    policy: Policy,
    *,
    window: int,
    fixed: int,
    anchor: float,
    valid: bool,
    tolerate_reused_call_ids: bool = False,
) -> tuple[ContextEngine, list[Projection]]:
    """Feed ``msgs`` the way a live agent does: assemble before every model call (the first
    assistant message of a run: Claude Code records one response as several assistant messages),
    then ingest the response and report usage; assemble once more at the end."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", WindowWarning)
        engine = ContextEngine(policy, model=MODEL, window=window)
    engine.bootstrap(system="You are a coding agent.", fixed_prefix_tokens=fixed)
    snapshot = [msgspec.to_builtins(m) for m in msgs]
    kept: list[Message] = []  # what history must hold
    projections: list[Projection] = []

    def call(now: float | None) -> None:
        proj = engine.assemble(now=now)
        projections.append(proj)
        check_projection(proj, tolerate_reused_call_ids=tolerate_reused_call_ids)
        assert len(engine.history) == len(kept)
        assert all(a is b for a, b in zip(engine.history, kept, strict=True))
        if valid and kept:
            assert proj.messages, "the projection lost everything"
            expected = message_with_results(kept[-1], engine.replacements)
            assert proj.messages[-1] == expected
        engine.after_turn(Usage(input_tokens=max(1, round(proj.tokens * anchor))))

    prev_role = ""
    for m in msgs:
        if m.role == "assistant" and prev_role != "assistant":
            call(m.timestamp)
        prev_role = m.role
        engine.ingest(m)
        if m.origin not in RECORDED_ORIGINS:
            kept.append(m)
    call(msgs[-1].timestamp + 10_000 if msgs and msgs[-1].timestamp else None)
    # ingesting never changed a message it was given
    assert [msgspec.to_builtins(m) for m in msgs] == snapshot
    return engine, projections


engine_params = st.fixed_dictionaries(
    {
        "policy": st.sampled_from(POLICIES),
        "window": st.integers(16_000, 40_000),
        "fixed": st.integers(0, 20_000),
        "anchor": st.sampled_from([0.8, 1.0, 1.3]),
    }
)

PROPERTY = settings(
    max_examples=100,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


@PROPERTY
@given(msgs=sessions(corrupt=False, max_turns=8), params=engine_params)
def test_valid_sessions_keep_every_invariant(msgs: list[Message], params: dict[str, Any]) -> None:
    drive(msgs, valid=True, **params)


@PROPERTY
@given(msgs=sessions(corrupt=True, max_turns=8), params=engine_params)
def test_corrupt_sessions_are_repaired_under_every_policy(
    msgs: list[Message], params: dict[str, Any]
) -> None:
    drive(msgs, valid=False, tolerate_reused_call_ids=True, **params)


@settings(max_examples=60, deadline=None, derandomize=True, database=None, phases=[Phase.generate])
@given(msgs=sessions(corrupt=True, max_turns=8), params=engine_params)
def test_corrupt_sessions_never_reuse_a_call_id_in_the_projection(
    msgs: list[Message], params: dict[str, Any]
) -> None:
    drive(msgs, valid=False, **params)


def coverage_sweep() -> dict[str, int]:
    """The layers' decisions (layer -> events) over fixed runs of the random sessions under
    ``SMALL`` and variants of it whose thresholds these short sessions reach."""
    seen: Counter[str] = Counter()

    def sweep(policies: list[Policy]) -> None:
        @settings(max_examples=60, deadline=None, derandomize=True, database=None)
        @given(
            msgs=sessions(corrupt=None, min_turns=3, max_turns=8),
            policy=st.sampled_from(policies),
            fixed=st.integers(2_000, 19_500),
        )
        def run(msgs: list[Message], policy: Policy, fixed: int) -> None:
            _, projections = drive(
                msgs,
                policy,
                window=20_000,
                fixed=fixed,
                anchor=1.0,
                valid=False,
                tolerate_reused_call_ids=True,
            )
            seen.update(e.layer for p in projections for e in p.events)

        run()

    sweep([SMALL, SMALL_STRUCTURED, off(SMALL, CompactionSettings)])
    sweep(
        [
            SMALL.with_(SMALL.settings(CompactionSettings).with_(at_share=0.05)),
            SMALL_STRUCTURED.with_(SMALL_STRUCTURED.settings(CompactionSettings).with_(at_share=0.05)),
            SMALL.with_(
                SMALL.settings(CacheClear).with_(trigger=0.1, target=0.0),
                SMALL.settings(CompactionSettings).with_(at_share=0.3),
            ),
            off(SMALL.with_(SMALL.settings(CacheClear).with_(trigger=0.05, target=0.0)), CompactionSettings),
        ]
    )
    # cache-aware clearing alone: a drift of the drawn sessions (see the test below) must not leave it
    # without a run that reaches it
    sweep([off(SMALL.with_(SMALL.settings(CacheClear).with_(trigger=0.05, target=0.0)), CompactionSettings)])
    return dict(seen)


def test_the_small_policy_exercises_every_layer() -> None:
    """The properties above are only worth something if the layers act on the random sessions:
    over a fixed (derandomized) run under ``SMALL``, every layer of the cascade makes decisions.
    The reserves are derived for the window (issue 9, item 4) and an early compaction waits until
    it leaves room, so a second run sets thresholds (compaction, clearing) low enough for these
    short sessions to reach them. Run in a fresh interpreter: Hypothesis (6.170 here) draws values from
    the literals of every local module in ``sys.modules``, so after other tests have imported more
    of ctxengine the derandomized run generates other sessions (traced: the inputs differ from the
    fifth example on; the engine's decisions on the same inputs do not), and which layers a fixed
    run reaches must not hang on the order tests run in."""
    code = "import json, test_layers_property as t; print(json.dumps(t.coverage_sweep()))"
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=Path(__file__).parent, capture_output=True, text=True, check=True
    )
    seen = json.loads(out.stdout.strip().splitlines()[-1])
    assert set(seen) >= {
        "tool_result_budget",
        "idle_clear",
        "cache_clear",
        "session_notes",
        "session_memory_compact",
        "summary_compact",
        "overflow_guard",
    }
