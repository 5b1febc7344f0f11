"""Plain shell scripts read without bashlex: lists of pipelines of simple commands, nothing else.

``shell_parse`` (``ctxengine.tools.shell.parse``) asks bashlex for the first command of each
pipeline. bashlex is pure Python: ~1-7 ms a script and ~0.1 s to import (it builds its LALR tables
at every import), the largest single cost of the replay's tool-limit report. Most scripts an
agent runs are plain (``cd src && grep -rn "x" . | head -20``), and for those ``plain_pipes``
reads the syntax tree of tree-sitter-bash (a maintained C grammar, ~0.1 ms a script) and gives
exactly what bashlex's tree gives (``parse._walk``), or None for anything else, which goes to
bashlex as before.

Plain means: words made of ``[A-Za-z0-9_-./=:,@%+^~*?[]]`` and non-ASCII letters, single-quoted
strings (any text but ``'``, NUL) and double-quoted strings without a backquote (a backslash
escapes the next character, as bashlex reads it), joined into words, with parameters (``$NAME``,
``${NAME}``, ``$?``, ``$@``, ``$0``-``$9``: bashlex keeps them as written); the operators ``&&``,
``||``, ``|``, ``;`` and newlines (a newline after ``&&``, ``||`` or ``|`` continues the line);
redirections ``>``, ``>>`` with an optional one-digit descriptor and a plain target word, and
``N>&M``, ``>&M``, each after a space or tab (or first in the script); a here-document as
``parse._prepared`` leaves it (``<<WORD`` or ``<<-WORD`` ending its line's pipeline, its body
emptied: the next line is ``WORD``). Anything else (other ``$`` forms such as ``$10``,
backquotes, backslashes outside quotes, other ``<``, ``&``, ``#``, ``(){}``, ``!``, reserved words
such as ``if``, ``for``, ``time`` or ``[[`` anywhere but as a redirection's target, an empty
command, a script tree-sitter-bash reads with an error) is not plain. ``tests/test_shell_plain.py``
checks the equality with bashlex on the shared corpus's scripts and on generated ones.

tree-sitter is imported at the first call (~0.1 s with the grammar), not at import.
"""

from __future__ import annotations

import re
import threading
from typing import TYPE_CHECKING, NamedTuple

if TYPE_CHECKING:
    from tree_sitter import Node, Parser

# a parameter bashlex keeps as written: $NAME, ${NAME}, $?, $@, $0-$9
_PARAM = re.compile(rb"\$(?:[A-Za-z_][A-Za-z0-9_]*|\{[A-Za-z_][A-Za-z0-9_]*\}|[?@0-9])")
# a bare word's characters (bytes of UTF-8): [A-Za-z0-9_-./=:,@%+^~*?[]] and every non-ASCII one
_BARE = re.compile(rb"[^\x00-\x20!\"#$&'();<>\\`{|}\x7f]+")
# the text of a double-quoted string between parameters (a backslash escapes the next character)
_IN_DOUBLE = re.compile(rb"(?:[^\"$`\\\x00]|\\[\s\S])*")
_NAME = re.compile(rb"[A-Za-z_][A-Za-z0-9_]*")
_BLANKS = re.compile(rb"[ \t\n]*")
_SPACES = re.compile(rb"[ \t]*")
_ODD_SPACE = re.compile(r"[^\S \t\n]")  # other white space (\r, NBSP, ...): left to bashlex
_QUOTED = re.compile(r"'([^']*)'|\"((?:[^\"\\]|\\[\s\S])*)\"")
# in double quotes bashlex drops each backslash and keeps what follows (a newline goes with it)
_ESCAPED = re.compile(r"\\\n|\\([\s\S])")
# words bash reads as syntax where a command may start (bashlex builds compound nodes for them)
_RESERVED = frozenset(
    {"if", "then", "else", "elif", "fi", "case", "esac", "for", "select", "while", "until", "do"}
    | {"done", "in", "function", "time", "coproc", "{", "}", "!", "[[", "]]"}
)
_WORDS = frozenset(
    {"word", "number", "string", "raw_string", "concatenation", "simple_expansion", "expansion"}
)


