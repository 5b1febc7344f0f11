"""Restoring the working set after a compaction (Claude Code's post-compaction attachments).

A synthetic session in a workspace under ``tmp_path`` reads files, then a manual compaction cuts
it; the restore messages after the summary are checked: at most 5 recently read files, newest
first, each re-read from disk (the new content when the file changed), at most 5,000 tokens each
and 50,000 in all, files read again in the kept tail skipped, files gone from disk skipped unless
``restore_from_transcript`` (then the content last read), the instruction files (CLAUDE.md /
AGENTS.md, 20,000 chars each and 60,000 in all, head and tail with a marker), and the todo list.
On the real mimo transcript the replay's compaction events list what was restored. On the two
real sessions with ExitPlanMode calls, the latest plan is kept in the summary state (with whether
the user approved it), rendered in the summary and restored with the todo list.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from conftest import CLAUDE_CODE
from ctxengine.engine.core import ContextEngine
from ctxengine.formats import load
from ctxengine.layers.base import LayerEvent
from ctxengine.llm import AnthropicClient
from ctxengine.messages.model import Message, Text, ToolCall, ToolResult
from ctxengine.models.registry import WindowWarning
from ctxengine.policy.registry import CompactionSettings, Policy, Restore, SessionMemory
from ctxengine.replay import replay_session
from ctxengine.summary import restore
from ctxengine.summary import structured as summarize
from llm_server import ScriptedLLMServer
from policies import PRE_SKELETON, off

MIMO = CLAUDE_CODE / "cc_mimo-v2.5-pro_2x-autocompact_db3f6604.jsonl"
MODEL = "claude-sonnet-4-5"
# the structured summary, a short kept tail so the synthetic sessions stay small
POLICY = off(PRE_SKELETON, SessionMemory).with_(
    PRE_SKELETON.settings(CompactionSettings).with_(keep_recent_tokens=2_000)
)


def words(n: int, tag: str = "w") -> str:
    return " ".join(f"{tag}{i}" for i in range(n))


class Session:
    """Builds a conversation of reads and chat, then compacts it in an engine."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.messages: list[Message] = [
            Message("user", (Text("Migrate the database schema in this repository."),), "u0")
        ]
        self.n = 0

    def file(self, name: str, content: str) -> Path:
        path = self.root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(content, encoding="utf-8")
        return path

    def read(self, path: Path | str, content: str | None = None, *, error: bool = False) -> None:
        self.n += 1
        cid = f"toolu_read_{self.n}"
        if content is None:
            content = Path(path if Path(path).is_absolute() else self.root / path).read_text()
        self.messages.append(
            Message(
                "assistant",
                (Text(f"Reading {path}."), ToolCall(cid, "Read", {"file_path": str(path)})),
                f"a{self.n}",
            )
        )
        self.messages.append(Message("user", (ToolResult(cid, (Text(content),), error),), f"r{self.n}"))

    def read_files(self, files: dict[str, str]) -> list[Path]:
        """Writes ``files`` (name: content), then reads each, in order."""
        paths = [self.file(name, content) for name, content in files.items()]
        for path in paths:
            self.read(path)
        return paths

    def todo(self, items: list[tuple[str, str]]) -> None:
        self.n += 1
        cid = f"toolu_todo_{self.n}"
        todos = [{"content": c, "status": s, "activeForm": c} for c, s in items]
        self.messages.append(
            Message("assistant", (ToolCall(cid, "TodoWrite", {"todos": todos}),), f"a{self.n}")
        )
        self.messages.append(Message("user", (ToolResult(cid, (Text("Todos updated"),)),), f"r{self.n}"))

    def chat(self, turns: int = 6) -> None:
        """The kept tail: ``turns`` exchanges of text (about 3,000 tokens in all)."""
        for k in range(turns):
            self.n += 1
            self.messages.append(
                Message("user", (Text(f"Next step {k}: " + words(150, "q")),), f"cu{self.n}")
            )
            self.messages.append(
                Message("assistant", (Text(f"Done {k}: " + words(150, "d")),), f"ca{self.n}")
            )

    def compact(
        self, policy: Policy = POLICY, *, from_transcript: bool = False, **kw: Any
    ) -> tuple[ContextEngine, LayerEvent]:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", WindowWarning)
            engine = ContextEngine(
                policy,
                model=MODEL,
                window=200_000,
                workspace=self.root,
                restore_from_transcript=from_transcript,
                **kw,
            )
        engine.bootstrap(system="You are a coding agent.")
        for m in self.messages:
            engine.ingest(m)
        event = engine.compact(force=True)
        assert event is not None
        return engine, event


