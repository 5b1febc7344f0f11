"""``grep`` and ``glob`` over the workspace: paged, confined, ignore-aware.

grep follows pi's limits (reference notes, section A) with Letta's paging (section B):
- Python ``re`` syntax, searched line by line (a match is a matching *line*); ``include`` is a glob
  on the path relative to the searched directory (gitignore / ripgrep ``-g`` semantics: ``*.py``
  matches at any depth, ``src/**/*.py`` is anchored, ``{a,b}`` alternatives are expanded);
  ``context`` lines before and after (at most 20); ``case_insensitive``;
- pages of 100 matches (pi's cap); lines cut at 500 characters (pi's) with
  ``... [line truncated, N chars]``;
- output ``path:line: text`` for a match and ``path-line- text`` for a context line, ``--`` between
  separate groups when context is shown (GNU grep's layout); paths relative to the root;
- when more matches remain, the last line gives the exact call for the next page, as Letta's
  grep_files does: ``[100 of N matches shown. Next page: grep(pattern="...", offset=100)]``;
- ``.gitignore`` (root and nested), hidden files and directories, binary files and symlinks out
  of the root are skipped (``Workspace.walk``; symlinked directories are not entered). A path
  named explicitly is searched even when hidden or ignored (ripgrep does the same).

Pure Python: ripgrep is not used (its ignore, hidden and symlink rules differ in details, and
equal results are part of the contract). Each file (or 8 MB block of a large file) is first
searched as a whole with the pattern in MULTILINE mode, a necessary condition for a line match,
so files without a match cost one regex scan; patterns with negative lookarounds or ``\\A``/``\\Z``
skip this shortcut. Files are never loaded whole above 8 MB.

glob follows pi's ``find`` and Claude Code's Glob: up to 1,000 paths (pi's cap), newest first
(modification time, as Claude Code's Glob sorts), relative to the root, with the same ignore
rules and gitignore-style patterns as ``include``.
"""

from __future__ import annotations

import json
import re
from typing import TYPE_CHECKING, Any

from ctxengine.tools.errors import ToolError
from ctxengine.tools.file_screen import (
    literal_needle,
    read_files,
    read_screened,
)
from ctxengine.tools.grep_scan import LineScan
from ctxengine.tools.workspace import (
    Workspace,
    sniff_file,
)

if TYPE_CHECKING:
    from pathspec import GitIgnoreSpec

    from ctxengine.tools.base import ToolSpec

GREP_MAX_CONTEXT = 20
GLOB_MAX_PATHS = 1_000

_NO_PREFILTER = re.compile(r"\(\?<?!|\\[AZ]")


def expand_braces(pattern: str) -> list[str]:
    """Shell-style ``{a,b}`` alternatives: ``*.{ts,tsx}`` -> ``*.ts``, ``*.tsx`` (nested braces
    work; an unbalanced brace is literal)."""
    depth = 0
    start = -1
    for i, ch in enumerate(pattern):
        if ch == "{":
            if depth == 0:
                start = i
            depth += 1
        elif ch == "}" and depth:
            depth -= 1
            if depth == 0:
                inner = pattern[start + 1 : i]
                options: list[str] = []
                level = 0
                last = 0
                for j, c in enumerate(inner):
                    if c == "{":
                        level += 1
                    elif c == "}":
                        level -= 1
                    elif c == "," and level == 0:
                        options.append(inner[last:j])
                        last = j + 1
                options.append(inner[last:])
                if len(options) == 1:
                    continue
                head, tail = pattern[:start], pattern[i + 1 :]
                return [x for opt in options for x in expand_braces(head + opt + tail)]
    return [pattern]


def path_matcher(pattern: str) -> GitIgnoreSpec:
    """A gitignore-style matcher for ``pattern`` (braces expanded, a leading ``./`` dropped)."""
    pattern = pattern.strip()
    while pattern.startswith("./"):
        pattern = pattern[2:]
    if not pattern:
        raise ToolError("the glob pattern is empty")
    from pathspec import GitIgnoreSpec  # imported when a pattern needs it (~20 ms)

    return GitIgnoreSpec.from_lines(expand_braces(pattern))


def _arg(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)
    return str(value)


