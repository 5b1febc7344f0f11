"""What one session's previous request body already holds, so the next one is written and checked
from where it differs (the proxy's own time per request: issue 30).

A session's projections mostly repeat: the same messages (the same objects: the engine's view
keeps them), then a few new ones. ``BodyMemo`` keeps, per session:

- the writer's memo (``formats.anthropic_memo.BlockMemo``, ``formats.openai_writer.RunMemo``: each
  message's blocks encoded once, regrouped from the first message that differs, the body equal to
  the writer's without a memo), as the replay's ``RequestMeter`` does;
- the incremental checker of the provider's rules (``formats.validate_incremental.RequestChecker``:
  exactly the problems of checking the body whole, found from the first message that differs);
- the messages the proxy makes for each projection, made once so that they are the same objects
  from one request to the next (which the writer's memo needs): the recovery hints' messages
  (``recovery.HintMemo``), Anthropic's markers of client ``system`` messages
  (``anthropic_system.mark``) and its pinned messages (by the client's raw message, compared by value).

A body must not be changed after it was checked (the checker keeps its messages): the proxy sets
only top-level fields afterwards (``prompt_cache_key``, the 1-hour TTL's new lists).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ctxengine.formats.anthropic_memo import BlockMemo
from ctxengine.formats.openai_writer import RunMemo
from ctxengine.formats.validate_incremental import Provider, RequestChecker
from ctxengine.messages.model import Message
from ctxengine.proxy.recovery import HintMemo


@dataclass
class BodyMemo:
    """One session's memos (see the module docstring); ``provider``: the checker's rules."""

    provider: Provider
    blocks: BlockMemo = field(default_factory=BlockMemo)
    runs: RunMemo = field(default_factory=RunMemo)
    hints: HintMemo = field(default_factory=HintMemo)
    markers: dict[tuple[int, str], Message] = field(default_factory=dict)
    pinned: dict[int, tuple[Any, Message]] = field(default_factory=dict)
    checker: RequestChecker = field(init=False)

    def __post_init__(self) -> None:
        self.checker = RequestChecker(self.provider)

    def pinned_message(self, index: int, raw: Any, read: Callable[[], Message]) -> Message:
        """The pinned message read from the client's ``raw`` message at ``index`` (``read()``),
        the same object as the previous request's while ``raw`` is equal to its."""
        found = self.pinned.get(index)
        if found is not None and found[0] == raw:
            return found[1]
        made = read()
        self.pinned[index] = (raw, made)
        return made
