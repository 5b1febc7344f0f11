"""What the user told the agent survives compactions: the rules extractor (on built sentences and
on a hand-checked list from the shared Claude Code sessions), corrections replacing rules through
the engine, the pinned latest failure and file ledger, and the ``expand`` tool."""

from __future__ import annotations

import json
import random
import tempfile
import warnings
from pathlib import Path

import pytest

from conftest import CLAUDE_CODE
from ctxengine.compaction.pinned import PinnedFacts
from ctxengine.engine.core import ContextEngine
from ctxengine.formats import load
from ctxengine.messages.model import Message, Text, ToolCall, ToolResult
from ctxengine.models.registry import WindowWarning
from ctxengine.policy.registry import get_policy
from ctxengine.store.sqlite import SQLiteStore
from ctxengine.summary.audit import user_request
from ctxengine.summary.file_ledger import FileLedger
from ctxengine.summary.rules import RuleBook, is_rule, standing_rules
from ctxengine.tools.registry import build_tools, default_executor

HAND_CHECKED = Path(__file__).parent / "data" / "rules_hand_checked.json"
T0 = 1_760_000_000.0
RULE = "Always run the tests with `make test-fast`, never with plain pytest."
FIX = "Correction: from now on run the tests with `make test-all`; `make test-fast` skips the slow suite."
WORDS = [
    "the",
    "importer",
    "reads",
    "each",
    "row",
    "maps",
    "its",
    "fields",
    "onto",
    "the",
    "schema",
    "and",
    "writes",
    "the",
    "batch",
]


def prose(chars: int, seed: int) -> str:
    rnd = random.Random(seed)
    out: list[str] = []
    while sum(len(w) + 1 for w in out) < chars:
        out.append(rnd.choice(WORDS))
    return " ".join(out)


@pytest.mark.parametrize(
    "sentence",
    [
        "Never push to main.",
        "Use pnpm, not npm.",
        "From now on the tests live in `spec/`.",
        "Please don't touch the generated files.",
        "be sure to keep the public API stable",
        "complete the commit, always verify and run hooks.",
        "所有md文档必须整理好此类规则",
        "每五轮做个记录",
    ],
)
def test_standing_instructions_are_rules(sentence: str) -> None:
    assert is_rule(sentence)


@pytest.mark.parametrize(
    "sentence",
    [
        "Never mind, move to the use case 12 branch",  # "never" in "nevermind" is no rule
        "nevermind, move to use case 12 branch",
        "Should we always run the slow suite?",  # a question lays down nothing
        "目前是否使用scrampling工具？",
        "我需要你执行这个任务",  # a one-off task
        "The parser reads the header and returns the fields in order.",
    ],
)
def test_tasks_questions_and_prose_are_not_rules(sentence: str) -> None:
    assert not is_rule(sentence)


def test_a_rule_inside_a_long_message_is_found_verbatim() -> None:
    text = f"Port the CSV importer.\n\n{prose(3_000, 1)}\n\n{RULE}\n\n{prose(3_000, 2)}"
    assert standing_rules(text) == [RULE]


def test_a_correction_replaces_the_rule_it_corrects() -> None:
    book = RuleBook()
    book.add_text(RULE, "u0")
    book.add_text("Never commit generated files.", "u1")
    book.add_text(FIX, "u2")
    assert [r.text for r in book.rules] == ["Never commit generated files.", FIX]
    assert book.rules[1].replaces.startswith("Always run the tests") and RULE not in book.rules[1].replaces


