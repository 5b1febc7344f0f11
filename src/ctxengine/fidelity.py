"""Fidelity measured on content: content recall, compaction probes and the re-fetch cost.

A list of identifiers cannot fake these figures: they ask whether the *text* the agent went on to
use was still in what the policy sent, not whether its names were.

- **Shingles.** A text is split on whitespace; its shingles are the runs of ``SHINGLE_WORDS`` (8)
  consecutive words. Text is read block by block (a ``Text`` block, each string value of a tool
  call's input, each text part of a tool result; thinking never), and shingles never cross a block.
- **Content recall** at a call: of the shingles of the assistant output the call produced (its
  text blocks and tool-call input strings) that also occur in the session's content before the
  call and not in the fixed prefix (the system prompt every policy sends), the share present in
  the request the policy sent. Pooled over calls and sessions (hits / grounded).
- **Probes** at every call whose projection carried a compaction (Factory's evaluation of context
  compression, Dec 2025, made exact): *request* (the latest user request whole in the context:
  1.0, else the share of its shingles present), *artifact* (per file modified so far, the share of
  the shingles of its last change present; mean over files), *error* (the first 8 words of the
  latest error present) and *continuation* (content recall at that call).
- **Re-fetch cost.** Each grounded shingle missing at a call would have to be fetched again from
  its most recent earlier source (a tool result, or any block that held it); a source is charged
  its tokens once per compaction epoch (the calls between two compactions), at the model's
  uncached input price.

``../shared/acceptance/anchor_content_recall.py`` computes the same content recall for the recorded
compactions of a Claude Code file. Units: shares in [0, 1], tokens, USD.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any

import msgspec

from ctxengine.audit import user_request
from ctxengine.messages import Message, Text, ToolCall, ToolResult
from ctxengine.view_counts import ViewCounts

SHINGLE_WORDS = 8
PROBE_KINDS = ("request", "artifact", "error", "continuation")
ERROR_LINE_RE = re.compile(r"error|exception|traceback|failed", re.I)
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


# ------------------------------------------------------------------ reading text


def shingles(text: str) -> set[int]:
    """Hashes of the ``SHINGLE_WORDS``-word runs of ``text`` (whitespace-split). Process-local."""
    w = text.split()
    if len(w) < SHINGLE_WORDS:
        return set()
    return set(map(hash, zip(*(w[i:] for i in range(SHINGLE_WORDS)), strict=False)))


def _strings(v: Any) -> Iterator[str]:
    if isinstance(v, str):
        yield v
    elif isinstance(v, dict):
        for x in v.values():
            yield from _strings(x)
    elif isinstance(v, list):
        for x in v:
            yield from _strings(x)


def units(msg: Message, *, outputs_only: bool = False) -> Iterator[str]:
    """The text units of ``msg`` read for shingles: each ``Text`` block, each string value of a
    tool call's input, each text part of a tool result (left out with ``outputs_only``). Thinking,
    images and documents are not read."""
    for b in msg.blocks:
        if isinstance(b, Text):
            yield b.text
        elif isinstance(b, ToolCall):
            yield from _strings(b.input)
        elif isinstance(b, ToolResult) and not outputs_only:
            for p in b.content:
                if isinstance(p, Text):
                    yield p.text


def normalized(text: str) -> str:
    """``text`` with every run of whitespace one space (how presence of short texts is checked)."""
    return " ".join(text.split())


# ------------------------------------------------------------------ what a session changed


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
    for v in _strings(inp):
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


# ------------------------------------------------------------------ figures


class ProbeStat(msgspec.Struct, kw_only=True):
    """One probe kind over a set of compactions: ``total`` of the scores, ``n`` scored, ``mean``
    (None when none was scored)."""

    total: float = 0.0
    n: int = 0
    mean: float | None = None

    def add(self, score: float) -> None:
        self.total += score
        self.n += 1
        self.mean = round(self.total / self.n, 4)

    def merge(self, other: ProbeStat) -> None:
        self.total += other.total
        self.n += other.n
        self.mean = round(self.total / self.n, 4) if self.n else None


def probe_score(stats: dict[str, ProbeStat]) -> float | None:
    """The mean of the probe kinds' means (kinds never scored left out); None when none was."""
    means = [s.mean for s in stats.values() if s.mean is not None]
    return round(sum(means) / len(means), 4) if means else None


class CallFidelity(msgspec.Struct, kw_only=True):
    """Fidelity figures of one call: content-recall ``hits`` of ``grounded`` shingles, the
    ``refetch_tokens`` charged at it, and the ``probes`` when the call followed a compaction
    (kind -> score in [0, 1]; a kind with nothing to probe is absent) with
    ``request_whole`` (the latest user request whole in the context)."""

    hits: int
    grounded: int
    refetch_tokens: int
    probes: dict[str, float] | None = None
    request_whole: bool | None = None


class _Source(msgspec.Struct):
    text: str
    tokens: int = -1


