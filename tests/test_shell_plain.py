"""Plain shell scripts read without bashlex (``ctxengine.tools.shell.plain``): whatever it accepts
it reads as bashlex's tree reads it (``shell.parse._walk``), on every recorded shell command of the
shared transcripts and on generated scripts; what it cannot vouch for is left to bashlex."""

from __future__ import annotations

import random

import bashlex
import pytest

from conftest import TRANSCRIPTS
from ctxengine.formats import load
from ctxengine.messages.model import ToolCall
from ctxengine.tools.shell import parse
from ctxengine.tools.shell.commands import shell_command
from ctxengine.tools.shell.plain import plain_pipes

# pieces of scripts, plain and not, joined at random (the generator below)
ATOMS = [
    *("ls", "cat", "grep", "-rn", "a", "b.py", "x=1", "A=b", "~/x", "*.py", "[ab]", "é", "中文", "-"),
    *("--k=v", "%s", "0", "9", "12", "=", "bash", "-c", "sudo", "env", "a2", "x9"),
    *("'q t'", '"d q"', '"it\'s"', "'say \"hi\"'", '""', "''", 'a"b"c', '"a!b"', "'a!b'", '"a\nb"'),
    *('"ls -la"', "'cat f | head'", '"a\\nb"', '"a\\"b"', '"E:\\AI"', '"x\\\\"', '"\\$x"', '"a\\\nb"'),
    *('x"\\"q"', "'a\\b'", '"a\\`b"', "$x", '"$x"', "a$x", '"a $? b"', "${x}", '$x"y"', '"${x}y"', "$1"),
    *('"$@"', "$x$y", "$(ls)", "${x:-y}", '"$(ls)"', "$((1+2))", "$$", "$#", '"$"', "$", '"a$?"'),
    *("<<EOF", "<< EOF", "<<'EOF'", "<<-EOF", "\nbody (x) #y\n", "\nEOF\n", "\nEOF", "EOF", "<<<x"),
    *("\n\tEOF\n", "<<E2", "\nE2\n"),
    *("2>/dev/null", ">out", ">>out", "2>&1", ">&2", "1>f", "> f", "2>", ">", "1>>f", ">> f", "0>f"),
    *("2>>&1", "a2>x", ">&", "&>", ">|"),
    *("|", "&&", "||", ";", "\n", " ", "  ", "\t", "&&\n", "|\n", ";;", "\n\n", " ; "),
    *("if", "done", "{", "}", "!", "#", "$x", "`x`", "\\", "<", "&", "(", ")", "[[", "time", "\r", "\xa0"),
]


def bashlex_pipes(script: str) -> tuple[tuple[object, ...], ...]:
    return tuple(tuple(p) for tree in bashlex.parse(script) for p in parse._walk(tree, True))


def agrees(script: str) -> bool | None:
    """None when ``script`` is not plain; else whether bashlex reads it the same (and at all),
    both given the script as ``parse._parsed`` gives it (here-document bodies emptied)."""
    script = parse._prepared(script)
    got = plain_pipes(script)
    if got is None:
        return None
    try:
        return bashlex_pipes(script) == tuple(tuple(p) for p in got)
    except Exception:  # bashlex refused what was taken for plain
        return False


def test_every_plain_recorded_command_reads_as_bashlex_reads_it() -> None:
    scripts = {
        cmd
        for f in sorted(TRANSCRIPTS.rglob("*"))
        if f.is_file() and f.suffix != ".md"
        for s in load(f)
        for m in s.messages
        for b in m.blocks
        if isinstance(b, ToolCall) and (cmd := shell_command(b)) is not None and cmd.strip()
    }
    results = {s: agrees(s) for s in sorted(scripts)}
    assert [s for s, ok in results.items() if ok is False] == []
    plain = sum(ok is True for ok in results.values())
    assert plain > len(scripts) / 2  # most recorded commands skip bashlex (655 of 679 when written)


def test_generated_scripts_read_as_bashlex_reads_them() -> None:
    rng = random.Random(30)
    plain = 0
    for _ in range(6_000):
        script = "".join(rng.choice(ATOMS) + rng.choice(("", " ", " ")) for _ in range(rng.randint(1, 8)))
        if not parse._prepared(script).strip():
            continue
        ok = agrees(script)
        assert ok is not False, repr(script)
        plain += ok is True
    assert plain > 500  # enough of them were plain for the comparison to mean something


@pytest.mark.parametrize(
    ("script", "pipes"),
    [
        (
            'cd src && grep -rn "a b" . | head -20',
            [(["cd", "src"], True), (["grep", "-rn", "a b", "."], False)],
        ),
        ("cat f > out; ls 2>/dev/null", [(["cat", "f"], True), (["ls"], True)]),
        ("A=1 cmd --p='x y' 2>&1 >&2", [(["A=1", "cmd", "--p=x y"], True)]),
    ],
)
def test_plain_scripts_give_each_pipelines_first_command(
    script: str, pipes: list[tuple[list[str], bool]]
) -> None:
    got = plain_pipes(script)
    assert got is not None
    assert [(p.words, p.alone) for p in got] == pipes
    assert [p.out_redirected for p in got][:1] == ([True] if script.startswith("cat") else [False])


@pytest.mark.parametrize(
    "script",
    [
        "for f in *; do cat $f; done",
        "cat <<EOF\nx\nEOF",
        "echo $(ls)",
        "a &",
        "x 'a' # c",
        "a && ",
        "ls 23>x",
    ],
)
def test_what_is_not_plain_is_left_to_bashlex(script: str) -> None:
    assert plain_pipes(script) is None


@pytest.mark.parametrize(
    "script",
    [
        "a;b",  # refused by the regex reader, read by the tree
        "cd x && ls -la d/ 2>/dev/null",  # tree-sitter-bash hangs the redirection on the whole list
        "a | b 2>&1 && c >> log d",  # ... and the words after its target on the redirection
        "cat f > out x y",
        "a && cat <<EOF > f\nEOF\nls",  # a here-document hung on the list, redirected too
        "A=1 B=2 cmd",
    ],
)
def test_shapes_of_tree_sitter_bashs_tree_read_as_bashlex_reads_them(script: str) -> None:
    assert agrees(script) is True


@pytest.mark.parametrize(
    "script",
    [
        "0>f cat",  # tree-sitter-bash makes ``0`` the command: left to bashlex
        "- 1>f x",  # its tree leaves the ``-`` out: a byte no token takes
        "a \\\nb",  # a line continuation (tree-sitter's extras)
        "[ab] x",  # a test_command in its tree
        "x -c<<EOF\nEOF",  # its lexer takes ``-c<<`` for the operator
    ],
)
def test_what_tree_sitter_bash_reads_otherwise_than_bash_is_left_to_bashlex(script: str) -> None:
    assert plain_pipes(script) is None
