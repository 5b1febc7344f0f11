"""Shell command lines: the commands a shell tool call runs, and the files it reads.

Pure string work below the layers, the restore and the tools: ``split_commands`` splits a script
into its commands and pipelines (quote-aware, never raising; the splitter is ``shell_scan``),
``first_commands`` yields the first command of each pipeline whose output the caller sees, and
``shell_read_paths`` names the files a shell tool call prints with ``cat`` / ``head`` / ``tail`` /
``sed -n`` / ``nl`` / ``less``. ``tool_limits`` classifies recorded calls with the same
commands, found by ``bashlex`` first (``shell_parse``).
"""

from __future__ import annotations

import functools
import re
import shlex
from collections.abc import Iterator
from typing import NamedTuple

from ctxengine.messages.model import ToolCall
from ctxengine.tools.shell.scan import scan, split_commands, stage_words

__all__ = [  # scan, stage_words and split_commands live in shell_scan
    "GREP_COMMANDS",
    "NESTING",
    "READ_COMMANDS",
    "SHELLS",
    "SHELL_TOOLS",
    "WHOLE_FILE_COMMANDS",
    "FirstCommand",
    "command_words",
    "first_commands",
    "in_place",
    "is_read",
    "scan",
    "shell_command",
    "shell_read_paths",
    "shell_script",
    "split_commands",
    "stage_words",
]

SHELL_TOOLS = frozenset({"bash", "shell", "exec_command", "local_shell", "run_command"})
READ_COMMANDS = frozenset({"cat", "head", "tail", "sed", "nl", "less"})
WHOLE_FILE_COMMANDS = frozenset({"cat", "nl", "less"})  # print the whole file (head/tail/sed: a part)
GREP_COMMANDS = frozenset({"grep", "rg", "ag", "ack", "egrep", "fgrep"})
SHELLS = frozenset({"bash", "sh", "zsh", "dash", "ksh"})

# words before a command that are not the command: keywords, and wrappers that run the rest
_PREFIXES = frozenset(
    {"!", "{", "do", "then", "else", "elif", "if", "while", "until"}
    | {"time", "command", "builtin", "exec", "nohup", "sudo", "env", "timeout"}
)
_ASSIGNMENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")
NESTING = 2  # bash -c "bash -c '...'" at most


def command_words(words: list[str]) -> list[str]:
    """``words`` from the command name on: leading assignments and prefixes (``_PREFIXES``, with
    their options, and ``timeout``'s duration) skipped."""
    i = 0
    while i < len(words):
        w = words[i]
        if _ASSIGNMENT.match(w):
            i += 1
        elif w in _PREFIXES:
            i += 1
            while i < len(words) and words[i].startswith("-"):
                i += 1
            if w == "timeout" and i < len(words):
                i += 1
        else:
            break
    return words[i:]


def shell_script(words: list[str]) -> str | None:
    """SCRIPT of ``bash -c SCRIPT`` (``-lc``, ``-ec``…), else None. ``words[0]`` is a shell."""
    for k, w in enumerate(words[1:], start=1):
        if not w.startswith("-"):
            return None
        if not w.startswith("--") and "c" in w[1:]:
            return words[k + 1] if k + 1 < len(words) else None
    return None


def in_place(words: list[str]) -> bool:
    return any(
        w == "--in-place" or w.startswith("--in-place=") or re.match(r"^-[A-Za-z]*i", w) for w in words
    )


_SED_SCRIPT = re.compile(r"^[\d,$]+[pd]?$|^/.*/[pd]?$")  # sed -n '1,80p', '$p', '/x/p'


def _read_args(name: str, args: list[str]) -> list[str]:
    """The file operands of a read command's ``args``: options and their values left out
    (``head -n 50``, ``tail -c 100``), ``sed``'s script (its first operand unless ``-e`` gave it).
    An operand counts only when it looks like a path (has a ``/`` or a ``.``, is no sed script)."""
    out: list[str] = []
    skip_value = False
    script_seen = name != "sed"
    for w in args:
        if skip_value:
            skip_value = False
            if name == "sed":
                script_seen = True
            continue
        if w.startswith("-"):
            skip_value = w in ("-n", "-c", "-e", "--lines", "--bytes") and name in ("head", "tail", "sed")
            if name == "sed":
                skip_value = w == "-e"
            continue
        if not script_seen:
            script_seen = True
            continue
        if ("/" in w or "." in w) and not _SED_SCRIPT.match(w) and not w.startswith(("<", ">", "$(")):
            out.append(w)
    return out


