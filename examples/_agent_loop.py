"""The provider-neutral half of the example agents: the engine, the tools and the turn loop.

``anthropic_agent.py`` and ``openai_compatible_agent.py`` keep only what depends on the provider
(the SDK client, how a projection is encoded and sent, how the reply becomes a neutral
``Message``) and hand it to ``run_agent`` as one ``complete`` function. The scripts import this
file as a sibling module: ``python examples/<script>.py`` puts ``examples/`` on ``sys.path``, so
copy it along with the script you start from.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ctxengine import (
    AgentSpec,
    ContextEngine,
    Message,
    Projection,
    Restore,
    SQLiteStore,
    SubagentError,
    SubagentResult,
    Text,
    ToolCall,
    ToolDefinition,
    ToolResult,
    Usage,
    build_tools,
    explore_for,
    get_policy,
    load_bootstrap,
    make_client,
    run_subagent,
    task_tool,
    usage_cost_usd,
)

SYSTEM = (
    "You are a coding assistant working in a repository. Look at the files with the tools before "
    "you answer; quote paths exactly. Answer concisely."
)

# (projection, tool definitions in the provider's format, turn number, model or None for --model)
# -> the model's reply
Complete = Callable[[Projection, list[dict[str, Any]], int, str | None], Message]


def agent_parser(
    doc: str, *, model: str, base_url_env: str, base_url_help: str = "API base URL"
) -> argparse.ArgumentParser:
    """The command line both scripts share; ``doc`` is the script's docstring, ``--base-url``
    defaults to the environment variable ``base_url_env``."""
    p = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    p.add_argument("prompt", help="what to ask the agent")
    p.add_argument("--model", default=model)
    p.add_argument("--base-url", default=os.environ.get(base_url_env), help=base_url_help)
    p.add_argument("--workspace", default=".", help="directory the tools may read (default: .)")
    p.add_argument("--max-turns", type=int, default=20)
    p.add_argument("--max-tokens", type=int, default=4_096, help="output cap per call")
    p.add_argument("--window", type=int, default=None, help="context window override (tokens)")
    p.add_argument("--policy", default="default", help="built-in ctxengine policy")
    p.add_argument("--timeout", type=float, default=120.0, help="seconds per request")
    p.add_argument("--summarize-with-model", action="store_true", help="LLM notes and summaries")
    p.add_argument(
        "--subagent-model",
        default=None,
        help="model of the Explore sub-agent the task tool spawns (default: the provider's cheap one)",
    )
    return p


def report(turn: int, predicted: int, usage: Usage, cost: float) -> None:
    print(
        f"[turn {turn}] predicted {predicted:,} input tokens; provider: {usage.total_input:,} in "
        f"({usage.cache_read_tokens:,} cache read, {usage.cache_write_tokens:,} cache write), "
        f"{usage.output_tokens:,} out; ${cost:.4f}",
        flush=True,
    )


def run_agent(args: argparse.Namespace, complete: Complete, *, provider: str, api_key: str | None) -> int:
    """Drive ``complete`` until the model answers without a tool call (exit 0 if it said anything).

    ``provider`` (``"anthropic"`` or ``"openai"``) picks the tool-definition format and, with
    ``--summarize-with-model``, the ``ctxengine.llm`` client that writes notes and summaries.
    """
    workspace = Path(args.workspace).resolve()
    summarizer = None
    if args.summarize_with_model:
        summarizer = make_client(f"{provider}:{args.model}", base_url=args.base_url, api_key=api_key)

    # the workspace's AGENTS.md / CLAUDE.md (capped) follow the base prompt for the whole session
    instructions = load_bootstrap(workspace).text
    system = f"{SYSTEM}\n\n# Instruction files\n\n{instructions}" if instructions else SYSTEM
    policy = get_policy(args.policy)
    if instructions:  # the system prompt survives compaction: no need to restore them after one
        policy = policy.with_(policy.settings(Restore).with_(instruction_files=()))

    store = SQLiteStore()  # shared: the retrieve tool finds what the engine offloaded
    engine = ContextEngine(
        policy,
        model=args.model,
        window=args.window,
        store=store,
        session_id="agent",
        llm=summarizer,
        workspace=workspace,
        background_notes=True,  # notes updates (an LLM call with --summarize-with-model) off the loop
    )
    toolbox = build_tools(workspace, store, "agent", window=engine.window, counter=engine.counter)
    engine.compaction_listeners.append(toolbox.read_state.reset)  # stubs may point at dropped text
    engine.compaction_listeners.append(toolbox.working_set.invalidate)  # the block may have been dropped
    explore = explore_for(provider, args.subagent_model)  # what the task tool spawns
    task = task_tool(explore)
    task_definition = task.anthropic() if provider == "anthropic" else task.openai()
    tools = [*toolbox.executor.definitions(provider), task_definition]
    engine.bootstrap(
        system=system,
        fixed_prefix_tokens=engine.counter.count_text(system + json.dumps(tools)),
        # a summary by the session's own model repeats them, so it reads the cached prefix
        tools=[ToolDefinition(t.name, t.description, t.parameters) for t in toolbox.executor.tools.values()],
    )
    engine.ingest(Message("user", (Text(args.prompt),), id="user-prompt", timestamp=time.time()))

    total = 0.0
    answer = ""
    try:
        for turn in range(1, args.max_turns + 1):
            proj = engine.assemble(now=time.time())
            for e in proj.events:
                print(f"[ctxengine] {e.layer}: {e.tokens_before:,} -> {e.tokens_after:,} tokens ({e.reason})")
            reply = complete(proj, tools, turn, None)
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
                if call.name == "task":  # its result is the sub-agent's report, ingested by the engine
                    total += run_task(engine, call, explore, workspace, complete, provider)
                    continue
                result = toolbox.executor.execute(call)
                size = sum(len(p.text) for p in result.content if isinstance(p, Text))
                flag = " (error)" if result.is_error else ""
                print(f"  -> {call.name}({json.dumps(call.input)[:120]}): {size:,} chars{flag}", flush=True)
                results.append(result)
            if results:
                now = time.time()
                engine.ingest(Message("user", tuple(results), id=f"tool-results-{turn}", timestamp=now))
            if toolbox.working_set.changed:  # open files ride with the newest turn, moved only on change
                engine.set_block(toolbox.working_set.block_text())
        else:
            print(f"[stopped after {args.max_turns} turns]")
    finally:
        toolbox.close()
        engine.dispose()
    print(f"[total] ${total:.4f} for the conversation" + (" (summaries extra)" if summarizer else ""))
    return 0 if answer else 1


def run_task(
    engine: ContextEngine, call: ToolCall, spec: AgentSpec, workspace: Path, complete: Complete, provider: str
) -> float:
    """A ``task`` call: an Explore sub-agent with its own context and its own tools (its own read
    cache); only its report and the files it read reach this session. Returns its cost (USD)."""
    prompt = str(call.input.get("prompt", "")) if isinstance(call.input, dict) else str(call.input)
    try:
        ctx = engine.prepare_subagent_spawn(spec, prompt, call_id=call.id, workspace=workspace)
    except SubagentError as exc:  # refused (depth, empty prompt) or failed: the model is told
        error = ToolResult(call.id, (Text(f"Error: {exc}"),), True, "task")
        engine.ingest(Message("user", (error,), id=f"task-error-{call.id}", timestamp=time.time()))
        return 0.0
    child = ctx.engine
    toolbox = build_tools(workspace, engine.store, ctx.child_id, window=child.window, counter=child.counter)
    allowed = [t for name, t in toolbox.executor.tools.items() if name in ctx.tools]
    defs = [t.anthropic() if provider == "anthropic" else t.openai() for t in allowed]
    try:
        call_model = lambda proj, sub: complete(proj, defs, 0, sub.model)  # noqa: E731
        result = run_subagent(ctx, call_model, toolbox.executor.execute)
    except Exception as exc:  # the sub-agent's call failed: it ends, and the model is told why
        failed = f"[the sub-agent failed: {exc}]"
        result = SubagentResult(child_id=ctx.child_id, report=failed, reason="deleted")
    finally:
        toolbox.close()
    usage = [m.usage for m in ctx.engine.history if m.role == "assistant" and m.usage is not None]
    cost = sum(usage_cost_usd(ctx.engine.model, u) for u in usage)
    engine.on_subagent_ended(result)
    print(
        f"  -> task ({spec.name} on {ctx.model}): {len(usage)} calls, "
        f"{sum(u.total_input for u in usage):,} input tokens kept out of this context; "
        f"report {len(result.report):,} chars; ${cost:.4f}",
        flush=True,
    )
    return cost
