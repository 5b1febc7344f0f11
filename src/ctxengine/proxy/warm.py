"""The proxy's warm start: what a session's first request would otherwise pay once per process.

``warm_start`` runs on the engine thread from the app's lifespan, which waits for it before the
server takes requests (~0.1-0.2 s at start-up, once per process; a failure is one warning line):
the tokenizer (``tokens.encoders.encoder``: ~50 ms of a first request before), then one
throwaway session through the request path (an engine with an in-memory store, one tool round
ingested, assembled, written for each wire and checked), which imports the modules the engine
and the writers load lazily and reads the model registry (~30 ms more). The throwaway session
shares nothing with the proxy's sessions: its engine, store and memos are dropped.
"""

from __future__ import annotations

import gc
import logging
import warnings

from ctxengine.engine.core import ContextEngine
from ctxengine.messages.model import Message, Text, ToolCall, ToolResult
from ctxengine.policy.registry import Policy
from ctxengine.tokens.encoders import encoder

log = logging.getLogger("ctxengine.proxy")
_MODELS = {"anthropic": "claude-sonnet-4-6", "openai": "gpt-4o"}


def warm_start(policy: Policy, window: int | None, freeze: bool = False) -> None:
    """Build the tokenizer, then take one throwaway session through the request path (see the
    module docstring); ``freeze``: then collect the heap once and freeze it (``freeze_heap``).
    Raises what the tokenizer's build raises; a throwaway session that fails is logged (a
    warning) and only costs the first request its time."""
    from ctxengine.proxy.apply import prepare
    from ctxengine.proxy.sessions import ProxySession
    from ctxengine.proxy.wire_anthropic import AnthropicWire
    from ctxengine.proxy.wire_openai import OpenAIWire

    encoder()
    for wire in (AnthropicWire(), OpenAIWire()):
        model = _MODELS[wire.provider]
        try:
            with warnings.catch_warnings():  # the window's warnings are said for real sessions
                warnings.simplefilter("ignore")
                engine = ContextEngine(policy, model=model, window=window or 200_000, session_id="warm")
            session = ProxySession("warm", wire.provider, model, engine, wire.reader())
            request = wire.parse({"model": model, "max_tokens": 16, "messages": _conversation(wire.provider)})
            prepare(session, wire, request)
            engine.dispose()
        except Exception as exc:  # only time is lost: the first request pays it instead
            log.warning(
                "proxy: the warm start of the %s request path failed: %s: %s",
                wire.provider,
                type(exc).__name__,
                exc,
            )
    if freeze:
        freeze_heap()


def freeze_heap() -> None:
    """Collect the process's heap once, then move what is left (the modules, classes and
    functions of the start-up: ~48,000 objects) out of the cyclic collector's view (``gc.freeze``),
    so that its full collections walk only what the sessions made since. A full collection of
    the start-up's heap took 12-16 ms, on whichever request's allocation triggered it (the
    proxy's p99 at 150,000 tokens); after the freeze, under 1 ms. What is frozen stays for the
    process's life: only for a process that is the proxy's own (``ProxyConfig.freeze_heap``)."""
    gc.collect()
    gc.freeze()


def _conversation(provider: str) -> list[dict[str, object]]:
    """A prompt, a tool call and its result, in ``provider``'s wire format."""
    from ctxengine.formats.anthropic_writer import to_anthropic
    from ctxengine.formats.openai_writer import to_openai_chat

    neutral = [
        Message("user", (Text("Read src/app.py."),), "u"),
        Message("assistant", (ToolCall("c1", "Read", {"file_path": "src/app.py"}),), "a"),
        Message("user", (ToolResult("c1", (Text("def main() -> None:\n    pass\n"),)),), "r"),
    ]
    if provider == "anthropic":
        return list(to_anthropic(neutral, model=_MODELS[provider], cache_breakpoints=False)["messages"])
    return list(to_openai_chat(neutral, model=_MODELS[provider])["messages"])
