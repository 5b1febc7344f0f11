"""The overflow guard's cut of large tool-call inputs, when dropping rounds and cutting tool
results left the request over the window (``overflow_guard``; run by the engine after
``fit_results``).

A round the guard cannot drop (the newest: the latest request's, or the one in flight) can hold a
tool call whose input alone fills a small window: a ``Write`` of a 20,000-character file, an
``Edit`` with a long replacement. The model wrote it; the file now holds it and the tool's result
says so. Each long string value of such a call (over ``FIT_MIN_CHARS``) is cut in place to its
head and tail, largest calls first, until the request fits; the whole input is kept as artifact
``tool-call/<call id>`` (``retrieve``), named in the cut. The call keeps its id, name and keys, so
every provider still pairs it with its result (Anthropic's context editing clears tool inputs
the same way: ``clear_tool_inputs``). Cost: $0.
"""

from __future__ import annotations

import msgspec

from ctxengine.layer_settings import OverflowGuard
from ctxengine.layers.base import LayerContext, LayerEvent, Replacements, call_artifact_id, result_key
from ctxengine.layers.overflow_guard import FIT_MIN_CHARS, LAYER, guard_limit, head_and_tail
from ctxengine.messages import ToolCall


def fit_calls(ctx: LayerContext) -> Replacements | None:
    """The largest tool-call inputs of the view cut in place until the request fits the guard's
    limit (see the module docstring); None when it fits or no call has a long string value."""
    if not OverflowGuard.of(ctx.policy).enabled:
        return None
    limit = guard_limit(ctx)
    over = ctx.predicted - limit
    if over <= 0:
        return None
    found: list[tuple[int, str, ToolCall]] = []
    for m in ctx.view:
        if m.role != "assistant":
            continue
        for c in m.tool_calls:
            if isinstance(c.input, dict):
                size = sum(len(v) for v in c.input.values() if isinstance(v, str) and len(v) > FIT_MIN_CHARS)
                if size:
                    found.append((size, m.id, c))
    found.sort(key=lambda f: -f[0])
    out: dict[str, ToolCall] = {}
    for _, msg_id, call in found:
        if over <= 0:
            break
        new_input, over = _cut_input(ctx, call, over)
        out[result_key(msg_id, call.id)] = msgspec.structs.replace(call, input=new_input)
    if not out:
        return None
    event = LayerEvent(
        layer=LAYER,
        reason=f"request {ctx.predicted:,} > {limit:,} tokens with only the newest round left: "
        f"{len(out)} tool call input(s) cut to fit",
        tokens_before=ctx.predicted,
        tokens_after=ctx.predicted,  # the engine fills in the measured figure
        details={"fitted_calls": sorted(c.id for c in out.values())},
    )
    return Replacements({}, event, calls=out)


def _cut_input(ctx: LayerContext, call: ToolCall, over: int) -> tuple[dict[str, object], int]:
    """``call``'s input with its long string values cut to head and tail (largest first) while
    the request is ``over`` the limit; and what is left over (tokens)."""
    source = call.input if isinstance(call.input, dict) else {}
    new_input: dict[str, object] = dict(source)
    longest = sorted(
        ((k, v) for k, v in source.items() if isinstance(v, str) and len(v) > FIT_MIN_CHARS),
        key=lambda kv: -len(kv[1]),
    )
    for key, value in longest:
        if over <= 0:
            break
        tokens = round(ctx.count_text(value) * ctx.scale)
        what = f"chars of {key} cut to fit the context window; the whole input is artifact"
        cut = head_and_tail(value, tokens, over, f"{what} {call_artifact_id(call.id)}")
        new_input[key] = cut
        over -= tokens - round(ctx.count_text(cut) * ctx.scale)
    return new_input, over
