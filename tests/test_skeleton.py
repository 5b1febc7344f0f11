"""The transcript skeleton restored after a compaction, and files read through the shell.

The skeleton (``ctxengine.summary.skeleton``) re-attaches the agent's own words from before the cut: user
and assistant text and every string of its tool-call inputs, verbatim, newest first within a token
budget, tool results left out. As append-only segments the earlier
segments stay the same objects from one compaction to the next, so a prefix cache can keep serving
them. On a real Codex session (which reads files with ``sed -n`` / ``nl``) compactions restore
those shell reads as files and carry the skeleton.
"""

from __future__ import annotations

import itertools
import warnings
from pathlib import Path
from typing import Any

import pytest

from conftest import CLAUDE_CODE, CODEX, TRANSCRIPTS
from ctxengine.engine.core import ContextEngine
from ctxengine.formats import load
from ctxengine.messages.model import Message, Text, ToolCall, ToolResult, Usage
from ctxengine.models.registry import WindowWarning
from ctxengine.policy.registry import Restore, get_policy
from ctxengine.summary.skeleton import extend_segments
from ctxengine.tools.shell.commands import shell_read_paths


def count(text: str) -> int:
    return len(text) // 4 + 1


def skeleton(msgs: list[Message], max_tokens: int, block_tokens: int) -> list[Message]:
    """The skeleton of ``msgs`` as the first compaction makes it (one segment, or none)."""
    return [
        m
        for m, _ in extend_segments((), msgs, count, max_tokens=max_tokens, block_tokens=block_tokens, part=1)
    ]


def convo() -> list[Message]:
    return [
        Message("user", (Text("Fix the failing parser test in src/parse.py please."),), "u0"),
        Message(
            "assistant",
            (
                Text("I will read the parser first."),
                ToolCall("c1", "Bash", {"command": "sed -n '1,80p' src/parse.py"}),
            ),
            "a1",
        ),
        Message("user", (ToolResult("c1", (Text("def parse(s):\n    return s.split(',')\n" * 50),)),), "r1"),
        Message(
            "assistant",
            (
                ToolCall(
                    "c2",
                    "Edit",
                    {"file_path": "src/parse.py", "old_string": "split(',')", "new_string": "split(';')"},
                ),
            ),
            "a2",
        ),
        Message("user", (ToolResult("c2", (Text("ok"),)),), "r2"),
    ]


def test_skeleton_keeps_the_agents_own_words_verbatim_and_leaves_tool_results_out() -> None:
    [msg] = skeleton(convo(), max_tokens=2_000, block_tokens=500)
    text = msg.text()
    assert "Fix the failing parser test in src/parse.py please." in text
    assert "command: sed -n '1,80p' src/parse.py" in text
    assert "new_string: split(';')" in text
    assert "return s.split(',')" not in text  # the tool result is left out
    # oldest first
    assert text.index("I will read the parser") < text.index("new_string: split(';')")


def test_skeleton_takes_the_newest_entries_within_its_budget_and_cuts_long_blocks() -> None:
    long = Message("assistant", (Text("x " * 4_000),), "a0")
    msgs = [long, *convo()]
    [msg] = skeleton(msgs, max_tokens=250, block_tokens=100)
    assert count(msg.text()) <= 250
    assert "new_string: split(';')" in msg.text()  # the newest entry is there
    [cut] = skeleton([long], max_tokens=400, block_tokens=100)
    assert cut.text().rstrip().endswith("[... cut]")
    assert skeleton(msgs, max_tokens=0, block_tokens=100) == []


def test_segments_append_and_keep_earlier_segments_as_the_same_objects() -> None:
    msgs = convo()
    first = extend_segments((), msgs[:3], count, max_tokens=1_000, block_tokens=500, part=1)
    second = extend_segments(first, msgs[3:], count, max_tokens=1_000, block_tokens=500, part=2)
    assert len(second) == 2
    assert second[0][0] is first[0][0]  # the same object: a prefix cache can serve it
    assert "new_string: split(';')" in second[1][0].text()
    assert "new_string" not in second[0][0].text()


def test_segments_over_budget_drop_the_oldest_in_one_batch() -> None:
    span = [Message("assistant", (Text(f"step {i} " + "w " * 500),), f"a{i}") for i in range(12)]
    segs: tuple[tuple[Message, int], ...] = ()
    sizes = []
    for part in range(1, 13):
        before = [m for m, _ in segs]
        new = span[part - 1 : part]
        segs = extend_segments(segs, new, count, max_tokens=2_000, block_tokens=400, part=part)
        sizes.append(len(segs))
        assert sum(t for _, t in segs) <= 2_000
        assert f"step {part - 1} " in segs[-1][0].text()  # the newest is always there
        kept = [m for m, _ in segs[:-1]]
        assert kept == before[len(before) - len(kept) :]  # only the oldest go
    assert max(sizes) - min(sizes[max(sizes) :]) >= 2  # in a batch, not one per compaction
    assert extend_segments(segs, span, count, max_tokens=0, block_tokens=400, part=13) == ()


