"""The judge of ``ctxengine eval``: Factory's four probe questions (Factory.ai, "Evaluating context
compression", Dec 2025), the requests that ask them and the grade, and the strict parsing of the
grade (``parse_grade``).

Both probe requests carry the conversation as native messages (thinking removed: its signatures
belong to the recorded model) with the tools the conversation called declared by name, and one
final user message holding the questions. When a conversation is larger than the judge's input
window (less the answer and the question), its oldest tool groups are dropped at a safe cut point
(``layers.pairing.safe_cut_points``: never a result without its call). Tokens.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from typing import Annotated, Literal

import msgspec

from ctxengine.layers.pairing import safe_cut_points
from ctxengine.llm import LLMClient, LLMRequest, ToolDefinition
from ctxengine.messages.model import Message, Text, Thinking
from ctxengine.tokens.counter import TokenCounter

Dimension = Literal["recall", "artifact", "continuation", "decision"]
DIMENSIONS: tuple[Dimension, ...] = ("recall", "artifact", "continuation", "decision")

# Factory's four probe kinds, one question each (Factory, Dec 2025).
PROBES: dict[Dimension, str] = {
    "recall": "What was the most recent error or failure, and what exactly did it say?",
    "artifact": "Which files have been modified so far, and how?",
    "continuation": "What were you about to do next?",
    "decision": "What key decisions have been made so far, and why?",
}

ANSWER_MAX_TOKENS = 1_500  # output cap of each probe answer
GRADE_MAX_TOKENS = 200  # output cap of the grade (a small JSON object)
TRIM_MARGIN = 0.9  # share of the judge's budget a conversation may fill (the counter may be an estimate)

JUDGE_SYSTEM = "You are a software engineering agent working in the user's repository."
GRADER_SYSTEM = "You grade answers strictly and reply with JSON only."

PROBE_PROMPT = (
    "[Evaluation, not part of the task] Stop working on the task for a moment. Using only the "
    "conversation above (do not call any tool), answer the four questions below, each under its "
    "heading. Be precise and concise; quote exact text (error messages, file paths, code) where "
    "the conversation gives it. If the conversation does not tell you, say so.{trimmed}\n\n{questions}"
)
TRIMMED_NOTE = " (The oldest {n} messages of the conversation were left out to fit your context window.)"

GRADE_PROMPT = (
    "An agent answered four questions about its own work twice: once from a compacted context "
    "(<answer>) and once from the full history (<reference>). Grade how well <answer> matches "
    "<reference> on each question, from 0 to 5: 5 = every fact of the reference, exact (same "
    "error text, same files and changes, same next step, same decisions and reasons); 3 = the gist "
    "with details missing or vague; 1 = little of it; 0 = missing or wrong. Facts in <answer> that "
    "contradict <reference> lower the grade.\n\n"
    "<questions>\n{questions}\n</questions>\n\n<answer>\n{answer}\n</answer>\n\n"
    "<reference>\n{reference}\n</reference>\n\n"
    'Reply with only this JSON object, integers from 0 to 5: {{"recall": n, "artifact": n, '
    '"continuation": n, "decision": n}}'
)

_FENCE = re.compile(r"\A```(?:json)?\s*\n(.*)\n```\Z", re.DOTALL)

Score = Annotated[int, msgspec.Meta(ge=0, le=5)]


class Grade(msgspec.Struct, forbid_unknown_fields=True):
    """The judge's grade of one probe: 0-5 per dimension (all four required, nothing else)."""

    recall: Score
    artifact: Score
    continuation: Score
    decision: Score

    def as_dict(self) -> dict[str, int]:
        return {d: int(getattr(self, d)) for d in DIMENSIONS}


class GradeError(ValueError):
    """The grade reply is not the JSON object asked for."""


def parse_grade(text: str) -> Grade:
    """The ``Grade`` in ``text``: exactly one JSON object with the four integer scores 0-5 and no
    other key, optionally wrapped whole in one Markdown code fence. Anything else (prose around
    it, a missing or extra key, a float, a score out of range) raises ``GradeError``."""
    body = text.strip()
    fenced = _FENCE.match(body)
    if fenced:
        body = fenced.group(1).strip()
    try:
        return msgspec.json.decode(body, type=Grade)
    except msgspec.ValidationError as exc:
        raise GradeError(f"invalid grade: {exc}") from None
    except msgspec.DecodeError:
        raise GradeError("the grade is not a JSON object") from None


def questions_text() -> str:
    """The four probe questions under their headings (``## recall`` ...)."""
    return "\n\n".join(f"## {d}\n{PROBES[d]}" for d in DIMENSIONS)


