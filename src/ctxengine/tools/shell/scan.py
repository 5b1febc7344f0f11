"""The hand-written shell splitter: a script cut into its commands and pipelines the way a shell
reads them (quote-aware, never raising), each simple command's words.

``split_commands`` and ``shell_read_paths`` (``ctxengine.tools.shell.commands``) use it; the tool-limit report
parses with ``bashlex`` first and falls back to it (``ctxengine.tools.shell.parse``). Pure string work.
"""

from __future__ import annotations

import re
import shlex
from typing import NamedTuple

_HEREDOC = re.compile(r"(?<!<)<<-?(?!<)[ \t]*(['\"]?)([A-Za-z_][A-Za-z0-9_]*)\1")
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
    ends = HeredocEnds(script)
    while (m := _HEREDOC.search(script, search)) is not None:
        eol = script.find("\n", m.end())
        if eol < 0:
            break
        end = ends.find(m.group(2), eol + 1)
        if end is None:
            search = m.end()
            continue
        out.append(script[pos:eol])  # the line with the operator; body and end line dropped
        pos = search = end.end()
    out.append(script[pos:])
    return "".join(out)


class HeredocEnds:
    """The end lines of a script's here-documents, found from a position on. A delimiter with no
    end line after some position has none after any later one either: it is searched once, not
    once per opening (a command of thousands of unended ``<<EOF`` lines was quadratic)."""

    def __init__(self, script: str) -> None:
        self.script = script
        self._missing: dict[str, int] = {}  # delimiter -> a position after which it has no end line

    def find(self, delimiter: str, start: int) -> re.Match[str] | None:
        """The first line holding only ``delimiter`` (spaces and tabs around it) at or after
        ``start``, or None."""
        after = self._missing.get(delimiter)
        if after is not None and start >= after:
            return None
        found = re.compile(rf"^[ \t]*{re.escape(delimiter)}[ \t]*$", re.M).search(self.script, start)
        if found is None:
            self._missing[delimiter] = start if after is None else min(after, start)
        return found


def _fd_before(s: str, i: int, start: int) -> str:
    """The file-descriptor digits right before the redirection at ``i`` (a word of their own:
    ``2>`` but not ``a2>``), or ``""``."""
    j = i
    while j > start and s[j - 1].isdigit():
        j -= 1
    if j < i and (j == start or s[j - 1] in " \t"):
        return s[j:i]
    return ""


class _Scanner:
    """The state of one ``scan``: the commands so far, the stages of the current pipeline, the
    current stage's text (``buf``) and substitutions, where it starts in ``s``, and its flags."""

    def __init__(self, s: str) -> None:
        self.s = s
        self.commands: list[list[_Stage]] = []
        self.stages: list[_Stage] = []
        self.buf: list[str] = []
        self.subs: list[str] = []
        self.start = 0  # where the current stage's text starts in ``s``
        self.out_redirected = self.here_input = False

    def end_stage(self, i: int) -> None:
        text = "".join(self.buf).strip()
        if text:
            self.stages.append(_Stage(text, self.out_redirected, self.here_input, tuple(self.subs)))
        self.buf.clear()
        self.subs.clear()
        self.out_redirected = self.here_input = False
        self.start = i

    def end_command(self, i: int) -> None:
        self.end_stage(i)
        if self.stages:
            self.commands.append(self.stages.copy())
        self.stages.clear()

    def step(self, i: int) -> int:
        """Take the text at ``i``; returns where the next step starts."""
        nxt = self._word_part(i)
        return self._operator(i) if nxt is None else nxt

    def _word_part(self, i: int) -> int | None:
        """Escapes, quotes, substitutions, a NUL and comments (None: none of these at ``i``)."""
        s, buf, c = self.s, self.buf, self.s[i]
        if c == "\\":
            buf.append(" " if s.startswith("\\\n", i) else s[i : i + 2])  # line continuation
            return i + 2
        if c == "'" or c == '"':
            end = (_end_single if c == "'" else _end_double)(s, i)
            buf.append(s[i:end])
            return end
        if c == "`" or s.startswith(("$(", "<(", ">("), i):  # substitutions, process substitution
            end = (_end_backquote if c == "`" else _end_subst)(s, i)
            buf.append(f"{_SUB_MARK}{len(self.subs)}{_SUB_MARK}")
            self.subs.append(s[i:end])
            return end
        if c == _SUB_MARK:
            return i + 1  # (a NUL: not shell text)
        if c == "#" and (i == 0 or s[i - 1] in " \t\n;&|()"):
            nl = s.find("\n", i)
            return len(s) if nl < 0 else nl  # a comment, to the end of the line
        return None

    def _operator(self, i: int) -> int:
        """Control operators, pipes and redirections; any other character joins the stage."""
        s, buf, c = self.s, self.buf, self.s[i]
        if s.startswith(("&&", "||"), i):
            self.end_command(i + 2)
            return i + 2
        if c == "|" and i > 0 and s[i - 1] == ">":  # >| (clobber)
            buf.append(c)
            return i + 1
        if c == "|":
            step = 2 if s.startswith("|&", i) else 1
            self.end_stage(i + step)
            return i + step
        if c == "&" and ((i > 0 and s[i - 1] in "<>") or s.startswith("&>", i)):
            buf.append(c)  # >&, <&, &> are redirections
            return i + 1
        if c in "&;\n()":
            self.end_command(i + 1)
            return i + 1
        if c == ">":
            fd = "&" if i > 0 and s[i - 1] == "&" else _fd_before(s, i, self.start)
            if fd in ("", "1", "&") and not s.startswith(">&", i) and not (i > 0 and s[i - 1] == ">"):
                self.out_redirected = True  # > file, >> file, >| file, &> file (not >&2, not 2>)
            buf.append(c)
            return i + 1
        if c == "<" and s.startswith("<<", i):
            self.here_input = True
            step = 3 if s.startswith("<<<", i) else 2
            buf.append(s[i : i + step])
            return i + step
        buf.append(c)
        return i + 1


def scan(script: str) -> list[list[_Stage]]:
    """The commands of ``script``, each a pipeline of stages (see ``split_commands``)."""
    s = _drop_heredoc_bodies(script.replace(_SUB_MARK, ""))  # a NUL is not shell text (marks subs here)
    scanner = _Scanner(s)
    i, n = 0, len(s)
    while i < n:
        i = scanner.step(i)
    scanner.end_command(n)
    return scanner.commands


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
