"""Transcript readers, auto-detected by content, and request-body writers.

``load(path)`` sniffs a file and hands it to the reader of its format; every reader returns a
list of ``Session`` (one file may hold many: the tau-bench file holds 200). A file that cannot be
read at all raises ``TranscriptError`` with one line naming the path; a malformed *record* is
kept in ``Session.malformed`` (file and line) and the rest still loads.

May import: ``messages``, ``subagents`` (the sidechain links).
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterator
from pathlib import Path

import msgspec

from ctxengine.messages.model import Session, SessionFormat, TranscriptError, Usage

SNIFF_BYTES = 64 * 1024  # bytes read to decide the format
SNIFF_MAX_BYTES = 1024 * 1024  # read on (up to this) while the only line seen is unreadable
DETECT_MAX_LINES = 64  # non-blank lines looked at to recognise JSONL past bad lines
DETECT_MAX_BYTES = 16 * 1024 * 1024  # ... a line read up to this (a record may be megabytes long)
DETECT_SCAN_BYTES = 4 * DETECT_MAX_BYTES  # ... and the file up to this
# The only bytes that make a JSONL line blank: JSON's whitespace. A line of form feeds or
# vertical tabs (which bytes.strip() removes) is not blank but one bad record.
JSON_WHITESPACE = b" \t\r\n"
UTF8_BOM = b"\xef\xbb\xbf"  # a byte-order mark: not JSON, written by some editors; left out
TOO_DEEP = "nested too deeply to read"  # a JSON value past the parser's recursion limit
# Tokens: no call of any model reads or writes this many (windows are at most a few million); a
# recorded usage count above it is a corrupt record, not a figure (a SQLite integer ends at 2**63).
MAX_USAGE_TOKENS = 10**9
MAX_EPOCH_SECONDS = 1e11  # year 5138: an epoch number above it is in ms (or µs, ns), not seconds


def epoch_seconds(value: float) -> float | None:
    """An epoch timestamp as seconds: one written in milliseconds or microseconds (JavaScript's
    ``Date.now()``, some loggers) is scaled down; None for a value no clock gives (negative,
    non-finite, or later than year 9999 in every unit)."""
    if not math.isfinite(value) or value < 0:
        return None
    for scale in (1.0, 1e3, 1e6, 1e9):
        if value / scale < MAX_EPOCH_SECONDS:
            return value / scale
    return None


def usage_problem(usage: Usage | None) -> str | None:
    """Why a recorded ``usage`` is not one (a count above ``MAX_USAGE_TOKENS``), None when it
    is or when there is none. The readers then report the record as malformed by file and line
    and keep the message without its usage."""
    if usage is None:
        return None
    for field, value in msgspec.structs.asdict(usage).items():
        if value > MAX_USAGE_TOKENS:
            return f"usage {field} {value:,} is not a token count (over {MAX_USAGE_TOKENS:,}); usage left out"
    return None

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
    a line of them is a bad record, not a blank line. A UTF-8 byte-order mark (which editors on
    Windows write at the start of a file) goes too."""
    return line.strip(JSON_WHITESPACE).removeprefix(UTF8_BOM).lstrip(JSON_WHITESPACE)


def bad_line_reason(line: bytes) -> str | None:
    """Why one line of a transcript is not text: NUL bytes, not UTF-8, or a control byte that
    JSON never holds raw. None for a readable line.

    A run of NUL bytes is the signature of an interrupted append (the file's size was updated
    before its data was written); such a line is one bad record, not a binary file.

    A line that ``msgspec.json`` decodes is readable (JSON text is UTF-8 without a raw control
    byte, and msgspec checks both), so the JSONL readers judge only the lines that fail to
    decode: the same reasons, without a second and third pass over every good line."""
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


