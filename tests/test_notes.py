"""Session notes (Claude Code's session memory) and session-memory compaction.

The cadence (first update at 10,000 conversation tokens, then each 5,000 tokens *and* 3 tool
calls), the ten sections in order, the caps (2,000 tokens per section, 12,000 in all) on a real
long Chinese transcript, what the deterministic updater extracts, the LLM updater through the
scripted loopback server (it sees only the notes and the new messages; a reply that loses the
structure is rejected), and session-memory compaction firing before summary compaction in the
default policy on real transcript replays, for $0.
"""

from __future__ import annotations

import itertools
import re
import threading
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from conftest import CLAUDE_CODE
from ctxengine.compaction import NotesJob
from ctxengine.compaction import chain as compaction_chain
from ctxengine.compaction import notes as compaction_notes
from ctxengine.engine.core import ContextEngine
from ctxengine.formats import load
from ctxengine.layers.base import LayerEvent
from ctxengine.layers.pairing import find_violations
from ctxengine.layers.session_memory_compact import INTRO
from ctxengine.llm import AnthropicClient
from ctxengine.messages.model import Message, Text, ToolCall, ToolResult
from ctxengine.models.registry import Registry, WindowWarning
from ctxengine.policy.registry import CompactionSettings, get_policy
from ctxengine.replay import replay_session
from ctxengine.summary.notes import (
    NOTES_MAX_TOKENS,
    NOTES_PLAN_CHARS,
    NOTES_SYSTEM,
    SECTION_MAX_TOKENS,
    SECTIONS,
    Cadence,
    DeterministicNotesUpdater,
    NotesState,
    parse_sections,
    render_sections,
    sections_of,
    serialize,
)
from ctxengine.tokens.counter import counter_for
from llm_server import Recorded, ScriptedLLMServer
from policies import ROUND2

MIMO = CLAUDE_CODE / "cc_mimo-v2.5-pro_2x-autocompact_db3f6604.jsonl"
MIMO_VSCODE = CLAUDE_CODE / "cc_mimo-v2.5-pro_vscode_2x-autocompact_4530697c.jsonl"
SONNET = CLAUDE_CODE / "cc_sonnet-4.5_long-290-tools_redacted_3cfce0ff.jsonl"
DEFAULT = get_policy("default")
HEADING = re.compile(r"(?m)^# (" + "|".join(re.escape(s) for s in SECTIONS) + r")$")


pytestmark = pytest.mark.usefixtures("clean_llm_env")


@pytest.fixture(scope="module")
def mimo_vscode() -> list[Message]:
    return load(MIMO_VSCODE)[0].messages


@pytest.fixture(scope="module")
def sonnet() -> list[Message]:
    return load(SONNET)[0].messages


def counter(model: str) -> Callable[[str], int]:
    return counter_for(Registry.default().get(model)).count_text


def split_sections(doc: str) -> list[tuple[str, str]]:
    """(heading, body) of the notes document's ten top-level headings, in document order (bodies
    may hold sub-headings of their own)."""
    marks = list(HEADING.finditer(doc))
    out = []
    for i, m in enumerate(marks):
        end = marks[i + 1].start() if i + 1 < len(marks) else len(doc)
        out.append((m.group(1), doc[m.end() : end].strip()))
    return out


def make_engine(policy: Any = DEFAULT, *, model: str = "claude-sonnet-4-5", **kw: Any) -> ContextEngine:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", WindowWarning)
        engine = ContextEngine(policy, model=model, window=200_000, **kw)
    engine.bootstrap(system="You are a coding agent.")
    return engine


def drive(
    engine: ContextEngine, messages: list[Message], *, assemble: bool = False
) -> Iterator[tuple[int, list[LayerEvent]]]:
    """Feed ``messages`` as a live loop would: before each assistant message (a model call) the
    projection is assembled (when ``assemble``), after it ``after_turn`` runs. Yields (index of
    the assistant message, events of that call)."""
    for i, m in enumerate(messages):
        events: list[LayerEvent] = []
        if m.role == "assistant" and assemble:
            events = engine.assemble(now=m.timestamp).events
        engine.ingest(m)
        if m.role == "assistant":
            engine.after_turn(None)
            yield i, events


# --------------------------------------------------------------------------------------------
# Cadence
# --------------------------------------------------------------------------------------------


def test_cadence_rule() -> None:
    c = Cadence()
    assert (c.first_tokens, c.every_tokens, c.every_tool_calls) == (10_000, 5_000, 3)
    c.tool_calls_since = 50
    assert not c.due(9_999)
    assert c.due(10_000)
    c.mark(10_000)
    assert c.tool_calls_since == 0
    c.tool_calls_since = 10
    assert not c.due(14_999)  # tokens missing
    assert c.due(15_000)
    c.tool_calls_since = 2
    assert not c.due(40_000)  # tool calls missing
    c.tool_calls_since = 3
    assert c.due(15_000)


