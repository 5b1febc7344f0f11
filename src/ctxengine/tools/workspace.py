"""The workspace every file tool works in: path confinement, ignore rules, text detection.

Confinement (Claude Code's and pi's tools only read inside the project; Anthropic's memory tool
docs ask for the same traversal check):
- paths are relative to the root; an absolute path is allowed when it lies inside the root;
- a path that leaves the root lexically (``..``, an absolute path elsewhere) is refused, and so is
  a path whose *real* path (every symlink resolved) is not inside the root's real path. Nothing
  outside is opened: the check runs before any read.

Walking (what grep and glob see, as ripgrep does by default):
- ``.gitignore`` files are honoured at the root and in every directory below it (git semantics via
  ``pathspec``'s ``GitIgnoreSpec``: a deeper file overrides a shallower one, ``!`` re-includes,
  a directory that is ignored is not entered), plus ``.git/info/exclude`` at the root. They apply
  whether or not the root is a git repository;
- hidden files and directories (a name starting with ``.``) are skipped;
- symlinks: a symlinked file is listed only when its real path is inside the root; symlinked
  directories are never entered (no cycles, nothing outside); sockets, FIFOs and devices are
  skipped.

Text detection: a NUL byte in the first 8 KB means binary (git's and ripgrep's rule). Otherwise the
text is UTF-8 (a UTF-8 BOM is dropped). Text that is not valid UTF-8 is decoded as Windows-1252
(Latin-1 for the five bytes cp1252 leaves undefined) when it looks like text: at most 1% control
characters; else it is reported as binary or of unknown encoding. UTF-16 and UTF-32 (recognised by
their BOM) are reported as unsupported rather than shown as garbage.
"""

from __future__ import annotations

import codecs
import os
import re
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Literal, NamedTuple

from ctxengine.tools.errors import ToolError

if TYPE_CHECKING:
    from pathspec import GitIgnoreSpec

SNIFF_BYTES = 8_192  # a NUL byte in the first 8 KB marks a binary file (git, ripgrep)
ENCODING_SAMPLE_BYTES = 65_536  # bytes decoded to choose UTF-8 or the legacy fallback
MAX_CONTROL_SHARE = 0.01  # legacy-decoded text with more control characters is not text

TextKind = Literal["text", "binary", "unsupported"]

_BOMS: tuple[tuple[bytes, str], ...] = (
    (codecs.BOM_UTF32_LE, "UTF-32"),
    (codecs.BOM_UTF32_BE, "UTF-32"),
    (codecs.BOM_UTF16_LE, "UTF-16"),
    (codecs.BOM_UTF16_BE, "UTF-16"),
)
# C0 controls other than \t \n \v \f \r \b ESC, DEL, and C1 controls: rare in real text.
_CP1252 = {
    b: bytes([b]).decode("cp1252") for b in range(0x80, 0xA0) if b not in (0x81, 0x8D, 0x8F, 0x90, 0x9D)
}
_CONTROL = re.compile("[\x00-\x07\x0e-\x1a\x1c-\x1f\x7f-\x9f]")


class Sniff(NamedTuple):
    """What a file's first bytes say: ``kind`` (text, binary or unsupported), the ``encoding`` to
    decode text with (``utf-8``, ``utf-8-sig`` or ``legacy``), and a ``label`` for messages."""

    kind: TextKind
    encoding: str = "utf-8"
    label: str = "UTF-8"

    @property
    def legacy(self) -> bool:
        """True when the text is not UTF-8 and is decoded as Windows-1252 / Latin-1."""
        return self.encoding == "legacy"


_UTF8 = Sniff("text")


def sniff(sample: bytes, complete: bool) -> Sniff:
    """Classify ``sample`` (the start of a file; ``complete`` when it is the whole file)."""
    if sample.startswith(codecs.BOM_UTF8):
        return Sniff("text", "utf-8-sig", "UTF-8 with BOM")
    for bom, label in _BOMS:
        if sample.startswith(bom):
            return Sniff("unsupported", label, label)
    if b"\0" in sample[:SNIFF_BYTES]:
        return Sniff("binary", "", "binary")
    try:
        codecs.getincrementaldecoder("utf-8")().decode(sample, final=complete)
        return Sniff("text")
    except UnicodeDecodeError:
        pass
    text = decode_legacy(sample)
    if len(_CONTROL.findall(text)) > MAX_CONTROL_SHARE * max(len(text), 1):
        return Sniff("binary", "", "unknown encoding")
    return Sniff("text", "legacy", "Windows-1252/Latin-1")


def sniff_decode(data: bytes) -> tuple[Sniff, str | None]:
    """``sniff(data, complete=True)`` and the decoded text (None unless text), decoding once."""
    if b"\0" not in data[:SNIFF_BYTES] and not data.startswith((codecs.BOM_UTF8, b"\xff\xfe", b"\xfe\xff")):
        try:
            return _UTF8, data.decode("utf-8")
        except UnicodeDecodeError:
            pass
    info = sniff(data, complete=True)
    return info, decode(data, info) if info.kind == "text" else None


