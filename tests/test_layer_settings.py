"""The settings records: each layer owns its settings, a ``Policy`` composes them, the built-in
policies and presets are compositions equal to what they were, policy files take one table per
record, and the old flat keys still work with a ``DeprecationWarning`` naming the new place."""

from __future__ import annotations

import json
import re
import warnings
from pathlib import Path
from typing import Any

import msgspec
import pytest

from ctxengine.policy.fields import AT_LEAST_ONE, BY_TABLE, PLACE, SHARES, TOP_LEVEL
from ctxengine.policy.registry import (
    BUILTIN,
    DEFAULT,
    NONE,
    SETTINGS,
    CacheClear,
    CompactionSettings,
    EvictionSettings,
    IdleClear,
    OverflowGuard,
    Policy,
    Restore,
    SessionMemory,
    Settings,
    SummarySettings,
    ToolResultBudget,
    TtlPrune,
    get_policy,
    presets,
    range_problems,
)
from ctxengine.policy.session_keys import HistoryLimits

PINS = Path(__file__).parent / "data" / "policies_before_settings.json"
ALL = {**BUILTIN, **presets()}


def flat(policy: Policy) -> dict[str, Any]:
    """A policy's flat fields as JSON values (tuples as lists), as the pin file holds them."""
    data: dict[str, Any] = json.loads(msgspec.json.encode(policy))
    return data


# ================================================================ equal to what they were


@pytest.mark.parametrize("name", sorted(ALL))
def test_every_built_in_and_preset_has_the_flat_fields_it_had(name: str) -> None:
    pinned = json.loads(PINS.read_text(encoding="utf-8"))
    assert flat(get_policy(name)) == pinned[name]


def test_the_flat_defaults_are_the_records_defaults() -> None:
    pinned = json.loads(PINS.read_text(encoding="utf-8"))
    assert flat(Policy()) == pinned["Policy()"]
    for kind in SETTINGS:
        stored = Policy().settings(kind)
        expected = kind(enabled=stored.enabled) if kind.switchable() else kind()  # type: ignore[call-arg, attr-defined]
        assert stored == expected, kind.__name__


@pytest.mark.parametrize("name", sorted(ALL))
def test_a_policy_is_the_composition_of_its_records(name: str) -> None:
    p = get_policy(name)
    again = Policy.compose(
        *p.all_settings(),
        name=p.name,
        description=p.description,
        shares_of_free_window=p.shares_of_free_window,
    )
    assert again == p


# ================================================================ one owner per field


def test_every_flat_field_belongs_to_exactly_one_record_or_the_top_level() -> None:
    owners: dict[str, list[str]] = {}
    for kind in SETTINGS:
        assert set(kind.flat) == set(kind.__struct_fields__), kind.__name__
        for attr, name in kind.flat.items():
            owners.setdefault(name, []).append(f"{kind.__name__}.{attr}")
    assert {name: where for name, where in owners.items() if len(where) > 1} == {}
    assert set(owners) | TOP_LEVEL == set(Policy.__struct_fields__)
    assert set(owners).isdisjoint(TOP_LEVEL)
    assert len(BY_TABLE) == len(SETTINGS)


def test_the_range_rules_are_the_ones_the_flat_policy_had() -> None:
    assert {
        "tool_result_max_chars",
        "message_results_max_chars",
        "summary_llm_max_output",
        "breaker_failures",
        "summary_max_tokens",
        "summary_stages",
        "notes_max_tokens",
    } == AT_LEAST_ONE
    assert {"cache_clear_trigger", "cache_clear_target", "summary_middle_keep"} == SHARES
    shares = {PLACE[name][0].flat[attr] for name in PLACE for attr in PLACE[name][0].shares}
    assert shares == {name for name in PLACE if name.endswith("_share")} | SHARES


# ================================================================ records


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda: ToolResultBudget(max_chars=0), "ToolResultBudget.max_chars must be at least 1, not 0"),
        (lambda: IdleClear(gap_s=float("nan")), "IdleClear.gap_s must be a finite number, not nan"),
        (
            lambda: CompactionSettings(keep_recent_tokens=-1),
            "CompactionSettings.keep_recent_tokens must not be negative",
        ),
        (
            lambda: CompactionSettings(at_share=1.5),
            "CompactionSettings.at_share is a share (0 to 1), not 1.5",
        ),
        (
            lambda: CacheClear(trigger=0.3, target=0.4),
            "CacheClear.target (0.4) must not exceed trigger (0.3)",
        ),
        (lambda: SummarySettings(middle_keep=2.0), "SummarySettings.middle_keep is a share"),
        (lambda: Restore(files=-2), "Restore.files must not be negative, not -2"),
    ],
)
def test_a_record_out_of_range_raises_value_error_naming_the_field(make: Any, message: str) -> None:
    with pytest.raises(ValueError, match=re.escape(message)):
        make()