def grep_call(
    pattern: str, path: str, include: str | None, context: int, case_insensitive: bool, offset: int
) -> str:
    """The grep call (non-default arguments only) for the page at ``offset``."""
    args: list[tuple[str, Any]] = [("pattern", pattern)]
    if path not in ("", "."):
        args.append(("path", path))
    if include:
        args.append(("include", include))
    if context:
        args.append(("context", context))
    if case_insensitive:
        args.append(("case_insensitive", True))
    args.append(("offset", offset))
    return "grep(" + ", ".join(f"{k}={_arg(v)}" for k, v in args) + ")"


def _check_int(name: str, value: Any, low: int, high: int | None = None) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ToolError(f"{name} must be an integer, got {value!r}")
    if value < low or (high is not None and value > high):
        bound = f"from {low} to {high}" if high is not None else f"at least {low}"
        raise ToolError(f"{name} must be {bound}; got {value}")
    return value


def grep(
    workspace: Workspace,
    pattern: str,
    path: str = ".",
    include: str | None = None,
    context: int = 0,
    case_insensitive: bool = False,
    offset: int = 0,
) -> str:
    """Search files under ``path`` for lines matching ``pattern``; one page of 100 matches from
    match ``offset`` (0-based). Raises ``ToolError`` on a bad pattern or a path outside."""
    if not isinstance(pattern, str) or not pattern:
        raise ToolError("pattern is required: a Python regular expression")
    context = _check_int("context", context, 0, GREP_MAX_CONTEXT)
    offset = _check_int("offset", offset, 0)
    if not isinstance(case_insensitive, bool):
        raise ToolError(f"case_insensitive must be true or false, got {case_insensitive!r}")
    path = path if isinstance(path, str) and path.strip() else "."
    flags = re.IGNORECASE if case_insensitive else 0
    try:
        rx = re.compile(pattern, flags)
    except re.error as exc:
        raise ToolError(
            f"invalid regular expression {pattern!r}: {exc}. The syntax is Python's re; escape "
            "special characters such as ( [ { . * + ? with a backslash."
        ) from None
    prefilter = None if _NO_PREFILTER.search(pattern) else re.compile(pattern, flags | re.MULTILINE)
    target = workspace.resolve(path)
    if not target.exists():
        raise ToolError(f"path not found: {path!r}")
    scan = LineScan(rx, prefilter, context, offset, literal_needle(pattern, case_insensitive))
    unread: list[str] = []  # files that could not be read: named after the matches, as grep does
    if target.is_file():
        try:
            info = sniff_file(target)
            if info.kind != "text":
                return f"{workspace.rel(target)} is a {info.label} file; it was not searched."
            scan.file(workspace.rel(target), target, read_screened(str(target), scan.needle))
        except OSError as exc:
            raise ToolError(f"cannot read {workspace.rel(target)}: {exc.strerror or exc}") from None
    else:
        start_rel = workspace.rel(target)
        prefix = "" if start_rel == "." else start_rel + "/"
        spec = path_matcher(include) if include else None
        files = (
            (e.rel, e.fspath)
            for e in workspace.walk(target)
            if spec is None or spec.match_file(e.rel[len(prefix) :])
        )
        for rel, fspath, loaded in read_files(files, scan.needle):
            if loaded is None:
                continue  # screened out: no matching line (``LineScan.file`` would do nothing)
            try:
                scan.file(rel, fspath, loaded)
            except OSError as exc:
                unread.append(f"{rel} ({exc.strerror or exc})")
    where = "the workspace" if path in ("", ".") else path
    if scan.total == 0:
        inc = f" (files matching {include!r})" if include else ""
        return f"No matches for {pattern!r} in {where}{inc}.{unread_note(unread)}"
    if offset >= scan.total:
        raise ToolError(
            f"offset={offset} is past the last match: there are {scan.total:,} matches "
            f"(offsets 0-{scan.total - 1})."
        )
    shown = min(scan.hi, scan.total) - offset
    span = f" (matches {offset + 1}-{offset + shown})" if offset else ""
    lines = scan.out
    if scan.hi < scan.total:
        nxt = grep_call(pattern, path, include, context, case_insensitive, scan.hi)
        lines.append(f"\n[{shown} of {scan.total:,} matches shown{span}. Next page: {nxt}]")
    elif offset:
        lines.append(f"\n[{shown} of {scan.total:,} matches shown{span}; this is the last page.]")
    return "\n".join(lines) + unread_note(unread)


