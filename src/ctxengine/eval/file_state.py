"""The evaluation's file state: the current text of each file the agent wrote.

Read recall (``fidelity``) counts as a source what the agent read, and the *current* content of
each file it wrote: an edit's ``old_string`` that quotes a file the agent created is grounded in
that file, not in the agent's old tool call. Past versions are not sources: once an edit replaced
a line, the old line is gone from the file.

The text of a path is kept as pieces. A whole write (Write, ``create``, an ``Add File`` patch, a
here-document) replaces them all; an edit (Edit, MultiEdit, ``str_replace``, a patch hunk) is
applied where its old text occurs in a piece, and otherwise (the base was never written by the
agent: it is in what the agent read) its new text is one more piece; a deleted file has none.
Anything else that writes (SWE-agent 0.x ``edit``, an ``insert``) adds its new text as a piece
(``file_writes.file_changes``). Pure; chars.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

from ctxengine.messages.file_writes import PATH_KEYS, file_changes, input_strings
from ctxengine.messages.model import ToolCall

_PATCH_FILE_RE = re.compile(r"^\*\*\* (Update|Add|Delete) File: (.+)$", re.M)
_PATCH_STOP_RE = re.compile(r"^\*\*\* (?:Update|Add|Delete) File: |^\*\*\* End Patch", re.M)
_WHOLE_WRITES = {"write": "content", "create": "file_text", "write_file": "content"}
_EDIT_KEYS = (("old_string", "new_string"), ("old_str", "new_str"))


def _path(inp: dict[str, Any]) -> str:
    return next((v for k in PATH_KEYS if isinstance(v := inp.get(k), str) and v), "")


def _hunks(body: str) -> Iterator[tuple[str, str]]:
    """(old text, new text) of each ``@@`` hunk of an ``Update File`` body."""
    for part in re.split(r"^@@[^\n]*\n?", body, flags=re.M):
        old: list[str] = []
        new: list[str] = []
        for ln in part.splitlines():
            tag, rest = ln[:1], ln[1:]
            if tag in (" ", "-"):
                old.append(rest)
            if tag in (" ", "+"):
                new.append(rest)
        if old or new:
            yield "\n".join(old), "\n".join(new)


class FileStates:
    """The current text of every file written so far (see the module docstring)."""

    def __init__(self) -> None:
        self._pieces: dict[str, list[str]] = {}

    def text(self, path: str) -> str:
        """The current text of ``path`` as known from the agent's writes ("" when none)."""
        return "\n".join(self._pieces.get(path, ()))

    def apply(self, call: ToolCall, open_file: str = "") -> list[str]:
        """Apply what ``call`` wrote; the paths whose text changed (``open_file``: the file a
        SWE-agent 0.x ``edit`` applies to)."""
        inp = call.input
        name = call.name.lower()
        if isinstance(inp, str):
            return self._patch(inp) if "*** Begin Patch" in inp else []
        path = _path(inp)
        if path and name in _WHOLE_WRITES and isinstance(text := inp.get(_WHOLE_WRITES[name]), str):
            self._pieces[path] = [text]
            return [path]
        if path and isinstance(inp.get("file_text"), str):  # str_replace_editor create
            self._pieces[path] = [inp["file_text"]]
            return [path]
        if path and isinstance(inp.get("edits"), list):  # MultiEdit
            for e in inp["edits"]:
                if isinstance(e, dict):
                    self._edit(path, e)
            return [path]
        if path and any(
            isinstance(inp.get(old), str) and isinstance(inp.get(new), str) for old, new in _EDIT_KEYS
        ):
            self._edit(path, inp)
            return [path]
        changed: list[str] = []
        for v in input_strings(inp):
            if "*** Begin Patch" in v:
                changed += self._patch(v)
        if changed:
            return changed
        swe_edit = any("end_of_edit" in v for v in input_strings(inp))
        for ch in file_changes(call, open_file):
            if not path and not swe_edit:  # a shell here-document writes the whole file
                self._pieces[ch.path] = [ch.text]
            else:
                self._pieces.setdefault(ch.path, []).append(ch.text)
            changed.append(ch.path)
        return changed

    def _edit(self, path: str, inp: dict[str, Any]) -> None:
        old, new = next(
            (
                (inp[o], inp[n])
                for o, n in _EDIT_KEYS
                if isinstance(inp.get(o), str) and isinstance(inp.get(n), str)
            ),
            ("", ""),
        )
        self._replace(path, old, new, every=bool(inp.get("replace_all")))

    def _replace(self, path: str, old: str, new: str, *, every: bool = False) -> None:
        pieces = self._pieces.setdefault(path, [])
        if old:
            for i, p in enumerate(pieces):
                if old in p:
                    pieces[i] = p.replace(old, new) if every else p.replace(old, new, 1)
                    return
        if new.strip():
            pieces.append(new)

    def _patch(self, patch: str) -> list[str]:
        changed = []
        for m in _PATCH_FILE_RE.finditer(patch):
            kind, path = m.group(1), m.group(2).strip()
            stop = _PATCH_STOP_RE.search(patch, m.end())
            body = patch[m.end() : stop.start() if stop else len(patch)]
            if kind == "Delete":
                self._pieces.pop(path, None)
            elif kind == "Add":
                self._pieces[path] = ["\n".join(ln[1:] for ln in body.splitlines() if ln.startswith("+"))]
            else:
                for old, new in _hunks(body):
                    self._replace(path, old, new)
            changed.append(path)
        return changed


