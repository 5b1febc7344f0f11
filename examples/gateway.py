"""A many-user chat gateway on ctxengine, offline: per-DM and per-channel history limits at work.

Messages come from a JSONL file (one ``{"key", "from", "text", "ts"}`` per line; ``key`` is an
OpenClaw session key ``agent:<id>:<provider>:<kind>:<peer>``), not from the network, and the
"model" is a stand-in that answers from what it was sent, so the run needs no key and is the same
every time. Every session (DMs, a channel, a group) lives in one store; each has its own engine
whose policy carries the gateway's limits (``HistoryLimits``): a DM keeps at most ``--dm-limit``
user turns, a channel ``--channel-limit``, a group ``--group-limit``, one peer its own
(``--peer telegram:carol=2``). A session is cut back to its limit once it exceeds 1.5 x the limit
(OpenClaw's batching), so between cuts its prompt-cache prefix holds.

    python examples/gateway.py                                  # the bundled gateway_messages.jsonl
    python examples/gateway.py msgs.jsonl --dm-limit 3 --store gateway.sqlite

It prints each eviction as it happens and a table per session: user turns in the transcript and
in the context, evictions, and the calls whose request only grew at its end (a cache hit).
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass
from pathlib import Path

from ctxengine import (
    ContextEngine,
    EvictionSettings,
    HistoryLimits,
    Message,
    Projection,
    SessionKey,
    SessionKeyError,
    SQLiteStore,
    Text,
    Usage,
    get_policy,
)

SYSTEM = "You are the support assistant of a small shop. Answer briefly."
MODEL = "gpt-4o-mini"


@dataclass
class Stats:
    limit: int
    turns: int = 0  # user turns received (all of them stay in the transcript)
    in_context: int = 0  # user turns in the latest request
    evictions: int = 0
    calls: int = 0
    prefix_kept: int = 0  # calls whose request extends the previous one (the cached prefix holds)


def offline_reply(proj: Projection, key: SessionKey, n: int) -> Message:
    """The stand-in model: says how many user turns it was shown (no network)."""
    turns = sum(1 for m in proj.messages if m.role == "user" and not m.tool_results)
    last = proj.messages[-1].text().splitlines()[-1]
    text = f"({key.peer}) noted: {last[:50]!r}; I can see {turns} of your messages."
    return Message("assistant", (Text(text),), f"{key}:reply-{n}", usage=Usage(input_tokens=proj.tokens))


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("messages", nargs="?", default=str(Path(__file__).with_name("gateway_messages.jsonl")))
    p.add_argument("--store", default=":memory:", help="SQLite file holding every session (default: memory)")
    p.add_argument("--dm-limit", type=int, default=4)
    p.add_argument("--channel-limit", type=int, default=6)
    p.add_argument("--group-limit", type=int, default=5)
    p.add_argument("--peer", action="append", default=["telegram:carol=2"], help="PROVIDER:PEER=N")
    return p.parse_args(argv)


def read_messages(path: Path) -> list[tuple[SessionKey, str, str, float]]:
    """The file's messages; a bad line raises ``ValueError`` naming it (nothing is half-read)."""
    out = []
    for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        try:
            rec = json.loads(line)
            out.append((SessionKey.parse(rec["key"]), str(rec["from"]), str(rec["text"]), float(rec["ts"])))
        except (ValueError, KeyError, TypeError, SessionKeyError) as exc:
            raise ValueError(f"{path}:{n}: {exc}") from None
    return out


def run(args: argparse.Namespace) -> int:
    try:
        peers = {p.split("=")[0]: int(p.split("=")[1]) for p in args.peer}
        messages = read_messages(Path(args.messages))
    except (ValueError, IndexError, OSError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    limits = HistoryLimits(dm=args.dm_limit, channel=args.channel_limit, group=args.group_limit, peers=peers)
    base = get_policy("default")
    policy = base.with_(base.settings(EvictionSettings).with_(limits=limits), name="gateway")
    store = SQLiteStore(args.store)
    engines: dict[str, ContextEngine] = {}
    stats: dict[str, Stats] = {}
    previous: dict[str, list[Message]] = {}
    for n, (key, sender, text, ts) in enumerate(messages, 1):
        sid = str(key)
        if sid not in engines:
            engines[sid] = ContextEngine(policy, model=MODEL, store=store, session_id=sid)
            engines[sid].bootstrap(system=SYSTEM)
            stats[sid] = Stats(limit=limits.limit_for(sid))
        engine, st = engines[sid], stats[sid]
        engine.ingest(Message("user", (Text(f"{sender}: {text}"),), f"{sid}:msg-{n}", timestamp=ts))
        st.turns += 1
        proj = engine.assemble(now=ts)
        for e in proj.events:
            if e.layer == "history_limit":
                st.evictions += 1
                print(f"[{sid}] {e.reason}: {e.tokens_before:,} -> {e.tokens_after:,} tokens")
        before = previous.get(sid, [])
        st.calls += 1
        st.prefix_kept += bool(before) and all(a is b for a, b in zip(before, proj.messages, strict=False))
        st.in_context = sum(1 for m in proj.messages if m.role == "user")
        reply = offline_reply(proj, key, n)
        engine.ingest(reply)
        engine.after_turn(reply.usage)
        previous[sid] = [*proj.messages]
    print(f"\n{'session':<40} {'limit':>5} {'turns':>5} {'in ctx':>6} {'evict':>5} {'prefix kept':>11}")
    for sid, st in stats.items():
        kept = f"{st.prefix_kept}/{max(0, st.calls - 1)}"
        print(f"{sid:<40} {st.limit:>5} {st.turns:>5} {st.in_context:>6} {st.evictions:>5} {kept:>11}")
    stored = sum(len(store.entries(sid, "message")) for sid in engines)
    print(f"\n{len(engines)} sessions in one store, {stored} messages stored (the transcript keeps all)")
    for engine in engines.values():
        engine.dispose()  # the store is shared: each dispose closes it; closing twice is harmless
    return 0


if __name__ == "__main__":
    sys.exit(run(parse_args(sys.argv[1:])))
