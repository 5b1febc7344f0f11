"""The read tool: confinement, the 256 KB gate, numbered pages with pi's hint, long lines, the
25,000-token cap, dedup and its reset, binary and non-UTF-8 files, a 200 MB file paged without
loading it."""

from __future__ import annotations

import os
import random
import tracemalloc
from pathlib import Path

import pytest

from ctxengine.messages.model import ToolCall
from ctxengine.tokens.counter import counter_for
from ctxengine.tools.base import ToolError, ToolExecutor
from ctxengine.tools.read import (
    READ_MAX_BYTES,
    ReadState,
    build_index,
    read_file,
    specs,
)
from ctxengine.tools.workspace import Workspace, is_binary

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture
def ws(tmp_path: Path) -> Workspace:
    root = tmp_path / "ws"
    (root / "sub").mkdir(parents=True)
    with open(root / "big.txt", "w") as f:
        for i in range(1, 5001):
            f.write(f"line {i} xxxxxxxx\n")
    (root / "long.txt").write_text("a" * 5000 + "\nshort\n")
    (root / "bin.dat").write_bytes(bytes(range(256)) * 100)
    (root / "sub" / "n.py").write_text("needle_alpha here\n")
    (tmp_path / "outside.txt").write_text("secret-outside\n")
    (tmp_path / "outdir").mkdir()
    (tmp_path / "outdir" / "s.txt").write_text("secret-in-dir\n")
    os.symlink(tmp_path / "outside.txt", root / "link.txt")
    os.symlink(tmp_path / "outdir", root / "linkdir")
    os.symlink(root / "sub" / "n.py", root / "inside_link.py")
    return Workspace(root)


def refused(ws: Workspace, path: str, **kw: int) -> str:
    with pytest.raises(ToolError) as info:
        read_file(ws, path, **kw)  # type: ignore[arg-type]
    return str(info.value)


# --------------------------------------------------------------------------------- output format


def test_default_page_numbering_and_exact_hint(ws: Workspace) -> None:
    out = read_file(ws, "big.txt")
    lines = out.split("\n")
    assert lines[0] == "     1\tline 1 xxxxxxxx"
    assert lines[1999] == "  2000\tline 2000 xxxxxxxx"
    assert lines[2000] == ""
    assert lines[2001] == "[Showing lines 1-2000 of 5000. Use offset=2001 to continue.]"
    assert len(lines) == 2002


def test_offset_is_one_based_and_limit_counts_lines(ws: Workspace) -> None:
    out = read_file(ws, "big.txt", offset=4990, limit=20)
    assert out.split("\n")[0] == "  4990\tline 4990 xxxxxxxx"
    assert "line 5000 " in out and "line 4989 " not in out
    assert "Showing" not in out  # nothing remains after line 5000
    mid = read_file(ws, "big.txt", offset=2001, limit=10)
    assert mid.endswith("[Showing lines 2001-2010 of 5000. Use offset=2011 to continue.]")
    assert mid.count("\n") == 11
    only_offset = read_file(ws, "big.txt", offset=4001)
    assert only_offset.split("\n")[-1] == "  5000\tline 5000 xxxxxxxx"


def test_long_line_is_cut_with_marker(ws: Workspace) -> None:
    out = read_file(ws, "long.txt")
    first, second = out.split("\n")
    assert first == "     1\t" + "a" * 2000 + "... [line truncated, 5,000 chars]"
    assert second == "     2\tshort"
    assert len(out) < 4500


def test_crlf_bom_and_missing_final_newline(tmp_path: Path) -> None:
    (tmp_path / "crlf.txt").write_bytes(b"one\r\ntwo\r\nthree")
    (tmp_path / "bom.txt").write_bytes(b"\xef\xbb\xbfhello\n")
    (tmp_path / "empty.txt").write_bytes(b"")
    ws = Workspace(tmp_path)
    assert read_file(ws, "crlf.txt") == "     1\tone\n     2\ttwo\n     3\tthree"
    assert read_file(ws, "bom.txt") == "     1\thello"
    assert "empty" in read_file(ws, "empty.txt")


# --------------------------------------------------------------------------------- refusals


