"""Exact identifiers in text: paths, URLs, UUIDs, hex ids, host:port, long numbers.

Used twice: the structured summary keeps them verbatim, and the replay measures *reference
recall* with them (DESIGN.md "Measuring"): of the identifiers the assistant uses at a call that
first appeared earlier in the session, the share still present in what the engine sends.

Matching is on decoded text (readers already decode JSON escapes). Paths are normalised so the
same file matches however it is written: backslashes become ``/``, a Windows drive letter is
lower-cased, trailing punctuation is stripped. Everything else is compared as written, except hex
ids and UUIDs, which are lower-cased.
"""

from __future__ import annotations

import bisect
import functools
import itertools
import re
from collections.abc import Iterable

MIN_PATH_CHARS = 4  # shorter "paths" (a/b) are mostly noise
MIN_NUMBER_DIGITS = 6  # long numbers: ids, ports excluded (they come with a host)
MIN_HEX_CHARS = 8  # git short shas are 7; 8+ with both digits and letters avoids words

_URL = r"(?:https?|ftp|file|wss?)://[^\s<>\"'`)\]}|]+"
_UUID = r"\b[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}\b"
_WINPATH = r"\b[A-Za-z]:[\\/](?:[^\s\\/:*?\"<>|,;`'()\[\]{}]+[\\/])*[^\s\\/:*?\"<>|,;`'()\[\]{}]*"
_UNIXPATH = r"(?<![\w.:/-])(?:~|\.{1,2})?/(?:[\w.@+-]+/)*[\w.@+-]+"
_RELPATH = r"(?<![\w/.-])(?:[\w@+-][\w.@+-]*/)+[\w@+-][\w.@+-]*\.[A-Za-z0-9]{1,8}\b"
_HOSTPORT = r"\b(?:localhost|(?:\d{1,3}\.){3}\d{1,3}|[a-z0-9-]+(?:\.[a-z0-9-]+)+):\d{2,5}\b"
_HEX = rf"\b(?:0x)?[0-9a-fA-F]{{{MIN_HEX_CHARS},}}\b"
_NUMBER = rf"(?<![\w.])\d{{{MIN_NUMBER_DIGITS},}}(?![\w.]*\d)"

# Every alternative below starts where the character before is not a word character (``\b``
# before a word character, or a look-behind excluding ``\w``), except a URL (``h``, ``f`` or ``w``
# first) and a host name starting with ``-`` after a word character (``\b`` then ``-``): the guard
# in front says so once, and spares the eight alternatives at the other positions (the middle of
# a word). The same matches (checked on every text of the shared transcripts), ~25% sooner.
_GUARD = r"(?:(?<!\w)|(?=[hfw-]))"

_ALTERNATIVES = "|".join(
    f"(?P<{name}>{rx})"
    for name, rx in (
        ("url", _URL),
        ("uuid", _UUID),
        ("winpath", _WINPATH),
        ("hostport", _HOSTPORT),
        ("unixpath", _UNIXPATH),
        ("relpath", _RELPATH),
        ("hex", _HEX),
        ("number", _NUMBER),
    )
)
_PATTERN = re.compile(f"{_GUARD}(?:{_ALTERNATIVES})")
_TRAILING = ".,;:!?)]}>'\"`"

# The prefilter: every identifier lies inside one run of non-space characters (no pattern above
# matches whitespace, and their look-arounds treat a space like the text's edge) and holds a
# ``/``, ``\``, a digit or a ``-`` (a UUID of letters only). Only such runs are searched, joined
# by newlines: the same matches, found in about a third of the time on the shared transcripts.
# Anchored at a run's start and possessive, so a long run is scanned once (linear time).
_CANDIDATE_RUN = re.compile(r"(?<!\S)[^\s/\\0-9-]*+[/\\0-9-]\S*")


def normalize_path(path: str) -> str:
    """Normalise a path for matching: ``\\`` -> ``/``, drive letter lower-cased, no trailing
    punctuation or separator."""
    p = path.replace("\\", "/").rstrip(_TRAILING).rstrip("/")
    if len(p) >= 2 and p[1] == ":" and p[0].isalpha():
        p = p[0].lower() + p[1:]
    return p


