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
- **Read recall** (the headline): the same, counting as grounded only the shingles that occurred
  earlier in something the agent *read*: a user message, a tool result, an attachment
  (``_read_kind``). A shingle found only in the *current* text of a file the agent wrote
  (``fidelity_files.FileStates``) is grounded kind ``file_state``: not read recall (the agent's own
  Write and Edit inputs hold it, and a baseline of the agent's own words scored 0.86 with it), but
  charged as a re-fetch when missing (the model would read the file again); its hits are in
  ``read_hits_by_kind["file_state"]``.
- **Probes** at every call whose projection carried a compaction (Factory's evaluation of context
  compression, Dec 2025, made exact): *request* (the latest user request whole in the context:
  1.0, else the share of its shingles present), *artifact* (per file modified so far, the share of
  the shingles of its last change present; mean over files), *error* (the first 8 words of the
  latest failure present: by structure, ``error_text``), *continuation* (read recall at that
  call), *rules* (the share of the user's standing rules and corrections so far, found by
  ``ctxengine.summary.rules``, present verbatim) and *files* (the share of touched files whose path and
  last action a line of the context states: ``fidelity_files.FileTrail``).
- **Re-fetch cost.** Each read-grounded shingle missing at a call would have to be fetched again
  from its most recent earlier source (what the agent read that held it, or the current text of a
  file it wrote; the agent's own words are not re-fetched); a source is charged its tokens once
  per compaction epoch (the calls between two compactions), at the model's uncached input price.

``../shared/acceptance/anchor_content_recall.py`` computes the same content recall for the recorded
compactions of a Claude Code file. Units: shares in [0, 1], tokens, USD.
"""

from __future__ import annotations

import functools
import re
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Sequence

import msgspec

from ctxengine.eval.file_state import FileStates, FileTrail
from ctxengine.messages.file_writes import SWE_OPEN_RE, file_changes, input_strings
from ctxengine.messages.model import Block, Message, Text, ToolCall, ToolResult
from ctxengine.messages.view_counts import BlockKeys, ViewCounts
from ctxengine.summary.audit import user_request
from ctxengine.summary.rules import RuleBook

SHINGLE_WORDS = 8
PROBE_KINDS = ("request", "artifact", "error", "continuation", "rules", "files")
# ------------------------------------------------------------------ reading text


# A line-number gutter (``cat -n``, ``nl -ba``: "     1<TAB>"; Claude Code's Read: "     1→") is
# not the file's words: left in, it splits every run that spans two lines of a file read with it.
GUTTER_RE = re.compile(r"^[ \t]*\d+(?:\t|\u2192)", re.M)


def shingles(text: str, *, gutters_are_words: bool = False) -> frozenset[int]:
    """Hashes of the ``SHINGLE_WORDS``-word runs of ``text`` (whitespace-split; a line-number
    gutter at the start of a line is not a word: ``GUTTER_RE``, unless ``gutters_are_words``, as
    the shared anchor script counts them). Process-local. The latest texts' shingles are
    remembered (``_SHINGLED``): the replay reads each text for two counts, and a text without a
    tab or an arrow is the same text under both."""
    if not gutters_are_words and ("\t" in text or "\u2192" in text):
        text = GUTTER_RE.sub("", text)
    return _shingled(text)


_SHINGLED = 512  # texts whose shingles are remembered (the least recently used forgotten first)


@functools.lru_cache(maxsize=_SHINGLED)
def _shingled(text: str) -> frozenset[int]:
    w = text.split()
    if len(w) < SHINGLE_WORDS:
        return frozenset()
    return frozenset(map(hash, zip(*(w[i:] for i in range(SHINGLE_WORDS)), strict=False)))


def units(msg: Message, *, outputs_only: bool = False) -> Iterator[str]:
    """The text units of ``msg`` read for shingles: each ``Text`` block, each string value of a
    tool call's input, each text part of a tool result (left out with ``outputs_only``). Thinking,
    images and documents are not read."""
    for b in msg.blocks:
        if not (outputs_only and isinstance(b, ToolResult)):
            yield from _block_units(b)


class MessageShingles(BlockKeys[int]):
    """The shingles (``sh`` of each of its units: ``_block_units``) of a block, kept per block
    object (a projection sends the same objects call after call, and an engine that rebuilds a
    message keeps the blocks it already had); a message's (``msg``) are its blocks' together."""

    def __init__(self, sh: Callable[[str], frozenset[int]]) -> None:
        def keys(b: Block) -> frozenset[int]:
            out: set[int] = set()
            for u in _block_units(b):
                out |= sh(u)
            return frozenset(out)

        super().__init__(keys)


def normalized(text: str) -> str:
    """``text`` with every run of whitespace one space (how presence of short texts is checked)."""
    return " ".join(text.split())


# ------------------------------------------------------------------ what a session changed


def _block_units(b: Block) -> Iterator[str]:
    if isinstance(b, Text):
        yield b.text
    elif isinstance(b, ToolCall):
        yield from input_strings(b.input)
    elif isinstance(b, ToolResult):
        for p in b.content:
            if isinstance(p, Text):
                yield p.text


def _lines(system: str, messages: Sequence[Message]) -> list[str]:
    """The context as lines for the files probe: text lines, and each tool call as one line of
    its name and input strings."""
    out = system.splitlines()
    for m in messages:
        for b in m.blocks:
            if isinstance(b, ToolCall):
                out.append(" ".join([b.name, *input_strings(b.input)]).replace("\n", " "))
            else:
                out += [ln for u in _block_units(b) for ln in u.splitlines()]
    return out


def _read_kind(msg: Message, b: Block) -> str:
    """The read-source kind of block ``b`` of ``msg``: ``tool_result``, ``attachment`` (a file or
    notice the harness injected), ``user`` (the user's text); "" for the agent's own output."""
    if isinstance(b, ToolResult):
        return "tool_result"
    if msg.role != "user" or not isinstance(b, Text):
        return ""
    return "attachment" if msg.origin == "attachment" else "user"


# ------------------------------------------------------------------ what counts as an error

_EXIT_RE = re.compile(
    r"^(?:Exit code:? |Process exited with code |<returncode>)(-?\d+)|\"exit_code\": ?(-?\d+)", re.M
)
_HEADER_RE = re.compile(
    r"^(?:Exit code:? -?\d+|Chunk ID: .*|Wall time: .*|Process exited with code -?\d+|Original token "
    r"count: .*|Output:|</?returncode>.*|</?output>)\s*$"
)
TRACEBACK = "Traceback (most recent call last):"


def error_text(result: ToolResult) -> str | None:
    """The probe text of ``result`` when it reports a failure by its structure, else None.

    A failure: the harness flagged it (``is_error``), the command's exit status is not zero (Claude
    Code's ``Exit code N``, Codex's ``Process exited with code N``, mini-swe-agent's
    ``<returncode>N``, an ``"exit_code": N`` field), or it holds a Python traceback. The probe text
    is the first ``SHINGLE_WORDS`` words of the failure's message: a traceback's last line (the
    exception), else the output with the harness's status lines left out."""
    text = "\n".join(p.text for p in result.content if isinstance(p, Text))
    m = _EXIT_RE.search(text[:2_000])
    code = int(m.group(1) or m.group(2)) if m else 0
    if not (result.is_error or code != 0 or TRACEBACK in text):
        return None
    lines = [ln for ln in text.splitlines() if ln.strip()]
    if TRACEBACK in text:  # the exception: the first unindented line after the frames
        after = text[text.rindex(TRACEBACK) :].splitlines()[1:]
        lines = [next((ln for ln in after if ln.strip() and not ln.startswith((" ", "\t"))), lines[0])]
    body = [ln for ln in lines if not _HEADER_RE.match(ln.strip())] or lines
    words = " ".join(body).split()[:SHINGLE_WORDS]
    return " ".join(words) if words else None


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
    """Fidelity figures of one call: read-recall ``read_hits`` of ``read_grounded`` shingles
    (grounded in what the agent read or a file's current text), content-recall ``hits`` of
    ``grounded`` shingles (grounded anywhere earlier, the agent's own output included), the
    ``refetch_tokens`` charged at it for read recall's misses, and the ``probes`` when the call
    followed a compaction (kind -> score in [0, 1]; a kind with nothing to probe is absent) with
    ``request_whole`` (the latest user request whole in the context)."""

    hits: int
    grounded: int
    read_hits: int
    read_grounded: int
    refetch_tokens: int
    probes: dict[str, float] | None = None
    request_whole: bool | None = None


class _Source(msgspec.Struct):
    text: str
    tokens: int = -1
    kind: str = ""  # a read source's kind (``user``, ``attachment``, ``tool_result``); "" else


class FidelityTracker:
    """Content recall, probes and re-fetch charges over one replay, fed in transcript order.

    ``observe(msg)`` after each message the agent saw (user text, tool results, attachments,
    assistant output); ``measure(call, messages, system, compaction=...)`` at each model call
    with what the policy sends. ``fixed_prefix`` is the text every policy sends (shingles in it
    are never grounded); ``count_text`` counts a source's tokens for the re-fetch charge;
    ``gutters_are_words``: line-number gutters count as words (``shingles``), as the shared
    anchor script counts content recall.
    """

    def __init__(
        self, fixed_prefix: str, count_text: Callable[[str], int], *, gutters_are_words: bool = False
    ) -> None:
        self._gutters_are_words = gutters_are_words
        self._fixed = self._sh(fixed_prefix)
        self._count_text = count_text
        self._seen: set[int] = set()  # every source (content recall)
        self._last_read: dict[int, int] = {}  # shingle -> index of its latest read source
        self._files = FileStates()
        self._trail = FileTrail()  # the files probe: each touched file's last action
        self._rules = RuleBook()  # the rules probe: the user's standing rules (``ctxengine.summary.rules``)
        self._file_sh: dict[str, frozenset[int]] = {}  # path -> shingles of its current text
        self._file_count: Counter[int] = Counter()  # shingle -> current files holding it
        self._file_src: dict[int, int] = {}  # shingle -> index of the latest file text holding it
        self._sources: list[_Source] = []
        self._charged: set[int] = set()  # sources charged in this epoch
        self._of = MessageShingles(self._sh)
        self._view: ViewCounts[int] = ViewCounts(self._of.block)
        self._changes: dict[str, str] = {}  # path -> new text of its last change
        self._open_file = ""
        self._error = ""  # the latest error's probe text
        self._request = ""
        self._system: tuple[str, frozenset[int]] = ("", frozenset())  # the last system text and its shingles
        self.grounded_by_kind: Counter[str] = Counter()  # grounded shingles by latest source kind
        self.read_hits_by_kind: Counter[str] = Counter()  # hits by kind (file_state: not read recall)

    def _sh(self, text: str) -> frozenset[int]:
        return shingles(text, gutters_are_words=self._gutters_are_words)

    # ---- the session, in order

    def _source(self, text: str, sh: set[int] | frozenset[int], into: dict[int, int], kind: str = "") -> None:
        """``text`` recorded as the latest source of its shingles ``sh`` in ``into``."""
        k = len(self._sources)
        self._sources.append(_Source(text, kind=kind))
        into.update(dict.fromkeys(sh, k))

    def observe(self, msg: Message) -> None:
        """Fold ``msg`` (a message of the session's own content) into what later calls can use:
        every unit's shingles are content-recall's (``_seen``); a user message's text and a tool
        result's text are read sources (kind ``user``, ``attachment`` or ``tool_result``), the
        latest of each of their shingles kept for the re-fetch charge; a tool call that writes a
        file updates that file's current text (kind ``file_state``)."""
        for b in msg.blocks:
            kind = _read_kind(msg, b)
            every: set[int] = set()
            for u in _block_units(b):
                sh = self._sh(u)
                if not sh:
                    continue
                if kind:
                    self._source(u, sh, self._last_read, kind)
                every |= sh
            self._seen |= every
            self._of.put(b, frozenset(every))  # the view counts it when it is sent
        for b in msg.blocks:
            if isinstance(b, ToolCall):
                for v in input_strings(b.input):
                    for m in SWE_OPEN_RE.finditer(v):
                        self._open_file = m.group(1)
                for ch in file_changes(b, self._open_file):
                    self._changes.pop(ch.path, None)
                    self._changes[ch.path] = ch.text
                changed = self._files.apply(b, self._open_file)
                for path in changed:
                    self._file_changed(path)
                self._trail.observe(b, changed)
            elif isinstance(b, ToolResult) and (err := error_text(b)) is not None:
                self._error = err
        if t := user_request(msg):
            self._request = t
            self._rules.add_text(t)

    def _file_changed(self, path: str) -> None:
        text = self._files.text(path)
        new = frozenset(self._sh(text))
        old = self._file_sh.get(path, frozenset())
        self._file_count.subtract(old - new)
        self._file_count.update(new - old)
        self._file_sh[path] = new
        if new:
            self._source(text, new, self._file_src)

    def _read_source(self, s: int) -> int | None:
        """The latest read source of shingle ``s`` (a read or the current text of a file)."""
        if self._file_count[s] > 0:
            return max(self._file_src[s], self._last_read.get(s, -1))
        return self._last_read.get(s)

    def new_epoch(self) -> None:
        """A compaction happened: sources may be charged again."""
        self._charged.clear()

    # ---- a call

    def measure(
        self, call: Message, messages: Sequence[Message], system: str, *, compaction: bool
    ) -> CallFidelity:
        """The figures of ``call`` (the recorded assistant output) given what the policy sent
        (``messages`` and ``system``); ``compaction`` when the projection carried one (then the
        probes are scored and a new re-fetch epoch starts). Read recall's misses are charged."""
        if compaction:
            self.new_epoch()
        self._view.move_to(messages)
        if system != self._system[0]:
            self._system = (system, self._sh(system))
        sys_sh = self._system[1]
        out: set[int] = set()
        for u in units(call, outputs_only=True):
            out |= self._sh(u)
        grounded = read_grounded = hits = read_hits = refetch = 0
        for s in out:
            if s in self._fixed or s not in self._seen:
                continue
            held = self._view.holds(s) or s in sys_sh
            grounded += 1
            hits += held
            at = self._read_source(s)
            last = self._last_read.get(s)
            kind = (
                self._sources[last].kind if last is not None else "own_output" if at is None else "file_state"
            )
            self.grounded_by_kind[kind] += 1
            if at is None:
                continue
            read = last is not None  # the agent's own file text is not something it read
            read_grounded += read
            if held:
                read_hits += read
                self.read_hits_by_kind[kind] += 1
            elif at not in self._charged:
                self._charged.add(at)
                src = self._sources[at]
                if src.tokens < 0:
                    src.tokens = self._count_text(src.text)
                refetch += src.tokens
        result = CallFidelity(
            hits=hits,
            grounded=grounded,
            read_hits=read_hits,
            read_grounded=read_grounded,
            refetch_tokens=refetch,
        )
        if compaction:
            result.probes, result.request_whole = self._probes(
                messages, system, sys_sh, read_hits, read_grounded
            )
        return result

    def _present(self, text: str, flat: str, sys_sh: frozenset[int]) -> float:
        """The share of ``text``'s shingles in the context (whole presence for a short text)."""
        sh = self._sh(text)
        if not sh:
            return 1.0 if normalized(text) in flat else 0.0
        return sum(1 for s in sh if self._view.holds(s) or s in sys_sh) / len(sh)

    def _probes(
        self, messages: Sequence[Message], system: str, sys_sh: frozenset[int], hits: int, grounded: int
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
        if self._rules.rules:
            kept = sum(normalized(r.text) in flat for r in self._rules.rules)
            probes["rules"] = round(kept / len(self._rules.rules), 4)
        if (files := self._trail.score(_lines(system, messages))) is not None:
            probes["files"] = files
        return probes, whole


def pooled(stats: Iterable[dict[str, ProbeStat]]) -> dict[str, ProbeStat]:
    """Probe statistics summed over sessions (pooled over their compactions)."""
    out = {k: ProbeStat() for k in PROBE_KINDS}
    for st in stats:
        for k, v in st.items():
            out.setdefault(k, ProbeStat()).merge(v)
    return out
