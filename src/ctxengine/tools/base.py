"""What every context-aware agent tool is: a Python function, a JSON schema, and a registry that
turns the schema into Anthropic and OpenAI tool definitions and dispatches calls.

A tool returns the text the model sees. A refusal (a path outside the workspace, a file too big to
read whole, a bad argument) raises ``ToolError`` whose message is written for the model: it says
what was wrong and what to do instead. The executor turns it into an error tool result; the CLI
exits 2 with it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ctxengine.tools.errors import ToolError

__all__ = ["ToolError", "ToolExecutor", "ToolSpec"]  # ToolError lives in tools.errors

if TYPE_CHECKING:
    from ctxengine.messages.model import ToolCall, ToolResult


@dataclass(frozen=True)
class ToolSpec:
    """A tool: ``name``, ``description`` (for the model), ``parameters`` (JSON schema object) and
    ``run(**arguments) -> str``."""

    name: str
    description: str
    parameters: dict[str, Any]
    run: Callable[..., str]

    def anthropic(self) -> dict[str, Any]:
        """The Anthropic Messages tool definition."""
        return {"name": self.name, "description": self.description, "input_schema": self.parameters}

    def openai(self) -> dict[str, Any]:
        """The OpenAI Chat Completions tool definition."""
        return {
            "type": "function",
            "function": {"name": self.name, "description": self.description, "parameters": self.parameters},
        }


@dataclass
class ToolExecutor:
    """Dispatches tool calls to the registered tools."""

    tools: dict[str, ToolSpec] = field(default_factory=dict)

    def register(self, spec: ToolSpec) -> None:
        self.tools[spec.name] = spec

    def definitions(self, provider: str = "anthropic") -> list[dict[str, Any]]:
        """Tool definitions for ``provider`` (``anthropic`` or ``openai``)."""
        return [t.anthropic() if provider == "anthropic" else t.openai() for t in self.tools.values()]

    def run(self, name: str, arguments: Mapping[str, Any]) -> str:
        """Run tool ``name``. Raises ``ToolError`` for an unknown tool or bad arguments, and
        whatever refusal the tool raises."""
        spec = self.tools.get(name)
        if spec is None:
            raise ToolError(f"unknown tool {name!r}; available: {', '.join(sorted(self.tools))}")
        try:
            return spec.run(**dict(arguments))
        except TypeError as exc:
            raise ToolError(f"bad arguments for {name}: {exc}") from None

    def execute(self, call: ToolCall) -> ToolResult:
        """Run a model's tool call and wrap the outcome (or the refusal) as a ``ToolResult``."""
        from ctxengine.messages.model import Text, ToolResult  # here: a one-shot tool never needs them

        args = call.input if isinstance(call.input, dict) else {"input": call.input}
        try:
            text = self.run(call.name, args)
            return ToolResult(call.id, (Text(text),), False, call.name)
        except ToolError as exc:
            return ToolResult(call.id, (Text(f"Error: {exc}"),), True, call.name)