def restored(engine: ContextEngine) -> list[Message]:
    return [m for m in engine.assemble().messages if m.origin == "restore"]


def file_ids(event: LayerEvent) -> list[str]:
    return [
        r
        for r in event.details["restored"]
        if r.startswith("restore:") and r not in ("restore:todos", "restore:instructions")
    ]


def rid(path: Path) -> str:
    return f"restore:{path}"


def body_of(msg: Message) -> str:
    return msg.text().split(":\n", 1)[1]


@pytest.fixture
def session(tmp_path: Path) -> Session:
    return Session(tmp_path / "ws")


# --------------------------------------------------------------------------------------------
# Recently read files
# --------------------------------------------------------------------------------------------


def test_at_most_five_files_newest_first(session: Session) -> None:
    paths = [session.file(f"src/m{i}.py", f"# module {i}\nVALUE_{i} = {i}\n") for i in range(7)]
    for p in paths:
        session.read(p)
    session.read(paths[1])  # read again: now the newest
    session.read(session.root / "src/missing.py", "File does not exist.", error=True)
    session.chat()
    engine, event = session.compact()
    assert event.layer == "summary_compact"
    assert file_ids(event) == [rid(paths[i]) for i in (1, 6, 5, 4, 3)]
    msgs = restored(engine)
    assert [m.id for m in msgs] == event.details["restored"]
    assert all(m.role == "user" for m in msgs)
    # after the summary, before the kept tail
    view = engine.assemble().messages
    assert view[0].origin == "summary"
    assert [m.origin for m in view[1 : 1 + len(msgs)]] == ["restore"] * len(msgs)
    (m6,) = [m for m in msgs if m.id == rid(paths[6])]
    assert "VALUE_6 = 6" in body_of(m6)
    assert event.details["restored_tokens"] == sum(engine.counter.count_text(m.text()) for m in msgs)


def test_files_are_re_read_from_disk(session: Session) -> None:
    path = session.file("app/db.py", "SCHEMA_VERSION = 1\n")
    session.read(path)
    session.chat()
    path.write_text("SCHEMA_VERSION = 2  # migrated\n", encoding="utf-8")  # changed since it was read
    engine, event = session.compact()
    assert file_ids(event) == [rid(path)]
    (msg,) = [m for m in restored(engine) if m.id == rid(path)]
    assert "(re-read from disk)" in msg.text()
    assert body_of(msg) == "SCHEMA_VERSION = 2  # migrated\n"
    assert "SCHEMA_VERSION = 1" not in msg.text()


def test_relative_paths_resolve_in_the_workspace(session: Session) -> None:
    session.file("lib/util.py", "def helper():\n    return 42\n")
    session.read("lib/util.py")
    session.chat()
    engine, event = session.compact()
    assert file_ids(event) == ["restore:lib/util.py"]
    assert "return 42" in restored(engine)[0].text()


def test_files_read_in_the_kept_tail_are_skipped(session: Session) -> None:
    a, b = session.read_files({"a.py": "A = 1\n", "b.py": "B = 2\n"})
    session.chat()
    session.read(b)  # b is in the context anyway
    session.chat(2)
    engine, event = session.compact()
    kept = engine.assemble().messages
    assert any(
        isinstance(blk, ToolCall) and blk.input.get("file_path") == str(b) for m in kept for blk in m.blocks
    )
    assert file_ids(event) == [rid(a)]