class PlainPipe(NamedTuple):
    """The first command of one pipeline (as ``parse._Pipe``): its words (quotes removed), whether
    its standard output goes to a file, whether its input is a here-document, and whether it is
    its pipeline's only command."""

    words: list[str]
    out_redirected: bool
    here_input: bool
    alone: bool


class _NotPlain(Exception):
    """Raised inside the walk when the script is not plain (caught by ``plain_pipes``)."""


class _Stage:
    __slots__ = ("here", "out", "words")

    def __init__(self) -> None:
        self.words: list[str] = []
        self.out = False  # standard output to a file
        self.here = False  # input from a here-document


_LOCAL = threading.local()  # a tree-sitter parser per thread (a parser is not shared)


def _parser() -> Parser:
    parser: Parser | None = getattr(_LOCAL, "parser", None)
    if parser is None:
        import tree_sitter_bash  # here, not at import: ~0.1 s with tree_sitter
        from tree_sitter import Language, Parser

        parser = _LOCAL.parser = Parser(Language(tree_sitter_bash.language()))
    return parser


def plain_pipes(script: str, alone: bool = True) -> tuple[PlainPipe, ...] | None:
    """The first command of each pipeline of ``script`` when it is plain (module docstring), the
    same pipes bashlex's tree gives (``alone``: the script is its caller's only command); None
    when it is not plain (bashlex reads it). Never raises."""
    if _ODD_SPACE.search(script) or "\x00" in script:
        return None
    src = script.encode()
    root = _parser().parse(src).root_node
    if root.has_error:
        return None
    walk = _Walk(src)
    try:
        walk.statements(root)
    except _NotPlain:
        return None
    # what the tree leaves out (tree-sitter's extras: a line continuation, ...) is not plain
    end = 0
    for start, stop in sorted(walk.spans):
        if start < end or not _BLANKS.fullmatch(src, end, start):
            return None
        end = stop
    if not _BLANKS.fullmatch(src, end) or any(not s.words for p in walk.pipelines for s in p):
        return None  # ``> f``: an empty command
    return tuple(_first(p, alone) for p in walk.pipelines)


