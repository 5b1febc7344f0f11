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

import functools
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

_PATTERN = re.compile(
    "|".join(
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
)
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
def _extract(text: str) -> frozenset[str]:
    runs = _CANDIDATE_RUN.findall(text)
    return _match(runs[0] if len(runs) == 1 else "\n".join(runs)) if runs else frozenset()


def _match(text: str) -> frozenset[str]:
    found: set[str] = set()
    for m in _PATTERN.finditer(text):
        kind = m.lastgroup
        value = m.group()
        if kind in ("winpath", "unixpath", "relpath"):
            value = normalize_path(value)
            if len(value) < MIN_PATH_CHARS or value.count("/") < 1:
                continue
            if kind == "unixpath" and value.count("/") < 2 and "." not in value.rsplit("/", 1)[-1]:
                continue  # "/body" of "</body>", "/tmp": one bare component is mostly noise
        elif kind == "url":
            value = value.rstrip(_TRAILING)
        elif kind == "hex":
            v = value[2:] if value[:2].lower() == "0x" else value
            if v.isalpha() or (v.isdigit() and len(v) < MIN_NUMBER_DIGITS):
                continue
            value = value.lower()
        elif kind == "uuid":
            value = value.lower()
        found.add(value)
    return frozenset(found)


def extract_all(texts: Iterable[str]) -> set[str]:
    """Union of ``extract`` over several texts."""
    out: set[str] = set()
    for t in texts:
        out |= extract(t)
    return out
