"""What a tool call wrote: the files it changed and the new text of each.

A fact of the transcript, read from the call's input the way each harness writes it: Claude
Code's Edit / MultiEdit / Write / NotebookEdit, SWE-agent's ``str_replace_editor`` and 0.x
``edit``, OpenHands' ``str_replace_based_edit_tool``, Codex's ``apply_patch`` (its added lines),
and a shell here-document that writes a file (mini-swe-agent, Codex). The restore re-attaches the
last change of recently modified files from it; the evaluation reads writes with its own file
state (``fidelity_files``). Pure; no I/O.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import msgspec

from ctxengine.messages.model import ToolCall

# tools whose call writes a file, and the input keys of the new text (Claude Code, SWE-agent,
# OpenHands, Codex); apply_patch's patch text is parsed for its added lines
WRITE_TEXT_KEYS: dict[str, tuple[str, ...]] = {
    "edit": ("new_string",),
    "multiedit": ("new_string",),
    "write": ("content",),
    "create": ("file_text", "content"),
    "notebookedit": ("new_source",),
    "str_replace_editor": ("new_str", "file_text"),
    "str_replace_based_edit_tool": ("new_str", "file_text", "insert_text"),
    "edit_file": ("new_string", "new_str", "content"),
    "write_file": ("content",),
}
PATH_KEYS = ("file_path", "path", "notebook_path", "filename", "file")
PATCH_FILE_RE = re.compile(r"^\*\*\* (?:Update|Add) File: (.+)$", re.M)
PATCH_END_RE = re.compile(r"^\*\*\* (?:Update|Add|Delete) File: |^\*\*\* End Patch", re.M)
# SWE-agent 0.x: "edit 10:20\n<new text>\nend_of_edit" (the open file is the one edited)
SWE_EDIT_RE = re.compile(r"^edit \d+:\d+\n(.*?)\nend_of_edit", re.S | re.M)  # searched up to the last end
# a shell heredoc that writes a file: cat > path <<'EOF' ... EOF (mini-swe-agent, Codex)
HEREDOC_RES = (
    re.compile(
        r"cat\s*>\s*(?P<path>\S+)\s*<<-?\s*['\"]?(?P<tag>\w+)['\"]?[^\n]*\n(?P<body>.*?)\n(?P=tag)[ \t]*$",
        re.S | re.M,
    ),
    re.compile(
        r"cat\s*<<-?\s*['\"]?(?P<tag>\w+)['\"]?\s*>\s*(?P<path>\S+)[^\n]*\n(?P<body>.*?)\n(?P=tag)[ \t]*$",
        re.S | re.M,
    ),
)


def input_strings(v: Any) -> Iterator[str]:
    """Every string in a tool call's input, depth first (dict values, list items)."""
    if isinstance(v, str):
        yield v
    elif isinstance(v, dict):
        for x in v.values():
            yield from input_strings(x)
    elif isinstance(v, list):
        for x in v:
            yield from input_strings(x)


class FileChange(msgspec.Struct, frozen=True):
    """The new text a tool call wrote to ``path`` (an edit's replacement, a write's content, a
    patch's added lines)."""

    path: str
    text: str


def _patch_changes(patch: str) -> list[FileChange]:
    out = []
    for m in PATCH_FILE_RE.finditer(patch):
        end = PATCH_END_RE.search(patch, m.end())
        body = patch[m.end() : end.start() if end else len(patch)]
        added = [ln[1:] for ln in body.splitlines() if ln.startswith("+")]
        if added:
            out.append(FileChange(path=m.group(1).strip(), text="\n".join(added)))
    return out


def file_changes(call: ToolCall, open_file: str = "") -> list[FileChange]:
    """The files ``call`` modified and the new text of each (Edit / MultiEdit / Write / create /
    NotebookEdit / str_replace_editor / apply_patch / SWE-agent 0.x ``edit`` / a shell heredoc);
    ``open_file`` is the file a SWE-agent 0.x ``edit`` applies to. [] for a call that writes
    nothing."""
    name = call.name.lower()
    inp = call.input
    if isinstance(inp, str):
        if name == "apply_patch" or "*** Begin Patch" in inp:
            return _patch_changes(inp)
        return []
    path = next((v for k in PATH_KEYS if isinstance(v := inp.get(k), str) and v), "")
    keys = WRITE_TEXT_KEYS.get(name)
    if keys is not None and path:
        if name == "multiedit" and isinstance(inp.get("edits"), list):
            texts = [e.get("new_string", "") for e in inp["edits"] if isinstance(e, dict)]
            text = "\n".join(t for t in texts if isinstance(t, str))
        else:
            text = next((v for k in keys if isinstance(v := inp.get(k), str)), "")
        return [FileChange(path=path, text=text)] if text.strip() else []
    out: list[FileChange] = []
    for v in input_strings(inp):
        if "*** Begin Patch" in v:
            out += _patch_changes(v)
        end = v.rfind(SWE_EDIT_END)  # a match ends at an end marker: none is searched past the last
        for m in SWE_EDIT_RE.finditer(v, 0, end + len(SWE_EDIT_END) if end >= 0 else 0):
            if open_file and m.group(1).strip():
                out.append(FileChange(path=open_file, text=m.group(1)))
        if "<<" in v:
            last = _last_tag_line(v)  # a match ends at a line holding only its tag: none past the last
            for rx in HEREDOC_RES:
                for m in rx.finditer(v, 0, last):
                    if m.group("body").strip():
                        out.append(FileChange(path=m.group("path").strip("'\""), text=m.group("body")))
    return out


SWE_EDIT_END = "\nend_of_edit"
_TAG_LINE_RE = re.compile(r"^\w+[ \t]*$", re.M)


def _last_tag_line(text: str) -> int:
    """Where the last line holding only a word (a here-document's end tag) ends; 0 when none.

    The here-document and SWE-agent edit patterns search lazily for their end: an opening with no
    end after it was searched to the text's end once per opening (quadratic: 48 s for a command of
    200,000 characters of unended heredoc openings). No match ends past the last possible end, so
    the search stops there: the same matches."""
    last = 0
    for m in _TAG_LINE_RE.finditer(text):
        last = m.end()
    return last


SWE_OPEN_RE = re.compile(r"^(?:open|create)\s+\"?([^\s\"]+)", re.M)


__all__ = ["PATH_KEYS", "SWE_OPEN_RE", "FileChange", "file_changes", "input_strings"]
