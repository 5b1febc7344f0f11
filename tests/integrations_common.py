"""What the framework-integration tests share: the examples' agents (their scripted test models),
the shared transcripts, the canonical form a round trip is compared in, and the checks on what a
model received."""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from types import ModuleType

import msgspec

from conftest import CLAUDE_CODE, CODEX, REPO
from ctxengine.formats import load
from ctxengine.formats.openai_writer import to_openai_chat
from ctxengine.formats.validate import validate_openai_chat
from ctxengine.integrations.bridge import PAIRING_KINDS, PAIRING_RULES
from ctxengine.layers.pairing import find_violations
from ctxengine.messages.model import Block, Image, Message, ToolResult
from ctxengine.models.registry import Registry
from ctxengine.tokens.counter import counter_for

# a few real sessions: Claude Code (thinking, redacted thinking, images) and Codex (reasoning items)
REPLAYED = (
    CLAUDE_CODE / "cc_opus-4.5_thinking_redacted_43391f62.jsonl",
    CLAUDE_CODE / "cc_mimo-v2.5-pro_2x-autocompact_db3f6604.jsonl",
    CODEX / "codex_gpt-5.4_cli-0.104_rollout-2026-03-09T18-28-04-019cd524.jsonl",
)


def example(name: str) -> ModuleType:
    """An example script of ``examples/`` as a module (its sibling ``_scripted_task`` importable)."""
    folder = str(REPO / "examples")
    if folder not in sys.path:
        sys.path.insert(0, folder)
    return importlib.import_module(name)


def replayed_messages() -> list[tuple[str, list[Message] | Path]]:
    """(file name, messages) of each session of the replayed transcripts; without the shared
    corpus (file name, its missing path), which conftest skips (fails under CI) as such."""
    out: list[tuple[str, list[Message] | Path]] = []
    for path in REPLAYED:
        if not Path(path).exists():
            out.append((Path(path).name, Path(path)))
            continue
        for session in load(Path(path)):
            out.append((Path(path).name, session.messages))
    return out


Normalize = Callable[[Block], Block]


def canonical(
    messages: Sequence[Message], normalize: Normalize | None = None
) -> list[tuple[str, tuple[Block, ...]]]:
    """Role and blocks, consecutive messages of one role merged (a turn split over several
    framework items is one turn, as for the pairing rules); ``normalize`` drops what a format has
    no field for."""
    out: list[tuple[str, tuple[Block, ...]]] = []
    for m in messages:
        blocks = tuple(normalize(b) for b in m.blocks) if normalize else m.blocks
        if out and out[-1][0] == m.role:
            out[-1] = (m.role, out[-1][1] + blocks)
        else:
            out.append((m.role, blocks))
    return out


def without_image_size(block: Block) -> Block:
    """An image without its pixel size (a format that does not carry it)."""
    if isinstance(block, Image):
        return msgspec.structs.replace(block, width=None, height=None)
    if isinstance(block, ToolResult):
        return msgspec.structs.replace(block, content=tuple(without_image_size(p) for p in block.content))  # type: ignore[misc]
    return block


def pairing_problems(messages: Sequence[Message]) -> list[str]:
    """Pairing breaches in what a model received (our invariant and OpenAI's rules O2/O3)."""
    problems = [f"{v.kind}: {v.detail}" for v in find_violations(messages) if v.kind in PAIRING_KINDS]
    body = to_openai_chat(messages, model="gpt-4.1")
    return problems + [p for p in validate_openai_chat(body) if p.endswith(PAIRING_RULES)]


def tokens(messages: Sequence[Message]) -> int:
    """Tokens of messages by the examples' counter (o200k)."""
    counter = counter_for(Registry.default().get("gpt-4.1"))
    return sum(counter.count_message(m) for m in messages)
