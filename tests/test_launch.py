"""The console script's fast start for ``tool grep`` / ``tool glob`` prints what the full command
line prints (``ctxengine.cli.launch``), and leaves every other command line to it."""

from __future__ import annotations

from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from ctxengine.cli.launch import fast_tool, parse_fast
from ctxengine.tools.cli import tool_app

app = typer.Typer()
app.add_typer(tool_app, name="tool")
runner = CliRunner()


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    (tmp_path / "src" / "deep").mkdir(parents=True)
    (tmp_path / "src" / "a.py").write_text("import os\nNEEDLE = 1\n\x1b[31mNEEDLE red\x1b[0m\n")
    (tmp_path / "src" / "deep" / "b.txt").write_text("no match\n" * 5 + "the NEEDLE again\ntail\n")
    (tmp_path / "src" / "bin.dat").write_bytes(b"NEEDLE\0\1\2")
    (tmp_path / "legacy.txt").write_bytes(b"caf\xe9 NEEDLE\r\n")
    (tmp_path / ".gitignore").write_text("ignored/\n")
    (tmp_path / "ignored").mkdir()
    (tmp_path / "ignored" / "c.py").write_text("NEEDLE hidden by .gitignore\n")
    return tmp_path


COMMAND_LINES = [
    ["grep", "NEEDLE"],
    ["grep", "NEEDLE", "-i", "--context", "2"],
    ["grep", "--include", "*.py", "NEE.LE"],
    ["grep", "--offset=1", "NEEDLE"],
    ["grep", "--path", "src/deep", "NEEDLE"],
    ["grep", "--path", "../elsewhere", "NEEDLE"],  # refused: outside the workspace
    ["grep", "NEEDLE", "--offset", "99"],  # refused: past the last match
    ["grep", "absent_literal"],
    ["grep", "(unbalanced"],
    ["glob", "**/*.py"],
    ["glob", "*.txt", "--path", "src"],
]


@pytest.mark.parametrize("args", COMMAND_LINES)
def test_fast_start_prints_what_the_full_command_line_prints(
    tree: Path, args: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["tool", args[0], "--workspace", str(tree), *args[1:]]
    code = fast_tool(argv)
    fast = capsys.readouterr()
    full = runner.invoke(app, argv)
    assert code == full.exit_code
    assert fast.out == full.stdout
    assert fast.err == full.stderr


@pytest.mark.parametrize(
    "args",
    [
        ["grep", "--help"],
        ["grep"],
        ["grep", "a", "b"],
        ["grep", "-x", "p"],
        ["grep", "--context", "two", "p"],
        ["grep", "--context", "-1", "p"],
        ["grep", "--path", "a", "--path", "b", "p"],
        ["grep", "--", "p"],
        ["grep", "-i=yes", "p"],
        ["glob", "--include", "x", "p"],
        ["read", "file.py"],
    ],
)
def test_other_command_lines_go_to_the_full_command_line(args: list[str]) -> None:
    assert parse_fast(args[0], args[1:]) is None


def test_plain_command_line_is_parsed() -> None:
    assert parse_fast("grep", ["-w", "/r", "--include=*.py", "-i", "--offset", "100", "x"]) == {
        "workspace": "/r",
        "include": "*.py",
        "case_insensitive": True,
        "offset": 100,
        "pattern": "x",
    }


def test_fast_start_leaves_heavy_modules_unimported(tmp_path: Path) -> None:
    """A plain ``tool grep`` in a tree without ignore rules imports neither the command-line
    framework, the engine, ``importlib.metadata`` (``__version__`` is read on first use) nor
    ``pathspec`` (loaded when a ``.gitignore`` or an ``include`` pattern needs it)."""
    import subprocess
    import sys

    (tmp_path / "a.py").write_text("NEEDLE = 1\n")
    probe = (
        "import sys; sys.argv = ['ctxengine', 'tool', 'grep', '--workspace', sys.argv[1], 'NEEDLE']\n"
        "from ctxengine.cli.launch import fast_tool\n"
        "code = fast_tool(sys.argv[1:])\n"
        "heavy = ['typer', 'ctxengine.cli.commands', 'ctxengine.engine.core', 'importlib.metadata',"
        " 'pathspec']\n"
        "print(code, [m for m in heavy if m in sys.modules])\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", probe, str(tmp_path)], capture_output=True, text=True, check=True,
        env={"PYTHONIOENCODING": "utf-8", "PATH": ""},
    )
    assert out.stdout.strip().splitlines()[-1] == "0 []"
    assert "a.py:1: NEEDLE = 1" in out.stdout


def test_version_starts_fast_and_prints_what_the_full_command_line_prints() -> None:
    """``ctxengine --version`` alone is answered by the console script before typer, the commands
    or the engine are imported, with the same line the typer command prints."""
    import subprocess
    import sys
    from importlib.metadata import version

    from typer.testing import CliRunner

    from ctxengine.cli.commands import app

    probe = (
        "import sys; sys.argv = ['ctxengine', '--version']\n"
        "from ctxengine.cli.launch import main\n"
        "try:\n"
        "    main()\n"
        "except SystemExit as exc:\n"
        "    heavy = ['typer', 'click', 'rich', 'ctxengine.cli.commands', 'ctxengine.engine.core']\n"
        "    print(exc.code, [m for m in heavy if m in sys.modules])\n"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    lines = out.stdout.strip().splitlines()
    assert lines == [f"ctxengine {version('ctxengine')}", "0 []"]
    full = CliRunner().invoke(app, ["--version"])
    assert full.exit_code == 0 and full.stdout.strip() == lines[0]
