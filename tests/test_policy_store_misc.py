"""Policy loading, the SQLite store, the token ledger, the prompt-cache model, identifier
extraction and the structured summary (on real transcript spans)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import msgspec
import pytest

from conftest import CLAUDE_CODE
from ctxengine.formats import load
from ctxengine.messages import identifiers
from ctxengine.messages.model import Message, Session, Text, ToolCall
from ctxengine.models.prompt_cache import AUTO_MIN_PREFIX, AUTO_STEP, LOOKBACK_BLOCKS, CacheModel
from ctxengine.models.registry import get_model
from ctxengine.policy.registry import BUILTIN, DEFAULT, NONE, IdleClear, Policy, get_policy
from ctxengine.store import Entry, SQLiteStore, StoreError
from ctxengine.summary import structured as summarize
from ctxengine.tokens.counter import counter_for
from ctxengine.tokens.ledger import Ledger

MIMO = CLAUDE_CODE / "cc_mimo-v2.5-pro_2x-autocompact_db3f6604.jsonl"
MIMO_VSCODE = CLAUDE_CODE / "cc_mimo-v2.5-pro_vscode_2x-autocompact_4530697c.jsonl"
COUNT = counter_for(get_model("claude-sonnet-4-5")).count_text


# ================================================================ Policy


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "policy.toml"
    path.write_text(text, encoding="utf-8")
    return path


def test_from_toml_starts_from_the_base_and_applies_overrides(tmp_path: Path) -> None:
    path = write(tmp_path, 'base = "none"\nname = "mine"\n[idle_clear]\nenabled = true\ngap_s = 60\n')
    p = Policy.from_toml(path)
    assert (p.name, p.idle_gap_s, p.idle_clear) == ("mine", 60.0, True)
    assert p.compaction == "none" and p.cache_clear is False and p.overflow_guard is False  # from base
    assert msgspec.structs.replace(p, name="none", idle_gap_s=NONE.idle_gap_s, idle_clear=False) == NONE


def test_from_toml_without_base_starts_from_default(tmp_path: Path) -> None:
    p = Policy.from_toml(write(tmp_path, "[compaction]\nkeep_recent_tokens = 12345\n"))
    assert p.keep_recent_tokens == 12_345
    assert p.compact_at_share == DEFAULT.compact_at_share == 0.9
    assert p.tool_result_max_chars == DEFAULT.tool_result_max_chars == 20_000


@pytest.mark.parametrize(
    "text",
    [
        '[idle_clear]\ngap_s = "soon"\n',
        '[compaction]\nmode = "magic"\n',
        "[compaction]\nkeep_recent_tokens = [1, 2]\n",
        "this is not toml\n",
    ],
    ids=["bad-float", "bad-enum", "bad-int", "syntax"],
)
def test_from_toml_bad_values_raise_value_error_naming_the_file(tmp_path: Path, text: str) -> None:
    path = write(tmp_path, text)
    with pytest.raises(ValueError, match=re.escape(str(path))):
        Policy.from_toml(path)


def test_from_toml_missing_file_raises_value_error(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=re.escape("nowhere.toml")):
        Policy.from_toml(tmp_path / "nowhere.toml")


def test_from_toml_unknown_key_raises_value_error_naming_the_file(tmp_path: Path) -> None:
    path = write(tmp_path, "[idle_clear]\ngap_secs = 60\n")
    with pytest.raises(ValueError, match=re.escape(str(path))):
        Policy.from_toml(path)


def test_from_toml_unknown_base_names_the_known_policies(tmp_path: Path) -> None:
    known = "default, evict-importance, evict-oldest, none, recorded"
    with pytest.raises((KeyError, ValueError), match=rf"nope.*{known}"):
        Policy.from_toml(write(tmp_path, 'base = "nope"\n'))


def test_get_policy() -> None:
    assert sorted(BUILTIN) == ["default", "evict-importance", "evict-oldest", "none", "recorded"]
    assert get_policy("default") is DEFAULT
    known = "default, evict-importance, evict-oldest, none, recorded"
    with pytest.raises(KeyError, match=f"'fast'; known: {known}"):
        get_policy("fast")


def test_with_returns_a_changed_copy() -> None:
    p = DEFAULT.with_(IdleClear(gap_s=10.0))
    assert p.idle_gap_s == 10.0 and DEFAULT.idle_gap_s == 3_600.0
    with pytest.raises(TypeError):
        DEFAULT.with_(no_such_field=1)


def test_summary_budget() -> None:
    assert Policy().summary_budget(200_000) == 12_000  # the cap
    assert Policy().summary_budget(100_000) == 6_000  # 6% of the window


# ================================================================ SQLiteStore


def test_store_appends_in_order_and_filters_by_kind_and_session(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "s.db")
    a = store.append("s1", "message", {"id": "m1", "n": [1, 2]})
    b = store.append("s1", "compaction", {"kept_from": 3})
    c = store.append("s2", "message", {"id": "x"})
    d = store.append("s1", "message", {"id": "m2"})
    assert (a.seq, b.seq, d.seq, c.seq) == (0, 1, 2, 0)
    assert a == Entry("s1", 0, "message", {"id": "m1", "n": [1, 2]})
    assert [e.payload["id"] for e in store.entries("s1", "message")] == ["m1", "m2"]
    assert [e.kind for e in store.entries("s1")] == ["message", "compaction", "message"]
    assert store.entries("s1", "offload") == []
    assert store.entries("nobody") == []
    store.close()

    reopened = SQLiteStore(tmp_path / "s.db")
    assert [e.seq for e in reopened.entries("s1")] == [0, 1, 2]
    assert reopened.append("s1", "event", {}).seq == 3  # sequence numbers continue
    reopened.close()


def test_store_artifacts(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "s.db")
    store.put_artifact("s1", "tool-result/c1", "original output", {"layer": "idle_clear", "call_id": "c1"})
    store.put_artifact("s1", "tool-result/c1", "something else", {})  # idempotent: first write stays
    assert store.get_artifact("s1", "tool-result/c1") == (
        "original output",
        {"layer": "idle_clear", "call_id": "c1"},
    )
    with pytest.raises(StoreError, match="tool-result/missing"):
        store.get_artifact("s1", "tool-result/missing")
    with pytest.raises(StoreError):
        store.get_artifact("s2", "tool-result/c1")  # artifacts are per session
    store.close()
    assert SQLiteStore(tmp_path / "s.db").get_artifact("s1", "tool-result/c1")[0] == "original output"


def test_store_that_cannot_open_raises_store_error(tmp_path: Path) -> None:
    with pytest.raises(StoreError, match="cannot open"):
        SQLiteStore(tmp_path / "no" / "such" / "dir" / "s.db")


# ================================================================ Ledger


def test_ledger_unanchored_predicts_fixed_prefix_plus_scaled_estimate() -> None:
    assert Ledger(fixed_prefix=1_000).predict(2_000) == 3_000
    assert Ledger(fixed_prefix=1_000, scale=1.5).predict(2_000) == 4_000
    assert not Ledger().anchored


def test_ledger_anchors_and_learns_the_scale_from_growth() -> None:
    ledger = Ledger(fixed_prefix=500)
    ledger.observe(10_000, 8_000)  # first call: anchor only, nothing to learn from
    assert ledger.anchored and ledger.scale == 1.0
    assert ledger.predict(9_000) == 11_000  # 10,000 + 1,000 estimated growth
    assert ledger.added_since_anchor(9_000) == 1_000

    ledger.observe(13_000, 10_000)  # grew 3,000 reported for 2,000 estimated
    assert ledger.scale == pytest.approx(1.5)
    assert ledger.predict(11_000) == 14_500  # 13,000 + 1,000 x 1.5

    ledger.observe(13_100, 10_100)  # growth under 200 estimated tokens teaches nothing
    assert ledger.scale == pytest.approx(1.5)
    ledger.observe(40_000, 11_100)  # a ratio of 26.9 is not a tokenizer effect: ignored
    assert ledger.scale == pytest.approx(1.5)
    assert ledger.predict(11_100) == 40_000

    ledger.reset()
    assert not ledger.anchored
    # the last anchor's offset (40,000 reported for 500 + 11,100 x 1.5) is most of its total:
    # content the estimate does not see, dropped at the reset
    assert ledger.predict(2_000) == 500 + 3_000  # fixed + estimate x the learned scale


def test_ledger_reset_keeps_the_providers_offset() -> None:
    """The provider counts 3,000 fewer tokens than fixed prefix + estimate: after a reset (a
    compaction) the prediction keeps that offset instead of jumping by it."""
    ledger = Ledger(fixed_prefix=20_000)
    ledger.observe(37_000, 20_000)
    assert ledger.predict(20_000) == 37_000
    ledger.reset()
    assert not ledger.anchored
    assert ledger.predict(15_000) == 32_000  # was 35,000: 3,000 of "growth" from the reset alone
    ledger.observe(33_000, 16_000)
    ledger.reset()
    assert ledger.predict(16_000) == 33_000


def test_ledger_scale_is_the_median_of_recent_ratios() -> None:
    ledger = Ledger()
    total, est = 10_000, 10_000
    ledger.observe(total, est)
    for ratio in (1.2, 2.0, 1.4):
        total += round(1_000 * ratio)
        est += 1_000
        ledger.observe(total, est)
    assert ledger.scale == pytest.approx(1.4)


# ================================================================ CacheModel


def msg(i: int) -> Message:
    return Message("user", (Text(f"message {i}"),), f"m{i}")


def test_explicit_cache_reads_the_previous_request() -> None:
    cache = CacheModel("explicit", ttl_s=300)
    m1, m2, m3 = msg(1), msg(2), msg(3)
    first = cache.request([m1, m2], [100, 200], fixed_prefix=50, total=350, now=0)
    assert (first.cache_read, first.cache_write, first.uncached) == (0, 350, 0)
    second = cache.request([m1, m2, m3], [100, 200, 50], fixed_prefix=50, total=400, now=60)
    assert (second.cache_read, second.cache_write, second.uncached) == (350, 50, 0)
    # a changed early message (a new object, as a cleared result is) breaks the prefix there
    edited = Message("user", (Text("message 1"),), "m1")
    third = cache.request([edited, m2, m3], [100, 200, 50], fixed_prefix=50, total=400, now=120)
    assert third.cache_read == 50  # only system prompt + tools are still shared
    assert third.cache_write == 350


def test_explicit_cache_reads_only_up_to_an_entry_written_at_a_breakpoint() -> None:
    """A change in the middle of the history reads up to the newest entry before it (where an
    earlier request had a breakpoint), not up to the change: Anthropic reads at breakpoints."""
    cache = CacheModel("explicit", ttl_s=300)
    ms = [msg(i) for i in range(6)]
    tok = [100] * 6
    cache.request(ms[:2], tok[:2], fixed_prefix=50, total=250, now=0)  # entry at 2
    cache.request(ms[:4], tok[:4], fixed_prefix=50, total=450, now=10)  # reads 2, entry at 4
    # message 3 changes: the longest common prefix is 3 messages, the newest entry within it is 2
    edited = Message("user", (Text("message 3, cleared"),), "m3")
    out = cache.request([*ms[:3], edited, ms[4]], tok[:5], fixed_prefix=50, total=550, now=20)
    assert out.cache_read == 250 and out.cache_write == 300
    # with the writer's second breakpoint (message 2) the next change after it reads through it
    cache2 = CacheModel("explicit", ttl_s=300)
    cache2.request(ms[:4], tok[:4], fixed_prefix=50, total=450, now=0, breakpoints=[2, 3])
    out2 = cache2.request([*ms[:3], edited], tok[:4], fixed_prefix=50, total=450, now=10)
    assert out2.cache_read == 350  # system + tools + messages 0-2


def test_explicit_cache_looks_back_at_most_20_blocks_from_a_breakpoint() -> None:
    assert LOOKBACK_BLOCKS == 20
    ms = [msg(i) for i in range(30)]
    tok = [10] * 30
    for added, hit in ((20, True), (21, False)):
        cache = CacheModel("explicit", ttl_s=300)
        cache.request(ms[:5], tok[:5], fixed_prefix=0, total=50, now=0)
        n = 5 + added
        out = cache.request(ms[:n], tok[:n], fixed_prefix=0, total=10 * n, now=1)
        assert out.cache_read == (50 if hit else 0), added


@pytest.mark.parametrize(("gap", "warm"), [(300.0, True), (300.5, False)])
def test_explicit_cache_expires_after_the_ttl(gap: float, warm: bool) -> None:
    cache = CacheModel("explicit", ttl_s=300)
    m1, m2 = msg(1), msg(2)
    cache.request([m1], [1_000], fixed_prefix=0, total=1_000, now=1_000.0)
    out = cache.request([m1, m2], [1_000, 100], fixed_prefix=0, total=1_100, now=1_000.0 + gap)
    assert out.cache_read == (1_000 if warm else 0)
    assert out.cache_read + out.cache_write + out.uncached == 1_100


def test_automatic_cache_starts_at_1024_tokens_in_128_steps() -> None:
    assert (AUTO_MIN_PREFIX, AUTO_STEP) == (1_024, 128)
    small = CacheModel("automatic", ttl_s=300)
    m1, m2 = msg(1), msg(2)
    small.request([m1], [1_000], fixed_prefix=0, total=1_000, now=0)
    out = small.request([m1, m2], [1_000, 500], fixed_prefix=0, total=1_500, now=1)
    assert (out.cache_read, out.cache_write, out.uncached) == (0, 0, 1_500)  # 1,000 < 1,024

    big = CacheModel("automatic", ttl_s=300)
    big.request([m1], [1_300], fixed_prefix=0, total=1_300, now=0)
    out = big.request([m1, m2], [1_300, 500], fixed_prefix=0, total=1_800, now=1)
    assert (out.cache_read, out.cache_write, out.uncached) == (1_280, 0, 520)  # 1,300 -> 10 x 128


def test_cache_reset_forgets_the_previous_request() -> None:
    cache = CacheModel("explicit", ttl_s=300)
    m1 = msg(1)
    cache.request([m1], [500], fixed_prefix=0, total=500, now=0)
    cache.reset()
    assert cache.request([m1], [500], fixed_prefix=0, total=500, now=1).cache_read == 0


# ================================================================ identifiers


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("open E:\\A\\b.py now", {"e:/A/b.py"}),
        ("same file as e:/A/b.py.", {"e:/A/b.py"}),
        ("see https://example.com/a/b?x=1.", {"https://example.com/a/b?x=1"}),
        ("job 123E4567-E89B-12D3-A456-426614174000 done", {"123e4567-e89b-12d3-a456-426614174000"}),
        ("connect to localhost:8080 or db.internal:5432", {"localhost:8080", "db.internal:5432"}),
        ("pid 1234567 and port 12345", {"1234567"}),
        ("sha DEADBEEF12 and a1b2c3d4e5", {"deadbeef12", "a1b2c3d4e5"}),
        ("/usr/lib/python3/site.py and src/app/main.py", {"/usr/lib/python3/site.py", "src/app/main.py"}),
    ],
)
def test_extract_finds_identifiers(text: str, expected: set[str]) -> None:
    assert identifiers.extract(text) == expected


@pytest.mark.parametrize(
    "text",
    [
        "hello world, the function returns nothing",
        "deadbeef and facade are words made of hex letters",
        "short hex a1b2c3d and numbers 12345",
        "a/b",
        "",
    ],
)
def test_extract_ignores_words_and_short_tokens(text: str) -> None:
    assert identifiers.extract(text) == set()


def test_normalize_path() -> None:
    assert identifiers.normalize_path("C:\\Users\\Me\\x.py,") == "c:/Users/Me/x.py"
    assert identifiers.normalize_path("/srv/app/") == "/srv/app"


# ================================================================ structured summary (real spans)


@pytest.fixture(scope="module")
def mimo(transcripts: Any) -> Session:
    (session,) = load(MIMO)
    return session


def span_before_first_compaction(session: Session) -> list[Message]:
    at = session.compactions[0].at
    return [m for m in session.messages[:at] if m.origin in ("message", "attachment")]


def tool_calls(span: list[Message], names: set[str]) -> list[ToolCall]:
    return [c for m in span for c in m.tool_calls if c.name in names]


def test_update_finds_files_read_and_modified_and_todos(mimo: Session) -> None:
    span = span_before_first_compaction(mimo)
    state = summarize.update(summarize.SummaryState(), span, user_message_chars=2_000)

    def paths(names: set[str]) -> set[str]:
        return {
            identifiers.normalize_path(c.input["file_path"])
            for c in tool_calls(span, names)
            if isinstance(c.input, dict) and "file_path" in c.input
        }

    read, written = paths({"Read"}), paths({"Edit", "Write", "MultiEdit"})
    assert len(read) >= 10 and len(written) >= 5
    assert set(state.files_read) == read
    assert set(state.files_modified) == written
    todo_calls = tool_calls(span, {"TodoWrite"})
    assert todo_calls
    latest = todo_calls[-1].input
    assert isinstance(latest, dict)
    for item in latest["todos"]:
        assert f"[{item['status']}] {item['content']}" in state.todos
    assert state.messages_summarized == len(span)
    first_user = next(m for m in span if m.role == "user" and m.origin == "message" and not m.tool_results)
    assert state.primary_request == first_user.text().strip()[:4_000]


@pytest.mark.parametrize("max_tokens", [3_000, 6_000, 12_000])
def test_render_respects_max_tokens_on_a_real_span(mimo: Session, max_tokens: int) -> None:
    span = span_before_first_compaction(mimo)
    state = summarize.update(summarize.SummaryState(), span, user_message_chars=2_000)
    text = summarize.render(state, max_tokens=max_tokens, count=COUNT, identifiers_max=400)
    assert COUNT(text) <= max_tokens
    assert "## Primary request" in text
    if max_tokens >= 6_000:
        assert "## Files read" in text and "## Files modified" in text
        assert "## Pending tasks" in text
        assert state.files_modified[-1] in text


def test_render_keeps_whole_sections_when_there_is_room(mimo: Session) -> None:
    span = span_before_first_compaction(mimo)
    state = summarize.update(summarize.SummaryState(), span, user_message_chars=2_000)
    roomy = summarize.render(state, max_tokens=100_000, count=COUNT, identifiers_max=400)
    tight = summarize.render(state, max_tokens=3_000, count=COUNT, identifiers_max=400)
    assert COUNT(tight) < COUNT(roomy)
    ids = roomy.split("## Identifiers (newest first)\n", 1)[1].split()
    assert len(ids) == min(400, len(state.identifiers))


@pytest.mark.parametrize(
    ("path", "max_tokens"), [(MIMO, 1_000), (MIMO_VSCODE, 2_400)], ids=["mimo", "vscode"]
)
def test_render_respects_small_budgets_on_real_spans(transcripts: Any, path: Path, max_tokens: int) -> None:
    (session,) = load(path)
    limit = 300 if path == MIMO_VSCODE else len(session.messages)
    span = [m for m in session.messages[:limit] if m.origin in ("message", "attachment")]
    state = summarize.update(summarize.SummaryState(), span, user_message_chars=2_000)
    text = summarize.render(state, max_tokens=max_tokens, count=COUNT, identifiers_max=400)
    assert COUNT(text) <= max_tokens


def test_update_accumulates_across_compactions(mimo: Session) -> None:
    span = span_before_first_compaction(mimo)
    half = len(span) // 2
    state = summarize.update(summarize.SummaryState(), span[:half], user_message_chars=2_000)
    first_request = state.primary_request
    summarize.update(state, span[half:], user_message_chars=2_000)
    whole = summarize.update(summarize.SummaryState(), span, user_message_chars=2_000)
    assert state.primary_request == first_request == whole.primary_request
    assert set(state.files_read) == set(whole.files_read)
    assert state.messages_summarized == whole.messages_summarized == len(span)