def test_cadence_on_a_real_transcript(mimo_vscode: list[Message]) -> None:
    """Updates happen exactly when the rule says, counting conversation tokens (history only;
    system prompt not counted) and tool calls since the last update."""
    engine = make_engine(model="mimo-v2.5-pro")
    count = engine.counter.count_message
    actual: list[int] = []
    turns: list[int] = []
    expected: list[int] = []
    tokens = 0
    calls_since = 0
    seen = 0
    last: int | None = None
    at: list[int] = []  # conversation tokens at each turn
    for i, _events in drive(engine, mimo_vscode[:400]):
        for m in engine.history[seen:]:
            tokens += count(m)
            calls_since += len(m.tool_calls)
        seen = len(engine.history)
        at.append(tokens)
        due = tokens >= 10_000 if last is None else tokens - last >= 5_000 and calls_since >= 3
        if due:
            expected.append(i)
            last, calls_since = tokens, 0
        if engine.compactor.notes.updates > len(actual):
            actual.append(i)
            turns.append(len(at) - 1)
    assert len(expected) >= 5
    assert actual == expected
    # no update before the conversation reached 10,000 tokens; the first one right then
    first = turns[0]
    assert first > 0 and at[first - 1] < 10_000 <= at[first]
    # later ones: at least 5,000 more tokens each time
    assert all(at[b] - at[a] >= 5_000 for a, b in itertools.pairwise(turns))


def test_system_prompt_does_not_count_toward_the_cadence(sonnet: list[Message]) -> None:
    engine = make_engine()
    engine.bootstrap(system="x " * 30_000, fixed_prefix_tokens=30_000)
    msgs = sonnet[:4]
    assert sum(engine.counter.count_message(m) for m in msgs) < 10_000
    list(drive(engine, msgs))
    assert engine.compactor.notes.updates == 0


# --------------------------------------------------------------------------------------------
# The document: ten sections, caps
# --------------------------------------------------------------------------------------------


def test_ten_sections_in_order_and_caps_on_a_real_transcript(mimo_vscode: list[Message]) -> None:
    count = counter("mimo-v2.5-pro")
    updater = DeterministicNotesUpdater(count)
    state = NotesState()
    cut_seen = False
    for k in range(0, len(mimo_vscode), 120):
        state, spent = updater.update(state, mimo_vscode[k : k + 120])
        assert spent.llm_calls == 0 and spent.cost_usd == 0
        raw = sections_of(state)
        doc = render_sections(raw, count)
        sections = split_sections(doc)
        assert [name for name, _ in sections] == list(SECTIONS)
        for name, body in sections:
            assert count(body) <= SECTION_MAX_TOKENS, name
            cut_seen |= "[...]" in body
        assert count(doc) <= NOTES_MAX_TOKENS
    assert state.updates == (len(mimo_vscode) + 119) // 120
    # the long Chinese session does exceed the caps before rendering: they were applied
    assert max(count(v) for v in sections_of(state).values()) > SECTION_MAX_TOKENS
    assert cut_seen
    # the original request is kept from its start; lists keep their newest end
    doc = render_sections(sections_of(state), count)
    spec = dict(split_sections(doc))["Task specification"]
    assert spec.startswith(state.facts.user_messages[0][:50])


def test_total_cap_cuts_the_longest_sections_first() -> None:
    count = counter("claude-sonnet-4-5")
    words = " ".join(f"word{i}" for i in range(4_000))
    bodies = {name: f"{name}: {words}" for name in SECTIONS}
    bodies["Session Title"] = "Fix the parser"
    doc = render_sections(bodies, count)
    sections = split_sections(doc)
    assert [n for n, _ in sections] == list(SECTIONS)
    assert count(doc) <= NOTES_MAX_TOKENS
    assert all(count(b) <= SECTION_MAX_TOKENS for _, b in sections)
    assert dict(sections)["Session Title"] == "Fix the parser"


def test_empty_sections_are_marked() -> None:
    doc = render_sections({}, counter("claude-sonnet-4-5"))
    assert [n for n, _ in split_sections(doc)] == list(SECTIONS)
    assert all(b == "_(nothing yet)_" for _, b in split_sections(doc))


# --------------------------------------------------------------------------------------------
# The deterministic updater
# --------------------------------------------------------------------------------------------