class FirstCommand(NamedTuple):
    """The first command of a pipeline: its name (path stripped), its arguments, and whether it is
    ``alone`` (its pipeline, and every pipeline around a ``bash -c`` holding it, has one command)."""

    name: str
    args: list[str]
    alone: bool


def first_commands(script: str, depth: int = 0, alone: bool = True) -> Iterator[FirstCommand]:
    """The first command of each pipeline of ``script`` whose output the caller sees: ``bash -c
    SCRIPT`` (``sh``/``zsh``, ``-lc``...) is followed into SCRIPT (``NESTING`` levels at most);
    a command whose standard output goes to a file or whose input is a here-document or
    here-string is left out. Leading assignments and prefixes (``command_words``) are skipped."""
    for pipeline in scan(script):
        first = pipeline[0]
        words = command_words(stage_words(first))
        if not words:
            continue
        name = words[0].rsplit("/", 1)[-1]
        single = alone and len(pipeline) == 1
        if name in SHELLS:
            inner = shell_script(words)
            if inner is not None and depth < NESTING:
                yield from first_commands(inner, depth + 1, single)
            continue
        if first.out_redirected or first.here_input:
            continue
        yield FirstCommand(name, words[1:], single)


def is_read(cmd: FirstCommand) -> bool:
    """``cmd`` prints (part of) a file: a ``READ_COMMANDS`` command, ``sed -i`` (an edit) aside."""
    return cmd.name in READ_COMMANDS and not (cmd.name == "sed" and in_place(cmd.args))


def shell_command(call: ToolCall) -> str | None:
    """The command line of a shell tool call (``SHELL_TOOLS``; ``command`` or ``cmd``, an argv list
    joined, so ``["bash", "-lc", "cd x && cat f"]`` keeps its script), None for any other call."""
    if call.name.lower() not in SHELL_TOOLS or not isinstance(call.input, dict):
        return None
    cmd = call.input.get("command") or call.input.get("cmd")
    if isinstance(cmd, list):
        cmd = shlex.join(str(c) for c in cmd)
    return cmd if isinstance(cmd, str) and cmd.strip() else None


def shell_read_paths(call: ToolCall) -> list[str]:
    """The files a shell tool call (``SHELL_TOOLS``) reads with ``cat``, ``head``, ``tail``,
    ``sed``, ``nl`` or ``less`` as the first command of a pipeline (``cat f``, ``sed -n '1,80p' f``,
    ``nl -ba f | sed -n '1,200p'``, ``cd d && cat f``), as written (relative paths stay relative).
    Reads whose output goes to a file, here-documents and ``sed -i`` are not reads (as
    ``tool_limits.classify``). ``[]`` for any other call. Codex and mini-swe-agent read files
    this way; the restore after a compaction treats these like Read tool calls."""
    cmd = shell_command(call)
    if cmd is None or not _may_read(cmd):
        return []
    return list(_script_read_paths(cmd))


# A command's name is made of the script's own characters: the splitter and ``shlex`` only take
# some away (quotes, escaping backslashes, line continuations, NULs, comments, here-document
# bodies) and put substitutions back as written. So a script in which no ``READ_COMMANDS`` name
# appears once those characters are deleted runs none of them (about two thirds of the shell
# calls of the shared transcripts): it is not split at all (shlex is ~0.1 ms a command).
_NOT_IN_NAMES = str.maketrans("", "", "'\"\\\x00\r\n")
_READ_NAME = re.compile("|".join(sorted(READ_COMMANDS)))


def _may_read(cmd: str) -> bool:
    """False when no ``READ_COMMANDS`` name can be a word of ``cmd`` (see above)."""
    return _READ_NAME.search(cmd.translate(_NOT_IN_NAMES)) is not None


@functools.lru_cache(maxsize=8192)
def _script_read_paths(cmd: str) -> tuple[str, ...]:
    """``shell_read_paths`` of one command line, remembered: the restore after each compaction
    looks at every shell call of the history again (a pure function of the text)."""
    paths = [p for c in first_commands(cmd) if is_read(c) for p in _read_args(c.name, c.args)]
    return tuple(dict.fromkeys(paths))
