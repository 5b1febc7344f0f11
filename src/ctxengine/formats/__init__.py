"""Transcript readers, auto-detected by content, and request-body writers.

``load(path)`` sniffs a file and hands it to the reader of its format; every reader returns a
list of ``Session`` (one file may hold many: the tau-bench file holds 200). A file that cannot be
read at all raises ``TranscriptError`` with one line naming the path; a malformed *record* is
kept in ``Session.malformed`` (file and line) and the rest still loads.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from ctxengine.messages import Session, SessionFormat, TranscriptError

SNIFF_BYTES = 64 * 1024  # bytes read to decide the format
SNIFF_MAX_BYTES = 1024 * 1024  # read on (up to this) while the only line seen is unreadable
# The only bytes that make a JSONL line blank: JSON's whitespace. A line of form feeds or
# vertical tabs (which bytes.strip() removes) is not blank but one bad record.
JSON_WHITESPACE = b" \t\r\n"

# Named only to say what a binary file is; the verdict itself is made line by line.
BINARY_SIGNATURES: tuple[tuple[bytes, str], ...] = (
    (b"\x89PNG\r\n\x1a\n", "a PNG image"),
    (b"\xff\xd8\xff", "a JPEG image"),
    (b"GIF8", "a GIF image"),
    (b"%PDF-", "a PDF document"),
    (b"PK\x03\x04", "a zip archive"),
    (b"\x1f\x8b", "a gzip archive"),
    (b"BZh", "a bzip2 archive"),
    (b"\xfd7zXZ\x00", "an xz archive"),
    (b"(\xb5/\xfd", "a zstd archive"),
    (b"7z\xbc\xaf'\x1c", "a 7-zip archive"),
    (b"\x7fELF", "an ELF executable"),
    (b"SQLite format 3\x00", "an SQLite database"),
    (b"RIFF", "a RIFF file (WebP, WAV, AVI)"),
    (b"\xff\xfe", "UTF-16 text"),
    (b"\xfe\xff", "UTF-16 text"),
)
# C0 control bytes that never occur raw in JSON text (tab, LF, CR and form feed are left alone,
# and ESC for terminal output pasted into a comment line)
_CONTROL = re.compile(rb"[\x00-\x08\x0e-\x1a\x1c-\x1f]")


def json_line(line: bytes) -> bytes:
    """``line`` (one line of a JSONL file) without the JSON whitespace around it (space, tab, CR,
    LF); empty for a blank line. Form feeds and vertical tabs stay: JSON does not allow them, so
    a line of them is a bad record, not a blank line."""
    return line.strip(JSON_WHITESPACE)


def bad_line_reason(line: bytes) -> str | None:
    """Why one line of a transcript is not text: NUL bytes, not UTF-8, or a control byte that
    JSON never holds raw. None for a readable line.

    A run of NUL bytes is the signature of an interrupted append (the file's size was updated
    before its data was written); such a line is one bad record, not a binary file."""
    nul = line.count(b"\x00")
    if nul:
        if nul == len(line.strip(b"\r")):
            return f"a line of {nul:,} NUL bytes (an interrupted write?)"
        return f"{nul:,} NUL byte(s) in the line"
    try:
        line.decode("utf-8")
    except UnicodeDecodeError as exc:
        return f"not UTF-8 (byte 0x{line[exc.start]:02x} at column {exc.start + 1})"
    m = _CONTROL.search(line)
    if m is not None:
        return f"control byte 0x{line[m.start()]:02x} at column {m.start() + 1}"
    return None


def _cut_char(line: bytes) -> bytes:
    """``line`` without a multi-byte UTF-8 character cut at its end (by a read of fixed size)."""
    try:
        line.decode("utf-8")
    except UnicodeDecodeError as exc:
        if exc.start >= len(line) - 3 and b"\x00" not in line:
            return line[: exc.start]
    return line


def _judge(head: bytes, *, complete: bool) -> tuple[list[str], int, bool]:
    """(readable lines, number of unreadable lines, whether NUL bytes were seen) of ``head``.
    ``complete``: ``head`` is the whole file (else its last line may be cut: it is not judged,
    unless it is the only one, whose cut multi-byte character at the end is then dropped)."""
    lines = head.split(b"\n")
    if not complete:
        if len(lines) > 1:
            lines.pop()
        else:
            lines[0] = _cut_char(lines[0])
    good: list[str] = []
    bad = 0
    nul = False
    for line in lines:
        if not json_line(line):
            continue
        if bad_line_reason(line) is None:
            good.append(line.decode("utf-8"))
        else:
            bad += 1
            nul = nul or b"\x00" in line
    return good, bad, nul


def readable_text(path: Path, head: bytes, *, complete: bool) -> str:
    """The readable lines of ``head`` (the start of the file at ``path``), joined by newlines.

    Raises ``TranscriptError`` when the file is binary: more unreadable lines (``bad_line_reason``)
    than readable ones. A bad line among readable ones is left to the reader, which reports it by
    line number as one malformed record and loads the rest. ``complete`` as in ``_judge``."""
    good, bad, nul = _judge(head, complete=complete)
    if bad > len(good):
        kind = next((name for sig, name in BINARY_SIGNATURES if head.startswith(sig)), None)
        checked = f"{bad:,} of {bad + len(good):,} lines checked unreadable"
        if kind is not None:
            raise TranscriptError(f"{path}: binary file ({kind}), not a transcript")
        if nul:
            raise TranscriptError(f"{path}: binary file ({checked}: NUL bytes), not a transcript")
        raise TranscriptError(f"{path}: not UTF-8 text ({checked}), not a transcript")
    return "\n".join(good)


def sniff(path: Path) -> str:
    """The readable text at the start of the file at ``path``, for format detection: its first
    ``SNIFF_BYTES``, read on (up to ``SNIFF_MAX_BYTES``) while the one line seen is unreadable
    and no readable line is complete yet (a long run of NUL bytes at the start of a transcript
    is one bad line, not yet a verdict).

    Raises ``TranscriptError`` for an empty or binary file (see ``readable_text``)."""
    with path.open("rb") as fh:
        head = fh.read(SNIFF_BYTES)
        if not head.strip():
            raise TranscriptError(f"{path}: empty file")
        complete = len(head) < SNIFF_BYTES
        while not complete and len(head) < SNIFF_MAX_BYTES:
            good, bad, _ = _judge(head, complete=False)
            if good or bad != 1:
                break
            more = fh.read(SNIFF_BYTES)
            head += more
            complete = len(more) < SNIFF_BYTES
    return readable_text(path, head, complete=complete)


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
    text = sniff(path)
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
        data = path.read_bytes()
        try:
            doc = json.loads(data.decode("utf-8"))
        except UnicodeDecodeError as exc:  # one document: a bad line spoils it; named by number
            line = data.count(b"\n", 0, exc.start) + 1
            raise TranscriptError(f"{path}:{line}: not valid JSON (not UTF-8)") from None
        except json.JSONDecodeError as exc:
            raise TranscriptError(f"{path}:{exc.lineno}: not valid JSON ({exc.msg})") from None
    if isinstance(doc, dict):
        if "trajectory" in doc and ("history" in doc or "info" in doc):
            return "swe-agent"
        if isinstance(doc.get("messages"), list):
            return "openai-chat"
    raise TranscriptError(f"{path}: unknown transcript format")


def load(path: Path | str) -> list[Session]:
    """Read every session in a transcript, its format auto-detected.

    Formats: Claude Code, Codex, mini-swe-agent / SWE-agent, OpenAI chat.

    Args:
        path: the transcript file.

    Returns:
        The sessions in the file (several for a file that holds several).

    Raises:
        TranscriptError: when the file cannot be read at all (a missing path, a directory, an
            empty or binary file, a file in no known format).
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
    (matched by ``session_id``), then tie each to the parent's call that spawned it
    (``subagents.linking.link_runs``)."""
    from ctxengine.subagents.linking import link_runs

    parents = {s.session_id: s.source for s in sessions if not s.sidechain and s.session_id}
    for s in sessions:
        if s.sidechain and s.session_id in parents and s.parent is None:
            s.parent = parents[s.session_id]
    link_runs(sessions)
