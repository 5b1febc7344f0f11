"""A small agent loop on an OpenAI-compatible Chat Completions server where ctxengine decides what
the model sees: OpenAI itself, or Ollama, vLLM, LM Studio, OpenRouter through ``--base-url``.

Every turn: the engine assembles the projection (clearing, offloading, compacting as its policy
says), the Chat Completions writer encodes it, the SDK sends it, and the reply goes back into the
engine with the provider's usage. Tool calls run in the workspace with ctxengine's tools.
This file holds what is specific to Chat Completions; the loop itself is in ``_agent_loop.py``.

    OPENAI_API_KEY=... python examples/openai_compatible_agent.py --model gpt-4o "Where is the CLI?"
    python examples/openai_compatible_agent.py --base-url http://localhost:11434/v1 \\
        --model llama3.1:8b --window 32000 "..."                          # Ollama, no key needed

Options: --model, --base-url, --workspace, --max-turns, --window, --policy, --summarize-with-model
(notes and summaries by the same model instead of ctxengine's $0 structured summary).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from typing import Any

import openai
from _agent_loop import agent_parser, run_agent  # examples/_agent_loop.py: engine, tools, turn loop

from ctxengine import Block, Message, Projection, Text, ToolCall, normalise_usage, to_openai_chat


def arguments(raw: str | None) -> dict[str, Any]:
    """A tool call's JSON arguments; what is not a JSON object is passed on as ``input``."""
    try:
        value = json.loads(raw or "{}")
    except json.JSONDecodeError:
        return {"input": raw}
    return value if isinstance(value, dict) else {"input": value}


def to_message(completion: Any, turn: int) -> Message:
    """The SDK's first choice as a neutral message (text and tool calls, usage)."""
    msg = completion.choices[0].message
    blocks: list[Block] = []
    if msg.content:
        blocks.append(Text(msg.content))
    for call in msg.tool_calls or []:
        blocks.append(ToolCall(call.id, call.function.name, arguments(call.function.arguments)))
    usage = normalise_usage(completion.usage.model_dump() if completion.usage else None)
    return Message(
        role="assistant",
        blocks=tuple(blocks),
        id=completion.id or f"assistant-{turn}",
        timestamp=time.time(),
        usage=usage,
        model=completion.model,
    )


def run(args: argparse.Namespace) -> int:
    api_key = os.environ.get("OPENAI_API_KEY") or ("not-needed" if args.base_url else None)
    client = openai.OpenAI(api_key=api_key, base_url=args.base_url, timeout=args.timeout, max_retries=2)
    # OpenAI's newer models want max_completion_tokens; most compatible servers know max_tokens
    cap_name = "max_tokens" if args.base_url else "max_completion_tokens"

    def complete(proj: Projection, tools: list[dict[str, Any]], turn: int, model: str | None) -> Message:
        """One model call (``model``, else ``--model``): Chat Completions in, a neutral message out."""
        body = to_openai_chat(proj.messages, system=proj.system, model=model or args.model, tools=tools)
        body[cap_name] = args.max_tokens
        return to_message(client.chat.completions.create(**body), turn)

    with client:
        return run_agent(args, complete, provider="openai", api_key=api_key)


def main(argv: list[str] | None = None) -> int:
    parser = agent_parser(
        __doc__,
        model="gpt-4o",
        base_url_env="OPENAI_BASE_URL",
        base_url_help="e.g. http://localhost:11434/v1",
    )
    return run(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
