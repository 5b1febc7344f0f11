"""Importance scores for eviction without a summary (seed 002, "history importance").

importance = 0.3 x recency + 0.4 x relevance + 0.2 x role weight + 0.1 x has-tool-call, each in
[0, 1], over *units* that can leave the context whole without breaking tool-call pairing (a
user turn, or an API round: ``layers.pairing.tool_groups``):

- recency: the unit's rank among the candidates, oldest 1/n ... newest 1;
- relevance: Okapi BM25 (k1 = 1.5, b = 0.75) of the unit's text against the latest user request,
  divided by the best candidate's score (0 for all when nothing matches);
- role weight: 1 for a unit a user message opens, 0.5 for one an assistant message opens (the
  seed's 0.4 vs 0.2 for user vs assistant messages), 0.25 for harness-made ones (attachments,
  notices);
- has-tool-call: 1 when the unit holds a tool call.

Seed 002 lists a different mix (recency 0.3, message type 0.4, tool call 0.2, error 0.1); issue 13
asks for relevance to the latest request in place of the type, which is what tells an old file
read the task still needs from one it does not. Lowest importance is evicted first.

BM25 is a short core implementation (the tokenizer: lower-cased words of letters, digits and
``_./-``, so paths and identifiers count as one term; ``audit.STOP_WORDS`` left out), pure and
deterministic.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Sequence

import msgspec

from ctxengine.messages.model import Message
from ctxengine.summary.audit import STOP_WORDS, span_text

W_RECENCY, W_RELEVANCE, W_ROLE, W_TOOL = 0.3, 0.4, 0.2, 0.1
BM25_K1, BM25_B = 1.5, 0.75
ROLE_WEIGHT = {"user": 1.0, "assistant": 0.5}
HARNESS_WEIGHT = 0.25  # attachments, notices: made by the harness, not said by either side
_TERM = re.compile(r"[\w./-]{2,}")


class Score(msgspec.Struct, frozen=True):
    """One unit's importance and its four parts (each 0..1)."""

    importance: float
    recency: float
    relevance: float
    role: float
    tool: float


def terms(text: str) -> list[str]:
    """Lower-cased terms of ``text`` (words, paths and identifiers whole; stop words left out)."""
    out = (t.strip("./-") for t in _TERM.findall(text.lower()))
    return [t for t in out if t and t not in STOP_WORDS]


def bm25(documents: Sequence[Sequence[str]], query: Sequence[str]) -> list[float]:
    """Okapi BM25 score of each document (a list of terms) for ``query``."""
    n = len(documents)
    if not n or not query:
        return [0.0] * n
    avg = sum(len(d) for d in documents) / n or 1.0
    df: Counter[str] = Counter()
    for d in documents:
        df.update(set(d))
    idf = {q: math.log(1 + (n - df[q] + 0.5) / (df[q] + 0.5)) for q in set(query)}
    scores = []
    for d in documents:
        tf = Counter(d)
        norm = BM25_K1 * (1 - BM25_B + BM25_B * len(d) / avg)
        scores.append(sum(idf[q] * tf[q] * (BM25_K1 + 1) / (tf[q] + norm) for q in set(query) if tf[q]))
    return scores


def role_weight(first: Message) -> float:
    """The weight of the message that opens a unit (user 1, assistant 0.5, harness-made 0.25)."""
    if first.origin != "message":
        return HARNESS_WEIGHT
    return ROLE_WEIGHT.get(first.role, HARNESS_WEIGHT)


def score_units(units: Sequence[Sequence[Message]], request: str) -> list[Score]:
    """The importance of each unit (in order, oldest first) against the latest ``request``."""
    n = len(units)
    raw = bm25([terms(span_text(u)) for u in units], terms(request))
    best = max(raw, default=0.0)
    out = []
    for i, unit in enumerate(units):
        recency = (i + 1) / n
        relevance = raw[i] / best if best > 0 else 0.0
        role = role_weight(unit[0]) if unit else 0.0
        tool = 1.0 if any(m.tool_calls for m in unit) else 0.0
        total = W_RECENCY * recency + W_RELEVANCE * relevance + W_ROLE * role + W_TOOL * tool
        out.append(Score(round(total, 6), recency, round(relevance, 6), role, tool))
    return out


def eviction_order(units: Sequence[Sequence[Message]], request: str) -> list[int]:
    """Unit indices, least important first (ties: the older first)."""
    scores = score_units(units, request)
    return sorted(range(len(units)), key=lambda i: (scores[i].importance, i))