def decode_legacy(data: bytes) -> str:
    """Windows-1252, with the five bytes it leaves undefined (0x81 0x8D 0x8F 0x90 0x9D) kept as
    Latin-1; never fails."""
    return data.decode("latin-1").translate(_CP1252)


def decode(data: bytes, info: Sniff) -> str:
    """Decode ``data`` as ``info`` says; invalid UTF-8 further on becomes U+FFFD."""
    if info.legacy:
        return decode_legacy(data)
    if info.encoding == "utf-8-sig" and data.startswith(codecs.BOM_UTF8):
        data = data[len(codecs.BOM_UTF8) :]
    return data.decode("utf-8", errors="replace")


def sniff_file(path: Path, size: int | None = None) -> Sniff:
    """Classify the file at ``path`` from its first ``ENCODING_SAMPLE_BYTES``."""
    with path.open("rb") as f:
        sample = f.read(ENCODING_SAMPLE_BYTES)
    if size is None:
        size = path.stat().st_size
    return sniff(sample, complete=len(sample) >= size)


def is_binary(path: Path) -> bool:
    """True when ``path`` is not text we can show: a NUL byte in its first 8 KB, a UTF-16/32
    BOM, or bytes that are neither UTF-8 nor text-like Windows-1252 / Latin-1."""
    return sniff_file(path).kind != "text"


def _entry_name(entry: os.DirEntry[str]) -> str:
    return entry.name


def is_hidden(name: str) -> bool:
    """A hidden file or directory: its name starts with a dot."""
    return name.startswith(".") and name not in (".", "..")


# ------------------------------------------------------------------------------------------------
# Ignore rules
# ------------------------------------------------------------------------------------------------

_Rules = tuple[tuple[str, "GitIgnoreSpec"], ...]  # (directory relative to the root, its spec)


class IgnoreRules:
    """``.gitignore`` specs per directory, cached by the file's mtime."""

    def __init__(self, real_root: Path) -> None:
        self.real_root = real_root
        self._cache: dict[str, tuple[int, GitIgnoreSpec | None]] = {}

    def spec_for(self, rel_dir: str) -> GitIgnoreSpec | None:
        """The spec of ``rel_dir``'s own ``.gitignore`` (None when it has none). The root's also
        takes ``.git/info/exclude`` (lower priority than the root ``.gitignore``)."""
        directory = self.real_root / rel_dir if rel_dir else self.real_root
        files = [directory / ".gitignore"]
        if not rel_dir:
            files.insert(0, directory / ".git" / "info" / "exclude")
        stamp = 0
        texts: list[str] = []
        for file in files:
            try:
                st = file.stat()
                if not stat.S_ISREG(st.st_mode):
                    continue
                stamp = stamp * 31 + st.st_mtime_ns + st.st_size
                texts.append(file.read_text(encoding="utf-8", errors="replace"))
            except OSError:
                continue
        cached = self._cache.get(rel_dir)
        if cached is not None and cached[0] == stamp:
            return cached[1]
        lines = [line for text in texts for line in text.splitlines()]
        spec = None
        if any(ln.strip() for ln in lines):
            from pathspec import GitIgnoreSpec  # imported when a tree has ignore rules (~20 ms)

            spec = GitIgnoreSpec.from_lines(lines)
        self._cache[rel_dir] = (stamp, spec)
        return spec

    def rules_for(self, rel_dir: str) -> _Rules:
        """The specs that apply inside ``rel_dir``: the root's and every ancestor's, shallowest
        first."""
        rules: list[tuple[str, GitIgnoreSpec]] = []
        parts = [p for p in rel_dir.split("/") if p]
        for i in range(len(parts) + 1):
            base = "/".join(parts[:i])
            spec = self.spec_for(base)
            if spec is not None:
                rules.append((base, spec))
        return tuple(rules)

    def descend(self, rules: _Rules, rel_dir: str) -> _Rules:
        """``rules`` extended with ``rel_dir``'s own ``.gitignore``."""
        spec = self.spec_for(rel_dir)
        return (*rules, (rel_dir, spec)) if spec is not None else rules

    @staticmethod
    def ignored(rules: _Rules, rel: str, is_dir: bool) -> bool:
        """Whether ``rel`` (relative to the root) is ignored: the deepest spec with a verdict wins."""
        verdict = False
        for base, spec in rules:
            sub = rel[len(base) + 1 :] if base else rel
            result = spec.check_file(sub + "/" if is_dir else sub)
            if result.include is not None:
                verdict = result.include
        return verdict

    def is_ignored(self, rel: str, is_dir: bool = False) -> bool:
        """Whether ``rel`` or one of its parent directories is ignored."""
        parts = rel.split("/")
        rules: _Rules = self.rules_for("")
        for i in range(1, len(parts)):
            parent = "/".join(parts[:i])
            if self.ignored(rules, parent, True):
                return True
            rules = self.descend(rules, parent)
        return self.ignored(rules, rel, is_dir)