def test_files_gone_from_disk(session: Session) -> None:
    keep, gone = session.read_files({"keep.py": "KEEP = True\n", "gone.py": "GONE = 'last content read'\n"})
    session.chat()
    gone.unlink()
    _, event = session.compact()
    assert file_ids(event) == [rid(keep)]  # skipped: nothing to re-read
    # in replay, where files are not on this machine, the content the session last read
    engine, event = session.compact(from_transcript=True)
    assert file_ids(event) == [rid(gone), rid(keep)]
    msg = restored(engine)[0]
    assert "(as last read in this session)" in msg.text()
    assert body_of(msg) == "GONE = 'last content read'\n"


def test_each_file_is_capped(session: Session) -> None:
    big = session.file("big.py", "\n".join(f"line_{i} = '{words(12, f'v{i}_')}'" for i in range(6_000)))
    session.chat(20)  # earlier work: a compaction restores no more than it frees
    session.read(big, "(first lines only)")
    session.chat()
    engine, _ = session.compact()
    (msg,) = [m for m in restored(engine) if m.id == rid(big)]
    count = engine.counter.count_text
    assert count(big.read_text()) > 5_000
    assert count(body_of(msg)) <= 5_000
    assert "[cut to 5,000 tokens; read the rest with offset/limit]" in msg.text()
    assert big.read_text().startswith(body_of(msg))  # the head of the file


def compact_over_budget(session: Session) -> tuple[list[Path], list[Message], Callable[[str], int]]:
    """More files than the default five, each over the per-file cap, compacted with room for 20:
    the 50,000 total binds. The paths in read order, the restored file messages, the counter."""
    paths = [
        session.file(f"big{i}.py", "\n".join(f"x{i}_{j} = '{words(12, f'k{j}_')}'" for j in range(2_500)))
        for i in range(14)
    ]
    session.chat(120)  # earlier work: a compaction restores no more than it frees
    for p in paths:
        session.read(p, "(read)")
    session.chat()
    engine, event = session.compact(POLICY.with_(POLICY.settings(Restore).with_(files=20)))
    msgs = [m for m in restored(engine) if m.id in file_ids(event)]
    return paths, msgs, engine.counter.count_text


def test_total_file_budget(session: Session) -> None:
    paths, msgs, count = compact_over_budget(session)
    assert 10 <= len(msgs) < 14
    assert [m.id for m in msgs] == [rid(p) for p in reversed(paths)][: len(msgs)]
    assert all(count(body_of(m)) <= 5_000 for m in msgs)
    assert sum(count(body_of(m)) for m in msgs) <= 50_000


def test_total_file_budget_includes_the_headers(session: Session) -> None:
    _, msgs, count = compact_over_budget(session)
    assert sum(count(m.text()) for m in msgs) <= 50_000


def test_no_restore_when_disabled(session: Session) -> None:
    path = session.file("a.py", "A = 1\n")
    session.file("CLAUDE.md", "Rules.\n")
    session.read(path)
    session.chat()
    _, event = session.compact(
        POLICY.with_(POLICY.settings(Restore).with_(files=0, instruction_files=(), todos=False))
    )
    assert event.details["restored"] == [] and event.details["restored_tokens"] == 0


# --------------------------------------------------------------------------------------------
# Instruction files and the todo list
# --------------------------------------------------------------------------------------------


def test_instruction_files_with_caps_head_and_tail(session: Session) -> None:
    lines = [f"rule {i}: {words(8, f'r{i}_')}" for i in range(600)]
    lines[0] = "HEAD-MARK: always run the migrations in a transaction"
    lines[300] = "MIDDLE-MARK: never shown"
    lines[-1] = "TAIL-MARK: end of the rules"
    claude = "\n".join(lines)
    assert len(claude) > 20_000
    session.file("CLAUDE.md", claude)
    session.file("AGENTS.md", "Use ruff; never push to main.\n")
    session.chat(40)  # earlier work, then the kept tail: a compaction restores no more than it frees
    session.chat()
    engine, event = session.compact()
    assert "restore:instructions" in event.details["restored"]
    (msg,) = [m for m in restored(engine) if m.id == "restore:instructions"]
    text = msg.text()
    assert "Use ruff; never push to main." in text
    assert "HEAD-MARK" in text and "TAIL-MARK" in text and "MIDDLE-MARK" not in text
    section = text.split("## CLAUDE.md\n\n", 1)[1].split("\n\n## AGENTS.md", 1)[0]
    assert len(section) <= 20_000
    marker = section.index("[...truncated: CLAUDE.md has")
    assert 'read(path="CLAUDE.md", offset=' in section
    assert 0.65 < marker / len(section) < 0.85  # 75% head, 25% tail