def coding_session() -> list[Message]:
    def call(i: int, name: str, args: dict[str, Any], text: str = "") -> Message:
        blocks: tuple[Any, ...] = ((Text(text),) if text else ()) + (ToolCall(f"c{i}", name, args),)
        return Message("assistant", blocks, f"a{i}")

    def result(i: int, text: str, error: bool = False) -> Message:
        return Message("user", (ToolResult(f"c{i}", (Text(text),), error),), f"r{i}")

    return [
        Message("user", (Text("Fix the KeyError crash in /srv/app/main.py and add a test"),), "u0"),
        call(1, "Read", {"file_path": "/srv/app/main.py"}, "Reading the entry point."),
        result(1, "def main():\n    port = CONFIG['port']\n"),
        call(2, "Read", {"file_path": "/srv/app/config.py"}),
        result(2, "CONFIG = {}\n"),
        call(3, "Bash", {"command": "pytest -q tests/test_main.py"}),
        result(3, "FAILED tests/test_main.py::test_port - KeyError: 'port'\n1 failed in 0.12s", True),
        call(
            4,
            "Edit",
            {"file_path": "/srv/app/config.py", "old_string": "{}", "new_string": "{'port': 8080}"},
            "The root cause is the missing port key in CONFIG.",
        ),
        result(4, "The file /srv/app/config.py has been updated."),
        call(5, "Write", {"file_path": "/srv/app/tests/test_config.py", "content": "def test(): ..."}),
        result(5, "File created successfully at: /srv/app/tests/test_config.py"),
        call(6, "Bash", {"command": "pytest -q"}),
        result(6, "3 passed in 0.20s"),
        Message("assistant", (Text("Fixed: CONFIG now defines port 8080; 3 tests pass."),), "a7"),
    ]


def test_deterministic_updater_contents() -> None:
    count = counter("claude-sonnet-4-5")
    state, _ = DeterministicNotesUpdater(count).update(NotesState(), coding_session())
    s = dict(split_sections(render_sections(sections_of(state), count)))
    assert s["Session Title"] == "Fix the KeyError crash in /srv/app/main.py and add a test"
    assert "Fix the KeyError crash" in s["Task specification"]
    files = s["Files and Functions"]
    modified, read = files.split("Read:")
    assert "/srv/app/config.py" in modified and "/srv/app/tests/test_config.py" in modified
    assert "/srv/app/main.py" in read and "/srv/app/config.py" in read
    assert "/srv/app/main.py" not in modified
    assert "- pytest -q tests/test_main.py" in s["Workflow"] and "- pytest -q" in s["Workflow"].splitlines()
    errors = s["Errors & Corrections"]
    assert "KeyError: 'port'" in errors and "Edit(/srv/app/config.py)" in errors  # what followed
    assert "3 passed" in s["Key results"]
    assert "root cause is the missing port key" in s["Learnings"]
    assert "Fixed: CONFIG now defines port 8080" in s["Current State"]
    worklog = s["Worklog"].splitlines()
    assert worklog[0] == "- Read(/srv/app/main.py)" and worklog[-1] == "- Bash(pytest -q)"
    assert "/srv/app/main.py" in s["Codebase and System Documentation"]


def test_deterministic_updater_does_not_modify_its_input() -> None:
    count = counter("claude-sonnet-4-5")
    updater = DeterministicNotesUpdater(count)
    msgs = coding_session()
    first, _ = updater.update(NotesState(), msgs[:5])
    snapshot = (list(first.facts.files_read), list(first.worklog), first.updates)
    second, _ = updater.update(first, msgs[5:])
    assert (list(first.facts.files_read), list(first.worklog), first.updates) == snapshot
    assert second.updates == 2 and len(second.worklog) > len(first.worklog)


def test_notes_track_the_current_plan_with_the_todos(mimo_vscode: list[Message]) -> None:
    # the real session with two approved ExitPlanMode plans (messages 400 and 632): Current State
    # ends with the latest, labelled, after the todo list; cut to NOTES_PLAN_CHARS (head and
    # tail), its status, plan file and title first
    plans = [c for m in mimo_vscode for c in m.tool_calls if c.name == "ExitPlanMode"]
    assert len(plans) == 2 and all(isinstance(c.input, dict) for c in plans)
    first, latest = (str(c.input["plan"]).strip() for c in plans if isinstance(c.input, dict))
    cut = mimo_vscode.index(next(m for m in mimo_vscode if plans[1] in m.tool_calls))
    state, _ = DeterministicNotesUpdater(counter("mimo-v2.5-pro")).update(NotesState(), mimo_vscode[:cut])
    current = sections_of(state)["Current State"]
    assert "Todo list:\n- [" in current
    head = "Current plan (latest plan from ExitPlanMode):\nStatus: approved by the user\nPlan file: "
    assert current.index("Todo list:") < current.index(head)
    assert current.endswith(first[-200:])  # the plan approved at 401; the next one not yet made
    assert first[:500] in current
    assert len(current.split(head, 1)[1]) <= NOTES_PLAN_CHARS + 120
    state, _ = DeterministicNotesUpdater(counter("mimo-v2.5-pro")).update(state, mimo_vscode[cut:])
    current = sections_of(state)["Current State"]
    assert latest[:500] in current and first[:200] not in current
    assert "Status: proposed" not in current  # its result (approved) was folded too


def test_parse_sections_needs_most_headings() -> None:
    doc = render_sections({"Worklog": "- step"}, counter("claude-sonnet-4-5"))
    assert parse_sections(doc) is not None
    assert parse_sections("Sure! Here are the notes: nothing changed.") is None
    assert parse_sections("\n".join(f"# {s}\nx" for s in SECTIONS[:7])) is None


# --------------------------------------------------------------------------------------------
# The LLM updater through the scripted server
# --------------------------------------------------------------------------------------------


