"""The file ledger: every file the agent read, created, edited or deleted, and how, kept mechanically.

Factory's evaluation of compaction finds the *artifact trail* (which files were touched, and how)
the weakest dimension of every compactor it tested. The ledger follows the agent's tool calls
(not the model's summary): a read (a read tool, or a shell command that prints one file:
``shell.shell_read_paths``), a write or an edit (``file_writes.file_changes``: Edit, Write,
MultiEdit, str_replace_editor, apply_patch, a here-document), a deletion (an ``apply_patch``
``Delete File``, a plain ``rm``). Each file keeps its last action, the tool that did it and a
one-line description (an edit's first new line), newest last; ``lines`` gives them newest first
(``compaction.pinned`` fits them in a token budget). Pure.
"""

from __future__ import annotations

import re

import msgspec

from ctxengine.messages.file_writes import PATH_KEYS, file_changes
from ctxengine.messages.identifiers import normalize_path
from ctxengine.messages.model import Message, ToolCall

READ_TOOLS = frozenset({"read", "read_file", "view", "cat", "open", "open_files", "notebookread"})
CREATE_TOOLS = frozenset({"write", "create", "write_file"})
_DELETE_PATCH_RE = re.compile(r"^\*\*\* Delete File: (.+)$", re.M)
_RM_RE = re.compile(r"(?:^|[;&|]\s*)rm\s+(?:-[A-Za-z]+\s+)*((?:[^\s;&|]+\s*)+)")
LINE_CHARS = 60  # a description's length at most, chars


class FileEntry(msgspec.Struct, kw_only=True):
    """One file's last action: ``read``, ``created``, ``edited`` or ``deleted``, by ``tool``,
    with a one-line ``note`` (an edit's first new line; "" for a read or a deletion)."""

    path: str
    action: str
    tool: str
    note: str = ""


def _first_line(text: str) -> str:
    line = next((ln.strip() for ln in text.splitlines() if ln.strip()), "")
    return line if len(line) <= LINE_CHARS else line[: LINE_CHARS - 1] + "…"


def _read_paths(call: ToolCall) -> list[str]:
    from ctxengine.tools.shell.commands import shell_read_paths  # bashlex only when a shell call is read

    if call.name.lower() in READ_TOOLS and isinstance(call.input, dict):
        return [v for k in PATH_KEYS if isinstance(v := call.input.get(k), str) and v]
    return shell_read_paths(call) if isinstance(call.input, dict) else []


def _deleted(call: ToolCall) -> list[str]:
    inp = call.input
    texts = [inp] if isinstance(inp, str) else [v for v in inp.values() if isinstance(v, str)]
    out: list[str] = []
    for t in texts:
        out += [m.strip() for m in _DELETE_PATCH_RE.findall(t)]
        if call.name.lower() in ("bash", "shell", "exec_command", "run_command", "execute_bash"):
            for m in _RM_RE.finditer(t):
                out += [w.strip("'\"") for w in m.group(1).split() if not w.startswith("-")]
    return out


def _writes_whole(call: ToolCall) -> bool:
    """A call that writes whole files: a here-document from a shell, an ``Add File`` patch."""
    inp = call.input
    texts = [inp] if isinstance(inp, str) else [v for v in inp.values() if isinstance(v, str)]
    return any("*** Add File:" in t or ("<<" in t and not any(k in inp for k in PATH_KEYS)) for t in texts)


class FileLedger:
    """Files touched so far, by normalised path, in the order of their last action."""

    def __init__(self) -> None:
        self.entries: dict[str, FileEntry] = {}

    def _set(self, path: str, action: str, tool: str, note: str = "") -> None:
        key = normalize_path(path)
        self.entries.pop(key, None)
        self.entries[key] = FileEntry(path=key, action=action, tool=tool, note=note)

    def observe(self, msg: Message) -> None:
        """Fold the tool calls of an assistant message into the ledger."""
        for call in msg.tool_calls:
            for path in _read_paths(call):
                known = self.entries.get(normalize_path(path))
                if known is None or known.action == "read":  # a read does not hide an edit
                    self._set(path, "read", call.name)
            whole = call.name.lower() in CREATE_TOOLS or _writes_whole(call)
            for ch in file_changes(call):
                created = whole and normalize_path(ch.path) not in self.entries
                self._set(ch.path, "created" if created else "edited", call.name, _first_line(ch.text))
            for path in _deleted(call):
                self._set(path, "deleted", call.name)

    def lines(self) -> list[str]:
        """One line per file, newest first: its path, last action and, for a write, the tool and
        its first new line."""
        return [
            f"- {e.path}: {e.action}" + (f" ({e.tool}): {e.note}" if e.note else "")
            for e in reversed(self.entries.values())
        ]


__all__ = ["FileEntry", "FileLedger"]
