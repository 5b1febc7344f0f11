"""The provider's rules checked request after request of one conversation, from the first message
that changed.

An agent's requests repeat: each holds the previous one's messages and a few new ones (the last
messages differ too, where a cache breakpoint moved). ``RequestChecker.validate(body)`` returns
exactly what ``validate_anthropic`` / ``validate_openai_chat`` return for ``body``, but checks
only the messages from the first one that differs from the previous body's (compared by value:
the writer reuses the messages' strings, so an unchanged message compares in a few
microseconds), resuming the check's state (``AnthropicScan`` / ``OpenAIScan``) where that
message starts. The replay checks every call's request this way (``summary.pairing_violations``).

The checker keeps the previous body's messages: a caller must not change a body after checking it.
Messages are compared with ``==``: values Python holds equal though of other types (``1`` and
``True``, ``1`` and ``1.0``) count as unchanged, and a problem line then names the earlier value
(the problems found are the same: every check of this module treats such values alike).
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping
from typing import Any, Literal

from ctxengine.formats.validate import (
    AnthropicScan,
    OpenAIScan,
    _check_breakpoints,
    _check_system,
    validate_anthropic,
    validate_openai_chat,
)

Provider = Literal["anthropic", "openai"]
# the state before a message: problems so far, then the scan's state (Anthropic: cache_control
# count, previous role, the previous assistant's tool_use ids, tool_use ids seen; OpenAI: the
# assistant's calls, those answered, inside a run of tool messages)
_Snapshot = tuple[int, Any, Any, Any, Any]


class RequestChecker:
    """``validate(body)`` for request after request to ``provider`` (see the module docstring)."""

    def __init__(self, provider: Provider) -> None:
        self.provider: Provider = provider
        self._messages: list[Any] = []
        self._problems: list[str] = []  # the previous body's message problems, in order
        self._snaps: list[_Snapshot] = []  # the state before each of its messages (and after all)
        self._scan_seen: dict[str, int] = {}  # the last Anthropic scan's tool_use ids, in order
        self.checked = 0  # messages checked in all (the rest was the previous body's)

    def validate(self, body: Mapping[str, Any]) -> list[str]:
        """The problems of ``body``, one line each (as ``validate_anthropic`` or
        ``validate_openai_chat``, by ``provider``). Never raises, whatever the input."""
        messages = body.get("messages") if isinstance(body, Mapping) else None
        if not isinstance(messages, list) or not messages:
            self._messages, self._problems, self._snaps = [], [], []
            return validate_anthropic(body) if self.provider == "anthropic" else validate_openai_chat(body)
        d = self._common(messages)
        if self.provider == "anthropic":
            return self._anthropic(body, messages, d)
        return self._openai(messages, d)

    def _common(self, messages: list[Any]) -> int:
        """How many leading messages are the previous body's (a state is known before each)."""
        prev = self._messages
        n = min(len(prev), len(messages), len(self._snaps) - 1)
        d = 0
        while d < n and prev[d] == messages[d]:
            d += 1
        return d

    def _anthropic(self, body: Mapping[str, Any], messages: list[Any], d: int) -> list[str]:
        head: list[str] = []
        breakpoints = _check_system(body.get("system"), head)
        tools = body.get("tools")
        if isinstance(tools, list):
            breakpoints += sum(1 for t in tools if isinstance(t, Mapping) and "cache_control" in t)
        if d:
            n, bp, role, expected, seen = self._snaps[d]
            scan = AnthropicScan(bp, dict(itertools.islice(self._scan_seen.items(), seen)), expected, role)
        else:
            n, scan = 0, AnthropicScan()
        problems, snaps = self._problems[:n], self._snaps[: d + 1] or [(0, 0, None, {}, 0)]
        for k in range(d, len(messages)):
            scan.step(k, messages[k], problems)
            seen = len(scan.seen_calls)
            snaps.append((len(problems), scan.breakpoints, scan.prev_role, scan.expected, seen))
        self._remember(messages, problems, snaps, len(messages) - d)
        self._scan_seen = scan.seen_calls
        end: list[str] = []
        breakpoints += scan.end(end)
        out = head + problems + end
        _check_breakpoints(breakpoints, out)
        return out

    def _openai(self, messages: list[Any], d: int) -> list[str]:
        if d:
            n, pending, answered, in_tools, _ = self._snaps[d]
            scan = OpenAIScan(pending, set(answered), in_tools)
        else:
            n, scan = 0, OpenAIScan()
        problems, snaps = self._problems[:n], self._snaps[: d + 1] or [(0, {}, frozenset(), False, None)]
        for k in range(d, len(messages)):
            scan.step(k, messages[k], problems)
            snaps.append((len(problems), scan.pending, frozenset(scan.answered), scan.in_tools, None))
        self._remember(messages, problems, snaps, len(messages) - d)
        end: list[str] = []
        scan.end(end)
        return problems + end

    def _remember(
        self, messages: list[Any], problems: list[str], snaps: list[_Snapshot], checked: int
    ) -> None:
        self._messages, self._problems, self._snaps = list(messages), problems, snaps
        self.checked += checked