def notes_reply(tag: str) -> str:
    return "\n\n".join(f"# {s}\n- {tag} {s.lower()}" for s in SECTIONS)


def is_notes(rec: Recorded) -> bool:
    return "<current-notes>" in prompt_of(rec)


def prompt_of(rec: Recorded) -> str:
    content = rec.body["messages"][-1]["content"]
    if isinstance(content, str):
        return content
    return "\n".join(b.get("text", "") for b in content if isinstance(b, dict))


def between(text: str, tag: str) -> str:
    m = re.search(rf"(?s)<{tag}>\n(.*)\n</{tag}>", text)
    assert m, tag
    return m.group(1)


def llm_engine(server: ScriptedLLMServer) -> ContextEngine:
    client = AnthropicClient(
        "claude-sonnet-4-6", api_key="test-key", base_url=server.url, timeout=5, max_retries=0
    )
    return make_engine(llm=client)


def test_llm_updater_sees_only_the_notes_and_the_new_messages(sonnet: list[Message]) -> None:
    replies = iter(["FIRST", "SECOND", "THIRD", "FOURTH"])
    with ScriptedLLMServer(default=lambda body: notes_reply(next(replies, "MORE"))) as server:
        engine = llm_engine(server)
        marks: list[int] = []
        notes_after: list[str] = []
        for _i, _ in drive(engine, sonnet):
            if len(server.requests) > len(marks):
                marks.append(len(engine.history))
                notes_after.append(engine.compactor.notes_text())
            if len(marks) == 2:
                break
    assert len(server.requests) == 2 and all(is_notes(r) for r in server.requests)
    first, second = server.requests
    # only the notes request: the notes system prompt, one user message
    assert [b["text"] for b in first.body["system"]] == [NOTES_SYSTEM]
    assert len(first.body["messages"]) == 1 and len(second.body["messages"]) == 1
    p1, p2 = prompt_of(first), prompt_of(second)
    history = engine.history
    assert between(p1, "new-conversation") == serialize(history[: marks[0]])
    assert between(p2, "new-conversation") == serialize(history[marks[0] : marks[1]])
    # the second sees the notes the first wrote, not the older messages
    assert between(p2, "current-notes") == notes_after[0]
    assert "FIRST" in notes_after[0] and "SECOND" in notes_after[1]
    assert history[0].text()[:80] in p1 and history[0].text()[:80] not in p2
    # the empty notes the first update starts from have the ten headings
    assert [n for n, _ in split_sections(between(p1, "current-notes"))] == list(SECTIONS)
    for name in SECTIONS:
        assert name in p1.split("<current-notes>")[0]  # the rules name the headings
    # the LLM's notes are the ten sections, in order
    assert [n for n, _ in split_sections(notes_after[1])] == list(SECTIONS)
    events = [e for e in engine.assemble().events if e.layer == "session_notes"]
    assert [e.llm_calls for e in events] == [1, 1]
    assert all(e.llm_cost_usd > 0 and "error" not in e.details for e in events)


def test_llm_updater_reply_without_the_headings_is_rejected(sonnet: list[Message]) -> None:
    with ScriptedLLMServer(
        script=[("ok", "I updated the notes, they look good now.")], default=lambda b: notes_reply("GOOD")
    ) as server:
        engine = llm_engine(server)
        turns = drive(engine, sonnet)
        for _ in turns:
            if server.requests:
                break
        assert len(server.requests) == 1
        notes = engine.compactor.notes
        assert notes.updates == 0 and notes.text == "" and engine.compactor.notes_text() == ""
        events = [e for e in engine.assemble().events if e.layer == "session_notes"]
        assert len(events) == 1
        assert "rejected" in events[0].reason
        assert "ten-section structure" in events[0].details["error"]
        assert events[0].llm_calls == 1  # the failed attempt is accounted for
        # still due: the next turn asks again, and that reply is taken
        next(turns)
        assert len(server.requests) == 2
        assert engine.compactor.notes.updates == 1 and "GOOD" in engine.compactor.notes_text()


def test_llm_updater_reply_is_capped(sonnet: list[Message]) -> None:
    count = counter("claude-sonnet-4-5")
    huge = " ".join(f"item{i}" for i in range(8_000))
    reply = notes_reply("x").replace("- x worklog", huge)
    with ScriptedLLMServer(default=("ok", reply)) as server:
        engine = llm_engine(server)
        for _ in drive(engine, sonnet):
            if server.requests:
                break
        doc = engine.compactor.notes_text()
    sections = dict(split_sections(doc))
    assert count(sections["Worklog"]) <= SECTION_MAX_TOKENS < count(huge)
    assert count(doc) <= NOTES_MAX_TOKENS


def test_llm_updater_failure_keeps_the_notes(sonnet: list[Message]) -> None:
    from llm_server import server_error

    with ScriptedLLMServer(default=server_error("anthropic")) as server:
        engine = llm_engine(server)
        for _ in drive(engine, sonnet):
            if server.requests:
                break
        assert engine.compactor.notes.updates == 0
        events = [e for e in engine.assemble().events if e.layer == "session_notes"]
        assert events and "error" in events[0].details and "failed" in events[0].reason


