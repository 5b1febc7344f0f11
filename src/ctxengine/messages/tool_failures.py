"""Whether a tool result reports a failure, by its structure (the policy's own check).

Used by the restore's latest error and by the clearing layers of a policy that pins it. The
evaluation (``ctxengine.eval.fidelity``) defines its error probe apart, on the same kinds of evidence.
"""

from __future__ import annotations

import functools
import re

from ctxengine.messages.model import ToolResult

_EXIT_STATUS = re.compile(
    r"^(?:Exit code:? |Process exited with code |<returncode>)-?0*[1-9]\d*|\"exit_code\": ?[1-9]\d*",
    re.M,
)
_TRACEBACK = "Traceback (most recent call last):"


def failed(result: ToolResult, text: str) -> bool:
    """Whether a tool result reports a failure by its structure: the harness flagged it
    (``is_error``), a shell's non-zero exit status (Claude Code's ``Exit code N``, Codex's ``Process
    exited with code N``, mini-swe-agent's ``<returncode>N``, an ``"exit_code": N`` field), or a
    Python traceback. A word such as "error" in a file that was read is not a failure. The text's
    part of the answer is remembered by text, as ``identifiers.extract`` remembers its (a
    compaction's restore asks it of every result of the history, again at each compaction)."""
    return result.is_error or _text_failed(text)


@functools.lru_cache(maxsize=16_384)
def _text_failed(text: str) -> bool:
    return _EXIT_STATUS.search(text[:2_000]) is not None or _TRACEBACK in text


__all__ = ["failed"]
