"""The scripted task the framework examples share: a code-review agent that reads every module of
a repository and runs its tests, long enough that ctxengine compacts (no key, no network).

Each step's tool call comes from ``step_call``; the tools return deterministic text (a module of
~6,000 characters, every 8th step a test log of ~60,000 characters that the engine offloads to a
preview). The examples import this file as a sibling module (``python examples/<script>.py``
puts ``examples/`` on ``sys.path``).
"""

from __future__ import annotations

from typing import Any

STEPS = 48  # tool calls before the final answer
WINDOW = 32_000  # tokens: the context window the examples give ctxengine
SYSTEM = "You are a code-review agent. Read each module with read_module, run its tests with run_tests."
TASK = f"Review the {STEPS} modules under src/ (read each one, run the tests every few modules) and report."
FINAL = "Review done: every module read; the failing tests are in the logs above."


def step_call(step: int) -> tuple[str, dict[str, Any]] | None:
    """The tool call of step ``step`` (0-based): (tool name, arguments); None: answer now."""
    if step >= STEPS:
        return None
    if step % 8 == 7:
        return "run_tests", {"module": f"module_{step:02d}"}
    return "read_module", {"path": f"src/module_{step:02d}.py"}


def read_module(path: str) -> str:
    """A module of ~6,000 characters (deterministic)."""
    name = path.rsplit("/", 1)[-1].removesuffix(".py")
    lines = [f'"""{name}: part of the reviewed package."""', "from __future__ import annotations", ""]
    for k in range(60):
        lines.append(f"def {name}_helper_{k}(value: int) -> int:  # returns value * {k} + {len(name)}")
    return "\n".join(lines)


def run_tests(module: str) -> str:
    """A test log of ~60,000 characters whose tail reports one failure (deterministic)."""
    body = [f"tests/test_{module}.py::test_case_{k:04d} PASSED [{k % 100:3d}%]" for k in range(1_000)]
    tail = [
        f"FAILED tests/test_{module}.py::test_case_0999 - AssertionError: expected 42, got 41",
        "1 failed",
    ]
    return "\n".join(body + tail)


def result_line(transcript: int, largest: int, compactions: int) -> str:
    """The line every example ends with."""
    return (
        f"transcript {transcript:,} tokens, largest model input {largest:,} tokens, compactions {compactions}"
    )


MODEL = "gpt-4.1"  # the registry entry the examples name (tokenizer o200k; the window is WINDOW)


def count_tokens(text: str) -> int:
    """Tokens of ``text`` as the test models report usage (o200k, ctxengine's counter)."""
    from ctxengine import Registry, counter_for

    return counter_for(Registry.default().get(MODEL)).count_text(text)