# --------------------------------------------------------------------------------------------
# Session-memory compaction
# --------------------------------------------------------------------------------------------

_CC = get_policy("claude-code")
CC_AT_40 = _CC.with_(_CC.settings(CompactionSettings).with_(at_share=0.4))
"""Claude Code's policy, compacting at 40% of the window."""


def test_session_memory_compaction_uses_the_notes(sonnet: list[Message]) -> None:
    # Claude Code's session-memory compaction (the preset keeps its 10,000-40,000-token tail)
    engine = make_engine(CC_AT_40)
    count = engine.counter.count_message
    for _i, events in drive(engine, sonnet, assemble=True):
        sm = [e for e in events if e.layer == "session_memory_compact"]
        if sm:
            break
    else:
        pytest.fail("no session-memory compaction")
    event = sm[0]
    assert event.llm_calls == 0 and event.llm_cost_usd == 0
    assert [e.layer for e in events if e.layer != "session_notes"][-1] == "session_memory_compact"
    flush = [e for e in events if e.layer == "session_notes"]
    assert flush and flush[-1].reason == "pre-compaction flush"
    assert events.index(flush[-1]) < events.index(event)
    proj = engine.assemble()
    at_compaction = engine.history[:-1]  # the assistant message of that call came after it
    summary = proj.messages[0]
    assert summary.role == "user" and summary.origin == "summary"
    assert summary.text().startswith(INTRO)
    assert [n for n, _ in split_sections(summary.text())] == list(SECTIONS)
    # the most recent 10,000-40,000 tokens are kept, at least 5 text messages, pairs intact
    kept = at_compaction[-event.details["kept_messages"] :]
    assert [m for m in proj.messages if m.origin not in ("summary", "restore")][: len(kept)] == kept
    kept_tokens = sum(count(m) for m in kept)
    assert 10_000 <= kept_tokens <= 40_000, kept_tokens
    assert sum(1 for m in kept if m.text().strip()) >= 5
    assert find_violations(proj.messages) == []
    q = event.details["quality"]
    assert q["tokens_saved"] > 0 and 0 < q["compression_ratio"] < 1


@pytest.mark.parametrize("path", [MIMO, MIMO_VSCODE], ids=["mimo", "mimo-vscode"])
def test_default_replay_session_memory_before_summary(path: Path) -> None:
    session = load(path)[0]
    report = replay_session(session, ROUND2, window=200_000)  # compacts when the cache is cold
    s = report.summary
    assert s.compactions.get("session_memory_compact", 0) >= 2
    # the structured summary only where the notes could not free enough (once at most here)
    assert s.compactions.get("summary_compact", 0) <= 1
    assert s.notes_updates > 0
    # every compaction of the default policy cost $0 and is counted as such
    assert s.compactions_free == sum(s.compactions.values())
    assert s.llm_calls == 0 and s.llm_cost_usd == 0
    events = [e for c in report.calls for e in c.events]
    compacting = [e["layer"] for e in events if e["layer"] in ("session_memory_compact", "summary_compact")]
    assert compacting[0] == "session_memory_compact"
    sm = [e for e in events if e["layer"] == "session_memory_compact"]
    assert all(e["llm_cost_usd"] == 0 for e in sm)
    # each is preceded, at its call, by the pre-compaction flush of the notes
    for c in report.calls:
        layers = [e["layer"] for e in c.events]
        if "session_memory_compact" in layers:
            k = layers.index("session_memory_compact")
            assert "session_notes" in layers[:k]
    assert s.compaction_quality


def test_replay_with_an_llm_session_memory_still_comes_first() -> None:
    session = load(MIMO)[0]

    def reply(body: dict[str, Any]) -> str:
        text = str(body["messages"][-1]["content"])
        if "<current-notes>" in text:
            return notes_reply("llm notes")
        return "<summary>" + "\n".join(f"## {h}" for h in SECTIONS) + "</summary>"

    with ScriptedLLMServer(default=reply) as server:
        client = AnthropicClient(
            "claude-sonnet-4-6", api_key="test-key", base_url=server.url, timeout=5, max_retries=0
        )
        report = replay_session(session, ROUND2, window=200_000, llm=client)
        requests = list(server.requests)
    s = report.summary
    assert s.compactions.get("session_memory_compact", 0) >= 2
    assert "summary_compact" not in s.compactions
    assert requests and all(is_notes(r) for r in requests)
    assert 0 < s.llm_calls <= len(requests) and s.llm_calls == s.notes_updates
    assert s.llm_tokens > 0 and s.llm_cost_usd > 0
    # the notes cost money in the background; the compactions themselves are free
    assert s.compactions_free == sum(s.compactions.values())


# --------------------------------------------------------------------------------------------
# Bugs found
# --------------------------------------------------------------------------------------------


