"""The tool-limit report's shell parsing by ``bashlex`` (``ctxengine.tools.shell.parse``): the same
classification as the hand-written splitter on every recorded shell command, quoted
here-documents read without falling back, the fallback counted when bashlex refuses a script, and
compound commands judged by the parser (a compound piped or redirected as a whole)."""

from __future__ import annotations

import pytest

from conftest import TRANSCRIPTS
from ctxengine.formats import load
from ctxengine.messages.model import ToolCall
from ctxengine.tools import limits
from ctxengine.tools.limits import ToolUse, classify
from ctxengine.tools.shell.commands import first_commands, shell_command
from ctxengine.tools.shell.parse import FALLBACKS, fallback_count, parsed_first_commands


def bash(command: str) -> ToolCall:
    return ToolCall("t1", "Bash", {"command": command})


def names(script: str) -> list[tuple[str, bool]]:
    return [(c.name, c.alone) for c in parsed_first_commands(script)]


def test_same_classification_as_the_hand_splitter_on_every_recorded_command(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Every shell command of the shared transcripts is classified as the hand-written splitter
    classified it (the tool-limit figures of the replay stay as they were)."""
    commands = [
        cmd
        for f in sorted(TRANSCRIPTS.rglob("*"))
        if f.is_file() and f.suffix != ".md"
        for s in load(f)
        for m in s.messages
        for b in m.blocks
        if isinstance(b, ToolCall) and (cmd := shell_command(b)) is not None
    ]
    if not commands:
        pytest.skip("no shared transcripts")
    refused = fallback_count()
    parsed = [classify(bash(cmd)) for cmd in commands]
    # bashlex parsed all but 7 of them (5 ParsingError, 2 MatchedPairError: counted from the
    # output once, not derived), so the equality below compares two different parsers
    assert fallback_count() - refused == 7
    monkeypatch.setattr(limits, "parsed_first_commands", first_commands)
    hand = [classify(bash(cmd)) for cmd in commands]
    assert parsed == hand
    assert sum(u is not None for u in parsed) > 100


@pytest.mark.parametrize(
    ("script", "expected"),
    [
        ("cd /repo && cat f.txt", [("cd", True), ("cat", True)]),
        ("cat f | head -5", [("cat", False)]),
        ("FOO=1 timeout 30 cat f", [("cat", True)]),
        ("if grep -q x f; then echo y; fi", [("grep", True), ("echo", True)]),
        ("bash -lc 'cd /repo && rg -n foo'", [("cd", True), ("rg", True)]),
        ('cat f > out.txt; grep x <<< "$s"; cat g >&2', [("cat", True)]),
        ("", []),
    ],
)
def test_first_commands(script: str, expected: list[tuple[str, bool]]) -> None:
    assert names(script) == expected


def test_quoted_here_documents_are_parsed_without_falling_back() -> None:
    """bashlex 0.18 cannot end ``<<'EOF'``: the body is emptied and the delimiter unquoted first."""
    before = fallback_count()
    script = "cat > out.md <<'EOF'\nit's a body && cat x\nEOF\nhead -1 f"
    assert names(script) == [("head", True)]
    commit = "git commit -m \"$(cat <<'EOF'\nmsg && cat y\nEOF\n)\" && cat f"
    assert names(commit) == [("git", True), ("cat", True)]
    assert fallback_count() == before


@pytest.mark.parametrize(
    ("script", "use"),
    [
        ("[[ -f x ]] && cat x", ToolUse("read", True)),  # [[ ]]: bashlex raises ParsingError
        ("time cat f", ToolUse("read", True)),  # time: NotImplementedError
        ("echo $((1 + 2)); grep x f", ToolUse("grep")),  # arithmetic: NotImplementedError
        ('cd x && cat "f && ls', ToolUse("read", True)),  # an unbalanced quote
    ],
)
def test_a_refused_script_falls_back_and_is_counted(script: str, use: ToolUse) -> None:
    before = fallback_count()
    assert classify(bash(script)) == use
    assert fallback_count() == before + 1
    assert all(isinstance(k, str) and n > 0 for k, n in FALLBACKS.items())


@pytest.mark.parametrize(
    ("script", "use"),
    [
        # a compound piped as a whole: its commands' output goes through the pipe
        ("for x in a b; do cat $x; done | head", ToolUse("read", False)),
        ("{ cat a; cat b; } | head", ToolUse("read", False)),
        # a compound sent to a file: nothing reaches the model
        ("{ cat a; } > out", None),
        # after a subshell, the next stage is not the first command of a pipeline
        ("(cd a && git log) | head -5", None),
    ],
)
def test_compound_commands_are_judged_by_the_parser(script: str, use: ToolUse | None) -> None:
    assert classify(bash(script)) == use
