"""The OpenAI Responses API's rules for a request body's ``input`` (``POST /v1/responses``).

``validate_responses(body)`` returns one line per broken rule (empty: the body is valid), in the
manner of ``formats.validate``. The rules (R-numbers name them in the messages):

- (R1) ``input`` is a string or a non-empty list of objects;
- (R2) a message item has a role of ``user`` / ``assistant`` / ``system`` / ``developer`` and a
  content that is a non-empty string or a non-empty list of typed parts;
- (R3) every ``function_call_output`` has its ``function_call`` earlier in the input by
  ``call_id`` (``custom_tool_call_output`` its ``custom_tool_call``): the API answers "No tool
  call found for function call output with call_id ...";
- (R4) every ``function_call`` / ``custom_tool_call`` is answered by one output later in the
  input (the API answers "No tool output found for function call ...");
- (R5) a call id is used by one call only, and answered once;
- (R6) ``function_call.arguments`` is a string (JSON; the API does not parse it);
- (R7) an item has a string ``type`` (or is a message, given by its ``role``).

Items of other types (reasoning, compaction, hosted tool calls, item references) are the
provider's to judge and are not checked beyond (R7).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

ROLES = frozenset({"user", "assistant", "system", "developer"})
CALLS = {"function_call": "function_call_output", "custom_tool_call": "custom_tool_call_output"}
OUTPUTS = {v: k for k, v in CALLS.items()}


def validate_responses(body: Mapping[str, Any]) -> list[str]:
    """The broken rules of a Responses request ``body`` (see the module docstring)."""
    items = body.get("input")
    if isinstance(items, str):
        return [] if items else ["input: empty string (R1)"]
    if not isinstance(items, list) or not items:
        return ["input: must be a string or a non-empty list (R1)"]
    problems: list[str] = []
    calls: dict[str, tuple[int, str]] = {}
    answered: set[str] = set()
    for k, item in enumerate(items):
        where = f"input[{k}]"
        if not isinstance(item, dict):
            problems.append(f"{where}: not an object (R1)")
            continue
        kind = item.get("type", "message" if "role" in item else None)
        if not isinstance(kind, str):
            problems.append(f"{where}: no type (R7)")
        elif kind == "message":
            _check_message(item, where, problems)
        elif kind in CALLS:
            _check_call(item, kind, k, where, calls, problems)
        elif kind in OUTPUTS:
            _check_output(item, kind, where, calls, answered, problems)
    for call_id, (k, _) in calls.items():
        if call_id not in answered:
            problems.append(f"input[{k}]: call {call_id} has no output (R4)")
    return problems


def _check_message(item: Mapping[str, Any], where: str, problems: list[str]) -> None:
    if item.get("role") not in ROLES:
        problems.append(f"{where}: role {item.get('role')!r} (R2)")
    content = item.get("content")
    if isinstance(content, str):
        if not content:
            problems.append(f"{where}: empty content (R2)")
    elif not isinstance(content, list) or not content:
        problems.append(f"{where}: content must be a non-empty string or list (R2)")
    elif any(not isinstance(p, dict) or not isinstance(p.get("type"), str) for p in content):
        problems.append(f"{where}: a content part without a type (R2)")


def _check_call(
    item: Mapping[str, Any],
    kind: str,
    k: int,
    where: str,
    calls: dict[str, tuple[int, str]],
    problems: list[str],
) -> None:
    call_id = item.get("call_id")
    if not isinstance(call_id, str) or not call_id:
        problems.append(f"{where}: {kind} without a call_id (R3)")
        return
    if call_id in calls:
        problems.append(f"{where}: call_id {call_id} used by an earlier call (R5)")
        return
    if kind == "function_call" and not isinstance(item.get("arguments"), str):
        problems.append(f"{where}: arguments must be a string (R6)")
    calls[call_id] = (k, kind)


def _check_output(
    item: Mapping[str, Any],
    kind: str,
    where: str,
    calls: dict[str, tuple[int, str]],
    answered: set[str],
    problems: list[str],
) -> None:
    call_id = item.get("call_id")
    call = calls.get(call_id) if isinstance(call_id, str) else None
    if call is None or call[1] != OUTPUTS[kind] or not isinstance(call_id, str):
        problems.append(f"{where}: {kind} {call_id} without its {OUTPUTS[kind]} before it (R3)")
    elif call_id in answered:
        problems.append(f"{where}: call {call_id} answered twice (R5)")
    else:
        answered.add(call_id)