def unread_note(unread: list[str]) -> str:
    """The line naming the files a search could not read (the first 5), or ""."""
    if not unread:
        return ""
    more = f" and {len(unread) - 5:,} more" if len(unread) > 5 else ""
    return f"\n[{len(unread):,} file(s) could not be read: {', '.join(unread[:5])}{more}]"


def glob(workspace: Workspace, pattern: str, path: str = ".") -> str:
    """Files under ``path`` matching ``pattern``, newest first, at most 1,000, relative to the
    root. Raises ``ToolError`` on an empty pattern or a path outside."""
    if not isinstance(pattern, str):
        raise ToolError("pattern is required: a glob such as **/*.py")
    spec = path_matcher(pattern)
    path = path if isinstance(path, str) and path.strip() else "."
    target = workspace.resolve(path)
    if not target.is_dir():
        raise ToolError(f"{path!r} is not a directory of the workspace")
    start_rel = workspace.rel(target)
    prefix = "" if start_rel == "." else start_rel + "/"
    found = [
        (entry.stat.st_mtime_ns, entry.rel)
        for entry in workspace.walk(target)
        if spec.match_file(entry.rel[len(prefix) :])
    ]
    if not found:
        where = "the workspace" if path in ("", ".") else path
        return f"No files match {pattern!r} in {where}."
    found.sort(key=lambda t: (-t[0], t[1]))
    lines = [rel for _, rel in found[:GLOB_MAX_PATHS]]
    if len(found) > GLOB_MAX_PATHS:
        lines.append(
            f"\n[Showing the {GLOB_MAX_PATHS:,} newest of {len(found):,} matching paths. "
            "Narrow the pattern or the path to see the rest.]"
        )
    return "\n".join(lines)


GREP_DESCRIPTION = (
    "Search the workspace's files for lines matching a regular expression (Python re syntax). "
    "Returns `path:line: text` lines (context lines as `path-line- text`), 100 matches per page; "
    "when more remain, the last line gives the exact call for the next page. Honours .gitignore "
    "and skips hidden and binary files. `include` filters files by glob (e.g. `*.py`, "
    "`src/**/*.{ts,tsx}`)."
)

GREP_PARAMETERS: dict[str, Any] = {
    "type": "object",
    "properties": {
        "pattern": {"type": "string", "description": "Regular expression (Python re syntax)."},
        "path": {
            "type": "string",
            "description": "File or directory to search, relative to the workspace root (default: the root).",
        },
        "include": {"type": "string", "description": "Only files matching this glob, e.g. *.py."},
        "context": {
            "type": "integer",
            "minimum": 0,
            "maximum": GREP_MAX_CONTEXT,
            "description": "Lines of context before and after each match (default 0).",
        },
        "case_insensitive": {"type": "boolean", "description": "Ignore case (default false)."},
        "offset": {
            "type": "integer",
            "minimum": 0,
            "description": "Number of matches to skip, for the next page (default 0).",
        },
    },
    "required": ["pattern"],
    "additionalProperties": False,
}

GLOB_DESCRIPTION = (
    "List the workspace's files matching a glob (gitignore-style: `*.py` matches at any depth, "
    "`src/**/*.ts` under src), newest first, at most 1,000 paths relative to the workspace root. "
    "Honours .gitignore and skips hidden files."
)

GLOB_PARAMETERS: dict[str, Any] = {
    "type": "object",
    "properties": {
        "pattern": {"type": "string", "description": "Glob pattern, e.g. **/*.py or *.{ts,tsx}."},
        "path": {
            "type": "string",
            "description": "Directory to search, relative to the workspace root (default: the root).",
        },
    },
    "required": ["pattern"],
    "additionalProperties": False,
}


def specs(workspace: Workspace) -> list[ToolSpec]:
    """The ``grep`` and ``glob`` tools bound to ``workspace``."""
    from ctxengine.tools.base import ToolSpec  # here: a one-shot grep never registers a tool

    def run_grep(
        pattern: str,
        path: str = ".",
        include: str | None = None,
        context: int = 0,
        case_insensitive: bool = False,
        offset: int = 0,
    ) -> str:
        return grep(workspace, pattern, path, include, context, case_insensitive, offset)

    def run_glob(pattern: str, path: str = ".") -> str:
        return glob(workspace, pattern, path)

    return [
        ToolSpec("grep", GREP_DESCRIPTION, GREP_PARAMETERS, run_grep),
        ToolSpec("glob", GLOB_DESCRIPTION, GLOB_PARAMETERS, run_glob),
    ]
