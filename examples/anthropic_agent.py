"""A small agent loop on the Anthropic Messages API where ctxengine decides what the model sees.

Every turn: the engine assembles the projection (clearing, offloading, compacting as its policy
says), the Anthropic writer encodes it with prompt-cache breakpoints, the SDK sends it, and the
reply goes back into the engine with the provider's usage. Tool calls run in the workspace with
ctxengine's context-aware tools (read, grep, glob, search, retrieve, open_files, close_files).
This file holds what is Anthropic-specific; the loop itself is in ``_agent_loop.py`` next to it.

    ANTHROPIC_API_KEY=... python examples/anthropic_agent.py --workspace . "Where is the CLI defined?"
    python examples/anthropic_agent.py --base-url http://127.0.0.1:8080 "..."   # a local server

Options: --model, --base-url, --workspace, --max-turns, --window, --policy, --summarize-with-model
(notes and summaries by the same model instead of ctxengine's $0 structured summary).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from typing import Any

import anthropic
from _agent_loop import agent_parser, run_agent  # examples/_agent_loop.py: engine, tools, turn loop

from ctxengine import Block, Message, Projection, Text, Thinking, ToolCall, anthropic_usage, to_anthropic


def to_message(response: anthropic.types.Message, turn: int) -> Message:
    """The SDK's reply as a neutral message (text, thinking and tool-use blocks, usage)."""
    blocks: list[Block] = []
    for b in response.content:
        if b.type == "text":
            blocks.append(Text(b.text))
        elif b.type == "thinking":
            blocks.append(Thinking(b.thinking, signature=b.signature))
        elif b.type == "redacted_thinking":
            blocks.append(Thinking("", redacted=True, encrypted=b.data))
        elif b.type == "tool_use":
            blocks.append(ToolCall(b.id, b.name, dict(b.input) if isinstance(b.input, dict) else {}))
    return Message(
        role="assistant",
        blocks=tuple(blocks),
        id=response.id or f"assistant-{turn}",
        timestamp=time.time(),
        usage=anthropic_usage(response.usage),
        model=response.model,
    )


def run(args: argparse.Namespace) -> int:
    api_key = os.environ.get("ANTHROPIC_API_KEY") or ("not-needed" if args.base_url else None)
    client = anthropic.Anthropic(api_key=api_key, base_url=args.base_url, timeout=args.timeout, max_retries=2)

    def complete(proj: Projection, tools: list[dict[str, Any]], turn: int, model: str | None) -> Message:
        """One model call (``model``, else ``--model``): the projection with prompt-cache
        breakpoints in, a neutral message out."""
        body = to_anthropic(
            proj.messages,
            system=proj.system,
            model=model or args.model,
            max_tokens=args.max_tokens,
            tools=tools,
        )
        return to_message(client.messages.create(**body), turn)

    with client:
        return run_agent(args, complete, provider="anthropic", api_key=api_key)


def main(argv: list[str] | None = None) -> int:
    parser = agent_parser(__doc__, model="claude-sonnet-4-6", base_url_env="ANTHROPIC_BASE_URL")
    return run(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