def extract(text: str) -> set[str]:
    """Return the normalised identifiers found in ``text`` (a new set; results are cached)."""
    if not text:
        return set()
    return set(_extract(text))


@functools.lru_cache(maxsize=16_384)
def extract_sorted(text: str) -> tuple[str, ...]:
    """``sorted(extract(text))`` as a tuple, remembered per text: the notes and the cleared
    results list a text's identifiers in order each time they see it."""
    return tuple(sorted(_extract(text))) if text else ()


@functools.lru_cache(maxsize=16_384)
def _extract(text: str) -> frozenset[str]:
    runs = _CANDIDATE_RUN.findall(text)
    if not runs:
        return frozenset()
    found: set[str] = set()
    new: list[str] = []
    for run in dict.fromkeys(runs):
        ids = _RUN_IDS.get(run)
        if ids is None:
            if _MAY_HOLD(run) is not None:
                new.append(run)
        else:
            found |= ids
    if new:
        found |= _match_runs(new)
    return frozenset(found)


# The identifiers of each candidate run, remembered: the same paths and ids come back in many
# texts (a fifth of the runs' characters on the shared transcripts are distinct).
_RUN_IDS: dict[str, frozenset[str]] = {}
_RUN_IDS_MAX = 200_000  # runs remembered (the oldest forgotten first)
# What every match of ``_PATTERN`` holds: a ``/``, ``\``, ``:`` or ``-`` (URLs, paths, host:port,
# UUIDs), six digits in a row (a long number) or eight hex digits in a row (a hex id). A candidate
# run without any (``value_12``, ``load(12345)``: most runs of code) holds no identifier and is
# not searched.
_MAY_HOLD = re.compile(r"[/\\:-]|\d{6}|[0-9a-fA-F]{8}").search


def _match_runs(runs: list[str]) -> frozenset[str]:
    """``_match`` of the runs joined by newlines, each run's share remembered in ``_RUN_IDS``
    (no match spans two runs: a newline is a run's edge to every pattern)."""
    joined = "\n".join(runs)
    starts = list(itertools.accumulate((len(r) + 1 for r in runs[:-1]), initial=0))
    per_run: list[set[str]] = [set() for _ in runs]
    for m in _PATTERN.finditer(joined):
        value = _value(m)
        if value is not None:
            per_run[bisect.bisect_right(starts, m.start()) - 1].add(value)
    if len(_RUN_IDS) + len(runs) > _RUN_IDS_MAX:
        _RUN_IDS.clear()
    out: set[str] = set()
    for run, ids in zip(runs, per_run, strict=True):
        _RUN_IDS[run] = frozenset(ids)
        out |= ids
    return frozenset(out)


def _match(text: str) -> frozenset[str]:
    """The normalised identifiers ``_PATTERN`` finds in ``text``."""
    return frozenset(v for v in (_value(m) for m in _PATTERN.finditer(text)) if v is not None)


def _value(m: re.Match[str]) -> str | None:
    """The normalised identifier of one match, or None when it is noise."""
    kind = m.lastgroup
    value = m.group()
    if kind in ("winpath", "unixpath", "relpath"):
        value = normalize_path(value)
        if len(value) < MIN_PATH_CHARS or value.count("/") < 1:
            return None
        if kind == "unixpath" and value.count("/") < 2 and "." not in value.rsplit("/", 1)[-1]:
            return None  # "/body" of "</body>", "/tmp": one bare component is mostly noise
    elif kind == "url":
        value = value.rstrip(_TRAILING)
    elif kind == "hex":
        v = value[2:] if value[:2].lower() == "0x" else value
        if v.isalpha() or (v.isdigit() and len(v) < MIN_NUMBER_DIGITS):
            return None
        value = value.lower()
    elif kind == "uuid":
        value = value.lower()
    return value


def extract_all(texts: Iterable[str]) -> set[str]:
    """Union of ``extract`` over several texts."""
    out: set[str] = set()
    for t in texts:
        out |= extract(t)
    return out
