"""The framework-neutral bridge on plain neutral messages (an identity converter): which items are
new, a new conversation, the pairing check before the model, usage feedback, failure."""

from __future__ import annotations

import warnings

import msgspec
import pytest

from ctxengine.integrations.bridge import EngineBridge, IntegrationWarning
from ctxengine.messages.model import Message, Text, ToolCall, ToolResult, Usage

# the turns' usage is made up (1,000 tokens a turn), not what was sent: the engine says so
# (``UsageGapWarning``), which these tests are not about (tests/test_usage_gap.py is)
pytestmark = pytest.mark.filterwarnings("ignore::ctxengine.engine.usage_gap.UsageGapWarning")


class Identity:
    """Items are neutral messages already (ids replaced by the bridge's)."""

    def to_message(self, item: Message, message_id: str) -> Message:
        return msgspec.structs.replace(item, id=message_id)

    def from_message(self, message: Message, original: Message | None) -> list[Message]:
        return [message]


class DropsResults(Identity):
    """A broken conversion: a changed tool result is lost on the way back."""

    def from_message(self, message: Message, original: Message | None) -> list[Message]:
        return [] if message.tool_results else [message]


def turn(k: int, size: int = 100) -> list[Message]:
    call = ToolCall(f"c{k}", "read", {"path": f"f{k}"})
    return [
        Message("assistant", (call,), f"a{k}", usage=Usage(input_tokens=1_000 * (k + 1))),
        Message("user", (ToolResult(f"c{k}", (Text(f"line {k}\n" * size),)),), f"r{k}"),
    ]


def history(turns: int, size: int = 100) -> list[Message]:
    return [Message("user", (Text("task"),), "u"), *[m for k in range(turns) for m in turn(k, size)]]


def test_only_the_new_items_are_ingested_and_the_transcript_only_grows() -> None:
    bridge: EngineBridge[Message] = EngineBridge(Identity(), window=32_000)
    items = history(2)
    assert bridge.project(items) == items  # small: nothing to change, the originals come back
    bridge.project([*items, *turn(2)])
    assert len(bridge.engine.history) == len(bridge.transcript) == 7
    assert bridge.stats.resets == 0 and bridge.stats.calls == 2


def test_the_last_output_at_the_head_of_the_next_list_is_recognised() -> None:
    bridge: EngineBridge[Message] = EngineBridge(Identity(), window=32_000)
    out = bridge.project(history(3, size=3_000))  # large results: offloaded, so out differs
    assert out != history(3, size=3_000)
    bridge.project([*out, *turn(3)])
    assert bridge.stats.resets == 0 and len(bridge.transcript) == 9


def test_another_history_starts_a_new_engine_session() -> None:
    bridge: EngineBridge[Message] = EngineBridge(Identity(), window=32_000)
    bridge.project(history(2))
    other = [Message("user", (Text("another task"),), "u2")]
    assert bridge.project(other) == other
    assert bridge.stats.resets == 1 and bridge.transcript == other and len(bridge.engine.history) == 1


def test_usage_on_the_newest_assistant_message_anchors_the_ledger() -> None:
    bridge: EngineBridge[Message] = EngineBridge(Identity(), window=32_000)
    items = history(1)
    bridge.project(items)
    bridge.project([*items, *turn(1)])
    assert bridge.stats.usage_reports == 1
    assert bridge.engine.ledger.state.anchor_total == 2_000


def test_output_that_breaks_pairing_never_reaches_the_model() -> None:
    bridge: EngineBridge[Message] = EngineBridge(DropsResults(), window=32_000)
    items = history(3, size=3_000)
    with pytest.warns(IntegrationWarning, match="orphan|missing|pairing"):
        out = bridge.project(items)
    assert out == items and bridge.stats.fallbacks == 1 and "PairingError" in bridge.stats.last_error


def test_a_failure_warns_once_and_the_next_call_rebuilds_the_engine() -> None:
    bridge: EngineBridge[Message] = EngineBridge(Identity(), window=32_000)
    bad = [Message("user", (Text("x"),), "u"), "not a message"]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert bridge.project(bad) == bad  # type: ignore[arg-type]
        assert bridge.project(bad) == bad  # type: ignore[arg-type]
    assert sum(issubclass(w.category, IntegrationWarning) for w in caught) == 1
    assert bridge.stats.fallbacks == 2
    good = history(1)
    assert bridge.project(good) == good and bridge.stats.calls == 1