def test_every_compaction_saves_tokens_on_a_real_replay() -> None:
    report = replay_session(load(SONNET)[0], DEFAULT, window=200_000)
    comp = [
        e
        for c in report.calls
        for e in c.events
        if e["layer"] in ("session_memory_compact", "summary_compact")
    ]
    assert comp
    assert all(e["tokens_after"] < e["tokens_before"] for e in comp), [
        (e["tokens_before"], e["tokens_after"], e["details"]["messages_summarized"]) for e in comp
    ]


def test_llm_notes_with_sub_headings_keep_their_content() -> None:
    reply = notes_reply("x").replace(
        "- x current state",
        "Migrating the database.\n## Details\n- table users_v2 created on db-7.internal:5432",
    )
    sections = parse_sections(reply)
    assert sections is not None
    assert "users_v2" in sections["Current State"]


def test_replay_reports_every_llm_call_of_the_notes() -> None:
    session = load(MIMO)[0]
    with ScriptedLLMServer(default=("ok", notes_reply("llm notes"))) as server:
        client = AnthropicClient(
            "claude-sonnet-4-6", api_key="test-key", base_url=server.url, timeout=5, max_retries=0
        )
        report = replay_session(session, DEFAULT, window=200_000, llm=client)
        flushes = [e for c in report.calls for e in c.events if e["reason"] == "pre-compaction flush"]
        # each flush is followed, at the same call, by the compaction it prepared
        assert len(flushes) == report.summary.compactions.get("session_memory_compact", 0)
        assert report.summary.llm_calls == len(server.requests)


# --------------------------------------------------------------------------------------------
# Notes in the background (``background_notes``: live agents; the replay stays in line)
# --------------------------------------------------------------------------------------------


class Gate:
    """A reply the server holds until ``release``: ``arrived`` is set when a request is waiting.
    Replies are ``notes_reply`` of the given tags in order (then ``MORE``)."""

    def __init__(self, *tags: str) -> None:
        self.arrived = threading.Event()
        self.open = threading.Event()
        self.tags = iter(tags)

    def __call__(self, body: dict[str, Any]) -> str:
        self.arrived.set()
        self.open.wait(60)
        return notes_reply(next(self.tags, "MORE"))

    def release(self) -> None:
        self.open.set()


def bg_engine(server: ScriptedLLMServer, policy: Any = DEFAULT, timeout: float = 30) -> ContextEngine:
    client = AnthropicClient(
        "claude-sonnet-4-6", api_key="test-key", base_url=server.url, timeout=timeout, max_retries=0
    )
    return make_engine(policy, llm=client, background_notes=True)


def turns_until(
    engine: ContextEngine, messages: list[Message], start: int, until: Callable[[], bool], **kw: Any
) -> Iterator[tuple[int, list[LayerEvent]]]:
    """``drive`` from ``start`` on, stopping after the first turn at which ``until()`` holds."""
    for i, events in drive(engine, messages[start:], **kw):
        yield start + i, events
        if until():
            return
    pytest.fail("never happened")


def job_of(engine: ContextEngine) -> NotesJob:
    job = engine.compactor.notes_job
    assert job is not None and job.future is not None
    return job


def test_background_update_does_not_block_after_turn(sonnet: list[Message]) -> None:
    gate = Gate("BACKGROUND")
    with ScriptedLLMServer(default=gate) as server:
        try:
            engine = bg_engine(server)
            *_, (i, _) = turns_until(engine, sonnet, 0, lambda: engine.notes_update_pending)
            job = job_of(engine)
            # after_turn has returned while the server holds the reply
            assert gate.arrived.wait(30) and not gate.open.is_set()
            assert not job.future.done()
            assert engine.compactor.notes.updates == 0 and engine.compactor.notes_from == 0
            assert not [e for e in engine.assemble().events if e.layer == "session_notes"]
            assert engine.notes_update_pending  # assemble did not wait: no compaction needed it
            # the snapshot: every message up to the turn, and the notes as they were
            assert job.end == i + 1 and job.new == sonnet[: i + 1] and job.notes.updates == 0
            gate.release()
            job.future.result(timeout=30)
            assert engine.compactor.notes.updates == 0  # finished, not applied yet
            events = [e for e in engine.assemble().events if e.layer == "session_notes"]
        finally:
            gate.release()
    assert not engine.notes_update_pending
    assert len(events) == 1 and events[0].reason == "cadence" and "error" not in events[0].details
    assert events[0].llm_calls == 1 and events[0].llm_cost_usd > 0
    notes = engine.compactor
    assert notes.notes.updates == 1 and "BACKGROUND" in notes.notes_text()
    assert notes.notes_from == job.end and notes.cadence.updated_once
    assert len(server.requests) == 1 and between(
        prompt_of(server.requests[0]), "new-conversation"
    ) == serialize(sonnet[: i + 1])


