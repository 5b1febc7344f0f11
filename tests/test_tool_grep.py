"""grep and glob: this repository's own tree, .gitignore (root, nested, negation), hidden and binary
files, symlinks out of the root, pages of 100 with the exact next-page call, 500-char lines,
context, block-wise search of large files, glob newest first and its 1,000 cap."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from ctxengine.messages.model import ToolCall
from ctxengine.tools import grep as grep_module
from ctxengine.tools.base import ToolError, ToolExecutor
from ctxengine.tools.grep import expand_braces, glob, grep, grep_call, specs
from ctxengine.tools.workspace import Workspace

REPO = Path(__file__).resolve().parents[1]


def files_of(output: str) -> set[str]:
    return {
        re.split(r"[:-]\d+[:-] ", line)[0] for line in output.split("\n") if re.search(r"[:-]\d+[:-] ", line)
    }


def parse_call(call: str) -> dict[str, object]:
    """The arguments of ``grep(k=v, ...)`` (JSON values), as a model would send them."""
    body = call[call.index("(") + 1 : call.rindex(")")]
    args: dict[str, object] = {}
    decoder = json.JSONDecoder()
    pos = 0
    while pos < len(body):
        eq = body.index("=", pos)
        key = body[pos:eq]
        value, end = decoder.raw_decode(body, eq + 1)
        args[key] = value
        pos = end + 2 if body.startswith(", ", end) else end
    return args


@pytest.fixture
def tree(tmp_path: Path) -> Workspace:
    """A git-style tree with ignore files, hidden and binary files and symlinks."""
    root = tmp_path / "ws"
    for d in ("src", "build", "sub", "other", ".hidden", "node_modules/pkg", ".git/info"):
        (root / d).mkdir(parents=True)
    (root / ".gitignore").write_text("build/\n*.log\n!keep.log\nnode_modules\n# comment\n")
    (root / ".git" / "info" / "exclude").write_text("excluded.txt\n")
    (root / "sub" / ".gitignore").write_text("local.txt\n!important.log\n")
    files = {
        "src/a.py": "needle = 1\n",
        "src/b.md": "a needle in docs\n",
        "src/c.ts": "const needle = 2;\n",
        "build/out.txt": "needle built\n",
        "x.log": "needle logged\n",
        "keep.log": "needle kept\n",
        "sub/local.txt": "needle local\n",
        "sub/important.log": "needle important\n",
        "other/local.txt": "needle other local\n",
        ".hidden/h.txt": "needle hidden\n",
        ".env": "needle=env\n",
        "node_modules/pkg/index.js": "needle module\n",
        "excluded.txt": "needle excluded\n",
        "latin.txt": None,
    }
    for rel, text in files.items():
        if text is not None:
            (root / rel).write_text(text)
    (root / "latin.txt").write_bytes("needle café\n".encode("latin-1"))
    (root / "bin.dat").write_bytes(b"needle\0\x01\x02" * 100)
    (tmp_path / "outside.txt").write_text("needle secret-outside\n")
    (tmp_path / "outdir").mkdir()
    (tmp_path / "outdir" / "o.txt").write_text("needle secret-dir\n")
    os.symlink(tmp_path / "outside.txt", root / "link.txt")
    os.symlink(tmp_path / "outdir", root / "linkdir")
    os.symlink(root / "src" / "a.py", root / "alias.py")
    os.symlink(root, root / "src" / "loop")  # a cycle, never entered
    return Workspace(root)


# --------------------------------------------------------------------------------- ignore rules


def test_ignore_hidden_binary_and_symlinks(tree: Workspace) -> None:
    out = grep(tree, "needle")
    assert files_of(out) == {
        "alias.py",  # a symlink to a file inside the root
        "keep.log",  # re-included by !keep.log
        "latin.txt",  # non-UTF-8 text is searched
        "other/local.txt",  # the nested ignore applies only under sub/
        "src/a.py",
        "src/b.md",
        "src/c.ts",
        "sub/important.log",  # re-included by the nested !important.log
    }
    assert "secret" not in out
    assert "latin.txt:1: needle café" in out


def test_explicit_path_is_searched_even_if_hidden(tree: Workspace) -> None:
    assert grep(tree, "needle", path=".hidden") == ".hidden/h.txt:1: needle hidden"
    assert grep(tree, "needle", path="src/a.py") == "src/a.py:1: needle = 1"
    assert "binary" in grep(tree, "needle", path="bin.dat")


def test_symlinks_out_are_refused_as_paths(tree: Workspace) -> None:
    for path in ("link.txt", "linkdir", "../outside.txt", "/"):
        with pytest.raises(ToolError, match="outside"):
            grep(tree, "needle", path=path)
    with pytest.raises(ToolError, match="outside"):
        glob(tree, "*", path="linkdir")


def test_include_globs(tree: Workspace) -> None:
    assert files_of(grep(tree, "needle", include="*.py")) == {"alias.py", "src/a.py"}
    assert files_of(grep(tree, "needle", include="*.{md,ts}")) == {"src/b.md", "src/c.ts"}
    assert files_of(grep(tree, "needle", include="src/**/*.py")) == {"src/a.py"}
    assert files_of(grep(tree, "needle", path="src", include="*.md")) == {"src/b.md"}
    assert (
        grep(tree, "needle", include="*.rs")
        == "No matches for 'needle' in the workspace (files matching '*.rs')."
    )


def test_expand_braces() -> None:
    assert expand_braces("*.{ts,tsx}") == ["*.ts", "*.tsx"]
    assert expand_braces("{a,b{c,d}}.x") == ["a.x", "bc.x", "bd.x"]
    assert expand_braces("{single}.x") == ["{single}.x"]
    assert expand_braces("un{closed") == ["un{closed"]


# --------------------------------------------------------------------------------- matching


def test_case_context_and_separators(tmp_path: Path) -> None:
    lines = [f"filler {i}" for i in range(1, 31)]
    lines[4] = "NEEDLE five"
    lines[6] = "needle seven"
    lines[19] = "needle twenty"
    (tmp_path / "f.txt").write_text("\n".join(lines) + "\n")
    ws = Workspace(tmp_path)
    assert grep(ws, "needle") == "f.txt:7: needle seven\nf.txt:20: needle twenty"
    ci = grep(ws, "needle", case_insensitive=True)
    assert ci.split("\n")[0] == "f.txt:5: NEEDLE five"
    out = grep(ws, "needle", context=2, case_insensitive=True)
    assert out.split("\n") == [
        "f.txt-3- filler 3",
        "f.txt-4- filler 4",
        "f.txt:5: NEEDLE five",
        "f.txt-6- filler 6",
        "f.txt:7: needle seven",
        "f.txt-8- filler 8",
        "f.txt-9- filler 9",
        "--",
        "f.txt-18- filler 18",
        "f.txt-19- filler 19",
        "f.txt:20: needle twenty",
        "f.txt-21- filler 21",
        "f.txt-22- filler 22",
    ]


def test_lines_cut_at_500_chars(tmp_path: Path) -> None:
    (tmp_path / "w.txt").write_text("needle " + "z" * 993 + "\n")
    out = grep(Workspace(tmp_path), "needle")
    assert out == "w.txt:1: needle " + "z" * 493 + "... [line truncated, 1,000 chars]"


def test_regex_edge_cases(tmp_path: Path) -> None:
    (tmp_path / "e.txt").write_bytes(b"ax\nabc\nfoo\r\nx y\n\n")
    ws = Workspace(tmp_path)
    assert grep(ws, r"x(?!\s)") == "e.txt:1: ax"  # negative lookahead at a line end
    assert grep(ws, r"\Aabc") == "e.txt:2: abc"  # \A is the start of each line
    assert grep(ws, r"foo$") == "e.txt:3: foo"  # CRLF: the \r is not part of the line
    assert grep(ws, r"^$") == "e.txt:5: "
    assert grep(ws, r"x\sy") == "e.txt:4: x y"
    assert grep(ws, r"c\nf").startswith("No matches")  # lines are searched one by one


def test_refusals(tree: Workspace) -> None:
    with pytest.raises(ToolError, match="invalid regular expression"):
        grep(tree, "foo(")
    with pytest.raises(ToolError, match="context"):
        grep(tree, "x", context=21)
    with pytest.raises(ToolError, match="offset"):
        grep(tree, "x", offset=-1)
    with pytest.raises(ToolError, match="past the last match"):
        grep(tree, "needle", offset=50)
    with pytest.raises(ToolError, match="not found"):
        grep(tree, "x", path="missing")
    with pytest.raises(ToolError, match="required"):
        grep(tree, "")


# --------------------------------------------------------------------------------- pagination


def test_pages_of_100_with_exact_next_call(tmp_path: Path) -> None:
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "m.txt").write_text("".join(f"Needle {i}\n" for i in range(1, 251)))
    (tmp_path / "sub" / "skip.md").write_text("Needle in md\n")
    ws = Workspace(tmp_path)
    ex = ToolExecutor()
    for spec in specs(ws):
        ex.register(spec)

    first = grep(ws, "needle", path="sub", include="*.txt", case_insensitive=True)
    lines = first.split("\n")
    assert lines[:100] == [f"sub/m.txt:{i}: Needle {i}" for i in range(1, 101)]
    footer = (
        '[100 of 250 matches shown. Next page: grep(pattern="needle", path="sub", include="*.txt", '
        "case_insensitive=true, offset=100)]"
    )
    assert lines[100:] == ["", footer]

    seen = lines[:100]
    call = footer.split("Next page: ")[1][:-1]
    page = 1
    while call:
        page += 1
        args = parse_call(call)
        result = ex.execute(ToolCall(f"c{page}", "grep", args))
        assert not result.is_error
        text = result.content[0].text  # type: ignore[union-attr]
        body, _, tail = text.partition("\n\n[")
        seen += body.split("\n")
        call = tail.split("Next page: ")[1][:-1] if "Next page: " in tail else ""
        if page == 2:
            assert tail == (
                '100 of 250 matches shown (matches 101-200). Next page: grep(pattern="needle", '
                'path="sub", include="*.txt", case_insensitive=true, offset=200)]'
            )
        else:
            assert tail == "50 of 250 matches shown (matches 201-250); this is the last page.]"
    assert page == 3
    assert seen == [f"sub/m.txt:{i}: Needle {i}" for i in range(1, 251)]


def test_next_call_escapes_the_pattern() -> None:
    call = grep_call('a"b\\d+', ".", None, 2, False, 100)
    assert call == 'grep(pattern="a\\"b\\\\d+", context=2, offset=100)'
    assert parse_call(call) == {"pattern": 'a"b\\d+', "context": 2, "offset": 100}


def test_context_at_page_boundary(tmp_path: Path) -> None:
    (tmp_path / "c.txt").write_text("".join("hit\n" if i % 2 else "gap\n" for i in range(400)))
    ws = Workspace(tmp_path)
    out = grep(ws, "hit", context=1)
    body = out.split("\n\n[")[0].split("\n")
    assert body[0] == "c.txt-1- gap" and body[1] == "c.txt:2: hit"
    assert body[-1] == "c.txt-201- gap"  # after-context of match 100 (line 200)
    assert out.endswith('Next page: grep(pattern="hit", context=1, offset=100)]')
    second = grep(ws, "hit", context=1, offset=100).split("\n")
    assert second[0] == "c.txt-201- gap" and second[1] == "c.txt:202: hit"


@pytest.mark.parametrize("block", [100, 4096, 70_000])
def test_block_wise_search_equals_whole_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, block: int
) -> None:
    lines = [
        f"line {i} " + ("match" if i % 997 == 0 or i in (1, 2, 3) else "other") for i in range(1, 30_001)
    ]
    (tmp_path / "big.txt").write_text("\n".join(lines))  # > 64 KB, no final newline
    ws = Workspace(tmp_path)
    whole = [grep(ws, "match", context=c, offset=o) for c in (0, 3) for o in (0, 10)]
    from ctxengine.tools import grep_scan

    monkeypatch.setattr(grep_scan, "BLOCK_BYTES", block)
    assert [grep(ws, "match", context=c, offset=o) for c in (0, 3) for o in (0, 10)] == whole
    assert "big.txt:29910: line 29910 match" in whole[0]
    assert whole[1].startswith("big.txt:7976: line 7976 match")  # matches 1-3, then 997 * k


# --------------------------------------------------------------------------------- this repository


def test_repository_tree() -> None:
    ws = Workspace(REPO)
    out = grep(ws, r"^def read_file\(", include="*.py")
    assert out == "src/ctxengine/tools/read.py:" + out.split(":", 2)[1] + ": def read_file("
    everything = grep(ws, "import", include="*.py")
    assert ".venv" not in everything and "__pycache__" not in everything
    assert (
        "[100 of " in everything
        and 'Next page: grep(pattern="import", include="*.py", offset=100)]' in everything
    )
    paths = glob(ws, "**/*.py").split("\n")
    assert "src/ctxengine/tools/grep.py" in paths and "tests/test_tool_grep.py" in paths
    assert not any(p.startswith(".") or "__pycache__" in p for p in paths)


# --------------------------------------------------------------------------------- glob


def test_glob_newest_first_and_ignore_rules(tree: Workspace) -> None:
    root = tree.root
    for i, rel in enumerate(["src/a.py", "src/c.ts", "keep.log", "src/b.md"]):
        os.utime(root / rel, (1_000_000 + i, 1_000_000 + i))
    ordered = [
        p for p in glob(tree, "*.{ts,md,log}").split("\n") if p in ("src/c.ts", "keep.log", "src/b.md")
    ]
    assert ordered == ["src/b.md", "keep.log", "src/c.ts"]
    listed = set(glob(tree, "*").split("\n"))
    assert not listed & {"build/out.txt", "x.log", "sub/local.txt", ".env", ".hidden/h.txt", "excluded.txt"}
    assert not any(p.startswith(("linkdir", "node_modules", "src/loop")) or p == "link.txt" for p in listed)
    assert {"alias.py", "keep.log", "sub/important.log", "other/local.txt"} <= listed
    assert glob(tree, "*.py", path="src") == "src/a.py"
    assert glob(tree, "*.rs").startswith("No files match")
    with pytest.raises(ToolError, match="outside"):
        glob(tree, "*", path="..")


def test_glob_cap_1000(tmp_path: Path) -> None:
    d = tmp_path / "many"
    d.mkdir()
    for i in range(1050):
        p = d / f"f{i:04d}.txt"
        p.write_text("x")
        os.utime(p, (2_000_000 + i, 2_000_000 + i))
    out = glob(Workspace(tmp_path), "*.txt").split("\n")
    assert out[0] == "many/f1049.txt" and out[999] == "many/f0050.txt"
    assert out[1000:] == [
        "",
        "[Showing the 1,000 newest of 1,050 matching paths. Narrow the pattern or the path to see the rest.]",
    ]


@pytest.mark.parametrize("pattern", ["NEEDLE_7f3a", "NEEDLE_7f3[a-z]"])
def test_a_search_split_across_two_processes_prints_what_one_process_prints(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, pattern: str
) -> None:
    """With a plain literal over enough files, most of them are read and screened in a forked
    worker while the walk goes on (``file_screen.read_files``): the output, its order and the
    match count are those of a search in this process alone (a regular expression is never
    split)."""
    from ctxengine.tools import file_screen

    for d in range(12):
        sub = tmp_path / f"pkg{d}"
        sub.mkdir()
        for i in range(30):
            body = f"line {i}\n" + ("NEEDLE_7f3a here\n" if (d * 30 + i) % 37 == 0 else "") + "tail\n"
            (sub / f"m{i}.py").write_text(body)
    (tmp_path / "pkg11" / "big.log").write_bytes(b"x\n" * 10 + b"NEEDLE_7f3a in a log\n")
    ws = Workspace(tmp_path)
    monkeypatch.setattr(file_screen, "PARALLEL_MIN_FILES", 10**9)
    alone = grep(ws, pattern, context=1)
    # in a fresh process (one thread: a test runner's threads keep this one from forking)
    probe = (
        "import sys\n"
        "from ctxengine.tools import file_screen\n"
        "from ctxengine.tools.grep import grep\n"
        "from ctxengine.tools.workspace import Workspace\n"
        "file_screen.PARALLEL_MIN_FILES = 10\n"
        "file_screen.BATCH_FILES = 16\n"  # 23 batches: the child's and this process's interleave
        "file_screen.BLOCK_BYTES = 32\n"  # big.log (41 bytes) comes back as LARGE, read in blocks
        "screener = file_screen._Screener.start(b'x')\n"
        "print('forks' if screener is not None else 'alone')\n"
        "if screener is not None:\n"
        "    screener.results()\n"
        "sys.stdout.write(grep(Workspace(sys.argv[1]), sys.argv[2], context=1))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", probe, str(tmp_path), pattern], capture_output=True, text=True, check=True
    ).stdout
    mode, _, split = out.partition("\n")
    if os.name == "posix" and sys.platform != "darwin":
        assert mode == "forks"
    assert split == alone
    assert alone.count("NEEDLE_7f3a") == 11


def test_a_file_that_cannot_be_read_is_named_and_the_search_goes_on(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A file the search cannot read (permission denied) is named after the matches, as
    ``grep -r`` names it and goes on; the whole search used to end in a traceback. Naming that
    file alone is a refusal (``ToolError``), as for any path."""
    from ctxengine.tools import file_screen

    (tmp_path / "a.py").write_text("NEEDLE one\n")
    (tmp_path / "bad.py").write_text("NEEDLE hidden\n")
    (tmp_path / "z.py").write_text("NEEDLE two\n")
    real = file_screen.read_screened

    def denied(path: str, needle: bytes | None) -> file_screen.Loaded:
        if path.endswith("bad.py"):
            return PermissionError(13, "Permission denied")
        return real(path, needle)

    monkeypatch.setattr(file_screen, "read_screened", denied)
    monkeypatch.setattr(grep_module, "read_screened", denied)
    ws = Workspace(tmp_path)
    out = grep(ws, "NEEDLE")
    assert "a.py:1: NEEDLE one" in out and "z.py:1: NEEDLE two" in out
    assert out.endswith("[1 file(s) could not be read: bad.py (Permission denied)]")
    with pytest.raises(ToolError, match=r"cannot read bad\.py: Permission denied"):
        grep(ws, "NEEDLE", path="bad.py")