def without_thinking(messages: Sequence[Message]) -> list[Message]:
    """``messages`` without thinking blocks (signed for the recorded model, not the judge);
    messages left empty are dropped (pairing is unaffected: they held no tool block)."""
    out: list[Message] = []
    for m in messages:
        if not any(isinstance(b, Thinking) for b in m.blocks):
            out.append(m)
            continue
        kept = tuple(b for b in m.blocks if not isinstance(b, Thinking))
        if kept:
            out.append(msgspec.structs.replace(m, blocks=kept))
    return out


def fit(
    messages: Sequence[Message], budget: int, count: Callable[[Message], int]
) -> tuple[list[Message], int]:
    """The newest part of ``messages`` (pairing-valid) that fits ``budget`` tokens, and how many
    of the oldest messages were dropped. Cuts only at ``safe_cut_points``, so a tool result is
    never sent without its call; when even the newest tool group is larger than ``budget`` it is
    sent alone (the judge call may then fail as too long, and is counted as a failure)."""
    msgs = list(messages)
    tokens = [count(m) for m in msgs]
    suffix = [0] * (len(msgs) + 1)
    for i in range(len(msgs) - 1, -1, -1):
        suffix[i] = suffix[i + 1] + tokens[i]
    if suffix[0] <= budget:
        return msgs, 0
    cuts = [k for k in safe_cut_points(msgs) if k > 0]
    if not cuts:
        return msgs, 0
    k = next((c for c in cuts if suffix[c] <= budget), cuts[-1])
    return msgs[k:], k


def tools_of(messages: Sequence[Message]) -> tuple[ToolDefinition, ...]:
    """A definition (name only, any arguments) of every tool called in ``messages``: the
    providers expect the tools a conversation uses to be declared."""
    names = dict.fromkeys(c.name for m in messages for c in m.tool_calls if c.name)
    return tuple(ToolDefinition(name=n) for n in names)


class Judge:
    """Asks ``client`` the probes and the grade. ``window`` is the judge's input window in
    tokens (the conversation is trimmed to fit it, less the answer and the question); ``counter``
    counts tokens in the judge's units."""

    def __init__(self, client: LLMClient, *, window: int, counter: TokenCounter) -> None:
        self.client = client
        self.window = window
        self.counter = counter
        self._questions = questions_text()

    def _budget(self, system: str) -> int:
        fixed = (
            self.counter.count_text(system)
            + self.counter.count_text(PROBE_PROMPT + TRIMMED_NOTE + self._questions)
            + ANSWER_MAX_TOKENS
        )
        return max(0, int(self.window * TRIM_MARGIN) - fixed)

    def prepare(self, messages: Sequence[Message], system: str) -> tuple[list[Message], int, int]:
        """The messages to send (thinking removed, trimmed to the window), the number of oldest
        messages left out, and their tokens."""
        msgs, dropped = fit(without_thinking(messages), self._budget(system), self.counter.count_message)
        return msgs, dropped, sum(self.counter.count_message(m) for m in msgs)

    def answer(self, messages: list[Message], system: str, dropped: int) -> str:
        """The judge's answers to the four probes, given ``messages`` (already prepared) and
        ``system``. Raises ``LLMError``, or ``ValueError`` when the reply holds no text."""
        prompt = PROBE_PROMPT.format(
            trimmed=TRIMMED_NOTE.format(n=dropped) if dropped else "", questions=self._questions
        )
        request = LLMRequest(
            system=system or JUDGE_SYSTEM,
            messages=[*messages, Message(role="user", blocks=(Text(prompt),), id="ctxengine-eval-probe")],
            max_tokens=ANSWER_MAX_TOKENS,
            temperature=0.0,
            purpose="eval-probe",
            tools=tools_of(messages),
        )
        text = self.client.complete(request).text.strip()
        if not text:
            raise ValueError("the judge gave no text answer to the probes")
        return text

    def grade(self, answer: str, reference: str) -> tuple[Grade | None, str]:
        """The judge's grade of ``answer`` against ``reference``, or None with the reply when it
        is not the JSON object asked for. Raises ``LLMError``."""
        prompt = GRADE_PROMPT.format(questions=self._questions, answer=answer, reference=reference)
        reply = self.client.complete(
            LLMRequest(
                system=GRADER_SYSTEM,
                messages=[Message(role="user", blocks=(Text(prompt),), id="ctxengine-eval-grade")],
                max_tokens=GRADE_MAX_TOKENS,
                temperature=0.0,
                purpose="eval-grade",
            )
        ).text
        try:
            return parse_grade(reply), reply
        except GradeError:
            return None, reply
