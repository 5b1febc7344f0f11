"""An OpenAI Agents SDK agent whose every model call goes through ctxengine.

``EngineSession`` keeps the whole history in ctxengine's append-only store and carries the
``call_model_input_filter`` that hands the model the engine's projection (``run_config()``) and
the hooks that feed it the SDK's usage reports. The model is an OpenAI-compatible loopback
server on 127.0.0.1 following a script (``_scripted_task``); tracing is off: no key, no network.
Run: ``python examples/openai_agents.py``; it ends with one line
``transcript N tokens, largest model input M tokens, compactions K``.
"""

from __future__ import annotations

import asyncio
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import _scripted_task as task  # examples/_scripted_task.py: the scripted task and its tools
from agents import Agent, OpenAIChatCompletionsModel, Runner, function_tool, set_tracing_disabled
from openai import AsyncOpenAI

from ctxengine import EngineSession


class LoopbackModel:
    """A Chat Completions server on 127.0.0.1 answering from the script; ``requests`` holds every
    request body it got. Usage reports count the messages' JSON with o200k."""

    def __init__(self) -> None:
        self.requests: list[dict[str, Any]] = []
        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._thread = threading.Thread(target=self._httpd.serve_forever, daemon=True)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self._httpd.server_address[1]}/v1"

    def __enter__(self) -> LoopbackModel:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()

    def reply(self, body: dict[str, Any]) -> dict[str, Any]:
        step = len(self.requests)
        self.requests.append(body)
        if step and task.step_call(step - 1) and body["messages"][-1]["role"] != "tool":
            raise AssertionError("the newest tool result did not reach the model")
        call = task.step_call(step)
        message: dict[str, Any] = {"role": "assistant", "content": task.FINAL if call is None else None}
        if call is not None:
            function = {"name": call[0], "arguments": json.dumps(call[1])}
            message["tool_calls"] = [{"id": f"call_{step}", "type": "function", "function": function}]
        prompt = task.count_tokens(json.dumps(body["messages"]))
        return {
            "id": f"chatcmpl-{step}",
            "object": "chat.completion",
            "created": 0,
            "model": body.get("model", task.MODEL),
            "choices": [
                {"index": 0, "message": message, "finish_reason": "stop" if call is None else "tool_calls"}
            ],
            "usage": {"prompt_tokens": prompt, "completion_tokens": 20, "total_tokens": prompt + 20},
        }

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        model = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:  # quiet
                pass

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                payload = json.dumps(model.reply(body)).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

        return Handler


@function_tool
def read_module(path: str) -> str:
    """Read a file of the repository."""
    return task.read_module(path)


@function_tool
def run_tests(module: str) -> str:
    """Run the tests of a module and return the log."""
    return task.run_tests(module)


async def run_task(server: LoopbackModel, session: EngineSession) -> str:
    """Run the scripted task against ``server`` with ``session``; returns the final output."""
    set_tracing_disabled(True)
    client = AsyncOpenAI(base_url=server.base_url, api_key="loopback", max_retries=0)
    agent = Agent(
        name="reviewer",
        instructions=task.SYSTEM,
        tools=[read_module, run_tests],
        model=OpenAIChatCompletionsModel(model=task.MODEL, openai_client=client),
    )
    result = await Runner.run(
        agent,
        task.TASK,
        session=session,
        run_config=session.run_config(),
        hooks=session.hooks,
        max_turns=task.STEPS + 5,
    )
    return str(result.final_output)


def main() -> None:
    session = EngineSession("review-1", model=task.MODEL, window=task.WINDOW)
    with LoopbackModel() as server:
        answer = asyncio.run(run_task(server, session))
    bridge = session.filter.bridge
    items = asyncio.run(session.get_items())
    print(f"{len(items)} items in the session; {len(server.requests)} model calls")
    print(f"engine: {bridge.stats}")
    print(answer)
    print(task.result_line(bridge.transcript_tokens, bridge.stats.largest_input, bridge.stats.compactions))


if __name__ == "__main__":
    main()
