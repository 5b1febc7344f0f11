"""Standing instructions and corrections the user typed: found without a model, kept verbatim.

The complaint most often filed against the harnesses we measure: after a compaction the agent
forgets what the user told it ("never push to main", "use pnpm, not npm", a correction given an
hour ago). ``standing_rules(text)`` finds, in what the user typed (``audit.user_request``: not
tool results, not a harness's injected context), the sentences that lay down a rule: an
imperative constraint at the start of a sentence ("always", "never", "don't", "do not", "make
sure", "from now on", "avoid", "only use", "stop", a "use X, not Y"; in Chinese 不要, 必须, 务必,
禁止, 总是, 一定要, 以后, 别), or one of "from now on", "instead of", "rather than" inside it. A
sentence longer than ``MAX_RULE_CHARS`` is prose, not a rule.

``RuleBook`` keeps them in the order stated, each once. A rule that corrects an earlier one (it
says "correction", "actually", "instead", "from now on", "no longer", "not anymore", 改为, 改用,
不再, 以后) and shares a key term with it (a code span, a path, or two words of four letters or
more) replaces it: the book keeps the correction and notes which rule it replaced, by its first
words only, so the superseded rule is never shown as standing. Pure; chars.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

import msgspec

MAX_RULE_CHARS = 400  # a longer sentence is prose or a specification, not a rule
_SENTENCE_RE = re.compile(r"[^\n.!?。！？]+(?:[.!?。！？]+|$)", re.M)
_START_RE = re.compile(
    r"^(?:[-*>\d.)\s]*)(?:please\s+|pls\s+|and\s+|but\s+|also\s+|correction:\s*|note:\s*)?"
    r"(?:always|never(?!\s*mind)|don'?t|do\s+not|make\s+sure|ensure|from\s+now\s+on|avoid|only\s+use|stop|"
    r"remember\s+to|be\s+sure\s+to|use\s+`[^`]+`|use\s+\S+(?:\s+\S+){0,3}?,?\s+(?:not|instead))(?:\b|(?<=`))",
    re.I,
)
_INSIDE_RE = re.compile(
    r"\b(?:from\s+now\s+on|instead\s+of|rather\s+than|be\s+sure\s+to)\b|[,;]\s*(?:always|never)\s+\w", re.I
)
_ZH_RE = re.compile(  # a Chinese rule: a constraint word near its start (after 你 / 我们 / 请 ...)
    r"^(?:[-*>\d.)\s、]*)(?:[^，。,]{0,12}?)"
    r"(?:不要|必须|务必|禁止|总是|永远|一定要|以后|每次|每[一二三四五六七八九十\d]+|都要|至少要|不准|不许|只能|只登记|应该|需要|直接放|必读)"
)
_QUESTION_RE = re.compile(  # a question, a one-off task, a condition: none lays down a rule
    r"[?？]\s*$|吗|是否|什么|怎么|为什么|如何|能否|需不需要|要不要|^(?:我需要你|如果)"
)
_CORRECTS_RE = re.compile(
    r"\b(?:correction|actually|instead|from\s+now\s+on|no\s+longer|not\s+anymore|any\s+more)\b|改为|改用|不再|以后",
    re.I,
)
_CODE_RE = re.compile(r"`([^`\n]+)`")
_PATH_RE = re.compile(r"(?:[\w.-]+/)+[\w.-]+|\b[\w-]+\.[a-z]{1,5}\b")
_WORD_RE = re.compile(r"[A-Za-z][A-Za-z_-]{3,}")
_COMMON = frozenset(
    [
        "always",
        "never",
        "dont",
        "make",
        "sure",
        "ensure",
        "from",
        "avoid",
        "only",
        "stop",
        "remember",
        "instead",
        "rather",
        "than",
        "with",
        "this",
        "that",
        "these",
        "those",
        "they",
        "them",
        "their",
        "there",
        "here",
        "when",
        "what",
        "which",
        "while",
        "should",
        "would",
        "could",
        "correction",
        "actually",
        "longer",
        "anymore",
        "please",
        "also",
        "every",
        "each",
        "into",
        "onto",
        "your",
        "have",
        "been",
        "will",
    ]
)


def _sentences(text: str) -> Iterator[str]:
    for m in _SENTENCE_RE.finditer(text):
        s = m.group(0).strip()
        if s:
            yield s


def is_rule(sentence: str) -> bool:
    """Whether ``sentence`` lays down a standing instruction (see the module docstring)."""
    s = sentence.strip()
    if not s or len(s) > MAX_RULE_CHARS or _QUESTION_RE.search(s):  # a question asks, it lays down nothing
        return False
    return bool(_START_RE.match(s) or _INSIDE_RE.search(s) or _ZH_RE.match(s))


def standing_rules(text: str) -> list[str]:
    """The rule sentences of ``text`` (user-typed), verbatim, in order, each once. A sentence
    cut by a code span's dot (``make test-fast``.) stays whole: sentences end at a stop outside
    backticks only."""
    out: list[str] = []
    for line in text.splitlines():
        for s in _sentences(_mask_code(line)):
            original = _unmask(s)
            if is_rule(original) and original not in out:
                out.append(original)
    return out


_MASKS = str.maketrans(".!?", "\x00\x01\x02")
_UNMASKS = str.maketrans("\x00\x01\x02", ".!?")


def _mask_code(line: str) -> str:
    """``line`` with the stops inside backticks replaced by placeholders (``_unmask`` puts them back)."""
    return _CODE_RE.sub(lambda m: "`" + m.group(1).translate(_MASKS) + "`", line)


def _unmask(sentence: str) -> str:
    return sentence.translate(_UNMASKS)


def key_terms(rule: str) -> tuple[frozenset[str], frozenset[str]]:
    """(code spans and paths, content words) of ``rule``, lower-cased: what a correction must
    share with it."""
    spans = {c.strip().lower() for c in _CODE_RE.findall(rule)} | {p.lower() for p in _PATH_RE.findall(rule)}
    words = {w.lower() for w in _WORD_RE.findall(rule)} - _COMMON
    return frozenset(spans), frozenset(words)


def corrects(new: str, old: str) -> bool:
    """Whether rule ``new`` corrects rule ``old``: it says so (a correction marker) and names the
    same thing (a shared code span or path, or two shared content words)."""
    if not _CORRECTS_RE.search(new):
        return False
    (ns, nw), (os_, ow) = key_terms(new), key_terms(old)
    return bool(ns & os_) or len(nw & ow) >= 2


class Rule(msgspec.Struct, frozen=True):
    """A standing rule as the user typed it; ``replaces``: the first words of the rule it
    corrected ("" when none); ``source``: the id of the message that stated it."""

    text: str
    source: str = ""
    replaces: str = ""


def first_words(text: str, n: int = 6) -> str:
    """The first ``n`` words of ``text``, marked as cut when there are more."""
    words = text.split()
    return " ".join(words[:n]) + (" …" if len(words) > n else "")


class RuleBook:
    """The user's standing rules, in the order stated, corrections replacing what they correct."""

    def __init__(self) -> None:
        self.rules: list[Rule] = []

    def add_text(self, text: str, source: str = "") -> list[Rule]:
        """Fold the rules of one user-typed ``text``; returns the rules added."""
        added = []
        for s in standing_rules(text):
            if any(r.text == s for r in self.rules):
                continue
            old = next((r for r in reversed(self.rules) if corrects(s, r.text)), None)
            rule = Rule(s, source, first_words(old.text) if old is not None else "")
            if old is not None:
                self.rules.remove(old)
            self.rules.append(rule)
            added.append(rule)
        return added


__all__ = ["MAX_RULE_CHARS", "Rule", "RuleBook", "corrects", "first_words", "is_rule", "standing_rules"]
