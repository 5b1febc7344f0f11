"""The first commands of a shell script found by a real parser, ``bashlex``, for the tool-limit
report (``tool_limits.classify``), with the hand-written splitter (``shell_scan``) as fallback.

``parsed_first_commands`` yields what ``shell.first_commands`` yields (the first command of each
pipeline whose output the caller sees; ``bash -c SCRIPT`` followed ``NESTING`` levels; leading
assignments and prefixes skipped; commands whose standard output goes to a file or whose input
is a here-document left out), but from bashlex's syntax tree: compound commands (``for``,
``while``, ``if``, ``{ }``, ``( )``, functions) are entered, each inner pipeline judged on its own
(``alone`` when it has one command, and the compound is the only command of its own pipeline),
and a compound whose output goes to a file leaves its commands out.

A plain script (words, quotes, ``&&``, ``||``, ``|``, ``;``, simple redirections: most of what
agents run) is read by ``shell.plain`` instead, which gives what bashlex's tree gives in a
fraction of the time and without importing bashlex; anything else goes to bashlex.

bashlex 0.18 refuses some valid bash (``[[ ]]``, ``$(( ))``, ``time``, some quoting) and cannot
end a here-document whose delimiter is quoted (``<<'EOF'``). The latter is worked around before
parsing (``_prepared``: here-document bodies are data, never commands, so they are emptied and
their delimiters unquoted); for the rest the script goes to the hand-written splitter, and the
fallback is counted in ``FALLBACKS`` (by exception type) and logged at debug level.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Iterable, Iterator
from typing import Any, NamedTuple

from ctxengine.tools.shell.commands import NESTING, SHELLS, FirstCommand, command_words, shell_script
from ctxengine.tools.shell.plain import plain_pipes
from ctxengine.tools.shell.scan import _HEREDOC, HeredocEnds, scan, stage_words

log = logging.getLogger(__name__)

FALLBACKS: Counter[str] = Counter()  # scripts handed to the hand-written splitter, by exception type
_OUT_REDIRECTS = frozenset({">", ">>", ">|", "&>", "&>>"})  # with no fd or fd 1: stdout to a file
_HERE_INPUTS = frozenset({"<<", "<<-", "<<<"})
_COMPOUNDS = frozenset({"compound", "for", "if", "while", "until", "function"})
_SKIPPED = frozenset({"operator", "pipe", "reservedword", "word", "assignment", "redirect"})


class _Pipe(NamedTuple):
    """The first command of one pipeline: its words, whether its standard output goes to a file,
    whether its input is a here-document or here-string, and whether it is ``alone``."""

    words: list[str]
    out_redirected: bool
    here_input: bool
    alone: bool


def fallback_count() -> int:
    """Scripts handed to the hand-written splitter so far in this process (all reasons)."""
    return sum(FALLBACKS.values())


def parsed_first_commands(script: str, depth: int = 0, alone: bool = True) -> Iterator[FirstCommand]:
    """The first command of each pipeline of ``script`` whose output the caller sees (see the
    module docstring), as parsed by bashlex; by the hand-written splitter when bashlex refuses
    ``script`` (counted in ``FALLBACKS``). Never raises."""
    for pipe in _pipes(script, alone):
        words = command_words(pipe.words)
        if not words:
            continue
        name = words[0].rsplit("/", 1)[-1]
        if name in SHELLS:
            inner = shell_script(words)
            if inner is not None and depth < NESTING:
                yield from parsed_first_commands(inner, depth + 1, pipe.alone)
            continue
        if pipe.out_redirected or pipe.here_input:
            continue
        yield FirstCommand(name, words[1:], pipe.alone)


_PIPES: dict[tuple[str, bool], tuple[tuple[_Pipe, ...], str | None]] = {}
_PIPES_MAX = 8_192  # scripts remembered (the oldest forgotten first)


def _pipes(script: str, alone: bool) -> tuple[_Pipe, ...]:
    """The pipelines' first commands by bashlex, or by the hand-written splitter (counted).

    Remembered by script: a pure function of the text, and the same commands come back at every
    call of a session and under every policy of a bench. A remembered fallback is counted again
    each time, as a parse would count it."""
    key = (script, alone)
    hit = _PIPES.get(key)
    if hit is None:
        hit = _parsed(script, alone)
        if len(_PIPES) >= _PIPES_MAX:
            del _PIPES[next(iter(_PIPES))]
        _PIPES[key] = hit
    elif hit[1] is not None:
        FALLBACKS[hit[1]] += 1
    return hit[0]


def _parsed(script: str, alone: bool) -> tuple[tuple[_Pipe, ...], str | None]:
    text = _prepared(script)
    if not text.strip():
        return (), None  # no command (bashlex fails on empty input)
    plain = plain_pipes(text, alone)
    if plain is not None:  # what bashlex's tree gives, without bashlex (``shell.plain``)
        return tuple(_Pipe(*p) for p in plain), None
    import bashlex  # here, not at import: building its parser takes ~0.15 s

    try:
        trees = bashlex.parse(text)
        return tuple(p for tree in trees for p in _walk(tree, alone)), None
    except Exception as exc:  # bashlex raises ParsingError, NotImplementedError and others
        FALLBACKS[type(exc).__name__] += 1
        log.debug(
            "bashlex refused a shell command (%s: %s); the hand-written splitter read it",
            type(exc).__name__,
            exc,
        )
        pipes = tuple(
            _Pipe(stage_words(p[0]), p[0].out_redirected, p[0].here_input, alone and len(p) == 1)
            for p in scan(script)
        )
        return pipes, type(exc).__name__


def _prepared(script: str) -> str:
    """``script`` as bashlex can read it: NULs dropped (not shell text), and each here-document
    (an operator with a line holding only its delimiter after it) emptied, its delimiter
    unquoted and its end line unindented. Other text is left as it is."""
    s = script.replace("\x00", "")
    out: list[str] = []
    pos = search = 0
    ends = HeredocEnds(s)
    while (m := _HEREDOC.search(s, search)) is not None:
        eol = s.find("\n", m.end())
        if eol < 0:
            break
        delimiter = m.group(2)
        end = ends.find(delimiter, eol + 1)
        if end is None:
            search = m.end()
            continue
        operator = m.group(0).replace(m.group(1), "") if m.group(1) else m.group(0)
        out.append(s[pos : m.start()] + operator + s[m.end() : eol + 1] + delimiter)
        pos = search = end.end()
    out.append(s[pos:])
    return "".join(out)


def _walk(node: Any, alone: bool, redirected: bool = False) -> Iterator[_Pipe]:
    """The pipelines' first commands under ``node`` (a bashlex node), in order. ``redirected``:
    an enclosing compound sends its output to a file."""
    kind = node.kind
    if kind == "command":
        yield _command(node, alone, redirected)
    elif kind == "pipeline":
        stages = [p for p in node.parts if p.kind not in ("pipe", "reservedword")]
        single = alone and len(stages) == 1
        for i, stage in enumerate(stages):
            if stage.kind == "command":
                if i == 0:
                    yield _command(stage, single, redirected)
            else:
                yield from _walk(stage, single, redirected)
    elif kind in _COMPOUNDS:
        redirected = redirected or _sends_output(getattr(node, "redirects", ()))
        yield from _walk_parts(getattr(node, "list", None) or node.parts, alone, redirected)
    elif kind == "list":
        yield from _walk_parts(node.parts, alone, redirected)


def _walk_parts(parts: Iterable[Any], alone: bool, redirected: bool) -> Iterator[_Pipe]:
    """The commands among ``parts``: keywords, operators and words (a ``for`` list) skipped."""
    for part in parts:
        if part.kind not in _SKIPPED:
            yield from _walk(part, alone, redirected)


def _command(node: Any, alone: bool, redirected: bool) -> _Pipe:
    """A simple command's words (quotes removed, substitutions as written) and redirections."""
    words = [p.word for p in node.parts if p.kind in ("word", "assignment")]
    redirects = [p for p in node.parts if p.kind == "redirect"]
    here = any(r.type in _HERE_INPUTS for r in redirects)
    return _Pipe(words, redirected or _sends_output(redirects), here, alone)


def _sends_output(redirects: Iterable[Any]) -> bool:
    """Standard output goes to a file: ``>``, ``>>``, ``>|`` with no fd or fd 1, ``&>``,
    ``&>>``, or ``>&`` to a file name (``>&2`` and ``2>`` leave it where it was)."""
    for r in redirects:
        fd = getattr(r, "input", None)
        if r.type in _OUT_REDIRECTS and fd in (None, 1):
            return True
        if r.type == ">&" and fd in (None, 1) and not isinstance(r.output, int):
            return True
    return False
