"""Shell command lines, split the way a shell reads them, and the files a shell call reads.

Pure string work below the layers, the restore and the tools: ``split_commands`` splits a script
into its commands and pipelines (quote-aware, never raising), ``shell_read_paths`` names the files
a shell tool call prints with ``cat`` / ``head`` / ``tail`` / ``sed -n`` / ``nl`` / ``less``.
``tools.limits`` classifies recorded calls with the same splitting.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Iterator
from typing import NamedTuple

from ctxengine.messages import ToolCall

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
_HEREDOC = re.compile(r"(?<!<)<<-?(?!<)[ \t]*(['\"]?)([A-Za-z_][A-Za-z0-9_]*)\1")
NESTING = 2  # bash -c "bash -c '...'" at most
_SUB_MARK = "\x00"  # around a substitution's index in a stage's text (never in a command)
_SUB_RE = re.compile(_SUB_MARK + r"(\d+)" + _SUB_MARK)
_DOUBLE_STOP = re.compile(r'[\\"`]|\$\(')  # what matters inside double quotes


class _Stage(NamedTuple):
    """One simple command of a pipeline: its text (unquoted substitutions replaced by
    ``_SUB_MARK``-delimited indexes into ``subs``, so that ``shlex`` keeps each whole), whether its
    standard output goes to a file (``>``, ``>>``, ``>|``, ``&>``) and whether its input is a
    here-document or here-string."""

    text: str
    out_redirected: bool
    here_input: bool
    subs: tuple[str, ...] = ()


def _end_single(s: str, i: int) -> int:
    """The index after the single-quoted string opening at ``i`` (the end: unbalanced)."""
    j = s.find("'", i + 1)
    return len(s) if j < 0 else j + 1


def _end_double(s: str, i: int) -> int:
    """The index after the double-quoted string opening at ``i``."""
    j = i + 1
    while (m := _DOUBLE_STOP.search(s, j)) is not None:
        j, c = m.start(), m.group()
        if c == "\\":
            j += 2
        elif c == '"':
            return j + 1
        elif c == "$(":
            j = _end_subst(s, j)
        else:
            j = _end_backquote(s, j)
    return len(s)


def _end_subst(s: str, i: int) -> int:
    """The index after the ``$(...)`` opening at ``i`` (quotes inside are skipped)."""
    depth = 0
    j = i + 1
    while j < len(s):
        c = s[j]
        if c == "\\":
            j += 2
            continue
        if c == "'":
            j = _end_single(s, j)
            continue
        if c == '"':
            j = _end_double(s, j)
            continue
        if c == "(":
            depth += 1
        elif c == ")":
            depth -= 1
            if depth == 0:
                return j + 1
        j += 1
    return len(s)


def _end_backquote(s: str, i: int) -> int:
    j = i + 1
    while j < len(s):
        if s[j] == "\\":
            j += 2
        elif s[j] == "`":
            return j + 1
        else:
            j += 1
    return len(s)


def _drop_heredoc_bodies(script: str) -> str:
    """``script`` without the bodies of its here-documents (``<<EOF`` … ``EOF``): a body is data,
    not commands, and may hold unbalanced quotes. A ``<<WORD`` with no line ``WORD`` after it is
    left alone (it is not a here-document: ``x<<y`` in quoted code)."""
    out: list[str] = []
    pos = search = 0
    while (m := _HEREDOC.search(script, search)) is not None:
        eol = script.find("\n", m.end())
        if eol < 0:
            break
        end = re.compile(rf"^[ \t]*{re.escape(m.group(2))}[ \t]*$", re.M).search(script, eol + 1)
        if end is None:
            search = m.end()
            continue
        out.append(script[pos:eol])  # the line with the operator; body and end line dropped
        pos = search = end.end()
    out.append(script[pos:])
    return "".join(out)


def _fd_before(s: str, i: int, start: int) -> str:
    """The file-descriptor digits right before the redirection at ``i`` (a word of their own:
    ``2>`` but not ``a2>``), or ``""``."""
    j = i
    while j > start and s[j - 1].isdigit():
        j -= 1
    if j < i and (j == start or s[j - 1] in " \t"):
        return s[j:i]
    return ""


def scan(script: str) -> list[list[_Stage]]:
    """The commands of ``script``, each a pipeline of stages (see ``split_commands``)."""
    s = _drop_heredoc_bodies(script.replace(_SUB_MARK, ""))  # a NUL is not shell text (marks subs here)
    commands: list[list[_Stage]] = []
    stages: list[_Stage] = []
    buf: list[str] = []
    subs: list[str] = []
    start = 0  # where the current stage's text starts in ``s``
    out_redirected = here_input = False

    def end_stage(i: int) -> None:
        nonlocal out_redirected, here_input, start
        text = "".join(buf).strip()
        if text:
            stages.append(_Stage(text, out_redirected, here_input, tuple(subs)))
        buf.clear()
        subs.clear()
        out_redirected = here_input = False
        start = i

    def end_command(i: int) -> None:
        end_stage(i)
        if stages:
            commands.append(stages.copy())
        stages.clear()

    i, n = 0, len(s)
    while i < n:
        c = s[i]
        if c == "\\":
            buf.append(" " if s.startswith("\\\n", i) else s[i : i + 2])  # line continuation
            i += 2
        elif c == "'" or c == '"':
            end = (_end_single if c == "'" else _end_double)(s, i)
            buf.append(s[i:end])
            i = end
        elif c == "`" or s.startswith(("$(", "<(", ">("), i):  # substitutions, process substitution
            end = (_end_backquote if c == "`" else _end_subst)(s, i)
            buf.append(f"{_SUB_MARK}{len(subs)}{_SUB_MARK}")
            subs.append(s[i:end])
            i = end
        elif c == _SUB_MARK:
            i += 1  # (a NUL: not shell text)
        elif c == "#" and (i == 0 or s[i - 1] in " \t\n;&|()"):
            nl = s.find("\n", i)
            i = n if nl < 0 else nl  # a comment, to the end of the line
        elif s.startswith(("&&", "||"), i):
            end_command(i + 2)
            i += 2
        elif c == "|" and i > 0 and s[i - 1] == ">":  # >| (clobber)
            buf.append(c)
            i += 1
        elif c == "|":
            step = 2 if s.startswith("|&", i) else 1
            end_stage(i + step)
            i += step
        elif c == "&" and ((i > 0 and s[i - 1] in "<>") or s.startswith("&>", i)):
            buf.append(c)  # >&, <&, &> are redirections
            i += 1
        elif c in "&;\n()":
            end_command(i + 1)
            i += 1
        elif c == ">":
            fd = "&" if i > 0 and s[i - 1] == "&" else _fd_before(s, i, start)
            if fd in ("", "1", "&") and not s.startswith(">&", i) and not (i > 0 and s[i - 1] == ">"):
                out_redirected = True  # > file, >> file, >| file, &> file (not >&2, not 2>)
            buf.append(c)
            i += 1
        elif c == "<" and s.startswith("<<", i):
            here_input = True
            step = 3 if s.startswith("<<<", i) else 2
            buf.append(s[i : i + step])
            i += step
        else:
            buf.append(c)
            i += 1
    end_command(n)
    return commands


def stage_words(stage: _Stage) -> list[str]:
    """The words of one simple command, quotes removed (``shlex``; a plain whitespace split if
    ``shlex`` refuses it: an unbalanced quote), substitutions put back as they were written."""
    try:
        words = shlex.split(stage.text)
    except ValueError:
        words = stage.text.split()
    if not stage.subs:
        return words

    def put_back(m: re.Match[str]) -> str:
        k = int(m.group(1))
        return stage.subs[k] if k < len(stage.subs) else ""

    return [_SUB_RE.sub(put_back, w) for w in words]


def split_commands(script: str) -> list[list[list[str]]]:
    """The commands of a shell script, each a pipeline of simple commands, each a list of words.

    Commands are split on ``&&``, ``||``, ``;``, ``&``, newlines and parentheses, pipelines on
    ``|`` and ``|&``; only outside quotes and escapes (``grep "a && b" f`` and ``echo a\\;b`` are one
    command). ``$(...)``, backquoted and process (``<(...)``) substitutions stay inside their
    word; comments and here-document bodies are dropped; redirections stay as words
    (``2>/dev/null``). Quotes are removed from the words by ``shlex``. Never raises: an unbalanced
    quote runs to the end of the script; a NUL is dropped.
    """
    return [[stage_words(st) for st in pipeline] for pipeline in scan(script)]


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
    ``tools.limits.classify``). ``[]`` for any other call. Codex and mini-swe-agent read files
    this way; the restore after a compaction treats these like Read tool calls."""
    cmd = shell_command(call)
    if cmd is None:
        return []
    paths = [p for c in first_commands(cmd) if is_read(c) for p in _read_args(c.name, c.args)]
    return list(dict.fromkeys(paths))