def test_extractor_precision_and_recall_on_the_hand_checked_claude_code_rules() -> None:
    labels = [r["text"] for r in json.loads(HAND_CHECKED.read_text(encoding="utf-8"))["rules"]]
    found: list[str] = []
    for path in sorted(CLAUDE_CODE.glob("*.jsonl")):
        for session in load(path):
            for m in session.messages:
                for rule in standing_rules(user_request(m)):
                    if rule not in found:
                        found.append(rule)

    def same(a: str, b: str) -> bool:
        a, b = a.strip("- ").strip(), b.strip("- ").strip()
        return a in b or b in a

    true = [f for f in found if any(same(f, lab) for lab in labels)]
    recalled = [lab for lab in labels if any(same(f, lab) for f in found)]
    precision, recall = len(true) / len(found), len(recalled) / len(labels)
    print(
        f"rules extractor on {len(labels)} hand-checked rules: precision {precision:.2f}, recall {recall:.2f}"
    )
    assert precision >= 0.9  # measured 2026-12-03: 1.00 (12 of 12)
    assert recall >= 0.5  # measured 2026-12-03: 0.55 (11 of 20): most misses are Chinese without a marker


def _engine(window: int) -> ContextEngine:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", WindowWarning)
        e = ContextEngine(get_policy("default"), model="claude-sonnet-4-5", window=window)
    e.bootstrap(system="You are a coding agent.", fixed_prefix_tokens=2_000)
    return e


def _all_text(messages: list[Message]) -> str:
    out = []
    for m in messages:
        for b in m.blocks:
            if isinstance(b, Text):
                out.append(b.text)
            elif isinstance(b, ToolResult):
                out += [p.text for p in b.content if isinstance(p, Text)]
    return "\n".join(out)


def test_the_correction_and_not_the_rule_stands_after_every_compaction() -> None:
    e = _engine(32_000)
    first = f"Port the CSV importer to the new schema.\n\n{prose(4_000, 99)}\n\n{RULE}\n\n{prose(4_000, 98)}"
    e.ingest(Message("user", (Text(first),), "u0", timestamp=T0))
    compactions = {"before": 0, "after": 0}
    for k in range(120):
        ts = T0 + 10 * k
        if k == 60:
            e.ingest(Message("user", (Text(FIX),), f"u{k}", timestamp=ts))
        call = ToolCall(f"t{k}", "Bash", {"command": f"sed -n '1,400p' src/importer/part_{k}.py"})
        e.assemble(now=ts)
        e.ingest(Message("assistant", (Text(f"step {k}"), call), f"a{k}", timestamp=ts))
        e.ingest(Message("user", (ToolResult(f"t{k}", (Text(prose(7_000, k)),)),), f"r{k}", timestamp=ts + 1))
        p = e.assemble(now=ts + 2)
        if not any(x.layer in ("summary_compact", "session_memory_compact") for x in p.events):
            continue
        text = _all_text(p.messages)
        if k < 60:
            compactions["before"] += 1
            assert RULE in text, f"call {k}: the rule is gone after a compaction"
        else:
            compactions["after"] += 1
            assert FIX in text, f"call {k}: the correction is gone after a compaction"
            assert RULE not in text, f"call {k}: the superseded rule is still shown as standing"
    assert compactions["before"] >= 2 and compactions["after"] >= 2, compactions


def test_the_latest_failure_and_the_file_ledger_are_pinned_by_every_compaction() -> None:
    e = _engine(32_000)
    e.ingest(Message("user", (Text("Fix the importer."),), "u0", timestamp=T0))
    error = "Traceback (most recent call last):\n  File \"imp.py\", line 9\nKeyError: 'amount'"
    seen = 0
    for k in range(80):
        ts = T0 + 10 * k
        e.assemble(now=ts)
        if k == 5:
            call = ToolCall(
                f"t{k}", "Edit", {"file_path": "src/imp.py", "old_string": "a", "new_string": "row['amount']"}
            )
            out = "ok"
        elif k == 6:
            call, out = ToolCall(f"t{k}", "Bash", {"command": "python imp.py"}), error
        else:
            call, out = ToolCall(f"t{k}", "Bash", {"command": f"cat notes/n{k}.txt"}), prose(6_000, k)
        e.ingest(Message("assistant", (call,), f"a{k}", timestamp=ts))
        e.ingest(Message("user", (ToolResult(f"t{k}", (Text(out),)),), f"r{k}", timestamp=ts + 1))
        p = e.assemble(now=ts + 2)
        if k > 6 and any(x.layer in ("summary_compact", "session_memory_compact") for x in p.events):
            seen += 1
            text = _all_text(p.messages)
            assert "KeyError: 'amount'" in text
            assert "src/imp.py: edited (Edit): row['amount']" in text
    assert seen >= 2