def test_confinement(ws: Workspace, tmp_path: Path) -> None:
    for path in ("../outside.txt", str(tmp_path / "outside.txt"), "sub/../../outside.txt", "/etc/passwd"):
        msg = refused(ws, path)
        assert "outside the workspace" in msg and "secret" not in msg
    for path in ("link.txt", "linkdir/s.txt"):
        msg = refused(ws, path)
        assert "symlink" in msg and "outside" in msg and "secret" not in msg
    # inside the root: relative, absolute, through '..' that stays inside, symlink inside
    assert "needle_alpha" in read_file(ws, "sub/n.py")
    assert "needle_alpha" in read_file(ws, str(ws.root / "sub" / "n.py"))
    assert "needle_alpha" in read_file(ws, "sub/../sub/n.py")
    assert "needle_alpha" in read_file(ws, "inside_link.py")


def test_missing_directory_and_bad_arguments(ws: Workspace) -> None:
    assert "not found" in refused(ws, "nope.txt")
    assert "directory" in refused(ws, "sub")
    assert "1-based" in refused(ws, "big.txt", offset=0)
    assert "at least 1" in refused(ws, "big.txt", limit=0)
    assert "past the end" in refused(ws, "big.txt", offset=5001)
    with pytest.raises(ToolError, match="integer"):
        read_file(ws, "big.txt", offset="5")  # type: ignore[arg-type]
    with pytest.raises(ToolError, match="required"):
        read_file(ws, "")


