"""Bootstrap loader: per-file and total caps, the 75/25 head/tail split with a read hint, the
MISSING marker, dedup and confinement."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from ctxengine.tools.bootstrap import (
    MIN_REMAINING,
    PER_FILE_CHARS,
    TOTAL_CHARS,
    load_bootstrap,
    load_bootstrap_files,
)


def _numbered(n_lines: int, width: int = 99) -> str:
    return "".join(f"{i:06d} " + "a" * (width - 7) + "\n" for i in range(1, n_lines + 1))


def test_small_files_load_whole(tmp_path: Path) -> None:
    (tmp_path / "AGENTS.md").write_text("# Agents\nbe brief\n")
    (tmp_path / "CLAUDE.md").write_text("# Claude\nrun tests\n")
    b = load_bootstrap(tmp_path)
    assert [f.name for f in b.files] == ["AGENTS.md", "CLAUDE.md"]
    assert all(f.status == "loaded" and not f.truncated for f in b.files)
    assert b.files[0].chars_original == b.files[0].chars_shown == len("# Agents\nbe brief\n")
    assert b.text == "## AGENTS.md\n\n# Agents\nbe brief\n\n\n## CLAUDE.md\n\n# Claude\nrun tests\n"
    assert b.warnings == ()


def test_absent_defaults_are_silent_configured_are_missing(tmp_path: Path) -> None:
    (tmp_path / "AGENTS.md").write_text("x\n")
    b = load_bootstrap(tmp_path, ["docs/STYLE.md"])
    assert [f.name for f in b.files] == ["AGENTS.md", "docs/STYLE.md"]
    missing = b.files[1]
    assert missing.missing and missing.status == "missing" and not missing.truncated
    assert missing.text == "[MISSING] Expected at: docs/STYLE.md"
    assert missing.chars_original == 0 and missing.chars_shown == len(missing.text)
    assert "[MISSING] Expected at: docs/STYLE.md" in b.text
    assert "CLAUDE.md" not in b.text


def test_per_file_cap_head_tail_split(tmp_path: Path) -> None:
    content = _numbered(500)  # 50,000 chars, 100 per line
    (tmp_path / "AGENTS.md").write_text(content)
    b = load_bootstrap(tmp_path)
    f = b.files[0]
    assert f.truncated and f.chars_original == 50_000
    assert f.chars_shown <= PER_FILE_CHARS
    assert f.chars_shown > PER_FILE_CHARS - 400  # the budget is used, not wasted
    head, rest = f.text.split("\n\n[...truncated:", 1)
    marker, tail = rest.split("]\n\n", 1)
    assert content.startswith(head) and content.endswith(tail)
    # 75 % / 25 % of the budget left after the marker (line snapping moves each by < 1 line)
    budget = len(head) + len(tail)
    assert abs(len(head) / budget - 0.75) < 0.01
    assert abs(len(tail) / budget - 0.25) < 0.01
    # the marker names the omitted lines and the exact call to read them
    first = head.count("\n") + 1
    last = 500 - tail.count("\n")
    assert f"Lines {first}-{last} are omitted" in marker
    assert f'read(path="AGENTS.md", offset={first}, limit={last - first + 1})' in marker
    assert head.endswith("\n") and tail.startswith(f"{last + 1:06d} ")


def test_head_tail_split_without_newlines(tmp_path: Path) -> None:
    (tmp_path / "AGENTS.md").write_text("z" * 30_000)
    f = load_bootstrap(tmp_path, per_file_chars=10_000).files[0]
    head, rest = f.text.split("\n\n[...truncated:", 1)
    _, tail = rest.split("]\n\n", 1)
    assert abs(len(head) / (len(head) + len(tail)) - 0.75) < 0.001
    assert 9_900 < f.chars_shown <= 10_000
    assert 'read(path="AGENTS.md", offset=1, limit=1)' in f.text


def test_total_cap_across_files(tmp_path: Path) -> None:
    names = [f"doc{i}.md" for i in range(5)]
    for n in names:
        (tmp_path / n).write_text(_numbered(250))  # 25,000 chars each
    b = load_bootstrap(tmp_path, names)
    shown = [f.chars_shown for f in b.files]
    assert b.chars <= TOTAL_CHARS
    assert shown[0] <= PER_FILE_CHARS and shown[1] <= PER_FILE_CHARS and shown[2] <= PER_FILE_CHARS
    assert sum(shown[:3]) > TOTAL_CHARS - 3 * 400
    statuses = [f.status for f in b.files]
    assert statuses[:4] == ["truncated"] * 4
    # the few hundred chars left after three files get a sliver of the fourth and how to read it
    assert b.files[3].chars_shown < 600 and 'read(path="doc3.md", offset=' in b.files[3].text
    assert statuses[4] == "skipped"  # fewer than 64 chars left
    assert any("doc4.md: skipped" in w for w in b.warnings)
    assert TOTAL_CHARS - b.chars < MIN_REMAINING + 400


def test_total_cap_cuts_a_later_file_to_what_is_left(tmp_path: Path) -> None:
    (tmp_path / "a.md").write_text("a" * 15_000)
    (tmp_path / "b.md").write_text(_numbered(100))  # 10,000 chars
    b = load_bootstrap(tmp_path, ["a.md", "b.md"], total_chars=20_000)
    a, bb = b.files
    assert a.status == "loaded" and a.chars_shown == 15_000
    assert bb.status == "truncated" and bb.chars_shown <= 5_000
    assert b.chars <= 20_000


def test_dedup_and_confinement(tmp_path: Path) -> None:
    (tmp_path / "AGENTS.md").write_text("rules\n")
    (tmp_path / "CLAUDE.md").symlink_to(tmp_path / "AGENTS.md")
    outside = tmp_path.parent / "outside_secret.md"
    outside.write_text("secret\n")
    b = load_bootstrap(tmp_path, ["AGENTS.md", "../outside_secret.md"])
    assert [f.name for f in b.files] == ["AGENTS.md", "../outside_secret.md"]
    assert b.files[1].status == "refused" and "secret" not in b.text
    assert b.text.count("rules") == 1


def test_pure_function_same_result_twice(tmp_path: Path) -> None:
    (tmp_path / "AGENTS.md").write_text(_numbered(400))
    assert load_bootstrap(tmp_path, ["X.md"]) == load_bootstrap(tmp_path, ["X.md"])


@pytest.mark.parametrize("cap", [100, 200, 5_000])
def test_shown_never_exceeds_the_cap(tmp_path: Path, cap: int) -> None:
    (tmp_path / "AGENTS.md").write_text(_numbered(300))
    b = load_bootstrap(tmp_path, per_file_chars=cap, total_chars=cap)
    f = b.files[0]
    assert f.chars_shown <= cap
    if f.status == "truncated":
        assert re.search(r'read\(path="AGENTS.md", offset=\d+', f.text)


def test_load_bootstrap_files_exact_names(tmp_path: Path) -> None:
    (tmp_path / "CLAUDE.md").write_text("claude rules\n")
    (tmp_path / "AGENTS.md").write_text("agent rules\n")
    b = load_bootstrap_files(tmp_path, ["CLAUDE.md", "GONE.md"])
    assert [(f.name, f.status) for f in b.files] == [("CLAUDE.md", "loaded"), ("GONE.md", "missing")]
    assert "agent rules" not in b.text and "[MISSING] Expected at: GONE.md" in b.text
    quiet = load_bootstrap_files(tmp_path, ["CLAUDE.md", "GONE.md"], include_missing=False)
    assert [f.name for f in quiet.files] == ["CLAUDE.md"] and "MISSING" not in quiet.text


# ---------------------------------------------------------------------- the instructions tool


def test_instructions_tool_defaults(tmp_path: Path) -> None:
    from ctxengine.tools.registry import default_executor

    ex = default_executor(tmp_path)
    assert ex.run("instructions", {}) == "No instruction files found (looked for AGENTS.md, CLAUDE.md)."
    (tmp_path / "AGENTS.md").write_text("# Agents\nbe brief\n")
    (tmp_path / "CLAUDE.md").write_text("# Claude\nrun tests\n")
    out = ex.run("instructions", {})
    assert out == load_bootstrap(tmp_path).text
    assert out == "## AGENTS.md\n\n# Agents\nbe brief\n\n\n## CLAUDE.md\n\n# Claude\nrun tests\n"
    assert ex.run("instructions", {"files": []}) == out  # an empty list means the defaults
    spec = ex.tools["instructions"]
    assert "20,000" in spec.description and "60,000" in spec.description and "read()" in spec.description
    assert spec.parameters["properties"]["files"]["type"] == "array"
    assert "required" not in spec.parameters


def test_instructions_tool_explicit_files(tmp_path: Path) -> None:
    from ctxengine.tools.base import ToolError
    from ctxengine.tools.registry import default_executor

    root = tmp_path / "ws"
    root.mkdir()
    (root / "AGENTS.md").write_text("agent rules\n")
    (root / "docs").mkdir()
    (root / "docs" / "STYLE.md").write_text("style rules\n")
    (tmp_path / "outside_secret.md").write_text("secret\n")
    ex = default_executor(root)

    files = ["docs/STYLE.md", "GONE.md"]
    out = ex.run("instructions", {"files": files})
    assert out == load_bootstrap_files(root, files).text
    assert out.startswith("## docs/STYLE.md\n\nstyle rules\n")
    assert "## GONE.md\n\n[MISSING] Expected at: GONE.md" in out
    assert "agent rules" not in out  # exactly the files given, no defaults

    # a file outside the root is refused as read refuses it: an error, nothing loaded
    for outside in ("../outside_secret.md", str(tmp_path / "outside_secret.md")):
        with pytest.raises(ToolError, match="outside the workspace root") as refused:
            ex.run("instructions", {"files": [*files, outside]})
        assert "secret\n" not in str(refused.value)

    big = "".join(f"{i:06d} " + "a" * 92 + "\n" for i in range(1, 501))  # 50,000 chars
    (root / "BIG.md").write_text(big)
    out = ex.run("instructions", {"files": ["BIG.md"]})
    assert len(out) <= PER_FILE_CHARS + len("## BIG.md\n\n")
    assert 'read(path="BIG.md", offset=' in out

    for bad in ("AGENTS.md", [1], [""]):
        with pytest.raises(ToolError, match="files must be a list"):
            ex.run("instructions", {"files": bad})
