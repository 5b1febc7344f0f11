"""A small agent loop on an OpenAI-compatible Chat Completions server where ctxengine decides what
the model sees: OpenAI itself, or Ollama, vLLM, LM Studio, OpenRouter through ``--base-url``.

Every turn: the engine assembles the projection (clearing, offloading, compacting as its policy
says), the Chat Completions writer encodes it, the SDK sends it, and the reply goes back into the
engine with the provider's usage. Tool calls run in the workspace with ctxengine's tools.

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
from pathlib import Path
from typing import Any

import openai

from ctxengine.engine import ContextEngine
from ctxengine.formats.openai_writer import to_openai_chat
from ctxengine.llm import make_client
from ctxengine.llm.openai_client import normalise_usage
from ctxengine.messages import Block, Message, Text, ToolCall, Usage
from ctxengine.models import usage_cost_usd
from ctxengine.policy import get_policy
from ctxengine.store import SQLiteStore
from ctxengine.tools.registry import build_tools

SYSTEM = (
    "You are a coding assistant working in a repository. Look at the files with the tools before "
    "you answer; quote paths exactly. Answer concisely."
)


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


def report(turn: int, predicted: int, usage: Usage, cost: float) -> None:
    print(
        f"[turn {turn}] predicted {predicted:,} input tokens; provider: {usage.total_input:,} in "
        f"({usage.cache_read_tokens:,} cached), {usage.output_tokens:,} out; ${cost:.4f}",
        flush=True,
    )


def run(args: argparse.Namespace) -> int:
    workspace = Path(args.workspace).resolve()
    api_key = os.environ.get("OPENAI_API_KEY") or ("not-needed" if args.base_url else None)
    client = openai.OpenAI(api_key=api_key, base_url=args.base_url, timeout=args.timeout, max_retries=2)
    # OpenAI's newer models want max_completion_tokens; most compatible servers know max_tokens
    cap_name = "max_tokens" if args.base_url else "max_completion_tokens"
    summarizer = None
    if args.summarize_with_model:
        summarizer = make_client(f"openai:{args.model}", base_url=args.base_url, api_key=api_key)

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
    tools = toolbox.executor.definitions("openai")
    engine.bootstrap(system=SYSTEM, fixed_prefix_tokens=engine.counter.count_text(SYSTEM + json.dumps(tools)))
    engine.ingest(Message("user", (Text(args.prompt),), id="user-prompt", timestamp=time.time()))

    total = 0.0
    answer = ""
    try:
        for turn in range(1, args.max_turns + 1):
            proj = engine.assemble(now=time.time())
            for e in proj.events:
                print(f"[ctxengine] {e.layer}: {e.tokens_before:,} -> {e.tokens_after:,} tokens ({e.reason})")
            body = to_openai_chat(proj.messages, system=proj.system, model=args.model, tools=tools)
            body[cap_name] = args.max_tokens
            completion = client.chat.completions.create(**body)
            reply = to_message(completion, turn)
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
    p.add_argument("--model", default="gpt-4o")
    p.add_argument(
        "--base-url", default=os.environ.get("OPENAI_BASE_URL"), help="e.g. http://localhost:11434/v1"
    )
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