def bad_tail(data: bytes) -> tuple[bytes, list[tuple[int, str]]]:
    """A one-document file (``data``) without the unreadable lines at its end (an interrupted
    append after a complete document: NUL bytes, not UTF-8), and those lines as (1-based line
    number, ``bad_line_reason``); blank lines among them go too. The lines are found from the
    end (``rfind``): the document before them is not split."""
    bad: list[tuple[int, str]] = []
    lineno = data.count(b"\n") + 1  # of the last line
    end = len(data)  # the lines kept are data[:end]
    while end >= 0:
        start = data.rfind(b"\n", 0, end) + 1
        line = data[start:end]
        if json_line(line):
            reason = bad_line_reason(line)
            if reason is None:
                break
            bad.append((lineno, reason))
        end, lineno = start - 1, lineno - 1
    if not bad:
        return data, []
    return data[: max(end, 0)], bad[::-1]


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

    JSONL (Claude Code, Codex) is recognised by its first record of a known type, even after bad
    lines (a truncated first record, garbage, NUL bytes): the reader reports each bad line as
    one malformed record. A file whose first line is not valid JSON is one JSON document only
    when the whole file parses as one.

    Raises ``TranscriptError`` for a missing path, a directory, an empty or binary file, or a
    file in no known format.
    """
    if not path.exists():
        raise TranscriptError(f"{path}: no such file")
    if path.is_dir():
        raise TranscriptError(f"{path}: is a directory, not a transcript")
    stripped = sniff(path).lstrip().removeprefix("\ufeff").lstrip()  # a byte-order mark: not JSON
    fmt = _detect_by_lines(path)
    if fmt is not None:
        return fmt
    if stripped.startswith("["):
        return "openai-chat"
    if stripped.startswith("{"):
        return _detect_document(path, None)
    raise TranscriptError(f"{path}: unknown transcript format")


_UNREADABLE = object()  # a line (or file) that is not text or not valid JSON


def _head_lines(path: Path) -> Iterator[bytes]:
    """The first non-blank lines of the file at ``path`` (split on LF only, as the readers do;
    ``json_line``-stripped; ``//`` comment lines left out): at most ``DETECT_MAX_LINES`` of
    them, within the first ``DETECT_SCAN_BYTES``. A line longer than ``DETECT_MAX_BYTES`` (a
    record may be megabytes long) is yielded as its first ``SNIFF_BYTES`` only, which no JSON
    parser reads as a value of its own: the lines after it decide, as after a truncated line."""
    seen = scanned = 0
    with path.open("rb") as fh:
        while seen < DETECT_MAX_LINES and scanned < DETECT_SCAN_BYTES:
            raw = fh.readline(DETECT_MAX_BYTES)
            if not raw:
                return
            scanned += len(raw)
            if len(raw) == DETECT_MAX_BYTES and not raw.endswith(b"\n"):
                while scanned < DETECT_SCAN_BYTES:  # the rest of the long line, not kept
                    rest = fh.readline(DETECT_MAX_BYTES)
                    scanned += len(rest)
                    if not rest or rest.endswith(b"\n"):
                        break
                raw = raw[:SNIFF_BYTES]
            line = json_line(raw)
            if line and not line.startswith(b"//"):
                seen += 1
                yield line


def _parse_line(line: bytes) -> object:
    """The JSON value of one line, or ``_UNREADABLE`` (not text: ``bad_line_reason``; not JSON)."""
    if bad_line_reason(line) is not None:
        return _UNREADABLE
    try:
        return json.loads(line.decode("utf-8"))
    except (ValueError, RecursionError):
        return _UNREADABLE


def _record_format(value: object) -> SessionFormat | None:
    """The JSONL format of which ``value`` (one parsed line) is a record, or None."""
    if not isinstance(value, dict):
        return None
    kind = value.get("type")
    if kind in CODEX_TYPES and "payload" in value:
        return "codex"
    if kind in CLAUDE_CODE_TYPES:
        return "claude-code"
    return None


def _whole_document(path: Path) -> object:
    """The file at ``path`` parsed as one JSON document (unreadable lines after it aside:
    ``bad_tail``), or ``_UNREADABLE``."""
    try:
        return json.loads(bad_tail(path.read_bytes())[0].decode("utf-8-sig"))
    except (ValueError, RecursionError):  # UnicodeDecodeError and JSONDecodeError alike
        return _UNREADABLE


def _detect_by_lines(path: Path) -> SessionFormat | None:
    """The format told by the file's first non-blank lines (``_head_lines``), or None (left to
    ``detect``'s fallbacks).

    * A first line that is a Claude Code or Codex record, or a one-line document of a known
      shape (``_document_format``), decides.
    * Else the first line that is such a record gives that JSONL format: the lines before it
      (a truncated record, garbage, NUL bytes, JSON that is no record) are the reader's bad
      records. Unless the file is one JSON document: when the first line is not valid JSON,
      opens with ``{`` or ``[`` and the whole file parses, the document decides.
    * No record: a first line that is a JSON object of no known shape is refused.

    Raises ``TranscriptError`` ("unknown transcript format") as ``_detect_document`` does."""
    first: object = _UNREADABLE
    opens_document = False
    for n, line in enumerate(_head_lines(path)):
        value = _parse_line(line)
        fmt = _record_format(value)
        if n == 0:
            first, opens_document = value, value is _UNREADABLE and line[:1] in (b"{", b"[")
            fmt = fmt or (_document_format(value) if isinstance(value, dict) else None)
            if fmt is not None:
                return fmt
        elif fmt is not None:
            return _document_or(path, fmt) if opens_document else fmt
    if isinstance(first, dict):
        return _detect_document(path, first)
    return None


def _document_or(path: Path, fmt: SessionFormat) -> SessionFormat:
    """The format of the file at ``path`` if it parses as one JSON document (a list: OpenAI
    chat; an object: ``_detect_document``), else ``fmt``."""
    doc = _whole_document(path)
    if isinstance(doc, list):
        return "openai-chat"
    return fmt if doc is _UNREADABLE else _detect_document(path, doc)


def _document_format(doc: dict[str, object]) -> SessionFormat | None:
    """The format of a JSON-object document: a SWE-agent trajectory, an OpenAI chat
    ``{"messages": [...]}``; None for any other object."""
    if "trajectory" in doc and ("history" in doc or "info" in doc):
        return "swe-agent"
    if isinstance(doc.get("messages"), list):
        return "openai-chat"
    return None


def _detect_document(path: Path, doc: object | None) -> SessionFormat:
    """The format of the JSON document ``doc`` (None: the whole file at ``path``, parsed here).

    Raises ``TranscriptError`` naming the line when the file is not valid JSON, or "unknown
    transcript format" for a document of no known shape."""
    if doc is None:
        data = bad_tail(path.read_bytes())[0]
        try:
            doc = json.loads(data.decode("utf-8-sig"))
        except UnicodeDecodeError as exc:  # one document: a bad line spoils it; named by number
            line = data.count(b"\n", 0, exc.start) + 1
            raise TranscriptError(f"{path}:{line}: not valid JSON (not UTF-8)") from None
        except json.JSONDecodeError as exc:
            raise TranscriptError(f"{path}:{exc.lineno}: not valid JSON ({exc.msg})") from None
        except RecursionError:
            raise TranscriptError(f"{path}: not valid JSON ({TOO_DEEP})") from None
    fmt = _document_format(doc) if isinstance(doc, dict) else None
    if fmt is None:
        raise TranscriptError(f"{path}: unknown transcript format")
    return fmt


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
