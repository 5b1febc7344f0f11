"""mini-swe-agent's text mode: the fenced bash action of each reply becomes a tool call, and the
observation that answers it a tool result.

mini-swe-agent 1.x (its default ``mini.yaml``) sends no ``tools``: the model answers with a
THOUGHT and exactly one fenced block (the action is what ``r"```bash\\s*\\n(.*?)\\n```"`` finds,
exactly one match), the harness runs it and sends the output back as a ``user`` message
(``<returncode>0</returncode>\\n<output>...</output>``). Read as plain chat, every observation is
a user turn, so the newest command output passed for the user's latest request and no layer could
treat an observation as the tool result it is. As the SWE-agent reader does with its text
actions (``formats.swe_agent``), an assistant message with exactly one such block becomes its
discussion (the text without the block) plus ``ToolCall("call_<message id>", "bash",
{"command": action})``, and the user message right after it becomes that call's ``ToolResult``.
A reply with no action or several is answered by the harness's format error, a user message it
wrote: that message is kept with ``origin="attachment"`` (never the user's request).

Applied by the OpenAI chat reader to a mini-swe-agent ``.traj.json`` that has no ``tool`` message
and no ``tool_calls`` (the tool-calling mode needs nothing of this).
"""

from __future__ import annotations

import re

import msgspec

from ctxengine.messages.model import Block, Message, Text, Thinking, ToolCall, ToolResult

ACTION = re.compile(r"```bash\s*\n(.*?)\n```", re.DOTALL)  # mini-swe-agent 1.x's action regex
SHELL_TOOL = "bash"


def text_action_calls(messages: list[Message]) -> list[Message]:
    """``messages`` with each text action a tool call and its observation a tool result (see the
    module docstring); a new list, the messages not concerned as they were."""
    out: list[Message] = []
    answer: str | None = None  # the call the next user message answers
    feedback = False  # the next user message is the harness's format error
    for m in messages:
        if m.role == "user" and (answer is not None or feedback) and _plain(m):
            if answer is not None:
                parts = tuple(b for b in m.blocks if isinstance(b, Text))
                result = ToolResult(answer, parts, name=SHELL_TOOL)
                out.append(msgspec.structs.replace(m, blocks=(result,)))
            else:
                out.append(msgspec.structs.replace(m, origin="attachment"))
            answer, feedback = None, False
            continue
        answer, feedback = None, False
        texts_only = all(isinstance(b, Text | Thinking) for b in m.blocks)
        if m.role == "assistant" and m.origin == "message" and texts_only:
            m, answer = _with_call(m)
            feedback = answer is None
        out.append(m)
    return out


def _plain(m: Message) -> bool:
    """A user message of text only (an observation or a format error as the harness writes it)."""
    return m.origin == "message" and all(isinstance(b, Text) for b in m.blocks)


def _with_call(m: Message) -> tuple[Message, str | None]:
    """``m`` with its one action as a tool call, and the call's id; ``m`` and None when it has no
    action or several."""
    text = "\n".join(b.text for b in m.blocks if isinstance(b, Text))
    actions = list(ACTION.finditer(text))
    if len(actions) != 1:
        return m, None
    found = actions[0]
    discussion = (text[: found.start()].rstrip() + "\n" + text[found.end() :].strip()).strip()
    call_id = f"call_{m.id}"
    blocks: list[Block] = [b for b in m.blocks if isinstance(b, Thinking)]
    if discussion:
        blocks.append(Text(discussion))
    blocks.append(ToolCall(call_id, SHELL_TOOL, {"command": found.group(1)}))
    return msgspec.structs.replace(m, blocks=tuple(blocks)), call_id