def test_background_cadence_is_skipped_while_an_update_runs_and_catches_up(sonnet: list[Message]) -> None:
    gate = Gate("FIRST", "SECOND")
    with ScriptedLLMServer(default=gate) as server:
        try:
            engine = bg_engine(server)
            *_, (i, _) = turns_until(engine, sonnet, 0, lambda: engine.notes_update_pending)
            first = job_of(engine)
            assert gate.arrived.wait(30)
            # many more turns, the cadence due again more than once: no second request
            tokens_at_start = first.tokens
            assert tokens_at_start is not None
            count = engine.counter.count_message
            last = i
            for j, _ in drive(engine, sonnet[i + 1 :]):
                last = i + 1 + j
                if sum(count(m) for m in engine.history) - tokens_at_start > 12_000:
                    break
            assert engine.compactor.cadence.due(sum(count(m) for m in engine.history))  # due, skipped
            assert len(server.requests) == 1 and engine.compactor.notes_job is first
            assert engine.compactor.notes_from == 0  # nothing applied: nothing advanced
            gate.arrived.clear()
            gate.release()
            first.future.result(timeout=30)
            # the next after_turn applies the first and, still due, starts the catch-up
            *_, (k, events) = turns_until(
                engine, sonnet, last + 1, lambda: engine.compactor.notes_job not in (None, first)
            )
            assert gate.arrived.wait(30)
            second = job_of(engine)
            second.future.result(timeout=30)
            events = [e for e in engine.assemble().events if e.layer == "session_notes"]
        finally:
            gate.release()
    assert [e.reason for e in events] == ["cadence", "cadence"]
    assert engine.compactor.notes.updates == 2 and "SECOND" in engine.compactor.notes_text()
    assert engine.compactor.notes_from == second.end == k + 1
    p2 = prompt_of(server.requests[1])
    # the catch-up covers everything since the first snapshot, from the notes the first wrote
    assert between(p2, "new-conversation") == serialize(engine.history[first.end : second.end])
    assert "FIRST" in between(p2, "current-notes")


def updates_side_by_side(
    inline: ContextEngine, background: ContextEngine, messages: list[Message]
) -> tuple[list[int], list[int]]:
    """``messages`` fed to both engines, each background update finished and applied before the
    next turn: the indices of the turns at which each engine's notes were updated."""
    at_inline: list[int] = []
    at_background: list[int] = []
    for (i, _), _ in zip(drive(inline, messages), drive(background, messages), strict=True):
        if inline.compactor.notes.updates > len(at_inline):
            at_inline.append(i)
        job = background.compactor.notes_job
        if job is not None and job.future is not None:
            job.future.result(timeout=60)
            background.maintain()  # applies it
            at_background.append(i)
        assert not background.notes_update_pending
    return at_inline, at_background


def test_background_with_each_update_awaited_matches_in_line(sonnet: list[Message]) -> None:
    """The $0 updater in the background, each update finished before the next turn, ends with
    the same notes, at the same turns, as in line."""
    inline, background = make_engine(), make_engine(background_notes=True)
    at_inline, at_background = updates_side_by_side(inline, background, sonnet[:300])
    assert len(at_inline) >= 3 and at_background == at_inline
    assert background.compactor.notes == inline.compactor.notes
    assert background.compactor.notes_from == inline.compactor.notes_from
    assert background.compactor.cadence == inline.compactor.cadence


def test_a_compaction_waits_for_the_running_update(
    sonnet: list[Message], monkeypatch: pytest.MonkeyPatch
) -> None:
    gate = Gate("BACKGROUND", "FLUSHED")
    real_wait = compaction_notes.wait_for
    waited: list[bool] = []

    def wait_then_release(fs: Any, timeout: float | None = None) -> Any:
        waited.append(not next(iter(fs)).done())  # the update still runs when the notes are needed
        gate.release()
        return real_wait(fs, timeout=timeout)

    monkeypatch.setattr(compaction_notes, "wait_for", wait_then_release)
    policy = CC_AT_40
    with ScriptedLLMServer(default=gate) as server:
        try:
            engine = bg_engine(server, policy)
            *_, (i, _) = turns_until(engine, sonnet, 0, lambda: engine.notes_update_pending, assemble=True)
            job = job_of(engine)
            assert gate.arrived.wait(30)
            *_, (_k, events) = turns_until(engine, sonnet, i + 1, lambda: bool(waited), assemble=True)
            requests = list(server.requests)
        finally:
            gate.release()
    assert waited == [True]  # once, at the compaction, with the update still running
    layers = [e.layer if e.layer != "session_notes" else e.reason for e in events]
    assert (
        layers.index("cadence")
        < layers.index("pre-compaction flush")
        < layers.index("session_memory_compact")
    )
    assert all("error" not in e.details for e in events)
    # the flush started from the notes of the update it waited for, and covers what came after
    assert len(requests) >= 2
    flush = prompt_of(requests[1])
    assert "BACKGROUND" in between(flush, "current-notes")
    assert between(flush, "new-conversation").startswith(serialize(engine.history[job.end : job.end + 1]))
    assert any("FLUSHED" in m.text() for m in engine.prefix if m.origin == "summary")