def test_records_are_frozen_and_with_validates_again() -> None:
    budget = ToolResultBudget(max_chars=20_000)
    with pytest.raises(AttributeError):
        budget.max_chars = 1  # type: ignore[misc]
    assert budget.with_(preview_chars=500) == ToolResultBudget(max_chars=20_000, preview_chars=500)
    with pytest.raises(ValueError, match=re.escape("ToolResultBudget.message_max_chars must be at least 1")):
        budget.with_(message_max_chars=0)


def test_policy_settings_returns_a_layers_record() -> None:
    assert DEFAULT.settings(ToolResultBudget) == ToolResultBudget(
        max_chars=20_000, window_share=0.05, exempt_tools=(), weigh_tokens=True
    )
    assert DEFAULT.settings(TtlPrune).enabled is False
    assert get_policy("claude-code").settings(SessionMemory).keep_max_tokens == 40_000


def test_compose_leaves_a_switchable_layer_off_unless_listed() -> None:
    p = Policy.compose(IdleClear(gap_s=60.0), name="only-idle")
    assert (p.idle_clear, p.idle_gap_s) == (True, 60.0)
    assert not (p.tool_result_budget or p.cache_clear or p.overflow_guard or p.session_memory or p.ttl_prune)
    assert p.compaction == "summary" and p.restore_files == 5  # records without a switch: defaults
    with pytest.raises(TypeError, match="IdleClear given twice"):
        Policy.compose(IdleClear(), IdleClear(), name="twice")
    with pytest.raises(TypeError, match="not a policy settings record"):
        Policy.compose(HistoryLimits(), name="wrong")  # type: ignore[arg-type]


def test_with_replaces_a_layers_settings_without_warning() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        p = DEFAULT.with_(DEFAULT.settings(IdleClear).with_(gap_s=10.0), name="quick")
    assert (p.name, p.idle_gap_s, DEFAULT.idle_gap_s) == ("quick", 10.0, 3_600.0)
    assert msgspec.structs.replace(p, name="default", idle_gap_s=3_600.0) == DEFAULT


# ================================================================ old flat keys


def test_with_an_old_flat_key_works_and_warns_naming_the_new_place() -> None:
    with pytest.warns(
        DeprecationWarning, match=re.escape("idle_gap_s is deprecated: use [idle_clear] gap_s")
    ):
        p = DEFAULT.with_(idle_gap_s=10.0)
    assert p == DEFAULT.with_(DEFAULT.settings(IdleClear).with_(gap_s=10.0))
    with pytest.warns(DeprecationWarning, match=re.escape("compaction is deprecated: use [compaction] mode")):
        assert DEFAULT.with_(compaction="none").compaction == "none"
    with pytest.raises(TypeError, match="given both"):
        DEFAULT.with_(IdleClear(), idle_gap_s=5.0)


def test_the_warning_points_at_the_caller() -> None:
    with pytest.warns(DeprecationWarning) as caught:
        DEFAULT.with_(tool_result_max_chars=1_000)
    assert caught[0].filename == __file__


# ================================================================ TOML


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "policy.toml"
    path.write_text(text, encoding="utf-8")
    return path


def test_a_policy_file_has_one_table_per_layer(tmp_path: Path) -> None:
    text = (
        'base = "none"\nname = "mine"\n'
        "[idle_clear]\nenabled = true\ngap_s = 60\n"
        "[tool_result_budget]\nenabled = true\nmax_chars = 20000\n"
        '[eviction]\norder = "importance"\n[eviction.limits]\ndm = 20\npeers = { "telegram:alice" = 100 }\n'
    )
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        p = Policy.from_toml(write(tmp_path, text))
    assert p.settings(IdleClear) == IdleClear(gap_s=60.0)
    assert p.settings(ToolResultBudget) == ToolResultBudget(max_chars=20_000)
    assert p.settings(EvictionSettings) == EvictionSettings(
        order="importance", limits=HistoryLimits(dm=20, peers={"telegram:alice": 100})
    )
    assert p.compaction == "none" and p.overflow_guard is False  # from the base
    assert p == NONE.with_(
        IdleClear(gap_s=60.0), ToolResultBudget(max_chars=20_000), p.settings(EvictionSettings), name="mine"
    )


