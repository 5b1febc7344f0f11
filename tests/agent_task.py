"""A reading task for real agents (Claude Code, Codex CLI, aider) against the loopback upstream.

``workspace(path)`` makes a git repository of generated modules (``src/mod_K.py``, about 3,000
tokens each). ``AgentTask`` is an ``Upstream.plan``: for a request that offers the agent's tools
it answers with the next tool call of the task (Claude Code: ``Read`` a module, a ``Bash`` every
fifth round; Codex: ``exec_command`` / ``shell`` with ``cat``, each call after an encrypted
reasoning item, as OpenAI's reasoning models answer), ``rounds`` calls per client session (Claude
Code's ``x-claude-code-session-id``, Codex's ``prompt_cache_key``), then a final text; aider
(no tools) gets a SEARCH/REPLACE edit whose SEARCH text is not in the file ``misses`` times (it
answers each with the error, a further turn) and then one that applies; with ``edits`` every edit
applies instead, to ``src/mod_1.py`` (a line of it gets a comment: the file in the chat changes,
so aider's files message is rewritten on its next request); with ``mentions`` each answer also
names another module (``src/mod_7.py``, then 8, 9), which aider adds to the chat: its files
message and its repo map (the first message) are rewritten. ``client(name)`` finds an
installed client (``CTXENGINE_AGENT_BIN``, then ``PATH``).
"""

from __future__ import annotations

import json
import os
import random
import shutil
import subprocess
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from proxy_servers import Seen

WORDS = ("def", "return", "self", "value", "config", "path", "load", "save", "index", "token", "cache")
BIN_ENV = "CTXENGINE_AGENT_BIN"  # a folder holding claude, codex and aider (``.ci/run`` installs them)


def workspace(path: Path, modules: int = 40) -> Path:
    """A git repository at ``path`` with ``modules`` generated modules under ``src/``."""
    rng = random.Random(5)
    (path / "src").mkdir(parents=True)
    for k in range(modules):
        lines = [
            f"def {rng.choice(WORDS)}_{k}_{i}(x):\n    return {rng.choice(WORDS)}(x, {rng.randint(0, 9999)})"
            f"  # {' '.join(rng.sample(WORDS, 5))}"
            for i in range(120)
        ]
        (path / "src" / f"mod_{k}.py").write_text("\n".join(lines) + "\n")
    (path / "README.md").write_text("A small project.\n")
    git = ["git", "-c", "user.email=t@example.com", "-c", "user.name=t"]
    for args in (["init", "-q"], ["add", "-A"], ["commit", "-qm", "init"]):
        subprocess.run([*git, *args], cwd=path, check=True)
    return path


def client(name: str) -> str | None:
    """The path of the installed client ``name`` (``claude``, ``codex``, ``aider``), or None."""
    folder = os.environ.get(BIN_ENV)
    if folder and (Path(folder) / name).exists():
        return str(Path(folder) / name)
    return shutil.which(name)


@dataclass
class AgentTask:
    """The upstream's plan (see the module docstring)."""

    root: Path
    rounds: int = 12
    misses: int = 3
    edits: bool = False  # aider: every edit applies to src/mod_1.py (see the module docstring)
    mentions: bool = False  # aider: each answer names another module (see the module docstring)
    counts: dict[str, int] = field(default_factory=dict)
    reasoning_sent: list[dict[str, Any]] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def __call__(self, seen: Seen) -> dict[str, Any] | None:
        if seen.path.endswith("/messages"):
            return self._anthropic(seen)
        if seen.path.endswith("/responses"):
            return self._responses(seen)
        if seen.path.endswith("/chat/completions"):
            return self._aider(seen)
        return None

    def _next(self, key: str) -> int | None:
        """The round of client session ``key`` (counted), or None once its task is done."""
        with self._lock:
            k = self.counts.get(key, 0)
            self.counts[key] = k + 1
        return k if k < self.rounds else None

    def _anthropic(self, seen: Seen) -> dict[str, Any] | None:
        names = [t.get("name") for t in seen.body.get("tools") or []]
        if "Read" not in names:
            return None  # a side call (a title, a topic): the default text
        k = self._next("cc:" + seen.headers.get("x-claude-code-session-id", ""))
        if k is None:
            return {"content": [{"type": "text", "text": "Done: every module read and summarised."}]}
        tid = f"toolu_{len(self.counts)}_{k:03d}"
        if k % 5 == 4 and "Bash" in names:
            call = {
                "name": "Bash",
                "input": {"command": f"wc -l src/mod_{k}.py", "description": "Count lines"},
            }
        else:
            call = {"name": "Read", "input": {"file_path": str(self.root / "src" / f"mod_{k}.py")}}
        text = {"type": "text", "text": f"Reading module {k}."}
        return {"content": [text, {"type": "tool_use", "id": tid, **call}]}

    def _responses(self, seen: Seen) -> dict[str, Any] | None:
        names = [t.get("name") for t in seen.body.get("tools") or []]
        tool = next((n for n in ("exec_command", "shell") if n in names), None)
        if tool is None:
            return None
        key = str(seen.body.get("prompt_cache_key") or seen.headers.get("session_id", ""))
        k = self._next("codex:" + key)
        if k is None:
            return None  # the default answer: a message
        args = (
            {"cmd": f"cat src/mod_{k}.py"}
            if tool == "exec_command"
            else {"command": ["cat", f"src/mod_{k}.py"]}
        )
        reasoning = {
            "type": "reasoning",
            "id": f"rs_{k}",
            "summary": [{"type": "summary_text", "text": f"Module {k} next."}],
            "encrypted_content": f"gAAAAB{k:03d}" + "c2VjcmV0" * 40,
        }
        self.reasoning_sent.append(reasoning)
        call = {
            "type": "function_call",
            "id": f"fc_{k}",
            "call_id": f"call_{key[-6:]}_{k}",
            "name": tool,
            "arguments": json.dumps(args),
            "status": "completed",
        }
        return {"output": [reasoning, call]}

    def _aider(self, seen: Seen) -> dict[str, Any] | None:
        text = json.dumps(seen.body.get("messages"))
        if "SEARCH" not in text[:20000]:
            return None  # a side call (a commit message, a summary)
        with self._lock:
            k = self.counts.get("aider", 0)
            self.counts["aider"] = k + 1
        source = (self.root / "src" / "mod_1.py").read_text()
        if self.edits:  # the k-th line gets a comment: found in the file, so the edit applies
            line = source.splitlines()[k]
            block = f"<<<<<<< SEARCH\n{line}\n=======\n{line}  # edited {k}\n>>>>>>> REPLACE"
            edit = f"src/mod_1.py\n```python\n{block}\n```\n"
        elif k < self.misses:  # a SEARCH that does not match: aider answers with the error
            search = source.replace("return", f"yield{k}")
            edit = f"src/mod_1.py\n```python\n<<<<<<< SEARCH\n{search}=======\n{source}>>>>>>> REPLACE\n```\n"
        else:
            edit = "hello.py\n```python\n<<<<<<< SEARCH\n=======\nprint('hello')\n>>>>>>> REPLACE\n```\n"
        style = f", in the style of src/mod_{7 + k}.py" if self.mentions else ""
        return {"message": {"role": "assistant", "content": f"Here is the change{style}.\n\n{edit}"}}