def test_instruction_files_total_cap(session: Session) -> None:
    names = ("CLAUDE.md", "AGENTS.md", "docs/RULES.md", "docs/STYLE.md")
    for name in names:
        session.file(name, f"{name} START\n" + "\n".join(words(10, "z") for _ in range(400)))
    session.chat(120)  # earlier work, then the kept tail: a compaction restores no more than it frees
    session.chat()
    engine, _ = session.compact(POLICY.with_(POLICY.settings(Restore).with_(instruction_files=names)))
    (msg,) = [m for m in restored(engine) if m.id == "restore:instructions"]
    bodies = msg.text().split("\n\n## ")[1:]
    assert sum(len(b.split("\n\n", 1)[1]) for b in bodies) <= 60_000
    assert "CLAUDE.md START" in msg.text() and "AGENTS.md START" in msg.text()


def test_no_instruction_files_no_message(session: Session) -> None:
    session.chat()
    _, event = session.compact()
    assert "restore:instructions" not in event.details["restored"]


def test_todo_list_is_restored(session: Session) -> None:
    session.todo([("Write the migration", "completed"), ("Migrate the database", "in_progress")])
    session.chat()
    engine, event = session.compact()
    assert "restore:todos" in event.details["restored"]
    (msg,) = [m for m in restored(engine) if m.id == "restore:todos"]
    assert "- [in_progress] Migrate the database" in msg.text()
    assert "- [completed] Write the migration" in msg.text()


@pytest.mark.usefixtures("clean_llm_env")
def test_restore_after_an_llm_summary(session: Session) -> None:
    path = session.file("db/migrate.py", "def up():\n    pass\n")
    session.read(path)
    session.chat()
    reply = (
        "<summary>"
        + "\n".join(f"## {s}" for s in ("Primary Request and Intent", "Current Work"))
        + "</summary>"
    )
    with ScriptedLLMServer(default=("ok", reply)) as server:
        client = AnthropicClient("claude-sonnet-4-6", api_key="test-key", base_url=server.url, timeout=5)
        engine, event = session.compact(llm=client)
    assert event.layer == "summary_compact" and event.llm_calls >= 1
    assert file_ids(event) == [rid(path)]
    assert engine.ledger.anchored is False  # the cache baseline starts over


# --------------------------------------------------------------------------------------------
# Replay of a real transcript
# --------------------------------------------------------------------------------------------


def test_replay_shows_what_was_restored() -> None:
    report = replay_session(load(MIMO)[0], PRE_SKELETON, window=200_000)
    compactions = [
        (c, e)
        for c in report.calls
        for e in c.events
        if e["layer"] in ("session_memory_compact", "summary_compact")
    ]
    assert compactions
    with_files = [e for _, e in compactions if file_ids_of(e)]
    assert with_files
    for _, e in compactions:
        ids = e["details"]["restored"]
        assert all(i.startswith(("restore:", "restore-change:", "restore-error:")) for i in ids)
        assert len(file_ids_of(e)) <= 5
        assert e["details"]["restored_tokens"] >= 0
    # what a file list cannot give back is restored by content: the last changes, the latest error
    restored = [i for _, e in compactions for i in e["details"]["restored"]]
    assert any(i.startswith("restore-change:") for i in restored)
    assert any(i.startswith("restore-error:") for i in restored)
    # the files are not on this machine: replay restores them from the transcript
    assert any(i.startswith("restore:e:/") for e in with_files for i in file_ids_of(e))
    # the expected cache miss of a compaction is not reported as a cache break
    assert not any(c.cache_break for c, _ in compactions)