# ------------------------------------------------------------------------------------------------
# Workspace
# ------------------------------------------------------------------------------------------------


class WalkEntry:
    """A file found by ``Workspace.walk``: ``fspath`` (its path, real for a symlink), ``rel``
    (POSIX, relative to the root, as the model names it) and ``stat`` (of the target when it is
    a symlink; taken when first asked for, so a walk that only reads files costs no stat call
    per file)."""

    __slots__ = ("_stat", "fspath", "rel")

    def __init__(self, fspath: str, rel: str, stat: os.stat_result | None = None) -> None:
        self.fspath = fspath
        self.rel = rel
        self._stat = stat

    def __repr__(self) -> str:
        return f"WalkEntry({self.fspath!r}, {self.rel!r})"

    @property
    def stat(self) -> os.stat_result:
        if self._stat is None:
            self._stat = os.stat(self.fspath, follow_symlinks=False)
        return self._stat

    @property
    def path(self) -> Path:
        return Path(self.fspath)


class Workspace:
    """A root directory the tools are confined to."""

    def __init__(self, root: str | os.PathLike[str]) -> None:
        given = Path(root)
        if not given.is_dir():
            raise ToolError(f"workspace root {str(given)!r} is not a directory")
        self.root = Path(os.path.abspath(given))
        self.real_root = Path(os.path.realpath(given))
        self.ignore = IgnoreRules(self.real_root)

    def __repr__(self) -> str:
        return f"Workspace({str(self.root)!r})"

    def _inside(self, path: str, root: Path) -> bool:
        r = str(root)
        return path == r or path.startswith(r.rstrip(os.sep) + os.sep)

    def resolve(self, path: str | os.PathLike[str]) -> Path:
        """The real path of ``path`` (relative to the root, or absolute inside it). Raises
        ``ToolError`` when it leaves the root lexically or through a symlink."""
        raw = os.fspath(path)
        if "\0" in raw:
            raise ToolError(f"path {raw!r} contains a NUL byte")
        raw = raw if raw.strip() else "."
        candidate = raw if os.path.isabs(raw) else os.path.join(self.root, raw)
        lexical = os.path.normpath(candidate)
        if not (self._inside(lexical, self.root) or self._inside(lexical, self.real_root)):
            raise ToolError(
                f"path {raw!r} is outside the workspace root {self.root}; refused. "
                "Use a path relative to the root (without '..' leaving it)."
            )
        real = os.path.realpath(lexical)
        if not self._inside(real, self.real_root):
            raise ToolError(
                f"path {raw!r} resolves through a symlink to a location outside the workspace "
                f"root {self.root}; refused. Only files inside the root can be read."
            )
        return Path(real)

    def rel(self, real: Path) -> str:
        """``real`` (a resolved path inside the root) relative to the root, in POSIX form; ``.``
        for the root itself."""
        try:
            rel = real.relative_to(self.real_root).as_posix()
        except ValueError:
            return real.as_posix()
        return rel or "."

    def walk(self, start: Path) -> Iterator[WalkEntry]:
        """Regular files under ``start`` (a resolved directory inside the root), depth first in
        name order, skipping ignored, hidden and out-of-root entries (see the module docs). The
        rules are not applied to ``start`` itself: naming a directory searches it."""
        start_rel = self.rel(start)
        start_rel = "" if start_rel == "." else start_rel
        yield from self._walk(start, start_rel, self.ignore.rules_for(start_rel))

    def _walk(self, directory: str | Path, rel_dir: str, rules: _Rules) -> Iterator[WalkEntry]:
        try:
            with os.scandir(directory) as it:
                entries = sorted(it, key=_entry_name)
        except OSError:
            return
        prefix = f"{rel_dir}/" if rel_dir else ""
        ignored = self.ignore.ignored
        for entry in entries:
            name = entry.name
            if name[0] == ".":  # hidden (``is_hidden``: scandir never gives "." or "..")
                continue
            rel = prefix + name
            try:
                # regular files first, the most common entry; without following links, a symlink
                # is neither a file nor a directory here, so the order changes no verdict
                if entry.is_file(follow_symlinks=False):
                    if not (rules and ignored(rules, rel, False)):
                        yield WalkEntry(entry.path, rel)
                elif entry.is_dir(follow_symlinks=False):
                    if not (rules and ignored(rules, rel, True)):
                        yield from self._walk(entry.path, rel, self.ignore.descend(rules, rel))
                elif entry.is_symlink():
                    real = os.path.realpath(entry.path)
                    if not self._inside(real, self.real_root):
                        continue
                    st = os.stat(real)
                    if not stat.S_ISREG(st.st_mode):
                        continue  # symlinked directories are never entered
                    if not (rules and ignored(rules, rel, False)):
                        yield WalkEntry(real, rel, st)
            except OSError:
                continue
