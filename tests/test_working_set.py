"""The open-files working set: Letta's limits per window, LRU closing with the model told, and a
rendered block that changes only when files open/close or change on disk."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from ctxengine.messages.model import Message, Text, ToolResult
from ctxengine.tools.base import ToolError, ToolExecutor
from ctxengine.tools.working_set import (
    BLOCK_META_KEY,
    TRUNCATED,
    FileLimits,
    WorkingSet,
    limits_for_window,
    specs,
)
from ctxengine.tools.workspace import Workspace


def _tree(root: Path, n: int = 20, lines: int = 10) -> None:
    for i in range(n):
        (root / f"f{i}.txt").write_text("".join(f"file {i} line {j}\n" for j in range(1, lines + 1)))


@pytest.mark.parametrize(
    ("window", "files", "chars"),
    [
        (None, 5, 50_000),
        (4_000, 3, 5_000),
        (8_192, 3, 5_000),
        (8_193, 5, 15_000),
        (32_768, 5, 15_000),
        (100_000, 10, 25_000),
        (128_000, 10, 25_000),
        (131_072, 10, 25_000),
        (131_073, 10, 40_000),
        (200_000, 10, 40_000),
        (204_801, 15, 40_000),
        (1_000_000, 15, 40_000),
    ],
)
def test_limits_per_window(window: int | None, files: int, chars: int) -> None:
    assert limits_for_window(window) == FileLimits(files, chars)


@pytest.mark.parametrize(("window", "files"), [(8_000, 3), (32_000, 5), (128_000, 10), (1_000_000, 15)])
def test_open_files_is_capped_at_the_window_limit(tmp_path: Path, window: int, files: int) -> None:
    _tree(tmp_path)
    ws = WorkingSet(Workspace(tmp_path), window=window)
    for i in range(20):
        ws.open([f"f{i}.txt"])
    assert len(ws.open_paths) == files
    assert ws.open_paths == [f"f{i}.txt" for i in range(20 - files, 20)]


def test_per_file_char_limit_truncates_with_read_hint(tmp_path: Path) -> None:
    (tmp_path / "big.txt").write_text("".join(f"row {i:05d} " + "x" * 80 + "\n" for i in range(1, 501)))
    ws = WorkingSet(Workspace(tmp_path), window=8_000)  # 5,000 chars per file
    ws.open(["big.txt"])
    block = ws.render()
    body = block.split("\n", 2)[2].split(TRUNCATED)[0]  # after <open_files> and <file> lines
    assert len(body) <= 5_000
    assert TRUNCATED in block
    assert 'truncated="true"' in block
    # 5,000 chars hold 54 numbered lines of 92 chars; the rest is one read away
    shown_last = int(block.split('lines="1-')[1].split('"')[0])
    assert f'Use read(path="big.txt", offset={shown_last + 1})' in block
    assert "of 500" in block


def test_range_and_window_offset(tmp_path: Path) -> None:
    _tree(tmp_path, n=1, lines=100)
    ws = WorkingSet(Workspace(tmp_path))
    msg = ws.open(["f0.txt"], offset=10, length=5)
    assert "lines 10-14 of 100" in msg
    block = ws.render()
    assert "    10\tfile 0 line 10" in block and "    14\tfile 0 line 14" in block
    assert "line 15" not in block and "line 9\n" not in block


def test_lru_closes_least_recently_used_and_names_them(tmp_path: Path) -> None:
    _tree(tmp_path)
    ws = WorkingSet(Workspace(tmp_path), window=8_000)  # 3 files
    ws.open(["f0.txt", "f1.txt", "f2.txt"])
    assert ws.touch("f0.txt")  # f0 is now the most recently used; f1 the least
    msg = ws.open(["f3.txt"])
    assert "Closed (least recently used; at most 3 files open): f1.txt." in msg
    assert ws.open_paths == ["f0.txt", "f2.txt", "f3.txt"]
    msg = ws.open(["f4.txt", "f5.txt"])
    assert "f2.txt, f0.txt" in msg  # oldest access first
    assert set(ws.open_paths) == {"f3.txt", "f4.txt", "f5.txt"}


def test_too_many_in_one_call_and_refusals(tmp_path: Path) -> None:
    _tree(tmp_path, n=5)
    (tmp_path / "bin.dat").write_bytes(b"\x00\x01\x02" * 100)
    ws = WorkingSet(Workspace(tmp_path), window=8_000)
    msg = ws.open([f"f{i}.txt" for i in range(5)])
    assert "at most 3 files can be open at once" in msg
    assert len(ws.open_paths) == 3
    msg = ws.open(["bin.dat", "f0.txt"])
    assert "bin.dat: binary" in msg
    with pytest.raises(ToolError, match="outside the workspace"):
        ws.open(["../etc/passwd"])
    with pytest.raises(ToolError, match="no such file"):
        ws.open(["missing.txt"])


def test_render_is_stable_under_access_and_changes_on_edit(tmp_path: Path) -> None:
    _tree(tmp_path, n=3)
    ws = WorkingSet(Workspace(tmp_path))
    ws.open(["f0.txt", "f1.txt"])
    first = ws.render()
    assert first.index("f0.txt") < first.index("f1.txt")
    assert ws.changed
    delivered = ws.block_text()
    assert delivered == first and not ws.changed

    # accesses (touch, re-open with the same range, a second open call) never change the bytes
    ws.touch("f0.txt")
    ws.touch("f1.txt")
    ws.touch("f0.txt")
    ws.open(["f0.txt"])
    assert ws.render() == first
    assert not ws.changed

    # an edit on disk does
    p = tmp_path / "f1.txt"
    p.write_text("changed content\n")
    st = p.stat()
    os.utime(p, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000_000))
    assert ws.changed
    second = ws.block_text()
    assert "changed content" in second and second != first
    assert not ws.changed

    # opening and closing change it
    ws.open(["f2.txt"])
    assert ws.changed
    ws.block_text()
    ws.close(["f2.txt"])
    assert ws.render() == second


def test_block_message_appends_to_newest_user_turn(tmp_path: Path) -> None:
    _tree(tmp_path, n=1)
    ws = WorkingSet(Workspace(tmp_path))
    ws.open(["f0.txt"])
    turn = Message("user", (ToolResult("c1", (Text("Opened"),)),), "m1")
    out = ws.block_message(turn)
    assert turn.blocks == (ToolResult("c1", (Text("Opened"),)),)  # original untouched
    assert isinstance(out.blocks[0], ToolResult)
    last = out.blocks[-1]
    assert isinstance(last, Text) and last.text.startswith("<open_files")
    assert out.meta[BLOCK_META_KEY] is True
    assert not ws.changed
    ws.invalidate()
    assert ws.changed


def test_close_files_and_all(tmp_path: Path) -> None:
    _tree(tmp_path, n=4)
    ws = WorkingSet(Workspace(tmp_path))
    ws.open(["f0.txt", "f1.txt", "f2.txt"])
    assert ws.close(["f1.txt", "nope.txt"]).startswith("Closed 1 file(s): f1.txt. Not open: nope.txt")
    assert ws.open_paths == ["f0.txt", "f2.txt"]
    assert ws.close(all=True) == "Closed all 2 open file(s): f0.txt, f2.txt."
    assert ws.render() == ""
    with pytest.raises(ToolError):
        ws.close([])


def test_deleted_file_is_marked(tmp_path: Path) -> None:
    _tree(tmp_path, n=1)
    ws = WorkingSet(Workspace(tmp_path))
    ws.open(["f0.txt"])
    ws.block_text()
    (tmp_path / "f0.txt").unlink()
    assert ws.changed
    assert 'status="missing"' in ws.render()


def test_tool_specs_through_executor(tmp_path: Path) -> None:
    _tree(tmp_path, n=2)
    ws = WorkingSet(Workspace(tmp_path), window=32_000)
    ex = ToolExecutor()
    for s in specs(ws):
        ex.register(s)
    assert "At most 5 files" in ex.tools["open_files"].description
    assert "Opened 2 file(s)" in ex.run("open_files", {"paths": ["f0.txt", "f1.txt"], "length": 3})
    assert "lines 1-3 of 10" in ex.run("open_files", {"paths": ["f0.txt"], "length": 3})
    assert "Closed all 2" in ex.run("close_files", {"all": True})
    defs = ex.definitions("openai")
    assert {d["function"]["name"] for d in defs} == {"open_files", "close_files"}