def file_ids_of(event: dict[str, Any]) -> list[str]:
    return [
        r
        for r in event["details"]["restored"]
        if r.startswith("restore:") and r not in ("restore:todos", "restore:instructions")
    ]


# --------------------------------------------------------------------------------------------
# The current plan (Claude Code's ExitPlanMode) on the real sessions that have one
# --------------------------------------------------------------------------------------------

MIMO_VSCODE = CLAUDE_CODE / "cc_mimo-v2.5-pro_vscode_2x-autocompact_4530697c.jsonl"
OPUS_GENERAL = CLAUDE_CODE / "cc_opus-4.5_general-tool-calls_2-comment-header-lines.jsonl"
PLAN_HEADING = "Current plan (latest plan from ExitPlanMode)"


def plan_calls(messages: list[Message]) -> list[tuple[int, ToolCall]]:
    """(index of the message, call) of every ExitPlanMode call, in order."""
    return [(i, c) for i, m in enumerate(messages) for c in m.tool_calls if c.name == "ExitPlanMode"]


def plan_of(call: ToolCall) -> str:
    assert isinstance(call.input, dict)
    return str(call.input["plan"]).strip()


@pytest.fixture(scope="module")
def vscode() -> list[Message]:
    return load(MIMO_VSCODE)[0].messages


@pytest.fixture(scope="module")
def opus() -> list[Message]:
    return load(OPUS_GENERAL)[0].messages


def test_the_sessions_with_exit_plan_mode(vscode: list[Message], opus: list[Message]) -> None:
    # six ExitPlanMode records in the files: the opus file repeats its two (a resumed session),
    # which the reader keeps once, so two calls each; all approved but opus's first
    assert [i for i, _ in plan_calls(vscode)] == [400, 632]
    assert [i for i, _ in plan_calls(opus)] == [41, 53]
    assert [len(plan_of(c)) for _, c in plan_calls(vscode) + plan_calls(opus)] == [3378, 2422, 5042, 5573]


def test_summary_state_keeps_the_latest_plan_approved(vscode: list[Message]) -> None:
    state = summarize.update(summarize.SummaryState(), vscode, user_message_chars=2_000)
    (_, first), (_, latest) = plan_calls(vscode)
    assert state.plan == plan_of(latest) != plan_of(first)
    assert state.plan.startswith("# Context Freshness Hook — Session Heaviness Reminder")
    assert state.plan_status == summarize.PLAN_APPROVED
    assert state.plan_file == "C:\\Users\\Administrator\\.claude\\plans\\curried-marinating-pillow.md"
    assert state.todos  # the todo list is kept beside it
    plan = summarize.current_plan(state)
    assert plan.startswith("Status: approved by the user\nPlan file: C:\\Users\\")
    text = summarize.render(state, max_tokens=60_000, count=len, identifiers_max=10)
    assert f"## {PLAN_HEADING}\n{plan}" in text
    assert text.index(f"## {PLAN_HEADING}") < text.index("## Pending tasks (latest todo list)")
    cc = summarize.render_style(
        "claude-code", state, summarize.StyleInput(span=vscode), max_tokens=60_000, count=len
    )
    tasks = cc.split("7. Pending Tasks:\n", 1)[1].split("\n\n8. Current Work:", 1)[0]
    assert tasks.startswith(state.todos) and f"{PLAN_HEADING}:\n{plan}" in tasks