# ------------------------------------------------------------------ the files probe

_READ_TOOLS = frozenset({"read", "read_file", "view", "open", "notebookread"})
_VERBS = {  # what a line must say, beside the path, to tell the action
    "read": ("read", "view", "cat ", "sed -n", "head ", "tail ", "nl ", "open"),
    "edited": ("edit", "patch", "replace", "str_replace", "updat", "modif", "chang", "insert"),
    "created": ("creat", "writ", "wrote", "add file", "new file"),
    "deleted": ("delet", "remov", "rm "),
}
# a line says one of an action's verbs when this finds one in it (the same test as asking each)
_SAYS = {action: re.compile("|".join(map(re.escape, verbs))).search for action, verbs in _VERBS.items()}


class FileTrail:
    """The evaluation's trail of touched files: each path's last action (``read``, ``created``,
    ``edited``, ``deleted``), from the read tools' paths and ``FileStates``' changes."""

    def __init__(self) -> None:
        self.last: dict[str, str] = {}

    def observe(self, call: ToolCall, changed: list[str]) -> None:
        """Fold one tool call (``changed``: the paths ``FileStates.apply`` changed for it)."""
        inp = call.input
        path = _path(inp) if call.name.lower() in _READ_TOOLS and isinstance(inp, dict) else ""
        if path and self.last.get(path, "read") == "read":  # a read does not hide a write
            self.last.pop(path, None)
            self.last[path] = "read"
        patch = inp if isinstance(inp, str) else "\n".join(input_strings(inp))
        deleted = set(re.findall(r"^\*\*\* Delete File: (.+)$", patch, re.M))
        shell = isinstance(inp, dict) and ("command" in inp or "cmd" in inp)
        for m in re.finditer(r"(?:^|[;&|]\s*)rm\s+(?:-\w+\s+)*([^;&|\n]+)", patch if shell else "", re.M):
            for path in (w.strip("'\"") for w in m.group(1).split()):
                deleted.add(path)
                changed = [*changed, path] if path not in changed else changed
        whole = call.name.lower() in _WHOLE_WRITES or "<<" in patch or "*** Add File:" in patch
        for path in changed:
            action = (
                "deleted" if path in deleted else "created" if whole and path not in self.last else "edited"
            )
            self.last.pop(path, None)
            self.last[path] = action

    def score(self, lines: list[str]) -> float | None:
        """The share of touched files whose path and last action some line of the context states
        (``lines``: the context's text and each tool call as its name and input); None when no
        file was touched."""
        if not self.last:
            return None
        low = [ln.lower().replace("\\", "/") for ln in lines]  # one separator: the same file either way
        # per action, the lines saying one of its verbs, joined by NUL: a path without a NUL is
        # in the joined text exactly when it is in one of those lines (one search per path)
        stating: dict[str, str] = {}
        hits = 0
        for path, action in self.last.items():
            p = path.lower().replace("\\", "/")
            if "\x00" in p:
                says = _SAYS[action]
                hits += any(p in ln and says(ln) is not None for ln in low)
                continue
            said = stating.get(action)
            if said is None:
                said = stating[action] = "\x00".join(filter(_SAYS[action], low))
            hits += bool(said) and p in said  # (an empty path is in any line, not in none)
        return round(hits / len(self.last), 4)


__all__ = ["FileStates", "FileTrail"]