class _Walk:
    """One script's walk: its bytes, its pipelines (each a list of simple commands) and the spans
    of the tokens taken (all else must be blank)."""

    def __init__(self, src: bytes) -> None:
        self.src = src
        self.pipelines: list[list[_Stage]] = []
        self.spans: list[tuple[int, int]] = []

    def statements(self, root: Node) -> None:
        """Read the script's statements into ``pipelines``, in order, with a stack of what is
        left to read (tree-sitter-bash nests ``a && b && c`` to the left: recursing down a
        script of thousands would reach Python's limit). tree-sitter-bash hangs the redirections
        that end a list or a pipeline on the whole of it (``a && b 2>/dev/null``); bash gives
        them to its last command, and so does this."""
        todo: list[tuple[Node, bool] | tuple[list[Node], int]] = [(root, True)]
        while todo:
            item = todo.pop()
            if isinstance(item[0], list):
                self.parts(item[0], item[1], self.pipelines[-1][-1])  # the trailing redirections
                continue
            node, new = item
            kind = node.type
            if kind in ("program", "list", "pipeline"):
                later: list[tuple[Node, bool] | tuple[list[Node], int]] = []
                for child in node.children:
                    if child.type in (";", "&&", "||", "|") and (child.type == "|") == (kind == "pipeline"):
                        self.token(child)
                    else:  # a pipeline's first command starts it if the pipeline starts one
                        later.append((child, new and not later if kind == "pipeline" else True))
                todo.extend(reversed(later))
            elif kind == "redirected_statement" and node.children[0].type in ("list", "pipeline"):
                body, *redirects = node.children
                todo.append((redirects, body.end_byte))
                todo.append((body, new))
            else:
                self.stage(node, new)

    def stage(self, node: Node, new: bool) -> None:
        """A simple command: it starts a pipeline (``new``) or is the last one's next."""
        kind = node.type
        if kind not in ("command", "redirected_statement", "variable_assignment"):
            raise _NotPlain  # ``&``, ``|&``, a compound command, a comment, ...
        stage = _Stage()
        if new:
            self.pipelines.append([stage])
        elif self.pipelines:
            self.pipelines[-1].append(stage)
        else:
            raise _NotPlain
        self.parts(node.children if kind != "variable_assignment" else [node], node.start_byte, stage)

    def parts(self, nodes: list[Node], at: int, stage: _Stage) -> None:
        """Add the words and redirections ``nodes`` (one simple command's, from byte ``at``, on
        one line) to ``stage``, in the script's order."""
        for node in nodes:
            if not _SPACES.fullmatch(self.src, at, node.start_byte):
                raise _NotPlain  # a newline inside a command
            at = node.end_byte
            kind = node.type
            if kind in ("command", "redirected_statement") or (
                kind == "command_name" and node.child_count == 1
            ):
                self.parts(node.children, node.start_byte, stage)
            elif kind in _WORDS or kind == "variable_assignment":
                self.word(node, stage)
            elif kind == "file_redirect":
                stage.out = self.redirect(node, stage) or stage.out
            elif kind == "heredoc_redirect" and not stage.here:
                stage.here = True
                self.heredoc(node, stage)
            else:
                raise _NotPlain

    def word(self, node: Node, stage: _Stage) -> None:
        text = self.text(node)
        word = None if text in _RESERVED else _word(text)
        if word is None:
            raise _NotPlain
        stage.words.append(word)

    def text(self, node: Node) -> str:
        """A plain word's text as written (a span taken), or ``_NotPlain``."""
        _check_word(node)
        self.spans.append((node.start_byte, node.end_byte))
        return self.src[node.start_byte : node.end_byte].decode()

    def token(self, node: Node) -> None:
        """Take an operator's span, checking its text is the operator: tree-sitter-bash's lexer
        can take a word into it (``x -c<<EOF``: ``-c<<`` is its ``<<``)."""
        if self.src[node.start_byte : node.end_byte] != node.type.encode():
            raise _NotPlain
        self.spans.append((node.start_byte, node.end_byte))

    def separate(self, at: int) -> None:
        """A redirection starts at ``at``: it must follow a space or tab (``a2>x``: bash reads
        ``2>``, bashlex does not), or open the script."""
        if at > 0 and self.src[at - 1] not in b" \t":
            raise _NotPlain

    def redirect(self, node: Node, stage: _Stage) -> bool:
        """Check a ``file_redirect`` (``>``, ``>>`` to a word; ``>&`` to a digit; an optional
        one-digit descriptor) and take its span: does it send standard output to a file? The
        words after its target, which tree-sitter-bash hangs on it, go to ``stage``."""
        children = node.children
        fd = ""
        if children and children[0].type == "file_descriptor":
            first = children.pop(0)
            fd = first.text.decode() if first.text is not None else ""
            if len(fd) != 1 or not children or children[0].start_byte != first.end_byte:
                raise _NotPlain
        if len(children) < 2:
            raise _NotPlain
        op, target, *more = children
        self.separate(node.start_byte)
        self.token(op)
        if op.type in (">", ">>") and target.type in _WORDS:
            if not _SPACES.fullmatch(self.src, op.end_byte, target.start_byte):
                raise _NotPlain
            _check_word(target)
            out = fd in ("", "1")
        elif op.type == ">&" and target.start_byte == op.end_byte and target.end_byte == op.end_byte + 1:
            if not target.text or not target.text.isdigit() or _BARE.match(self.src, target.end_byte):
                raise _NotPlain
            out = False
        else:
            raise _NotPlain
        self.spans.append((node.start_byte, op.start_byte))  # the descriptor (or nothing)
        self.spans.append((target.start_byte, target.end_byte))
        at = target.end_byte
        for word in more:
            if word.type not in _WORDS or word.start_byte == at:
                raise _NotPlain
            self.parts([word], at, stage)
            at = word.end_byte
        return out

    def heredoc(self, node: Node, stage: _Stage) -> None:
        """Check a here-document as ``parse._prepared`` leaves it: ``<<WORD`` (or ``<<-``), maybe
        redirections, the end of the line, an empty body and the line ``WORD``."""
        children = node.children
        if len(children) < 4 or children[0].type not in ("<<", "<<-") or children[1].type != "heredoc_start":
            raise _NotPlain
        op, start, *middle, body, end = children
        self.separate(op.start_byte)
        self.token(op)
        name = self.src[start.start_byte : start.end_byte]
        if (
            not _NAME.fullmatch(name)
            or not _BLANKS.fullmatch(self.src, op.end_byte, start.start_byte)
            or body.type != "heredoc_body"
            or body.start_byte != body.end_byte
            or end.type != "heredoc_end"
            or self.src[end.start_byte : end.end_byte] != name
            or self.src[end.start_byte - 1 : end.start_byte] != b"\n"
            or self.src[end.end_byte : end.end_byte + 1] not in (b"", b"\n")
            or _BARE.match(self.src, start.end_byte)
        ):
            raise _NotPlain
        self.spans.append((start.start_byte, start.end_byte))
        self.spans.append((end.start_byte, end.end_byte))
        self.parts(middle, start.end_byte, stage)  # redirections (or words) after it, on its line
        last = middle[-1].end_byte if middle else start.end_byte
        if not _SPACES.fullmatch(self.src, last, end.start_byte - 1):
            raise _NotPlain