def test_size_gate_before_reading(tmp_path: Path) -> None:
    line = "0123456789abcdef ghij\n"  # 22 bytes
    n = READ_MAX_BYTES // len(line) + 1
    (tmp_path / "over.txt").write_text(line * n)
    (tmp_path / "exact.txt").write_bytes(b"x\n" * (READ_MAX_BYTES // 2))
    ws = Workspace(tmp_path)
    assert (tmp_path / "over.txt").stat().st_size > READ_MAX_BYTES
    msg = refused(ws, "over.txt")
    assert "262,144-byte (256 KB)" in msg and "offset" in msg and "limit" in msg and "grep" in msg
    # paging is allowed on the same file
    assert read_file(ws, "over.txt", offset=1, limit=5).endswith(
        f"[Showing lines 1-5 of {n}. Use offset=6 to continue.]"
    )
    assert read_file(ws, "over.txt", limit=3).count("\n") == 4
    # exactly 256 KB passes the gate
    assert (tmp_path / "exact.txt").stat().st_size == READ_MAX_BYTES
    assert read_file(ws, "exact.txt").startswith("     1\tx")


def test_token_cap_after_reading(tmp_path: Path) -> None:
    rng = random.Random(7)
    words = ["alpha", "beta", "gamma", "delta", "omega", "kappa", "sigma", "zeta", "theta", "iota"]
    with open(tmp_path / "dense.txt", "w") as f:
        for _ in range(1000):
            f.write(" ".join(rng.choice(words) + str(rng.randint(0, 999)) for _ in range(20)) + "\n")
    ws = Workspace(tmp_path)
    assert (tmp_path / "dense.txt").stat().st_size < READ_MAX_BYTES
    msg = refused(ws, "dense.txt")
    assert "25,000-token limit" in msg and "offset=1, limit=" in msg
    limit = int(msg.split("limit=")[1].split(")")[0])
    out = read_file(ws, "dense.txt", offset=1, limit=limit)
    assert out.endswith(f"Use offset={limit + 1} to continue.]")


def test_token_cap_counter_is_configurable(ws: Workspace) -> None:
    # the default (exact o200k) lets a 2,000-line page of short lines through; the Claude
    # estimate (+~18%) does not
    assert read_file(ws, "big.txt").endswith("Use offset=2001 to continue.]")
    with pytest.raises(ToolError, match="25,000-token"):
        read_file(ws, "big.txt", counter=counter_for(None))


# --------------------------------------------------------------------------------- dedup


def test_dedup_stub_and_reset(ws: Workspace) -> None:
    state = ReadState()
    first = read_file(ws, "big.txt", state=state)
    assert first.startswith("     1\t")
    stub = read_file(ws, "big.txt", state=state)
    assert stub.startswith("File unchanged since last read: big.txt (lines 1-2000)")
    assert "the content is earlier in the conversation" in stub
    assert len(stub) < 200
    # another range is content; the same range again is a stub with its own lines
    assert read_file(ws, "big.txt", offset=4990, limit=20, state=state).startswith("  4990\t")
    assert "(lines 4990-5000)" in read_file(ws, "big.txt", offset=4990, limit=20, state=state)
    # the same file under another spelling is the same file
    assert read_file(ws, str(ws.root / "big.txt"), state=state).startswith("File unchanged")
    # compaction clears the stub cache
    state.reset()
    assert read_file(ws, "big.txt", state=state).startswith("     1\t")
    assert read_file(ws, "big.txt", state=state).startswith("File unchanged")
    # a changed mtime (same size) means changed content
    p = ws.root / "big.txt"
    st = p.stat()
    os.utime(p, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000_000))
    assert read_file(ws, "big.txt", state=state).startswith("     1\t")
    # a changed size too
    with open(p, "a") as f:
        f.write("line 5001 xxxxxxxx\n")
    assert read_file(ws, "big.txt", state=state).endswith("of 5001. Use offset=2001 to continue.]")
    state.forget(p.resolve())
    assert read_file(ws, "big.txt", state=state).startswith("     1\t")


def test_refusals_are_not_remembered(ws: Workspace) -> None:
    state = ReadState()
    with pytest.raises(ToolError):
        read_file(ws, "big.txt", counter=counter_for(None), state=state)
    assert read_file(ws, "big.txt", state=state).startswith("     1\t")


def test_tool_spec_and_executor(ws: Workspace) -> None:
    state = ReadState()
    ex = ToolExecutor()
    for spec in specs(ws, state):
        ex.register(spec)
    (definition,) = ex.definitions("anthropic")
    assert definition["name"] == "read" and definition["input_schema"]["required"] == ["path"]
    assert ex.definitions("openai")[0]["function"]["parameters"]["properties"]["offset"]["minimum"] == 1
    ok = ex.execute(ToolCall("c1", "read", {"path": "big.txt", "offset": 1, "limit": 2}))
    assert not ok.is_error
    again = ex.execute(ToolCall("c2", "read", {"path": "big.txt", "offset": 1, "limit": 2}))
    assert "File unchanged" in again.content[0].text  # type: ignore[union-attr]
    state.reset()
    fresh = ex.execute(ToolCall("c3", "read", {"path": "big.txt", "offset": 1, "limit": 2}))
    assert "line 1 " in fresh.content[0].text  # type: ignore[union-attr]
    bad = ex.execute(ToolCall("c4", "read", {"path": "../outside.txt"}))
    assert bad.is_error and bad.content[0].text.startswith("Error: path")  # type: ignore[union-attr]
    assert ex.execute(ToolCall("c5", "read", {"path": "big.txt", "bogus": 1})).is_error


# --------------------------------------------------------------------------------- encodings


def test_binary_files_are_not_shown(ws: Workspace, tmp_path: Path) -> None:
    msg = refused(ws, "bin.dat")
    assert "binary" in msg and "not shown" in msg
    assert is_binary(ws.root / "bin.dat")
    (ws.root / "img.png").write_bytes(b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR" + os.urandom(2000))
    assert "binary" in refused(ws, "img.png")
    # the gate does not matter for a paged read of a binary file
    assert "binary" in refused(ws, "bin.dat", offset=1, limit=5)


def test_control_bytes_without_nul_are_unknown_encoding(tmp_path: Path) -> None:
    (tmp_path / "ctl.bin").write_bytes(bytes(range(1, 32)) * 50 + bytes(range(0x80, 0xA0)) * 50)
    msg = refused(Workspace(tmp_path), "ctl.bin")
    assert "unknown encoding" in msg and "not shown" in msg


def test_utf16_is_reported_not_garbled(tmp_path: Path) -> None:
    (tmp_path / "u16.txt").write_bytes("hello wörld\n".encode("utf-16"))
    msg = refused(Workspace(tmp_path), "u16.txt")
    assert "UTF-16" in msg


def test_latin1_text_is_decoded_with_a_note(tmp_path: Path) -> None:
    (tmp_path / "latin.txt").write_bytes("café crème brûlée\nnaïve “quotes” – ok\n".encode("cp1252"))
    (tmp_path / "iso.txt").write_bytes("Grüße aus Köln\n".encode("latin-1"))
    ws = Workspace(tmp_path)
    out = read_file(ws, "latin.txt")
    assert (
        out.split("\n")[0] == "[Note: latin.txt is not valid UTF-8; shown decoded as Windows-1252/Latin-1.]"
    )
    assert "     1\tcafé crème brûlée" in out and "“quotes” – ok" in out
    assert "Grüße aus Köln" in read_file(ws, "iso.txt")


def test_utf8_text_is_shown_as_is(tmp_path: Path) -> None:
    (tmp_path / "u.txt").write_text("日本語のテキスト\nemoji 🎉\n", encoding="utf-8")
    out = read_file(Workspace(tmp_path), "u.txt")
    assert out == "     1\t日本語のテキスト\n     2\temoji 🎉"


def test_repository_files(tmp_path: Path) -> None:
    ws = Workspace(REPO)
    out = read_file(ws, "src/ctxengine/tools/read.py", offset=1, limit=3)
    assert out.startswith('     1\t"""``read``')
    assert "Use offset=4 to continue." in out
    assert "outside" in refused(ws, "../shared")


# --------------------------------------------------------------------------------- large files

LINES_PER_BLOCK = 100_000


def _huge_line(n: int) -> str:
    return f"row {(n - 1) % LINES_PER_BLOCK:07d} abc"


@pytest.fixture(scope="module")
def huge(tmp_path_factory: pytest.TempPathFactory) -> tuple[Workspace, int]:
    """A 200 MB file of numbered 16-byte lines, written in 1.6 MB blocks."""
    root = tmp_path_factory.mktemp("huge")
    block = "".join(_huge_line(i) + "\n" for i in range(1, LINES_PER_BLOCK + 1)).encode()
    target = 200 * 1024 * 1024
    written = 0
    with open(root / "huge.txt", "wb") as f:
        while written < target:
            f.write(block)
            written += len(block)
    return Workspace(root), written // 16


def test_200mb_file_paged_without_loading_it(huge: tuple[Workspace, int]) -> None:
    ws, total = huge
    size = (ws.root / "huge.txt").stat().st_size
    assert size >= 200 * 1024 * 1024
    assert "256 KB" in refused(ws, "huge.txt")
    state = ReadState()
    tracemalloc.start()
    try:
        first = read_file(ws, "huge.txt", offset=1, state=state)
        last = read_file(ws, "huge.txt", offset=total - 9, state=state)
        middle = read_file(ws, "huge.txt", offset=total // 2 + 1, limit=3, state=state)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 20 * 1024 * 1024, peak  # a few MB, not the file
    assert first.split("\n")[0] == "     1\trow 0000000 abc"
    assert first.endswith(f"[Showing lines 1-2000 of {total}. Use offset=2001 to continue.]")
    assert last.split("\n") == [f"{n:>6}\t{_huge_line(n)}" for n in range(total - 9, total + 1)]
    m = total // 2 + 1
    assert middle.split("\n")[:3] == [f"{n:>6}\t{_huge_line(n)}" for n in (m, m + 1, m + 2)]
    assert middle.endswith(f"[Showing lines {m}-{m + 2} of {total}. Use offset={m + 3} to continue.]")
    # the line index is cached per (path, mtime, size)
    assert len(state._indexes) == 1


@pytest.mark.parametrize("block", [1, 7, 64, 4096])
def test_line_index_seeks_every_line(tmp_path: Path, block: int) -> None:
    from ctxengine.tools.read import seek_line

    rng = random.Random(block)
    lines = [b"x" * rng.randint(0, 30) for _ in range(300)]
    p = tmp_path / "v.txt"
    p.write_bytes(b"\n".join(lines))  # no final newline
    idx = build_index(p, block=block)
    assert idx.lines == 300
    with open(p, "rb") as f:
        for n in (1, 2, 3, 50, 151, 299, 300):
            seek_line(f, idx, n, block=block)
            assert f.readline().rstrip(b"\n") == lines[n - 1]


def test_line_index_and_long_line_in_large_file(tmp_path: Path) -> None:
    p = tmp_path / "wide.txt"
    with open(p, "wb") as f:
        f.write(b"first\n")
        f.write(b"b" * 5_000_000 + b"\r\n")
        f.write(b"tail\n")
        f.write(b"no newline at end")
    idx = build_index(p, block=4096)
    assert idx.lines == 4
    out = read_file(Workspace(tmp_path), "wide.txt", offset=1, limit=10)
    lines = out.split("\n")
    assert lines[0] == "     1\tfirst"
    assert lines[1] == "     2\t" + "b" * 2000 + "... [line truncated, 5,000,000 chars]"
    assert lines[2:] == ["     3\ttail", "     4\tno newline at end"]
    assert read_file(Workspace(tmp_path), "wide.txt", offset=3, limit=1).startswith(
        "     3\ttail\n\n[Showing"
    )
