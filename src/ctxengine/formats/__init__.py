"""Transcript readers, auto-detected by content, and request-body writers.

``load(path)`` sniffs a file and hands it to the reader of its format; every reader returns a
list of ``Session`` (one file may hold many: the tau-bench file holds 200). A file that cannot be
read at all raises ``TranscriptError`` with one line naming the path; a malformed *record* is
kept in ``Session.malformed`` (file and line) and the rest still loads.
"""

from __future__ import annotations

import json
from pathlib import Path

from ctxengine.messages import Session, SessionFormat, TranscriptError

SNIFF_BYTES = 64 * 1024  # bytes read to decide the format

CLAUDE_CODE_TYPES = {
    "user",
    "assistant",
    "system",
    "attachment",
    "summary",
    "queue-operation",
    "file-history-snapshot",
    "progress",
    "last-prompt",
    "ai-title",
    "custom-title",
}
CODEX_TYPES = {"session_meta", "response_item", "event_msg", "turn_context", "compacted"}


def detect(path: Path) -> SessionFormat:
    """Return the format of the transcript at ``path``.

    Raises ``TranscriptError`` for a missing path, a directory, an empty or binary file, or a
    file in no known format.
    """
    if not path.exists():
        raise TranscriptError(f"{path}: no such file")
    if path.is_dir():
        raise TranscriptError(f"{path}: is a directory, not a transcript")
    with path.open("rb") as fh:
        head = fh.read(SNIFF_BYTES)
    if not head.strip():
        raise TranscriptError(f"{path}: empty file")
    if b"\x00" in head:
        raise TranscriptError(f"{path}: binary file, not a transcript")
    try:
        text = head.decode("utf-8")
    except UnicodeDecodeError as exc:
        if exc.start < len(head) - 4:  # not just a multi-byte char cut at the sniff boundary
            raise TranscriptError(f"{path}: not UTF-8 text, not a transcript") from None
        text = head[: exc.start].decode("utf-8")
    stripped = text.lstrip()
    if stripped.startswith("["):
        return "openai-chat"
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("//"):
            continue
        try:
            first = json.loads(line)
        except ValueError:
            break  # not JSONL: maybe one (pretty-printed) JSON document
        if isinstance(first, dict):
            kind = first.get("type")
            if kind in CODEX_TYPES and "payload" in first:
                return "codex"
            if kind in CLAUDE_CODE_TYPES:
                return "claude-code"
            return _detect_document(path, first)
        break
    if stripped.startswith("{"):
        return _detect_document(path, None)
    raise TranscriptError(f"{path}: unknown transcript format")


def _detect_document(path: Path, doc: object | None) -> SessionFormat:
    if doc is None:
        try:
            doc = json.loads(path.read_text(encoding="utf-8"))
        except (ValueError, UnicodeDecodeError) as exc:
            raise TranscriptError(f"{path}: not valid JSON ({exc})") from None
    if isinstance(doc, dict):
        if "trajectory" in doc and ("history" in doc or "info" in doc):
            return "swe-agent"
        if isinstance(doc.get("messages"), list):
            return "openai-chat"
    raise TranscriptError(f"{path}: unknown transcript format")


def load(path: Path | str) -> list[Session]:
    """Read every session in the transcript at ``path`` (format auto-detected).

    Raises ``TranscriptError`` when the file cannot be read at all.
    """
    p = Path(path)
    fmt = detect(p)
    if fmt == "claude-code":
        from ctxengine.formats import claude_code

        return claude_code.read(p)
    if fmt == "codex":
        from ctxengine.formats import codex

        return codex.read(p)
    if fmt == "swe-agent":
        from ctxengine.formats import swe_agent

        return swe_agent.read(p)
    from ctxengine.formats import openai_chat

    return openai_chat.read(p)


def link_sidechains(sessions: list[Session]) -> None:
    """Set ``parent`` on sidechain (subagent) sessions whose parent session is among ``sessions``
    (matched by ``session_id``)."""
    parents = {s.session_id: s.source for s in sessions if not s.sidechain and s.session_id}
    for s in sessions:
        if s.sidechain and s.session_id in parents:
            s.parent = parents[s.session_id]