def _check_word(node: Node) -> None:
    """Raise ``_NotPlain`` unless ``node`` is a plain word: bare characters, quoted strings and
    simple parameters (module docstring), joined."""
    kind = node.type
    text = node.text or b""
    if kind in ("word", "number"):
        ok = _BARE.fullmatch(text) is not None
    elif kind == "raw_string":
        ok = True  # '...': any text but ' (NUL is refused for the whole script)
    elif kind in ("simple_expansion", "expansion"):
        ok = _PARAM.fullmatch(text) is not None
    elif kind == "string":
        ok = _double_quoted(node)
    elif kind == "concatenation":
        for child in node.children:
            _check_word(child)
        ok = True
    elif kind == "variable_assignment":
        name, *rest = node.children
        ok = name.type == "variable_name" and bool(rest) and _is(rest[0], ("=", "+=")) and len(rest) <= 2
        if ok and len(rest) == 2:
            _check_word(rest[1])
    else:
        ok = False
    if not ok:
        raise _NotPlain


def _is(node: Node, operators: tuple[str, ...]) -> bool:
    """``node`` is one of ``operators``, its text too (tree-sitter-bash's lexer can widen one)."""
    return node.type in operators and node.text == node.type.encode()


def _double_quoted(node: Node) -> bool:
    """A ``"..."`` string of text (a backslash escaping the next character) and simple
    parameters, without a backquote."""
    children = node.children
    if len(children) < 2 or not _is(children[0], ('"',)) or not _is(children[-1], ('"',)):
        return False
    for child in children[1:-1]:
        text = child.text or b""
        if child.type == "string_content":
            if not _IN_DOUBLE.fullmatch(text):
                return False
        elif child.type not in ("simple_expansion", "expansion") or not _PARAM.fullmatch(text):
            return False
    return True


def _first(stages: list[_Stage], alone: bool) -> PlainPipe:
    s = stages[0]
    return PlainPipe(s.words, s.out, s.here, alone and len(stages) == 1)


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
