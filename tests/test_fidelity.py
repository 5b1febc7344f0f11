"""Content recall, compaction probes and the re-fetch cost (``ctxengine.eval.fidelity``), on built
inputs where the right figure is known, and on real transcripts against the shared anchor script."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from conftest import CLAUDE_CODE, SHARED
from ctxengine.eval import fidelity
from ctxengine.eval.fidelity import FidelityTracker, error_text, file_changes, shingles
from ctxengine.formats import load as load_path
from ctxengine.messages.model import Block, Message, Text, ToolCall, ToolResult, Usage
from ctxengine.policy.registry import get_policy
from ctxengine.replay import replay_session

FILE = "the function parse_header reads the first line of the file and splits it on commas"
ERROR = (
    "Traceback (most recent call last):\n  File \"p.py\", line 3, in <module>\n    int('x')\n"
    "ValueError: invalid literal for int() with base 10: 'x'"
)


def user(text: str, i: int) -> Message:
    return Message(role="user", blocks=(Text(text),), id=f"u{i}")


def call(i: int, name: str, inp: dict[str, object], text: str = "") -> Message:
    blocks: tuple[Text | ToolCall, ...] = (ToolCall(id=f"c{i}", name=name, input=inp),)
    if text:
        blocks = (Text(text), *blocks)
    return Message(role="assistant", blocks=blocks, id=f"a{i}")


def result(i: int, text: str, *, is_error: bool = False) -> Message:
    return Message(
        role="user",
        blocks=(ToolResult(call_id=f"c{i}", content=(Text(text),), is_error=is_error),),
        id=f"r{i}",
    )


def test_shingles_are_eight_word_runs_within_one_text() -> None:
    assert len(shingles("one two three four five six seven")) == 0
    assert len(shingles("one two three four five six seven eight")) == 1
    assert len(shingles("a b c d e f g h i j")) == 3
    assert shingles("a  b\nc d e f g h") == shingles("a b c d e f g h")


@pytest.mark.parametrize(
    "gutter", ["{:>6}\t", "{:>6}\u2192", "{}\t"], ids=["nl -ba / cat -n", "Claude Code Read", "narrow"]
)
def test_a_line_number_gutter_is_not_a_word(gutter: str) -> None:
    lines = ["def parse_header(line):", "    first, rest = line.split(',', 1)", "    return first.strip()"]
    numbered = "\n".join(gutter.format(k) + ln for k, ln in enumerate(lines, 1))
    plain = "\n".join(lines)
    # an edit that quotes the three lines (runs across line breaks) is grounded in the numbered read
    assert shingles(numbered) == shingles(plain) and len(shingles(plain)) == 2
    # ... unless gutters count as words (content recall, as the shared anchor script counts it)
    assert shingles(numbered, gutters_are_words=True).isdisjoint(shingles(plain))
    # a number inside a line, or a tab after a word, is left alone
    inner = "x = 1\t2 three four five six seven eight"
    assert shingles(inner) != shingles("x = 2 three four five six seven eight")


def test_grounded_shingles_count_only_when_earlier_content_held_them() -> None:
    t = FidelityTracker("", lambda s: len(s.split()))
    read = result(1, FILE)
    t.observe(user("please fix the header parser", 0))
    t.observe(read)
    # the model quotes the file (grounded) and writes new words (not grounded)
    out = call(2, "Edit", {"file_path": "p.py", "old_string": FILE, "new_string": "brand new words " * 4})
    kept = t.measure(out, [read], "", compaction=False)
    assert kept.grounded == len(shingles(FILE)) and kept.hits == kept.grounded
    lost = FidelityTracker("", lambda s: len(s.split()))
    lost.observe(read)
    f = lost.measure(out, [user("a summary that names p.py only", 9)], "", compaction=False)
    assert f.hits == 0 and f.grounded == len(shingles(FILE))
    # the missing source is charged once: its tokens
    assert f.refetch_tokens == len(FILE.split())


def test_fixed_prefix_shingles_are_never_grounded() -> None:
    t = FidelityTracker(FILE, len)
    t.observe(result(1, FILE))
    f = t.measure(call(2, "Bash", {"command": FILE}), [], "", compaction=False)
    assert f.grounded == 0


def test_a_list_of_identifiers_holds_no_content() -> None:
    t = FidelityTracker("", len)
    t.observe(result(1, "src/app/parser.py line 12: " + FILE))
    names = user("src/app/parser.py parse_header", 5)
    f = t.measure(
        call(2, "Edit", {"file_path": "src/app/parser.py", "old_string": FILE}), [names], "", compaction=False
    )
    assert f.grounded > 0 and f.hits == 0


def test_refetch_is_charged_once_per_source_per_compaction_epoch() -> None:
    t = FidelityTracker("", lambda s: 100)
    t.observe(result(1, FILE))
    out = call(2, "Bash", {"command": FILE})
    assert t.measure(out, [], "", compaction=False).refetch_tokens == 100
    assert t.measure(out, [], "", compaction=False).refetch_tokens == 0  # same epoch
    assert t.measure(out, [], "", compaction=True).refetch_tokens == 100  # a new epoch


def test_probes_at_a_compaction() -> None:
    t = FidelityTracker("", len)
    request = "make the parser accept quoted fields and keep the tests green please"
    t.observe(user(request, 0))
    change = "def parse_header(line): return next(csv.reader([line])) # quoted fields now work"
    t.observe(call(1, "Edit", {"file_path": "p.py", "old_string": "x", "new_string": change}))
    t.observe(result(1, "ok"))
    t.observe(result(2, ERROR + "\nmore output", is_error=True))
    everything = [user(request, 0), user(change, 1), user(ERROR, 2), user("p.py was edited", 3)]
    f = t.measure(call(3, "Bash", {"command": "pytest"}), everything, "", compaction=True)
    assert f.probes == {"request": 1.0, "artifact": 1.0, "error": 1.0, "files": 1.0}
    assert f.request_whole is True
    nothing = t.measure(call(4, "Bash", {"command": "pytest"}), [user("summary", 3)], "", compaction=True)
    assert nothing.probes == {"request": 0.0, "artifact": 0.0, "error": 0.0, "files": 0.0}
    assert nothing.request_whole is False
    assert t.measure(call(5, "Bash", {"command": "ls"}), [], "", compaction=False).probes is None


@pytest.mark.parametrize(
    ("text", "probe"),
    [
        # Claude Code's Bash: a non-zero exit code heads the output
        (
            "Exit code 1\nError: Session info not available for this run",
            "Error: Session info not available for this run",
        ),
        # Codex: its status lines, then the output
        (
            "Chunk ID: 470b82\nWall time: 0.0515 seconds\nProcess exited with code 2\n"
            "Original token count: 16\nOutput:\n"
            "sed: can't read ./Use cases/UC-19.md: No such file or directory\n",
            "sed: can't read ./Use cases/UC-19.md: No such file",
        ),
        # mini-swe-agent
        (
            "<returncode>1</returncode>\n<output>\nmake: *** [test] Error 2 in the build\n</output>",
            "make: *** [test] Error 2 in the build",
        ),
        # a traceback without an exit status: the exception line
        (ERROR + "\n3 passed", "ValueError: invalid literal for int() with base 10:"),
    ],
)
def test_an_error_is_recognised_by_its_structure(text: str, probe: str) -> None:
    assert error_text(ToolResult(call_id="c1", content=(Text(text),))) == probe


@pytest.mark.parametrize(
    "text",
    [
        # a file that was read
        "1\tdef handle(error):\n2\t    raise RuntimeError('failed to parse')  # the exception path",
        "Exit code 0\nFAILED is a word this script prints",
        "Process exited with code 0\nOutput:\nerror handling documented in README",
    ],
)
def test_a_read_that_mentions_errors_is_not_an_error(text: str) -> None:
    assert error_text(ToolResult(call_id="c1", content=(Text(text),))) is None
    t = FidelityTracker("", len)
    t.observe(result(1, text))
    f = t.measure(call(2, "Bash", {"command": "ls"}), [user("x", 1)], "", compaction=True)
    assert f.probes is not None and "error" not in f.probes


@pytest.mark.parametrize(
    ("name", "inp", "path", "text"),
    [
        ("Edit", {"file_path": "/a.py", "old_string": "x", "new_string": "y = 2"}, "/a.py", "y = 2"),
        ("Write", {"file_path": "/b.md", "content": "# Plan"}, "/b.md", "# Plan"),
        (
            "MultiEdit",
            {
                "file_path": "/c.py",
                "edits": [{"old_string": "a", "new_string": "b1"}, {"old_string": "c", "new_string": "d2"}],
            },
            "/c.py",
            "b1\nd2",
        ),
        (
            "str_replace_editor",
            {"command": "str_replace", "path": "/d.py", "old_str": "a", "new_str": "z = 1"},
            "/d.py",
            "z = 1",
        ),
        ("bash", {"command": "cat > e.py <<'EOF'\nprint('hi')\nEOF"}, "e.py", "print('hi')"),
    ],
)
def test_file_changes_of_the_common_edit_tools(
    name: str, inp: dict[str, object], path: str, text: str
) -> None:
    (change,) = file_changes(ToolCall(id="1", name=name, input=inp))
    assert (change.path, change.text) == (path, text)


def test_file_changes_of_a_patch_keep_its_added_lines() -> None:
    patch = (
        "*** Begin Patch\n*** Update File: src/x.py\n@@\n-old line\n"
        "+new line one\n+new line two\n*** End Patch"
    )
    (change,) = file_changes(ToolCall(id="1", name="apply_patch", input=patch))
    assert change.path == "src/x.py" and change.text == "new line one\nnew line two"
    assert file_changes(ToolCall(id="1", name="Read", input={"file_path": "/a"})) == []


def test_none_sends_everything_and_scores_full_content_recall() -> None:
    path = CLAUDE_CODE / "cc_opus-4.5_general-tool-calls_2-comment-header-lines.jsonl"
    (session,) = load_path(path)
    report = replay_session(session, get_policy("none"), window=200_000)
    s = report.summary
    assert s.content_grounded > 100
    assert s.content_recall == 1.0 and s.refetch_tokens == 0
    assert s.probe_score is None and s.latest_request_kept is None  # it never compacted
    assert s.cost_with_refetch_usd == s.cost_usd


def test_identifiers_only_is_high_on_reference_recall_and_low_on_content_recall() -> None:
    from ctxengine.bench import engine_registry, resolve, run_one
    from ctxengine.models.registry import Registry

    path = CLAUDE_CODE / "cc_opus-4.5_general-tool-calls_2-comment-header-lines.jsonl"
    (session,) = load_path(path)
    (runner,) = resolve(["identifiers-only"])
    row = run_one(session, runner, window=200_000, registry=Registry.default(), engines=engine_registry())
    assert row.reference_recall is not None and row.reference_recall > 0.9
    assert row.content_recall is not None and row.content_recall < 0.1
    assert row.refetch_tokens > 0 and row.cost_with_refetch_usd > row.cost_usd


def test_recorded_compactions_match_the_shared_anchor_script() -> None:
    """The anchor (``../shared/acceptance/anchor_content_recall.py``) scores Claude Code's own
    compactions on the calls after the first boundary; our replay of ``recorded`` on the same
    calls agrees (db3f6604: 764/1230 there, within 0.01 here): content recall counts words as the
    anchor does, line-number gutters included (``FidelityMeter``'s second tracker)."""
    path = CLAUDE_CODE / "cc_mimo-v2.5-pro_2x-autocompact_db3f6604.jsonl"
    anchor = SHARED / "acceptance" / "anchor_content_recall.py"
    out = subprocess.run([sys.executable, str(anchor), str(path)], capture_output=True, text=True, check=True)
    hits, total = (int(x) for x in out.stdout.split("after compaction ")[1].split(" =")[0].split("/"))
    (session,) = load_path(path)
    report = replay_session(session, get_policy("recorded"), window=200_000)
    calls = [
        i for i, m in enumerate(session.messages) if m.role == "assistant" and not m.meta.get("synthetic")
    ]
    first = session.compactions[0].at
    after = [c for c, i in zip(report.calls, calls, strict=True) if i >= first]
    ours = sum(c.content_hits for c in after) / sum(c.content_grounded for c in after)
    assert abs(ours - hits / total) < 0.01, (ours, hits, total)
    # read recall counts the files' words: the lines Claude Code re-attaches after its compactions
    # (Read's "     1→" gutter) hold the runs the agent's later edits quote
    read = sum(c.read_hits for c in after) / sum(c.read_grounded for c in after)
    assert read > ours + 0.2, (read, ours)


def test_probe_kinds_are_reported_per_session() -> None:
    assert fidelity.PROBE_KINDS == ("request", "artifact", "error", "continuation", "rules", "files")
    path = CLAUDE_CODE / "cc_mimo-v2.5-pro_2x-autocompact_db3f6604.jsonl"
    (session,) = load_path(Path(path))
    s = replay_session(session, get_policy("default"), window=64_000).summary
    assert s.probe_compactions > 0
    assert set(s.probes) == set(fidelity.PROBE_KINDS)
    assert s.probes["files"].n > 0 and s.probes["error"].n > 0
    assert s.probe_score is not None and 0 <= s.probe_score <= 1
    assert s.latest_request_kept is not None


# ------------------------------------------------------------------ read recall

WRITTEN = "alpha beta gamma delta epsilon zeta eta theta iota kappa lambda mu nu xi omicron pi"


def test_the_agents_own_words_are_not_read_sources() -> None:
    t = FidelityTracker("", len)
    t.observe(call(1, "Bash", {"command": FILE}))  # the agent typed it: content, not read
    t.observe(result(1, "ok"))
    f = t.measure(call(2, "Bash", {"command": FILE}), [], "", compaction=False)
    assert f.grounded > 0 and f.read_grounded == 0 and f.refetch_tokens == 0


def test_a_quoted_tool_result_is_read_grounded_and_charged_when_missing() -> None:
    t = FidelityTracker("", lambda s: 100)
    t.observe(call(1, "Read", {"file_path": "p.py"}))
    t.observe(result(1, FILE))
    out = call(2, "Edit", {"file_path": "p.py", "old_string": FILE, "new_string": "x"})
    held = t.measure(out, [result(1, FILE)], "", compaction=False)
    assert held.read_grounded == held.read_hits > 0
    gone = t.measure(out, [user("a summary", 9)], "", compaction=True)
    assert gone.read_hits == 0 and gone.read_grounded > 0 and gone.refetch_tokens == 100


def test_a_written_file_is_a_file_state_source_until_its_text_is_replaced() -> None:
    t = FidelityTracker("", len)
    t.observe(call(1, "Write", {"file_path": "/n.txt", "content": WRITTEN}))
    t.observe(result(1, "File created"))
    quote = call(2, "Edit", {"file_path": "/n.txt", "old_string": WRITTEN, "new_string": "short"})
    f = t.measure(quote, [], "", compaction=False)
    # grounded in the file's current text, which the agent typed: not something it read
    assert t.grounded_by_kind["file_state"] == len(shingles(WRITTEN))
    assert f.read_grounded == 0 and f.refetch_tokens > 0  # a miss still costs a re-read
    t.observe(quote)  # the edit replaced the whole text: the old words are gone from the file
    again = t.measure(call(3, "Bash", {"command": WRITTEN}), [], "", compaction=False)
    assert again.grounded > 0 and t.grounded_by_kind["own_output"] == len(shingles(WRITTEN))


def test_an_edit_applied_to_a_written_file_keeps_the_rest_as_file_state() -> None:
    t = FidelityTracker("", len)
    t.observe(call(1, "Write", {"file_path": "/n.txt", "content": WRITTEN + "\n" + FILE}))
    t.observe(call(2, "Edit", {"file_path": "/n.txt", "old_string": WRITTEN, "new_string": "gone"}))
    t.measure(call(3, "Bash", {"command": FILE}), [], "", compaction=False)
    assert t.grounded_by_kind["file_state"] == len(shingles(FILE))


def test_a_file_read_then_quoted_is_read_even_when_the_agent_also_wrote_it() -> None:
    t = FidelityTracker("", len)
    t.observe(call(1, "Write", {"file_path": "/n.txt", "content": FILE}))
    t.observe(call(2, "Read", {"file_path": "/n.txt"}))
    t.observe(result(2, FILE))  # the agent read it back: a read source
    f = t.measure(call(3, "Bash", {"command": FILE}), [result(2, FILE)], "", compaction=False)
    assert f.read_grounded == f.read_hits == len(shingles(FILE))


def test_read_recall_on_a_real_session_none_keeps_all_own_words_only_little(transcripts: Path) -> None:
    path = next(transcripts.glob("codex-rollout-jsonl/codex_gpt-5.2-codex_cli-0.98_*.jsonl"))
    session = load_path(path)[0]
    from ctxengine.engine.baselines import OwnWordsOnlyEngine, policy_for
    from ctxengine.engine.plugins import EngineRegistry

    engines = EngineRegistry()
    none = replay_session(session, get_policy("none"), window=64_000).summary
    own = replay_session(
        session,
        policy_for("own-words-only"),
        window=64_000,
        engine_id=OwnWordsOnlyEngine.engine_id,
        engines=engines,
    ).summary
    default = replay_session(session, get_policy("default"), window=64_000).summary
    assert none.read_grounded > 500 and none.read_recall == 1.0
    assert own.read_grounded == none.read_grounded
    assert own.read_recall is not None and default.read_recall is not None
    assert own.read_recall < 0.5 < default.read_recall  # its own words do not carry what it read
    assert set(none.grounded_by_source) <= {"user", "attachment", "tool_result", "file_state", "own_output"}


def test_the_rules_probe_counts_the_standing_rules_and_not_what_a_correction_replaced() -> None:
    t = FidelityTracker("", len)
    rule = "Always run the tests with `make test-fast`, never with plain pytest."
    fix = "Correction: from now on run the tests with `make test-all`; `make test-fast` skips the slow suite."
    t.observe(user(rule, 0))
    kept = t.measure(call(1, "Bash", {"command": "ls"}), [user(rule, 0)], "", compaction=True)
    assert kept.probes is not None and kept.probes["rules"] == 1.0
    t.observe(user(fix, 1))
    old_only = t.measure(call(2, "Bash", {"command": "ls"}), [user(rule, 0)], "", compaction=True)
    assert old_only.probes is not None and old_only.probes["rules"] == 0.0  # the rule no longer stands
    both = t.measure(call(3, "Bash", {"command": "ls"}), [user(fix, 1)], "", compaction=True)
    assert both.probes is not None and both.probes["rules"] == 1.0


def test_the_files_probe_wants_the_path_with_its_last_action() -> None:
    t = FidelityTracker("", len)
    t.observe(call(1, "Read", {"file_path": "C:\\src\\a.py"}))
    t.observe(call(2, "Write", {"file_path": "/b.py", "content": "x = 1"}))
    t.observe(call(3, "Bash", {"command": "rm old.txt"}))
    shown = [user("read C:/src/a.py earlier; created /b.py; deleted old.txt", 0)]
    f = t.measure(call(4, "Bash", {"command": "ls"}), shown, "", compaction=True)
    assert f.probes is not None and f.probes["files"] == 1.0  # either slash, any harness's words
    names_only = t.measure(
        call(5, "Bash", {"command": "ls"}), [user("C:/src/a.py /b.py old.txt", 0)], "", compaction=True
    )
    assert names_only.probes is not None and names_only.probes["files"] == 0.0


def test_the_bench_reports_file_state_recall_apart_and_own_words_hold_it(transcripts: Path) -> None:
    """On a real Claude Code session, the agent's own Write/Edit inputs hold the current text of
    the files it wrote: own-words-only scores high on file-state recall and low on read recall,
    which is why the file-state runs are a figure of their own (``file_state_recall``)."""
    from ctxengine.bench.run import resolve, run_bench

    path = next(transcripts.glob("claude-code-jsonl/cc_sonnet-4.5_long-290-tools_*.jsonl"))
    result = run_bench(load_path(path), resolve(["none", "own-words-only"]), window=64_000)
    none, own = result.policies["none"], result.policies["own-words-only"]
    assert none.file_state_recall == 1.0 and none.read_recall == 1.0
    assert own.grounded_by_source["file_state"] > 50
    assert own.file_state_recall is not None and own.read_recall is not None
    assert own.file_state_recall > 0.9 > 0.6 > own.read_recall
    assert own.file_state_recall == round(
        own.read_hits_by_source["file_state"] / own.grounded_by_source["file_state"], 4
    )


def test_content_recall_alone_gives_the_anchor_trackers_hits_and_grounded() -> None:
    """``ContentRecall`` (the replay's second, anchor-style count) agrees with a whole
    ``FidelityTracker(gutters_are_words=True)`` call after call, views growing and cut."""
    from ctxengine.eval.content_recall import ContentRecall

    numbered = "\n".join(f"{i:>6}\t{w}" for i, w in enumerate(FILE.split(), 1))
    msgs = [user("please fix the header parser " + FILE, 0), result(1, numbered), result(2, ERROR)]
    calls = [
        call(3, "Edit", {"file_path": "p.py", "old_string": FILE}, text=numbered),
        call(4, "Bash", {"command": ERROR}, text="the header parser " + FILE),
    ]
    whole, alone = (
        FidelityTracker("fixed prefix " + FILE[:40], len, gutters_are_words=True),
        ContentRecall("fixed prefix " + FILE[:40]),
    )
    views = [msgs[:1], msgs[:2], msgs, msgs[1:], [user("a summary", 9), msgs[2]]]
    seen = 0
    for m in msgs:
        whole.observe(m)
        alone.observe(m)
        for view in views:
            for c in calls:
                a = whole.measure(c, view, "system " + FILE, compaction=False)
                b = alone.measure(c, view, "system " + FILE)
                assert (b.hits, b.grounded) == (a.hits, a.grounded)
                seen += b.grounded > 0
    assert seen > 0


def test_the_files_probe_scores_as_a_search_line_by_line() -> None:
    """``FileTrail.score`` (one search per path in the lines saying its action's verbs) gives what
    checking each line for the path and a verb gives, NULs, empty paths and no lines included."""
    import random

    from ctxengine.eval.file_state import _VERBS, FileTrail

    def by_line(last: dict[str, str], lines: list[str]) -> float | None:
        if not last:
            return None
        low = [ln.lower().replace("\\", "/") for ln in lines]
        hits = 0
        for path, action in last.items():
            p = path.lower().replace("\\", "/")
            hits += any(p in ln and any(v in ln for v in _VERBS[action]) for ln in low)
        return round(hits / len(last), 4)

    rng = random.Random(5)
    words = ["a", "b/c", "read ", "edit", "creat", "rm ", "\x00", "\\", "A", "x.py", "cat ", " ", ""]
    for _ in range(5_000):
        trail = FileTrail()
        for _ in range(rng.randint(0, 4)):
            path = "".join(rng.choice(words) for _ in range(rng.randint(0, 3)))
            trail.last[path] = rng.choice(list(_VERBS))
        n_lines = rng.randint(0, 5)
        lines = ["".join(rng.choice(words) for _ in range(rng.randint(0, 6))) for _ in range(n_lines)]
        assert trail.score(lines) == by_line(trail.last, lines), (trail.last, lines)


def test_own_words_only_resends_its_blocks_and_the_view_reads_only_the_changed_ones(
    transcripts: Path,
) -> None:
    """The baseline on a real Codex session at 64,000 tokens: each call's message is new, but every
    block it shares with the previous call's is the same object, so the measures' view counts
    (``ViewCounts``, per block) read only the blocks that came or went since the previous call;
    what they hold is what the message's blocks hold."""
    from ctxengine.engine.baselines import OwnWordsOnlyEngine, policy_for
    from ctxengine.messages.view_counts import ViewCounts

    read: list[int] = []

    def keys(b: Block) -> frozenset[int]:
        read.append(id(b))
        return shingles(b.text) if isinstance(b, Text) else frozenset()

    path = next(transcripts.glob("codex-rollout-jsonl/codex_gpt-5.2-codex_cli-0.98_*.jsonl"))
    (session,) = load_path(path)
    engine = OwnWordsOnlyEngine(policy_for("own-words-only"), model=session.model, window=64_000)
    engine.bootstrap(system=session.system)
    counts: ViewCounts[int] = ViewCounts(keys)
    previous: set[int] = set()
    calls = reused = 0
    for msg in session.messages:
        if msg.role == "assistant":
            (sent,) = engine.assemble().messages
            read.clear()
            counts.move_to([sent])
            blocks = {id(b) for b in sent.blocks}
            assert set(read) <= blocks ^ previous  # only what came or went was read
            held = frozenset().union(*(keys(b) for b in sent.blocks))
            assert all(counts.holds(s) for s in held)
            reused += len(blocks & previous)
            previous, calls = blocks, calls + 1
            engine.after_turn(Usage(input_tokens=0, output_tokens=0))
        engine.ingest(msg)
    assert calls > 10 and reused > calls  # blocks came back call after call, not rebuilt
