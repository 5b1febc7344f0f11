"""A small agent loop on the Anthropic Messages API where ctxengine decides what the model sees.

Every turn: the engine assembles the projection (clearing, offloading, compacting as its policy
says), the Anthropic writer encodes it with prompt-cache breakpoints, the SDK sends it, and the
reply goes back into the engine with the provider's usage. Tool calls run in the workspace with
ctxengine's context-aware tools (read, grep, glob, search, retrieve, open_files, close_files).

    ANTHROPIC_API_KEY=... python examples/anthropic_agent.py --workspace . "Where is the CLI defined?"
    python examples/anthropic_agent.py --base-url http://127.0.0.1:8080 "..."   # a local server

Options: --model, --base-url, --workspace, --max-turns, --window, --policy, --summarize-with-model
(notes and summaries by the same model instead of ctxengine's $0 structured summary).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import anthropic

from ctxengine.engine import ContextEngine
from ctxengine.formats.anthropic_writer import to_anthropic
from ctxengine.llm import make_client
from ctxengine.llm.anthropic_client import anthropic_usage
from ctxengine.messages import Block, Message, Text, Thinking, ToolCall, Usage
from ctxengine.models import usage_cost_usd
from ctxengine.policy import get_policy
from ctxengine.store import SQLiteStore
from ctxengine.tools.registry import build_tools

SYSTEM = (
    "You are a coding assistant working in a repository. Look at the files with the tools before "
    "you answer; quote paths exactly. Answer concisely."
)


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


def report(turn: int, predicted: int, usage: Usage, cost: float) -> None:
    print(
        f"[turn {turn}] predicted {predicted:,} input tokens; provider: {usage.total_input:,} in "
        f"({usage.cache_read_tokens:,} cache read, {usage.cache_write_tokens:,} cache write), "
        f"{usage.output_tokens:,} out; ${cost:.4f}",
        flush=True,
    )


def run(args: argparse.Namespace) -> int:
    workspace = Path(args.workspace).resolve()
    api_key = os.environ.get("ANTHROPIC_API_KEY") or ("not-needed" if args.base_url else None)
    client = anthropic.Anthropic(api_key=api_key, base_url=args.base_url, timeout=args.timeout, max_retries=2)
    summarizer = None
    if args.summarize_with_model:
        summarizer = make_client(f"anthropic:{args.model}", base_url=args.base_url, api_key=api_key)

    store = SQLiteStore()  # shared: the retrieve tool finds what the engine offloaded
    engine = ContextEngine(
        get_policy(args.policy),
        model=args.model,
        window=args.window,
        store=store,
        session_id="agent",
        llm=summarizer,
        workspace=workspace,
    )
    toolbox = build_tools(workspace, store, "agent", window=engine.window, counter=engine.counter)
    engine.compaction_listeners.append(toolbox.read_state.reset)  # stubs may point at dropped text
    engine.compaction_listeners.append(toolbox.working_set.invalidate)  # the block may have been dropped
    tools = toolbox.executor.definitions("anthropic")
    engine.bootstrap(system=SYSTEM, fixed_prefix_tokens=engine.counter.count_text(SYSTEM + json.dumps(tools)))
    engine.ingest(Message("user", (Text(args.prompt),), id="user-prompt", timestamp=time.time()))

    total = 0.0
    answer = ""
    try:
        for turn in range(1, args.max_turns + 1):
            proj = engine.assemble(now=time.time())
            for e in proj.events:
                print(f"[ctxengine] {e.layer}: {e.tokens_before:,} -> {e.tokens_after:,} tokens ({e.reason})")
            body = to_anthropic(
                proj.messages, system=proj.system, model=args.model, max_tokens=args.max_tokens, tools=tools
            )
            response = client.messages.create(**body)
            reply = to_message(response, turn)
            engine.ingest(reply)
            engine.after_turn(reply.usage)
            usage = reply.usage or Usage()
            cost = usage_cost_usd(engine.model, usage)
            total += cost
            report(turn, proj.tokens, usage, cost)
            if reply.text():
                answer = reply.text()
                print(answer, flush=True)
            if not reply.tool_calls:
                break
            results = []
            for call in reply.tool_calls:
                result = toolbox.executor.execute(call)
                size = sum(len(p.text) for p in result.content if isinstance(p, Text))
                flag = " (error)" if result.is_error else ""
                print(f"  -> {call.name}({json.dumps(call.input)[:120]}): {size:,} chars{flag}", flush=True)
                results.append(result)
            engine.ingest(Message("user", tuple(results), id=f"tool-results-{turn}", timestamp=time.time()))
            if toolbox.working_set.changed:  # open files ride with the newest turn, moved only on change
                engine.set_block(toolbox.working_set.block_text())
        else:
            print(f"[stopped after {args.max_turns} turns]")
    finally:
        toolbox.close()
        engine.dispose()
        client.close()
    print(f"[total] ${total:.4f} for the conversation" + (" (summaries extra)" if summarizer else ""))
    return 0 if answer else 1


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("prompt", help="what to ask the agent")
    p.add_argument("--model", default="claude-sonnet-4-6")
    p.add_argument("--base-url", default=os.environ.get("ANTHROPIC_BASE_URL"), help="API base URL")
    p.add_argument("--workspace", default=".", help="directory the tools may read (default: .)")
    p.add_argument("--max-turns", type=int, default=20)
    p.add_argument("--max-tokens", type=int, default=4_096, help="output cap per call")
    p.add_argument("--window", type=int, default=None, help="context window override (tokens)")
    p.add_argument("--policy", default="default", help="built-in ctxengine policy")
    p.add_argument("--timeout", type=float, default=120.0, help="seconds per request")
    p.add_argument("--summarize-with-model", action="store_true", help="LLM notes and summaries")
    return run(p.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