def test_a_plan_the_user_rejects_is_marked_and_the_next_one_replaces_it(opus: list[Message]) -> None:
    (first_i, first), (_, second) = plan_calls(opus)
    state = summarize.update(summarize.SummaryState(), opus[: first_i + 1], user_message_chars=2_000)
    assert state.plan == plan_of(first) and state.plan_status == summarize.PLAN_PROPOSED
    # its result: "User chose to stay in plan mode and continue planning" (an error result)
    summarize.update(state, opus[first_i + 1 : first_i + 2], user_message_chars=2_000)
    assert state.plan == plan_of(first)
    assert state.plan_status == "not approved: User chose to stay in plan mode and continue planning"
    summarize.update(state, opus[first_i + 2 :], user_message_chars=2_000)
    assert state.plan == plan_of(second) and state.plan_status == summarize.PLAN_APPROVED
    assert state.plan_file == "/Users/pete/.claude/plans/silly-wishing-narwhal.md"
    text = summarize.render(state, max_tokens=60_000, count=len, identifiers_max=10)
    assert plan_of(second) in text and "# Plan: Claude Code Session Share Plugin" in text


def test_todo_message_with_a_plan() -> None:
    assert restore.todo_message("", "") == [] == restore.todo_message("  ", "\n")
    (only_todos,) = restore.todo_message("- [pending] Ship it")
    assert only_todos.text() == "[Restored after compaction] Current todo list / plan:\n- [pending] Ship it"
    (both,) = restore.todo_message("- [pending] Ship it", "Status: approved by the user\n\n# Plan")
    assert both.id == "restore:todos" and both.origin == "restore"
    assert both.text() == (
        f"[Restored after compaction] {PLAN_HEADING}:\nStatus: approved by the user\n\n# Plan"
        "\n\nCurrent todo list:\n- [pending] Ship it"
    )
    (only_plan,) = restore.todo_message("", "# Plan")
    assert only_plan.text() == f"[Restored after compaction] {PLAN_HEADING}:\n# Plan"


def compact_real(messages: list[Message], policy: Policy) -> tuple[ContextEngine, LayerEvent]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", WindowWarning)
        engine = ContextEngine(policy, model="mimo-v2.5-pro", window=200_000)
    engine.bootstrap(system="You are a coding agent.")
    for m in messages:
        engine.ingest(m)
    event = engine.compact(force=True)
    assert event is not None
    return engine, event


def test_the_plan_is_restored_after_a_summary_compaction(vscode: list[Message]) -> None:
    # cut at the second plan's result: the first plan (approved at 401) is summarized, the second
    # is still in the kept tail, so the restore brings back the first with the todo list
    (_, first), (second_i, _) = plan_calls(vscode)
    engine, event = compact_real(vscode[: second_i + 6], POLICY)
    assert event.layer == "summary_compact"
    assert "restore:todos" in event.details["restored"]
    (msg,) = [m for m in restored(engine) if m.id == "restore:todos"]
    text = msg.text()
    assert text.startswith(f"[Restored after compaction] {PLAN_HEADING}:\nStatus: approved by the user\n")
    assert plan_of(first) in text
    assert "\n\nCurrent todo list:\n- [" in text
    (summary,) = [m for m in engine.assemble().messages if m.origin == "summary"]
    assert plan_of(first) in summary.text()


def test_the_plan_is_restored_after_a_session_memory_compaction(opus: list[Message]) -> None:
    # the notes hold everything up to the cut: the approved second plan is restored
    (_, first), (second_i, second) = plan_calls(opus)
    engine, event = compact_real(opus[: second_i + 6], PRE_SKELETON)
    assert event.layer == "session_memory_compact"
    (msg,) = [m for m in restored(engine) if m.id == "restore:todos"]
    assert plan_of(second) in msg.text()
    assert "Status: approved by the user\nPlan file: /Users/pete/.claude/plans/silly-wishing-narwhal.md" in (
        msg.text()
    )
    assert plan_of(first) not in msg.text()


def test_a_session_without_exit_plan_mode_has_no_plan() -> None:
    state = summarize.update(summarize.SummaryState(), load(MIMO)[0].messages[:50], user_message_chars=2_000)
    assert state.plan == "" and summarize.current_plan(state) == ""


# --------------------------------------------------------------------------------------------
# What a file list cannot give back: the last change of each modified file, the latest error
# --------------------------------------------------------------------------------------------