@pytest.mark.parametrize(
    ("reply", "reason", "llm_calls"),
    [
        (("ok", "Sure, the notes are updated."), "cadence: update rejected", 1),
        ("error", "cadence: update failed", 0),
    ],
    ids=["rejected", "llm-error"],
)
def test_a_failing_background_update_leaves_the_notes(
    sonnet: list[Message], reply: Any, reason: str, llm_calls: int
) -> None:
    from llm_server import server_error

    script = [server_error("anthropic") if reply == "error" else reply]
    with ScriptedLLMServer(script=script, default=lambda b: notes_reply("GOOD")) as server:
        engine = bg_engine(server)
        *_, (i, _) = turns_until(engine, sonnet, 0, lambda: engine.notes_update_pending)
        job_of(engine).future.result(timeout=30)
        events = [e for e in engine.assemble().events if e.layer == "session_notes"]
        c = engine.compactor
        assert len(events) == 1 and events[0].reason == reason and "error" in events[0].details
        assert events[0].llm_calls == llm_calls
        assert c.notes.updates == 0 and c.notes_text() == "" and c.notes_from == 0
        assert not c.cadence.updated_once  # still due: the next turn starts another
        next(drive(engine, sonnet[i + 1 :]))
        job_of(engine).future.result(timeout=30)
        engine.assemble()
        assert c.notes.updates == 1 and "GOOD" in c.notes_text()


def test_dispose_with_an_update_running_does_not_wait_for_it(sonnet: list[Message]) -> None:
    gate = Gate("LATE")
    with ScriptedLLMServer(default=gate) as server:
        try:
            engine = bg_engine(server, timeout=120)
            turns = list(turns_until(engine, sonnet, 0, lambda: engine.notes_update_pending))
            assert turns
            job = job_of(engine)
            assert gate.arrived.wait(30)
            engine.dispose()  # the server holds the reply until after this returns
            assert not job.future.done()
            assert not engine.notes_update_pending
            events = [e for e in engine.maintain() if e.layer == "session_notes"]
        finally:
            gate.release()
        job.future.result(timeout=30)  # the worker ends on its own; its outcome is dropped
    assert len(events) == 1 and "abandoned" in events[0].reason and "error" in events[0].details
    assert engine.compactor.notes.updates == 0 and engine.compactor.notes_from == 0


def test_dispose_applies_a_finished_update(sonnet: list[Message]) -> None:
    with ScriptedLLMServer(default=lambda b: notes_reply("DONE")) as server:
        engine = bg_engine(server)
        list(turns_until(engine, sonnet, 0, lambda: engine.notes_update_pending))
        job_of(engine).future.result(timeout=30)
        engine.dispose()
    assert engine.compactor.notes.updates == 1 and "DONE" in engine.compactor.notes_text()
    events = [e for e in engine.maintain() if e.layer == "session_notes"]
    assert [e.reason for e in events] == ["cadence"] and events[0].llm_calls == 1


def test_in_line_is_the_default_and_the_replay_stays_in_line(sonnet: list[Message]) -> None:
    engine = make_engine()
    assert not engine.background_notes and not engine.compactor.background_notes
    for _ in drive(engine, sonnet):
        if engine.compactor.notes.updates:
            break
    assert not engine.notes_update_pending and engine.compactor.notes_job is None
    made: list[ContextEngine] = []
    real_init = ContextEngine.__init__

    def spy(self: ContextEngine, *a: Any, **kw: Any) -> None:
        real_init(self, *a, **kw)
        made.append(self)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(ContextEngine, "__init__", spy)
        replay_session(load(MIMO)[0], DEFAULT, window=200_000)
    assert made and not any(e.background_notes for e in made)


def test_a_flush_with_no_compaction_after_it_is_still_reported(
    monkeypatch: pytest.MonkeyPatch, mimo_vscode: list[Message]
) -> None:
    """The flush runs when a session-memory compaction can follow; when the compaction then does
    not happen (its cut frees too little; here forced to None), the flush's event (an LLM call
    with a model) is reported all the same, not dropped with the chain's result."""
    original = compaction_chain.session_memory_compact
    calls: list[int] = []

    def probe_then_nothing(*args: Any, **kwargs: Any) -> Any:
        calls.append(1)  # the chain probes, flushes, then compacts: the second call finds nothing
        return original(*args, **kwargs) if len(calls) % 2 == 1 else None

    monkeypatch.setattr(compaction_chain, "session_memory_compact", probe_then_nothing)
    monkeypatch.setattr(compaction_chain, "summary_compact", lambda *a, **k: None)
    engine = make_engine()
    made: list[str] = []
    real_flush = engine.compactor.flush_notes

    def flush(history: Any) -> Any:
        event = real_flush(history)
        if event is not None:
            made.append(event.reason)
        return event

    monkeypatch.setattr(engine.compactor, "flush_notes", flush)
    reported = [e.reason for _, events in drive(engine, mimo_vscode, assemble=True) for e in events]
    assert made, "no flush ran"
    assert reported.count("pre-compaction flush") == len(made)