def test_old_flat_keys_in_a_file_still_load_with_a_warning(tmp_path: Path) -> None:
    path = write(tmp_path, 'base = "none"\nidle_gap_s = 60\nidle_clear = true\n[history_limits]\ndm = 3\n')
    with pytest.warns(DeprecationWarning) as caught:
        p = Policy.from_toml(path)
    assert sorted(str(w.message) for w in caught) == [
        "history_limits is deprecated: use [eviction] limits",
        "idle_clear is deprecated: use [idle_clear] enabled",
        "idle_gap_s is deprecated: use [idle_clear] gap_s",
    ]
    assert (p.idle_clear, p.idle_gap_s, p.history_limits.dm) == (True, 60.0, 3)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("[tool_result_budget]\nmax_chars = 0\n", "ToolResultBudget.max_chars must be at least 1"),
        ("[compaction]\nat_share = 1.5\n", "CompactionSettings.at_share is a share (0 to 1), not 1.5"),
        ('[compaction]\nmode = "magic"\n', "[compaction]"),
        ('[idle_clear]\ngap_s = "soon"\n', "[idle_clear]"),
        ("[idle_clear]\ngap_secs = 60\n", "gap_secs"),
        ("[cache_clear]\ntarget = 0.8\n", "CacheClear.target (0.8) must not exceed trigger (0.7)"),
        ("[no_such_layer]\nx = 1\n", "unknown key 'no_such_layer'"),
        ("idle_gap_s = 5\n[idle_clear]\ngap_s = 6\n", "idle_gap_s is given twice"),
    ],
)
def test_a_bad_table_raises_value_error_naming_the_file_and_the_field(
    tmp_path: Path, text: str, message: str
) -> None:
    path = write(tmp_path, text)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        with pytest.raises(ValueError, match=re.escape(str(path))) as info:
            Policy.from_toml(path)
    assert message in str(info.value)


def toml_of(policy: Policy) -> str:
    """``policy`` as a policy file over ``none``: its top-level keys, then one table per record
    (values written as JSON, which TOML reads the same for these types; ``None`` left out)."""
    lines = [f"base = {json.dumps('none')}"]
    lines += [f"{key} = {json.dumps(getattr(policy, key))}" for key in sorted(TOP_LEVEL)]
    for record in policy.all_settings():
        lines.append(f"[{record.table}]")
        for attr, value in msgspec.to_builtins(record).items():
            if isinstance(value, dict):
                pairs = ", ".join(f"{json.dumps(k)} = {json.dumps(v)}" for k, v in value.items())
                lines.append(f"{attr} = {{ {pairs} }}")
            elif value is not None:
                lines.append(f"{attr} = {json.dumps(value)}")
    return "\n".join(lines) + "\n"


@pytest.mark.parametrize("name", sorted(ALL))
def test_every_built_in_round_trips_through_a_policy_file(tmp_path: Path, name: str) -> None:
    policy = get_policy(name)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert Policy.from_toml(write(tmp_path, toml_of(policy))) == policy


def test_range_problems_names_the_flat_field() -> None:
    bad = msgspec.structs.replace(DEFAULT, tool_result_max_chars=0, compact_at_share=1.5)
    assert range_problems(bad) == [
        "tool_result_max_chars must be at least 1, not 0",
        "compact_at_share is a share (0 to 1), not 1.5",
    ]
    with pytest.raises(ValueError, match=re.escape("ToolResultBudget.max_chars")):
        bad.settings(ToolResultBudget)
    assert all(isinstance(r, Settings) for r in DEFAULT.all_settings())
    assert OverflowGuard().enabled and not DEFAULT.settings(SessionMemory).identifier_index


def test_the_engine_itself_sets_no_deprecated_key() -> None:
    # the derived policies of a replay (window shares, the session-memory context on a cold
    # cache) set the flat storage directly: a deprecation warning turned into an error would
    # surface as layer failures
    from conftest import CLAUDE_CODE
    from ctxengine.formats import load
    from ctxengine.replay import replay_session

    session = load(CLAUDE_CODE / "cc_mimo-v2.5-pro_2x-autocompact_db3f6604.jsonl")[0]
    with warnings.catch_warnings():
        warnings.simplefilter("error", DeprecationWarning)
        report = replay_session(session, get_policy("default"), window=64_000)
    assert report.summary.compactions.get("session_memory_compact", 0) > 0
    assert not report.summary.layer_failures


