"""Plain shell scripts read without bashlex: lists of pipelines of simple commands, nothing else.

``shell_parse`` (``ctxengine.tools.shell.parse``) asks bashlex for the first command of each
pipeline. bashlex is pure Python: ~1-7 ms a script and ~0.1 s to import (it builds its LALR tables
at every import), the largest single cost of the replay's tool-limit report. Most scripts an
agent runs are plain (``cd src && grep -rn "x" . | head -20``), and for those the answer needs no
grammar: ``plain_pipes`` reads them with one regular expression and gives exactly what bashlex's
tree gives (``parse._walk``), or None for anything else, which goes to bashlex as before.

Plain means: words made of ``[A-Za-z0-9_-./=:,@%+^~*?[]]`` and non-ASCII letters, single-quoted
strings (any text but ``'``, NUL) and double-quoted strings without a backquote (a backslash
escapes the next character, as bashlex reads it), joined into words, with parameters (``$NAME``,
``${NAME}``, ``$?``, ``$@``, ``$0``-``$9``: bashlex keeps them as written); the operators ``&&``,
``||``, ``|``, ``;`` and newlines (a newline after ``&&``, ``||`` or ``|`` continues the line);
redirections ``>``, ``>>`` with an optional one-digit descriptor and a plain target word, and
``N>&M``, ``>&M``; a here-document as ``parse._prepared`` leaves it (``<<WORD`` or ``<<-WORD``
on a line, its body emptied: the next line is ``WORD``). Anything else (other ``$`` forms,
backquotes, backslashes outside quotes, other ``<``, ``&``, ``#``, ``(){}``, ``!``, reserved words
such as ``if``, ``for``, ``time`` or ``[[``, an empty command, a descriptor written against a
word) is not plain. ``tests/test_shell_plain.py`` checks the equality with bashlex on the shared
corpus's scripts and on generated ones.
"""

from __future__ import annotations

import re
from typing import NamedTuple

# a parameter bashlex keeps as written: $NAME, ${NAME}, $?, $@, $0-$9
_PARAM = r"\$(?:[A-Za-z_][A-Za-z0-9_]*|\{[A-Za-z_][A-Za-z0-9_]*\}|[?@0-9])"
# [A-Za-z0-9_-./=:,@%+^~*?[]] and every non-ASCII character, written as the ASCII left out (a
# class reaching U+10FFFF costs ~5 ms to compile, this one ~0.5 ms)
_WORD_CHARS = r"^\x00-\x20!\"#$&'();<>\\`{|}\x7f"
_TOKEN = re.compile(
    r"(?P<ws>[ \t]+)"
    r"|(?P<nl>\n)"
    r"|(?P<op>&&|\|\||\||;)"
    r"|(?P<heredoc><<-?[ \t]*(?P<delim>[A-Za-z_][A-Za-z0-9_]*)(?![^\s;&|<>()]))"
    r"|(?P<redir>(?P<fd>[0-9]?)(?:>>|>(?:&(?P<dup>[0-9])(?=[\x00-\x20!#&();<>\\`{|}\x7f]|$))?))"
    r"|(?P<word>(?:[" + _WORD_CHARS + r"]|" + _PARAM + r"|'[^'\x00]*'"
    r"|\"(?:[^\"$`\\\x00]|\\[^\x00]|" + _PARAM + r")*\")+)"
)
_ODD_SPACE = re.compile(r"[^\S \t\n]")  # other white space (\r, NBSP, ...): left to bashlex
_QUOTED = re.compile(r"'([^']*)'|\"((?:[^\"\\]|\\[\s\S])*)\"")
# in double quotes bashlex drops each backslash and keeps what follows (a newline goes with it)
_ESCAPED = re.compile(r"\\\n|\\([\s\S])")
# words bash reads as syntax where a command may start (bashlex builds compound nodes for them)
_RESERVED = frozenset(
    {"if", "then", "else", "elif", "fi", "case", "esac", "for", "select", "while", "until", "do"}
    | {"done", "in", "function", "time", "coproc", "{", "}", "!", "[[", "]]"}
)


class PlainPipe(NamedTuple):
    """The first command of one pipeline (as ``parse._Pipe``): its words (quotes removed), whether
    its standard output goes to a file, whether its input is a here-document (never, here), and
    whether it is its pipeline's only command."""

    words: list[str]
    out_redirected: bool
    here_input: bool
    alone: bool