def test_shell_read_paths() -> None:
    def paths(cmd: str) -> list[str]:
        return shell_read_paths(ToolCall("c", "exec_command", {"cmd": cmd, "workdir": "/w"}))

    assert paths("sed -n '1,140p' /a/spec.md") == ["/a/spec.md"]
    assert paths("nl -ba /a/plan.md | sed -n '1,200p'") == ["/a/plan.md"]
    assert paths("cd x && cat src/a.py") == ["src/a.py"]
    assert paths("head -n 50 notes.txt") == ["notes.txt"]
    assert paths('bash -lc "cat README.md"') == ["README.md"]
    assert paths("cat <<'EOF' > f.md\nx\nEOF") == []  # a write
    assert paths("sed -i 's/a/b/' f.txt") == []  # an edit
    assert paths("rg -n x f.py") == []  # a search, not a read
    assert shell_read_paths(ToolCall("c", "Read", {"file_path": "/a/b.py"})) == []
    # the names hidden by quotes and escapes are still found (the prefilter deletes those first)
    assert paths("c'a't f.py") == paths('c"a"t f.py') == paths("c\\at f.py") == ["f.py"]
    assert paths("bash -c \"he''ad -n 3 a.py\"") == ["a.py"]
    assert paths("x=1 ta''il a.txt; ls") == ["a.txt"]


def test_the_read_prefilter_skips_no_read_of_the_shared_transcripts() -> None:
    """Every shell command of the shared transcripts that the prefilter skips (no read
    command's name in it) reads no file when split in full."""
    from ctxengine.tools.shell.commands import _may_read, _script_read_paths, shell_command

    commands = {
        cmd
        for f in sorted(TRANSCRIPTS.rglob("*"))
        if f.suffix in (".jsonl", ".json", ".traj")
        for s in load(f)
        for m in s.messages
        for c in m.tool_calls
        if (cmd := shell_command(c)) is not None
    }
    skipped = [c for c in commands if not _may_read(c)]
    assert len(commands) > 300 and len(skipped) > len(commands) // 3
    assert [c for c in skipped if _script_read_paths(c)] == []