class FidelityTracker:
    """Content recall, probes and re-fetch charges over one replay, fed in transcript order.

    ``observe(msg)`` after each message the agent saw (user text, tool results, attachments,
    assistant output); ``measure(call, messages, system, compaction=...)`` at each model call
    with what the policy sends. ``fixed_prefix`` is the text every policy sends (shingles in it
    are never grounded); ``count_text`` counts a source's tokens for the re-fetch charge.
    """

    def __init__(self, fixed_prefix: str, count_text: Callable[[str], int]) -> None:
        self._fixed = shingles(fixed_prefix)
        self._count_text = count_text
        self._seen: set[int] = set()
        self._last_src: dict[int, int] = {}  # shingle -> index in _sources of its latest holder
        self._sources: list[_Source] = []
        self._charged: set[int] = set()  # sources charged in this epoch
        self._view: ViewCounts[int] = ViewCounts(self._of)
        self._cache: dict[int, tuple[Message, frozenset[int]]] = {}
        self._changes: dict[str, str] = {}  # path -> new text of its last change
        self._open_file = ""
        self._error = ""  # the latest error's probe text
        self._request = ""
        self._system: tuple[str, set[int]] = ("", set())  # the last system text and its shingles

    # ---- the session, in order

    def _of(self, msg: Message) -> frozenset[int]:
        hit = self._cache.get(id(msg))
        if hit is not None and hit[0] is msg:
            return hit[1]
        out: set[int] = set()
        for u in units(msg):
            out |= shingles(u)
        fs = frozenset(out)
        self._cache[id(msg)] = (msg, fs)
        return fs

    def observe(self, msg: Message) -> None:
        """Fold ``msg`` (a message of the session's own content) into what later calls can use."""
        every: set[int] = set()
        for u in units(msg):
            sh = shingles(u)
            if sh:
                k = len(self._sources)
                self._sources.append(_Source(u))
                self._last_src.update(dict.fromkeys(sh, k))
                every |= sh
        self._seen |= every
        self._cache[id(msg)] = (msg, frozenset(every))  # the view counts it when it is sent
        for b in msg.blocks:
            if isinstance(b, ToolCall):
                for v in _strings(b.input):
                    for m in SWE_OPEN_RE.finditer(v):
                        self._open_file = m.group(1)
                for ch in file_changes(b, self._open_file):
                    self._changes.pop(ch.path, None)
                    self._changes[ch.path] = ch.text
            elif isinstance(b, ToolResult):
                self._fold_error(b)
        if t := user_request(msg):
            self._request = t

    def _fold_error(self, b: ToolResult) -> None:
        text = "\n".join(p.text for p in b.content if isinstance(p, Text))
        if b.is_error:
            line = text
        else:
            lines = [ln for ln in text.splitlines() if ERROR_LINE_RE.search(ln)]
            if not lines:
                return
            line = lines[-1]
        words = line.split()[:SHINGLE_WORDS]
        if words:
            self._error = " ".join(words)

    def new_epoch(self) -> None:
        """A compaction happened: sources may be charged again."""
        self._charged.clear()

    # ---- a call

    def measure(
        self, call: Message, messages: Sequence[Message], system: str, *, compaction: bool
    ) -> CallFidelity:
        """The figures of ``call`` (the recorded assistant output) given what the policy sent
        (``messages`` and ``system``); ``compaction`` when the projection carried one (then the
        probes are scored and a new re-fetch epoch starts)."""
        if compaction:
            self.new_epoch()
        self._view.move_to(messages)
        if system != self._system[0]:
            self._system = (system, shingles(system))
        sys_sh = self._system[1]
        out: set[int] = set()
        for u in units(call, outputs_only=True):
            out |= shingles(u)
        grounded = [s for s in out if s in self._seen and s not in self._fixed]
        hits = 0
        refetch = 0
        for s in grounded:
            if self._view.holds(s) or s in sys_sh:
                hits += 1
                continue
            at = self._last_src.get(s)
            if at is not None and at not in self._charged:
                self._charged.add(at)
                src = self._sources[at]
                if src.tokens < 0:
                    src.tokens = self._count_text(src.text)
                refetch += src.tokens
        result = CallFidelity(hits=hits, grounded=len(grounded), refetch_tokens=refetch)
        if compaction:
            result.probes, result.request_whole = self._probes(messages, system, sys_sh, hits, len(grounded))
        return result

    def _present(self, text: str, flat: str, sys_sh: set[int]) -> float:
        """The share of ``text``'s shingles in the context (whole presence for a short text)."""
        sh = shingles(text)
        if not sh:
            return 1.0 if normalized(text) in flat else 0.0
        return sum(1 for s in sh if self._view.holds(s) or s in sys_sh) / len(sh)

    def _probes(
        self, messages: Sequence[Message], system: str, sys_sh: set[int], hits: int, grounded: int
    ) -> tuple[dict[str, float], bool | None]:
        flat = normalized("\n".join([system, *(u for m in messages for u in units(m))]))
        probes: dict[str, float] = {}
        whole: bool | None = None
        if self._request:
            whole = normalized(self._request) in flat
            probes["request"] = 1.0 if whole else round(self._present(self._request, flat, sys_sh), 4)
        if self._changes:
            scores = [self._present(t, flat, sys_sh) for t in self._changes.values()]
            probes["artifact"] = round(sum(scores) / len(scores), 4)
        if self._error:
            probes["error"] = 1.0 if normalized(self._error) in flat else 0.0
        if grounded:
            probes["continuation"] = round(hits / grounded, 4)
        return probes, whole


def pooled(stats: Iterable[dict[str, ProbeStat]]) -> dict[str, ProbeStat]:
    """Probe statistics summed over sessions (pooled over their compactions)."""
    out = {k: ProbeStat() for k in PROBE_KINDS}
    for st in stats:
        for k, v in st.items():
            out.setdefault(k, ProbeStat()).merge(v)
    return out