def test_last_changes_and_latest_error_are_restored_by_content() -> None:
    from ctxengine.engine.core import ContextEngine
    from ctxengine.messages.model import ToolCall, ToolResult
    from ctxengine.policy.registry import DEFAULT

    new_text = "def parse(line):\n    return next(csv.reader([line]))  # quoted fields"
    msgs = [
        Message("user", (Text("fix the parser"),), "u0"),
        Message(
            "assistant",
            (ToolCall("e1", "Edit", {"file_path": "/w/p.py", "old_string": "x", "new_string": "y"}),),
            "a0",
        ),
        Message("user", (ToolResult("e1", (Text("ok"),)),), "r0"),
        Message(
            "assistant",
            (ToolCall("e2", "Edit", {"file_path": "/w/p.py", "old_string": "y", "new_string": new_text}),),
            "a1",
        ),
        Message("user", (ToolResult("e2", (Text("ok"),)),), "r1"),
        Message("assistant", (ToolCall("b1", "Bash", {"command": "pytest -x tests/test_p.py"}),), "a2"),
        Message(
            "user", (ToolResult("b1", (Text("E   AssertionError: expected 3 fields"),), is_error=True),), "r2"
        ),
    ]
    for i in range(20):  # chat after it; the compaction keeps only its newest part
        msgs.append(Message("assistant", (Text(f"thinking about it {i} " * 300),), f"t{i}"))
        msgs.append(Message("user", (Text(f"go on {i}"),), f"g{i}"))
    engine = ContextEngine(off(DEFAULT, SessionMemory), model="claude-sonnet-4-5", window=64_000)
    engine.bootstrap(fixed_prefix_tokens=2_000)
    for m in msgs:
        engine.ingest(m)
    event = engine.compact(force=True)
    assert event is not None
    ids = event.details["restored"]
    assert "restore-change:/w/p.py" in ids and "restore-error:b1" in ids
    shown = "\n".join(m.text() for m in engine.assemble().messages)
    assert new_text in shown  # the last change, not the first
    assert "pytest -x tests/test_p.py" in shown and "AssertionError: expected 3 fields" in shown


def test_restore_folds_resumed_across_compactions_give_the_whole_historys_answer(transcripts: Path) -> None:
    """``RestoreScans`` on the largest shared Claude Code session, cut at growing points as the
    compactions of one session are (and once at a shorter one, as a rehearsal after a compaction
    may be): every restore it gives equals the one folded over the whole history, and a resumed
    fold reads only the messages after the previous cut."""
    (s,) = load(CLAUDE_CODE / "cc_mimo-v2.5-pro_vscode_2x-autocompact_4530697c.jsonl")
    msgs = s.messages
    scans = restore.RestoreScans()
    count = len  # any pure count: the folds, not the fitting, are under test
    cuts = [len(msgs) // 5, 2 * len(msgs) // 5, 3 * len(msgs) // 5, len(msgs) // 2, len(msgs) - 20]
    restored_files = 0
    for cut in cuts:
        before, kept = msgs[:cut], msgs[cut:]
        args: dict[str, Any] = {"max_files": 5, "change_tokens": 5_000, "total_tokens": 50_000}
        whole = restore.recent_changes(before, kept, count, **args)
        assert restore.recent_changes(before, kept, count, **args, scans=scans) == whole
        for shell in (False, True):
            whole_files = restore.recent_files(before, kept, count, from_transcript=True, shell_reads=shell)
            resumed = restore.recent_files(
                before, kept, count, from_transcript=True, shell_reads=shell, scans=scans
            )
            assert resumed == whole_files
            restored_files += len(resumed)
        error = restore.latest_error(before, kept, count, max_tokens=2_000)
        assert restore.latest_error(before, kept, count, max_tokens=2_000, scans=scans) == error
    assert any(
        restore.recent_changes(
            msgs[: cuts[-1]], msgs[cuts[-1] :], count, max_files=5, change_tokens=5_000, total_tokens=50_000
        )
    )
    assert restored_files > 0
    # each fold read the messages up to the last cut once, and again from the start after the
    # shorter cut (len // 2 after 3 * len // 5): never the whole history at every cut
    assert scans.changes.folded == 3 * len(msgs) // 5 + (len(msgs) - 20)