def drive(path: Path, window: int) -> list[tuple[list[str], list[Message]]]:
    """Replay-like: assemble before each assistant message; the restored ids and the projection
    at every compaction."""
    session = load(path)[0]
    default = get_policy("default")
    policy = default.with_(
        default.settings(Restore).with_(
            skeleton_tokens=100_000, skeleton_share=0.25, skeleton_block_tokens=4_000, shell_reads=True
        )
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", WindowWarning)
        engine = ContextEngine(
            policy, model=session.model or "unknown", window=window, restore_from_transcript=True
        )
    engine.bootstrap(system=session.system or "")
    found = []
    for m in session.messages:
        if m.role == "assistant":
            p = engine.assemble(now=m.timestamp)
            for e in p.events:
                if "restored" in e.details:
                    found.append((list(e.details["restored"]), list(p.messages)))  # type: ignore[arg-type]
            engine.ingest(m)
            engine.after_turn(Usage(input_tokens=p.tokens, output_tokens=100))
        else:
            engine.ingest(m)
    return found


def test_real_codex_session_restores_shell_reads_and_keeps_skeleton_segments_cached() -> None:
    path = next(CODEX.glob("codex_gpt-5.2-codex_cli-0.98_*.jsonl"))
    found = drive(path, 40_000)
    assert len(found) >= 2
    restored = [i for ids, _ in found for i in ids]
    # files read with sed -n / nl -ba come back as files
    assert any(i.startswith("restore:/home/") for i in restored)
    assert all(any(i.startswith("restore-skeleton:") for i in ids) for ids, _ in found)
    # a segment that outlives a compaction is the same object at the next one (prompt cache),
    # and leads the prefix there
    persisted = 0
    for (_, before), (ids, after) in itertools.pairwise(found):
        for seg in (m for m in before if m.id.startswith("restore-skeleton:")):
            if seg.id in ids:
                assert any(m is seg for m in after)
                persisted += 1
        assert after[0].id.startswith("restore-skeleton:")
    assert persisted >= 1
    # the segments carry the agent's shell commands verbatim
    first = next(m for m in found[0][1] if m.id.startswith("restore-skeleton:"))
    assert "cmd: sed -n" in first.text() or "cmd: nl -ba" in first.text()


def test_shell_reads_are_restored_only_when_the_policy_asks() -> None:
    """Claude Code restores only its Read tool's files (presets keep that); ``default`` also
    restores files printed by ``sed -n`` (``restore_shell_reads``)."""
    from ctxengine.summary import restore

    msgs = convo()
    kept: list[Message] = []
    off = restore.recent_files(msgs, kept, count, from_transcript=True, max_files=5)
    on = restore.recent_files(msgs, kept, count, from_transcript=True, max_files=5, shell_reads=True)
    assert off == []
    assert [m.id for m in on] == ["restore:src/parse.py"]
    assert "return s.split(',')" in on[0].text()


def test_a_change_already_in_the_skeleton_is_not_restored_twice() -> None:
    from ctxengine.summary import restore

    msgs = convo()
    [shown] = skeleton(msgs, max_tokens=2_000, block_tokens=500)
    both = restore.recent_changes(msgs, [], count, max_files=5, change_tokens=500, total_tokens=2_000)
    deduped = restore.recent_changes(
        msgs, [], count, max_files=5, change_tokens=500, total_tokens=2_000, shown=shown.text()
    )
    assert [m.id for m in both] == ["restore-change:src/parse.py"]
    assert deduped == []


def test_skeleton_leaves_out_harness_notices_replaced_text_descriptions_and_todos() -> None:
    """What the agent never re-uses: a harness's notices in a user message, the text an edit
    replaced (gone from the file once the edit ran), a shell command's description, the todo list
    (restored whole after the summary). The new text, the path and the command stay."""
    msgs = [
        Message("user", (Text("<system-reminder>file a.py was read</system-reminder>"),), "u0"),
        Message("user", (Text("[Request interrupted by user]"),), "u1"),
        Message("user", (Text("Rename the parser's helper."),), "u2"),
        Message(
            "assistant",
            (
                ToolCall("c1", "Bash", {"command": "pytest -q tests/", "description": "Run the test suite"}),
                ToolCall("c2", "TodoWrite", {"todos": [{"content": "rename helper", "status": "pending"}]}),
                ToolCall(
                    "c3",
                    "MultiEdit",
                    {
                        "file_path": "src/parse.py",
                        "edits": [{"old_string": "def helper_old(x):", "new_string": "def helper_new(x):"}],
                    },
                ),
            ),
            "a1",
        ),
    ]
    [msg] = skeleton(msgs, max_tokens=2_000, block_tokens=500)
    text = msg.text()
    assert "Rename the parser's helper." in text
    assert "system-reminder" not in text and "interrupted" not in text
    assert "command: pytest -q tests/" in text and "Run the test suite" not in text
    assert "rename helper" not in text and "TodoWrite" not in text  # nothing left of it: no entry
    assert "file_path: src/parse.py" in text and "def helper_new(x):" in text
    assert "helper_old" not in text


def test_skeleton_cuts_an_earlier_user_message_to_its_head_and_keeps_the_agents_blocks() -> None:
    paste = "Here is the spec: " + "lorem ipsum dolor " * 400
    write = "x = 1\n" * 300
    msgs = [
        Message("user", (Text(paste),), "u0"),
        Message("assistant", (ToolCall("c1", "Write", {"file_path": "a.py", "content": write}),), "a1"),
    ]
    segs = extend_segments((), msgs, count, max_tokens=5_000, block_tokens=1_000, part=1, user_tokens=100)
    text = segs[0][0].text()
    assert "Here is the spec: lorem ipsum" in text and paste not in text  # its head, marked cut
    assert text.index("[... cut]") < text.index("[tool call Write]")
    assert write.strip() in text  # the agent's own block is not held to the user cap
    whole = extend_segments((), msgs, count, max_tokens=5_000, block_tokens=1_000, part=1)
    assert count(whole[0][0].text()) > count(text)  # 0: the block cap alone


def test_real_anthropic_session_reads_the_skeleton_from_the_cache_at_the_next_compaction(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """On the recorded Sonnet session at 64,000 tokens, default's compactions carry the skeleton
    segments; the breakpoint at their end (``CACHE_ANCHOR``) lets each next compaction read them
    instead of writing them again: fewer cache writes, the same context."""
    from ctxengine.formats import anthropic_writer
    from ctxengine.replay import replay_session

    session = load(CLAUDE_CODE / "cc_sonnet-4.5_long-290-tools_redacted_3cfce0ff.jsonl")[0]
    with_anchor = replay_session(session, get_policy("default"), window=64_000)
    monkeypatch.setattr(anthropic_writer, "CACHE_ANCHOR", "no-such-key")  # the writer sees no anchor
    without = replay_session(session, get_policy("default"), window=64_000)

    def at_compactions(r: Any, field: str) -> int:
        return sum(
            getattr(c, field) for c in r.calls if any(e["layer"].endswith("_compact") for e in c.events)
        )

    assert [c.sent_tokens for c in with_anchor.calls] == [c.sent_tokens for c in without.calls]
    assert at_compactions(with_anchor, "cache_read_tokens") > at_compactions(without, "cache_read_tokens")
    writes = [sum(c.cache_write_tokens for c in r.calls) for r in (with_anchor, without)]
    assert writes[0] < writes[1]
    assert with_anchor.summary.cost_usd < without.summary.cost_usd
