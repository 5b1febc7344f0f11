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

from collections.abc import Iterator
from typing import Any

import msgspec

from ctxengine.layers.base import LayerContext, LayerEvent, Replacements, call_artifact_id, result_key
from ctxengine.layers.overflow_guard import (
    FIT_MARKER_TOKENS,
    FIT_MIN_CHARS,
    FIT_TAIL_SHARE,
    LAYER,
    guard_excess,
    guard_limit,
    head_and_tail,
)
from ctxengine.messages.model import ToolCall

Path = tuple[str | int, ...]  # where a string sits in a tool call's input (() : the input itself)
FLOOR_CHARS = 200  # the second pass cuts strings longer than this to their marker line alone
LIST_MIN_ITEMS = 8  # ... and lists longer than this to their first and last items


def fit_calls(ctx: LayerContext) -> Replacements | None:
    """The largest tool-call inputs of the view cut in place until the request fits the guard's
    limit (see the module docstring): every long string of an input, at any depth (a raw string
    input such as Codex's ``apply_patch``, the ``edits`` of a MultiEdit), largest first, to head
    and tail of at least ``FIT_MIN_CHARS``; then, while still over (many medium strings), each
    string over ``FLOOR_CHARS`` to its marker line. None when it fits or no call has a long string."""
    over = guard_excess(ctx)
    if over <= 0:
        return None
    limit = guard_limit(ctx)
    found: list[tuple[int, str, ToolCall]] = []
    for k, m in enumerate(ctx.view):
        if m.role != "assistant" or ctx.src[k] < 0:
            continue
        for c in m.tool_calls:
            size = sum(len(v) for _, v in _strings(c.input) if len(v) > FLOOR_CHARS)
            size += sum(len(_json(items)) for _, items in _lists(c.input))
            if size:
                found.append((size, m.id, c))
    found.sort(key=lambda f: -f[0])
    out: dict[str, ToolCall] = {}
    for floor in (FIT_MIN_CHARS, 0):
        for _, msg_id, call in found:
            if over <= 0:
                break
            key = result_key(msg_id, call.id)
            shown = out[key].input if key in out else call.input
            new_input, over = _cut_input(ctx, call, shown, over, floor)
            if new_input is not shown:
                out[key] = msgspec.structs.replace(call, input=new_input)
        if over <= 0:
            break
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


def _cut_input(ctx: LayerContext, call: ToolCall, shown: Any, over: int, floor: int) -> tuple[Any, int]:
    """``shown`` (``call``'s input as shown so far) with the long strings of ``call``'s input cut
    from the original to head and tail (at least ``floor`` chars kept), largest first, while the
    request is ``over`` the limit; and what is left over (tokens). ``shown`` itself when nothing
    was cut."""
    longest = sorted(
        ((path, v) for path, v in _strings(call.input) if len(v) > max(floor, FLOOR_CHARS)),
        key=lambda pv: -len(pv[1]),
    )
    for path, value in longest:
        if over <= 0:
            break
        now = _get(shown, path)
        now_tokens = round(ctx.count_text(now) * ctx.scale)
        tokens = round(ctx.count_text(value) * ctx.scale)
        where = "the input" if not path else ".".join(str(p) for p in path)
        what = f"chars of {where} cut to fit the context window; the whole input is artifact"
        more = over + tokens - now_tokens  # from the original: as much as the shown one, and over
        cut = head_and_tail(value, tokens, more, f"{what} {call_artifact_id(call.id)}", floor)
        cut_tokens = round(ctx.count_text(cut) * ctx.scale)
        if cut_tokens >= now_tokens:
            continue  # cut as far already
        shown = _set(shown, path, cut)
        over -= now_tokens - cut_tokens
    if floor == 0:
        shown, over = _cut_lists(ctx, call, shown, over)
    return shown, over


def _cut_lists(ctx: LayerContext, call: ToolCall, shown: Any, over: int) -> tuple[Any, int]:
    """``shown`` with its longest lists and objects (more than ``LIST_MIN_ITEMS`` items or keys:
    800 lines of 150 characters, 2,000 short settings; no string long enough to cut) cut to their
    first and last items around a marker item (an object: under the key ``"..."``), largest
    first, while the request is ``over`` the limit."""
    lists = sorted(_lists(shown), key=lambda pv: -len(_json(pv[1])))
    for path, items in lists:
        if over <= 0:
            break
        tokens = round(ctx.count_text(_json(items)) * ctx.scale)
        keep_tokens = max(0, tokens - over - FIT_MARKER_TOKENS)
        keep = max(2, int(len(items) * keep_tokens / max(1, tokens)))
        if keep >= len(items):
            continue
        tail = int(keep * FIT_TAIL_SHARE)
        where = ".".join(str(p) for p in path) or "the input"
        what = "keys" if isinstance(items, dict) else "items"
        marker = (
            f"[... {len(items) - keep:,} of {len(items):,} {what} of {where} cut to fit the context "
            f"window; the whole input is artifact {call_artifact_id(call.id)} (retrieve it in pages) ...]"
        )
        entries = list(items.items()) if isinstance(items, dict) else list(items)
        head, rest = entries[: keep - tail], entries[len(entries) - tail :] if tail else []
        cut: Any = (
            {**dict(head), "...": marker, **dict(rest)} if isinstance(items, dict) else [*head, marker, *rest]
        )
        shown = _set(shown, path, cut)
        over -= tokens - round(ctx.count_text(_json(cut)) * ctx.scale)
    return shown, over


def _json(value: Any) -> str:
    return msgspec.json.encode(value).decode()


def _lists(value: Any, path: Path = ()) -> Iterator[tuple[Path, Any]]:
    """(path, list or object) of every list or object of more than ``LIST_MIN_ITEMS`` items
    (keys) in ``value``, outermost first (the input object itself too)."""
    if isinstance(value, list | dict) and len(value) > LIST_MIN_ITEMS:
        yield path, value
        return
    if isinstance(value, list):
        for i, v in enumerate(value):
            yield from _lists(v, (*path, i))
    elif isinstance(value, dict):
        for k, v in value.items():
            yield from _lists(v, (*path, k))


def _strings(value: Any, path: Path = ()) -> Iterator[tuple[Path, str]]:
    """(path, string) of every string in a tool call's input, at any depth."""
    if isinstance(value, str):
        yield path, value
    elif isinstance(value, dict):
        for k, v in value.items():
            yield from _strings(v, (*path, k))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            yield from _strings(v, (*path, i))


def _get(value: Any, path: Path) -> Any:
    for p in path:
        value = value[p]
    return value


def _set(value: Any, path: Path, new: Any) -> Any:
    """A copy of ``value`` with ``new`` at ``path`` (only the containers along it copied)."""
    if not path:
        return new
    head, rest = path[0], path[1:]
    if isinstance(value, dict):
        return {**value, head: _set(value[head], rest, new)}
    out = list(value)
    out[head] = _set(out[head], rest, new)  # type: ignore[index]
    return out
