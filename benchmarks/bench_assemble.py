"""``assemble()`` in the agent loop at 10K, 150K and 1M tokens of history, beside LangChain's
``trim_messages`` on the same messages in the same run (issue 10).

Run from the repository root (the shared transcripts in ``../shared`` beside it)::

    .venv/bin/python benchmarks/bench_assemble.py
    .venv/bin/python benchmarks/bench_assemble.py --sizes 150000 --samples 40

History: the 3.6 MB Claude Code session's messages (its recorded compactions left out), repeated
with fresh message and tool-call ids until the history holds the size in tokens (the model's
counter), then repaired once so that it breaks no pairing rule. *With a lasting violation*, an
orphan tool result (a result whose call is not in the history; real sessions have them) sits
near its start for the whole run. An engine ingests that history, assembles once (not timed),
then ``--samples`` times runs the agent-loop step: ingest an assistant message with a tool call,
``after_turn`` with the last projection's tokens as usage, ingest the tool result (not timed),
then ``assemble()`` (timed). The window is large enough that nothing is compacted (2x the history,
at least 200,000 tokens): the figure is what every call pays. Policies ``default`` and ``none``.

``trim_messages`` is timed on the same history and loop messages, converted to LangChain messages
once (not timed), called as a LangChain user calls it: ``strategy="last"``,
``token_counter=count_tokens_approximately``, ``max_tokens`` = window - fixed prefix -
min(max output, 20,000).

Prints one line per size and case, medians in microseconds::

    assemble p50 µs at 150,000 tokens: default A, none B, trim_messages C
    assemble p50 µs at 150,000 tokens with a lasting violation: default A, none B, trim_messages C

then the ratios the issue sets goals on (none / trim_messages at 150K; none at 1M / none at 10K).
It asserts nothing. Needs LangChain (extra ``peers``) for the ``trim_messages`` figure.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
import warnings
from pathlib import Path
from typing import Any

import msgspec

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "src"))

from ctxengine.engine.core import ContextEngine  # noqa: E402
from ctxengine.formats import load  # noqa: E402
from ctxengine.layers.pairing import repair  # noqa: E402
from ctxengine.messages.model import Message, Session, Text, ToolCall, ToolResult, Usage  # noqa: E402
from ctxengine.models.registry import Registry  # noqa: E402
from ctxengine.policy.registry import get_policy  # noqa: E402
from ctxengine.replay import infer_fixed_prefix  # noqa: E402
from ctxengine.tokens.counter import TokenCounter, counter_for  # noqa: E402

TRANSCRIPTS = REPO.parent / "shared" / "data" / "transcripts"
BIG_FILE = "claude-code-jsonl/cc_mimo-v2.5-pro_vscode_2x-autocompact_4530697c.jsonl"
SIZES = (10_000, 150_000, 1_000_000)
POLICIES = ("default", "none")
RECORDED_ORIGINS = ("compact_summary", "compact_restore")
RESULT_TEXT = "\n".join(f"{k:4d}\tdef handler_{k}(event):  # returns the parsed value" for k in range(40))


def _renamed(m: Message, cycle: int) -> Message:
    """``m`` with ids unique to this repetition of the session (timestamps dropped: the
    repetitions would go back in time)."""
    blocks = tuple(
        msgspec.structs.replace(b, id=f"{b.id}~{cycle}")
        if isinstance(b, ToolCall)
        else msgspec.structs.replace(b, call_id=f"{b.call_id}~{cycle}")
        if isinstance(b, ToolResult)
        else b
        for b in m.blocks
    )
    return msgspec.structs.replace(m, id=f"{m.id}~{cycle}", blocks=blocks, timestamp=None)


def build_history(session: Session, tokens: int, counter: TokenCounter, violation: bool) -> list[Message]:
    """The session's messages repeated until ``tokens`` tokens, repaired to a valid history;
    with ``violation``, an orphan tool result near the start."""
    base = [m for m in session.messages if m.origin not in RECORDED_ORIGINS]
    out: list[Message] = []
    total = cycle = 0
    while total < tokens:
        for m in base:
            out.append(_renamed(m, cycle))
            total += counter.count_message(out[-1])
            if total >= tokens and m.role == "user":
                break
        cycle += 1
    history, _ = repair(out)
    if violation:
        orphan = Message("user", (ToolResult("bench-orphan", (Text("stale output"),)),), "bench-orphan")
        history.insert(min(3, len(history)), orphan)
    return history


def loop_messages(k: int) -> tuple[Message, Message]:
    """Sample ``k``'s assistant tool call and its result."""
    cid = f"bench-call-{k}"
    call = Message(
        "assistant",
        (Text("Reading the next module."), ToolCall(cid, "Read", {"file_path": f"/src/pkg/m{k}.py"})),
        f"bench-a-{k}",
    )
    return call, Message("user", (ToolResult(cid, (Text(RESULT_TEXT),), name="Read"),), f"bench-r-{k}")