def test_the_ledger_keeps_each_files_last_action() -> None:
    led = FileLedger()
    calls = [
        ToolCall("1", "Read", {"file_path": "a.py"}),
        ToolCall("2", "Write", {"file_path": "b.py", "content": "print('new')\n"}),
        ToolCall("3", "Edit", {"file_path": "a.py", "old_string": "x", "new_string": "y = 1"}),
        ToolCall("4", "Read", {"file_path": "a.py"}),  # a read does not hide the edit
        ToolCall("5", "Bash", {"command": "rm -f 'old.txt'"}),
    ]
    led.observe(Message("assistant", tuple(calls), "a"))
    assert {p: (e.action, e.note) for p, e in led.entries.items()} == {
        "b.py": ("created", "print('new')"),
        "a.py": ("edited", "y = 1"),
        "old.txt": ("deleted", ""),
    }
    facts = PinnedFacts()
    facts.ledger = led
    text = facts.ledger_text(1_000, len)
    assert text.splitlines()[1] == "- old.txt: deleted"


def test_expand_returns_the_original_messages_of_a_range() -> None:
    store = SQLiteStore(":memory:")
    e = ContextEngine(
        get_policy("default"), model="claude-sonnet-4-5", window=64_000, store=store, session_id="s"
    )
    msgs = [
        Message("user", (Text("first request"),), "u0"),
        Message("assistant", (ToolCall("c1", "Bash", {"command": "ls"}),), "a1"),
        Message("user", (ToolResult("c1", (Text("a.py\nb.py"),)),), "r1"),
    ]
    for m in msgs:
        e.ingest(m)
    box = build_tools(tempfile.mkdtemp(), store, "s")
    out = box.executor.run("expand", {"start": 1, "end": 3})
    assert out.startswith("[messages 1..2 of 3]")
    assert '#1 assistant (a1):\n[tool call Bash id=c1] {"command":"ls"}' in out
    assert "#2 user (r1):\n[tool result id=c1] a.py\nb.py" in out
    assert "expand" in default_executor(tempfile.mkdtemp()).tools


def test_on_a_real_session_every_rule_and_latest_failure_survive_every_compaction() -> None:
    """The vscode Claude Code session (its user lays down rules in Chinese, its tools fail now and
    then) at 64,000 tokens: what the pinned blocks carry is in the context at each compaction."""
    from ctxengine.replay import replay_session

    (session,) = load(CLAUDE_CODE / "cc_mimo-v2.5-pro_vscode_2x-autocompact_4530697c.jsonl")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", WindowWarning)
        s = replay_session(session, get_policy("default"), window=64_000).summary
    probes = s.probes
    assert probes["rules"].n > 0 and probes["rules"].mean == 1.0
    assert probes["error"].n > 0 and probes["error"].mean == 1.0
    assert probes["files"].n > 0 and probes["files"].mean is not None and probes["files"].mean >= 0.9


def test_expand_gives_back_a_real_transcripts_messages_as_ingested() -> None:
    from ctxengine.tools.expand import render

    (session,) = load(CLAUDE_CODE / "cc_opus-4.5_general-tool-calls_2-comment-header-lines.jsonl")
    store = SQLiteStore(":memory:")
    e = ContextEngine(
        get_policy("default"), model="claude-sonnet-4-5", window=200_000, store=store, session_id="s"
    )
    for m in session.messages:
        e.ingest(m)
    box = build_tools(tempfile.mkdtemp(), store, "s")
    out = box.executor.run("expand", {"start": 3, "end": 6})
    assert out.startswith(f"[messages 3..5 of {len(store.entries('s', 'message'))}]")
    for k in range(3, 6):
        assert render(k, session.messages[k]) in out