class _Stage:
    __slots__ = ("here", "out", "redirected", "words")

    def __init__(self) -> None:
        self.words: list[str] = []
        self.out = False  # standard output to a file
        self.here = False  # input from a here-document
        self.redirected = False  # any redirection


def plain_pipes(script: str, alone: bool = True) -> tuple[PlainPipe, ...] | None:
    """The first command of each pipeline of ``script`` when it is plain (module docstring), the
    same pipes bashlex's tree gives (``alone``: the script is its caller's only command); None
    when it is not plain (bashlex reads it). Never raises."""
    if _ODD_SPACE.search(script):
        return None
    pipes: list[PlainPipe] = []
    stages: list[_Stage] = [_Stage()]
    pending: bool | None = None  # a redirection waiting for its target: does it send stdout?
    heredoc: str | None = None  # the delimiter of a here-document whose (emptied) body is ahead
    joined = False  # the last token was a word (no space since)
    pos, end = 0, len(script)
    while pos < end:
        m = _TOKEN.match(script, pos)
        if m is None:
            return None
        pos = m.end()
        kind, text = m.lastgroup, m.group()
        if kind == "ws":
            joined = False
            continue
        stage = stages[-1]
        if kind == "word":
            if joined:
                return None  # cannot happen (words are greedy); kept as a guard
            joined = True
            if pending is not None:
                stage.out = stage.out or pending
                pending = None
            elif text in _RESERVED:
                return None
            else:
                word = _word(text)
                if word is None:
                    return None
                stage.words.append(word)
            continue
        if pending is not None or (joined and kind in ("redir", "heredoc")) or (heredoc and kind == "op"):
            return None  # a redirection without its target; ``a2>x`` (bash reads ``2>``)
        if kind == "heredoc":
            if heredoc is not None:
                return None
            heredoc, stage.here, stage.redirected = m.group("delim"), True, True
            continue
        if kind == "redir":
            stage.redirected = True
            if m.group("dup") is None:
                pending = m.group("fd") in ("", "1")
            continue
        if kind == "op" and text == "|":
            if not stage.words:
                return None
            stages.append(_Stage())
            pos = _skip_blanks(script, pos)
            continue
        # ``&&``, ``||``, ``;`` or a newline: the pipeline ends (a newline, and the here-document)
        if heredoc is not None:
            if not script.startswith(heredoc, pos) or script[
                pos + len(heredoc) : pos + len(heredoc) + 1
            ] not in ("", "\n"):
                return None
            pos, heredoc = min(end, pos + len(heredoc) + 1), None
        if stage.words:
            pipes.append(_first(stages, alone))
        elif stage.redirected or len(stages) > 1 or kind == "op":
            return None  # ``> f``, ``a | ;``, ``; a``, ``a && && b``
        stages = [_Stage()]
        if text in ("&&", "||"):
            pos = _skip_blanks(script, pos)
            if pos >= end or script[pos] in "&|;":
                return None
    if pending is not None or heredoc is not None:
        return None
    if stages[-1].words:
        pipes.append(_first(stages, alone))
    elif stages[-1].redirected or len(stages) > 1:
        return None
    return tuple(pipes)


def _word(text: str) -> str | None:
    """``text`` with its quotes removed as bashlex removes them, or None where bashlex's quote
    removal is not the shell's (it then drops quote characters inside another kind of quotes, or
    keeps a second quoted part as written): a word joining quoted parts whose text holds the other
    kind of quote or a backslash, or starting with a quote and holding two quoted parts."""
    if "'" not in text and '"' not in text:
        return text
    parts = list(_QUOTED.finditer(text))
    if len(parts) == 1 and parts[0].end() - parts[0].start() == len(text):
        return _unquoted(parts[0])  # one quoted string: its text
    if text[0] in "'\"" and len(parts) > 1:
        return None
    if any(("'" if q.group(2) is not None else '"') in q.group() or "\\" in q.group() for q in parts):
        return None
    return _QUOTED.sub(_unquoted, text)


def _escaped(e: re.Match[str]) -> str:
    return e.group(1) or ""


def _unquoted(q: re.Match[str]) -> str:
    return q.group(1) if q.group(1) is not None else _ESCAPED.sub(_escaped, q.group(2))


def _first(stages: list[_Stage], alone: bool) -> PlainPipe:
    s = stages[0]
    return PlainPipe(s.words, s.out, s.here, alone and len(stages) == 1)


def _skip_blanks(script: str, pos: int) -> int:
    """The index of the first character at or after ``pos`` that is not a space, tab or newline."""
    while pos < len(script) and script[pos] in " \t\n":
        pos += 1
    return pos