def time_engine(
    session: Session, history: list[Message], policy: str, window: int, fixed: int, samples: int
) -> tuple[list[float], dict[str, int]]:
    """Microseconds of each timed ``assemble()``, and the layer events they reported."""
    engine = ContextEngine(get_policy(policy), model=session.model, window=window)
    engine.bootstrap(system=session.system, fixed_prefix_tokens=fixed)
    for m in history:
        engine.ingest(m)
    proj = engine.assemble()
    times: list[float] = []
    events: dict[str, int] = {}
    for k in range(samples):
        call, result = loop_messages(k)
        engine.ingest(call)
        engine.after_turn(Usage(input_tokens=proj.tokens))
        engine.ingest(result)
        t0 = time.perf_counter()
        proj = engine.assemble()
        times.append((time.perf_counter() - t0) * 1e6)
        for e in proj.events:
            events[e.layer] = events.get(e.layer, 0) + 1
    engine.dispose()
    return times, events


def time_trim(history: list[Message], budget: int, samples: int) -> list[float]:
    """Microseconds of each ``trim_messages`` call on the history plus the loop so far."""
    from langchain_core.messages import trim_messages
    from langchain_core.messages.utils import count_tokens_approximately

    from ctxengine.peers.langchain import _to_langchain

    lc: list[Any] = [x for k, m in enumerate(history) for x, _ in _to_langchain(m, k)]
    times: list[float] = []
    for k in range(samples):
        for m in loop_messages(k):
            lc.extend(x for x, _ in _to_langchain(m, len(history) + 2 * k))
        t0 = time.perf_counter()
        trim_messages(lc, max_tokens=budget, token_counter=count_tokens_approximately, strategy="last")
        times.append((time.perf_counter() - t0) * 1e6)
    return times


def measure(session: Session, size: int, violation: bool, samples: int) -> dict[str, float]:
    """p50 µs per policy and for ``trim_messages`` at ``size`` tokens of history."""
    registry = Registry.default()
    model = registry.get(session.model or "unknown")
    counter = counter_for(model)
    fixed = infer_fixed_prefix(session, counter.count_message, counter.count_text)
    history = build_history(session, size, counter, violation)
    window = max(200_000, 2 * size)
    out: dict[str, float] = {}
    for policy in POLICIES:
        times, events = time_engine(session, history, policy, window, fixed, samples)
        out[policy] = statistics.median(times)
        if events:
            made = ", ".join(f"{layer} {n}" for layer, n in sorted(events.items()))
            print(f"  note: {policy} at {size:,} tokens: events reported by the timed calls: {made}")
    try:
        budget = window - fixed - min(model.max_output, 20_000)
        out["trim_messages"] = statistics.median(time_trim(history, budget, samples))
    except ImportError as exc:
        print(f"  note: trim_messages skipped ({exc}); install the 'peers' extra")
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--transcripts", type=Path, default=TRANSCRIPTS)
    ap.add_argument(
        "--sizes", default=",".join(str(s) for s in SIZES), help="tokens of history, comma-separated"
    )
    ap.add_argument("--samples", type=int, default=40, help="timed calls per size and policy")
    args = ap.parse_args()
    warnings.simplefilter("ignore")  # windows above the model's own, on purpose (nothing compacts)
    (session,) = load(args.transcripts / BIG_FILE)
    sizes = [int(s) for s in args.sizes.split(",")]
    found: dict[tuple[int, bool], dict[str, float]] = {}
    for violation in (False, True):
        for size in sizes:
            r = found[(size, violation)] = measure(session, size, violation, args.samples)
            case = " with a lasting violation" if violation else ""
            figures = ", ".join(
                f"{name} {r[name]:,.0f}" for name in (*POLICIES, "trim_messages") if name in r
            )
            print(f"assemble p50 µs at {size:,} tokens{case}: {figures}", flush=True)
    for violation in (False, True):
        case = " with a lasting violation" if violation else ""
        r = found.get((150_000, violation))
        if r and "trim_messages" in r:
            print(f"none / trim_messages at 150,000 tokens{case}: 1/{r['trim_messages'] / r['none']:.0f}")
        lo, hi = found.get((min(sizes), violation)), found.get((max(sizes), violation))
        if lo and hi and len(sizes) > 1:
            print(f"none at {max(sizes):,} / at {min(sizes):,} tokens{case}: {hi['none'] / lo['none']:.2f}x")


if __name__ == "__main__":
    main()