def test_a_layer_reads_its_record_once_per_policy_object() -> None:
    # ``Settings.of``: the layers' per-call read, made once per (frozen) policy object
    policy = get_policy("default").for_window(64_000, 20_000)
    first = IdleClear.of(policy)
    assert first == policy.settings(IdleClear)
    assert IdleClear.of(policy) is first
    other = policy.with_(policy.settings(IdleClear).with_(gap_s=60.0))
    assert IdleClear.of(other).gap_s == 60.0 and IdleClear.of(policy) is first


def test_the_preview_share_caps_an_offload_preview_in_a_small_window() -> None:
    """``preview_share`` caps the preview as OpenClaw's ``window_share`` caps the result:
    floor(free window x share) x 4 chars; a large window keeps the 2 KB preview."""
    default = get_policy("default")
    assert ToolResultBudget.of(default).preview_share == 0.0  # off in default
    p = default.with_(default.settings(ToolResultBudget).with_(preview_share=0.006))
    small = p.for_window(64_000, 24_000)  # 40,000 free: 240 tokens, 960 chars
    assert small.preview_chars == 960 and small.tail_chars == 480
    large = p.for_window(200_000, 24_000)
    assert large.preview_chars == 2_000 and large.tail_chars == 600
    assert default.for_window(64_000, 24_000).preview_chars == 2_000  # no share set


def test_a_result_offloaded_in_a_small_window_keeps_a_shorter_preview() -> None:
    result = "\n".join(f"line {k}: " + "word " * 12 for k in range(400))
    default = get_policy("default")
    policy = default.with_(default.settings(ToolResultBudget).with_(preview_share=0.006))
    sizes = []
    for window in (64_000, 200_000):
        bash = ("Bash", "command", "cat log")
        shown, _ = _result_shown(policy, result, window=window, fixed=24_000, call=bash)
        assert "line 0:" in shown and "line 200:" not in shown  # offloaded behind a preview
        sizes.append(len(shown))
    assert sizes[0] < sizes[1] - 500


def _result_shown(
    policy: Policy,
    text: str,
    *,
    window: int = 32_000,
    fixed: int = 20_000,
    call: tuple[str, str, str] = ("Read", "file_path", "cfg"),
) -> tuple[str, int]:
    """What the model is shown of a tool result ``text`` (of ``call``: tool, input key, value) at
    ``window`` tokens with a ``fixed``-token prefix under ``policy``, and its tokens."""
    from ctxengine.engine.core import ContextEngine
    from ctxengine.messages.model import Message, Text, ToolCall, ToolResult

    e = ContextEngine(policy, model="claude-sonnet-4-5", window=window)
    e.bootstrap(system="sys", fixed_prefix_tokens=fixed)
    e.ingest(Message("user", (Text("read it"),), "u0"))
    e.ingest(Message("assistant", (ToolCall("c1", call[0], {call[1]: call[2]}),), "a1"))
    e.ingest(Message("user", (ToolResult("c1", (Text(text),)),), "r1"))
    [block] = e.assemble().messages[-1].blocks
    assert isinstance(block, ToolResult)
    out = "".join(part.text for part in block.content if isinstance(part, Text))
    return out, e.counter.count_text(out)


def test_chinese_results_are_weighed_by_their_tokens_not_their_chars() -> None:
    """The caps and the preview are chars of English-like text (4 a token). 2,000 chars of
    Chinese are about as many tokens: kept whole, such a result took a quarter of a 32,000-token
    window with a 20,000-token prefix, and its 2,000-char preview as much, so every call compacted
    (the m3 fault's kind). Weighed by its tokens it is offloaded like English of four times its
    length, behind a preview of about the tokens an English one takes."""
    chinese = "".join(f"配置文件第{k}行：读取数据库连接参数并检查超时设置。\n" for k in range(60))
    english = "\n".join(f"line {k}: the reader checks the timeout of the pool" for k in range(33))
    assert abs(len(chinese) - len(english)) < 200  # about 1,650 chars each, under the 2,400-char cap
    default = get_policy("default")
    en, _ = _result_shown(default, english)
    zh, zh_tokens = _result_shown(default, chinese)
    assert len(en) >= len(english)  # English of 1,650 chars fits the cap: whole
    assert len(zh) < len(chinese) // 2  # Chinese of 1,600 chars does not: a preview ...
    assert zh_tokens < 2 * _result_shown(default, english)[1]  # ... of about an English one's tokens
    chars_only = default.with_(default.settings(ToolResultBudget).with_(weigh_tokens=False))
    assert _result_shown(chars_only, chinese)[0] == chinese  # as the presets count: whole
