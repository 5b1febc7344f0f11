"""What our read and grep limits would have kept out of a recorded session's context.

For every recorded tool result that read a file or searched, apply the limits of
``ctxengine.tools.read`` / ``ctxengine.tools.grep`` to the recorded output:
- read: the 256 KB size gate first (a whole-file read, i.e. no offset/limit, of a file over
  262,144 bytes is refused before reading), then 2,000 lines, lines cut at 2,000 chars, then
  refused above 25,000 tokens. A refused read keeps everything out but the refusal (which asks
  the model to page), counted as ``REFUSAL_TOKENS``;
- grep: a page of 100 output lines, lines cut at 500 chars.
The difference in tokens is what the limits would have kept out. A measurement only: the replay
reports it per session; nothing is changed.

Which calls count (``classify``):
- tools by name (``READ_TOOLS``, ``GREP_TOOLS``); a read tool's call is a whole-file read unless
  its input gives an offset, a limit or a line range (``PAGE_KEYS``);
- shell tools (``SHELL_TOOLS``): the command is split into its commands on ``&&``, ``||``, ``;``,
  ``&``, newlines and parentheses, each a pipeline split on ``|`` (``split_commands``: quote-aware,
  so ``grep "a && b" f`` is one command, and it never raises, even on unbalanced quotes). The
  call counts as a read or a grep when the *first* command of one of those pipelines is a read
  (``cat``, ``head``, ``tail``, ``sed``, ``nl``, ``less``) or a search (``grep``, ``rg``, ``ag``,
  ``ack``, ``egrep``, ``fgrep``), after leading ``VAR=value`` assignments and prefixes such as
  ``do``, ``then``, ``!``, ``time``, ``env``, ``sudo``, ``timeout N``; ``bash -c SCRIPT`` (and
  ``sh``/``zsh``, ``-lc``…) is classified by SCRIPT. So ``cd X && cat f``, ``cd X; rg p`` and
  ``for f in *; do head -1 "$f"; done`` count. The first such command decides the kind, and the
  whole recorded output is measured against its limits (the ``cd`` before it prints nothing; any
  other output is small next to what a limit cuts).

  Pipelines are classified by their first command, the one that reads or searches: ``grep x |
  head -5`` is a grep and ``cat f | tail -30`` a read, while ``ps aux | grep x`` and ``python
  run.py | head`` are neither (our tools could not have produced their output). The limits are
  applied to the recorded output, which is what is left after the pipeline's own cut: such a call
  counts in ``results`` but keeps nothing out unless the pipeline left more than the limits allow
  (``grep x | head -500`` can). A shell read is a whole-file read (the size gate applies) only for
  ``cat``/``nl``/``less`` with nothing after them in the pipeline; ``head``, ``tail`` and ``sed``
  read a part, like offset/limit.

  Not counted: a read or search whose standard output goes to a file (``cat > f``, ``grep x f >
  out``), whose input is a here-document or here-string (``cat <<EOF``, ``grep x <<< "$s"``), and
  ``sed -i`` (an edit). Command substitutions (``$(...)``, backquotes) stay inside their word:
  ``n=$(grep -c x f)`` is not a grep whose output the model saw.

The size gate needs the file's size, which a recording does not give: it is estimated from the
recorded output, without the ``cat -n`` line numbers when the output is numbered (Claude Code's
Read). Claude Code applies the same 256 KB gate itself, so its recorded Read results never pass it.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Callable, Sequence
from typing import NamedTuple

import msgspec

from ctxengine.messages import Message, Text, ToolCall, ToolResult
from ctxengine.tools.grep import GREP_MAX_LINE_CHARS, GREP_PAGE_MATCHES
from ctxengine.tools.read import READ_DEFAULT_LINES, READ_MAX_BYTES, READ_MAX_LINE_CHARS, READ_MAX_TOKENS

READ_TOOLS = frozenset({"read", "read_file", "view_file", "open_file", "view"})
GREP_TOOLS = frozenset({"grep", "rg", "ripgrep", "grep_search", "search_files", "search"})
SHELL_TOOLS = frozenset({"bash", "shell", "exec_command", "local_shell", "run_command"})
READ_COMMANDS = frozenset({"cat", "head", "tail", "sed", "nl", "less"})
WHOLE_FILE_COMMANDS = frozenset({"cat", "nl", "less"})  # print the whole file (head/tail/sed: a part)
GREP_COMMANDS = frozenset({"grep", "rg", "ag", "ack", "egrep", "fgrep"})
SHELLS = frozenset({"bash", "sh", "zsh", "dash", "ksh"})
# a read tool's input keys that page it: with one of them set, the size gate does not apply
PAGE_KEYS = ("offset", "limit", "view_range", "start_line", "end_line", "line_start", "line_end")
REFUSAL_TOKENS = 60  # what the model sees instead of an over-cap (or over-size) read

# words before a command that are not the command: keywords, and wrappers that run the rest
_PREFIXES = frozenset(
    {"!", "{", "do", "then", "else", "elif", "if", "while", "until"}
    | {"time", "command", "builtin", "exec", "nohup", "sudo", "env", "timeout"}
)
_ASSIGNMENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")
_HEREDOC = re.compile(r"(?<!<)<<-?(?!<)[ \t]*(['\"]?)([A-Za-z_][A-Za-z0-9_]*)\1")
_NUMBERED_LINE = re.compile(r"^ *\d+(?:\t|→)", re.M)  # cat -n / Claude Code's Read prefix
_NESTING = 2  # bash -c "bash -c '...'" at most
_SUB_MARK = "\x00"  # around a substitution's index in a stage's text (never in a command)
_SUB_RE = re.compile(_SUB_MARK + r"(\d+)" + _SUB_MARK)
_DOUBLE_STOP = re.compile(r'[\\"`]|\$\(')  # what matters inside double quotes


class LimitFigures(msgspec.Struct):
    """Per tool kind: results seen, results over a limit, tokens those limits keep out."""

    results: int = 0
    over_limit: int = 0
    tokens_kept_out: int = 0


class ToolLimitReport(msgspec.Struct):
    read: LimitFigures = msgspec.field(default_factory=LimitFigures)
    grep: LimitFigures = msgspec.field(default_factory=LimitFigures)


class ToolUse(NamedTuple):
    """How a recorded call is measured: ``kind`` is ``"read"`` or ``"grep"``; ``whole_file``: a
    read of a whole file (no offset/limit), to which the 256 KB size gate applies."""

    kind: str
    whole_file: bool = False


# ------------------------------------------------------------------ splitting shell commands


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


def _scan(script: str) -> list[list[_Stage]]:
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


def _words(stage: _Stage) -> list[str]:
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
    return [[_words(st) for st in pipeline] for pipeline in _scan(script)]


def _command_words(words: list[str]) -> list[str]:
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


def _shell_script(words: list[str]) -> str | None:
    """SCRIPT of ``bash -c SCRIPT`` (``-lc``, ``-ec``…), else None. ``words[0]`` is a shell."""
    for k, w in enumerate(words[1:], start=1):
        if not w.startswith("-"):
            return None
        if not w.startswith("--") and "c" in w[1:]:
            return words[k + 1] if k + 1 < len(words) else None
    return None


def _in_place(words: list[str]) -> bool:
    return any(
        w == "--in-place" or w.startswith("--in-place=") or re.match(r"^-[A-Za-z]*i", w) for w in words
    )


def _shell_use(script: str, depth: int = 0) -> ToolUse | None:
    for pipeline in _scan(script):
        first = pipeline[0]
        words = _command_words(_words(first))
        if not words:
            continue
        name = words[0].rsplit("/", 1)[-1]
        if name in SHELLS:
            inner = _shell_script(words)
            use = _shell_use(inner, depth + 1) if inner is not None and depth < _NESTING else None
            if use is not None:
                return use if len(pipeline) == 1 else ToolUse(use.kind)
            continue
        if first.out_redirected or first.here_input:
            continue
        if name in READ_COMMANDS and not (name == "sed" and _in_place(words[1:])):
            return ToolUse("read", whole_file=name in WHOLE_FILE_COMMANDS and len(pipeline) == 1)
        if name in GREP_COMMANDS:
            return ToolUse("grep")
    return None


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


def _shell_read_paths(script: str, depth: int = 0) -> list[str]:
    out: list[str] = []
    for pipeline in _scan(script):
        first = pipeline[0]
        words = _command_words(_words(first))
        if not words:
            continue
        name = words[0].rsplit("/", 1)[-1]
        if name in SHELLS:
            inner = _shell_script(words)
            if inner is not None and depth < _NESTING:
                out += _shell_read_paths(inner, depth + 1)
            continue
        if first.out_redirected or first.here_input:
            continue
        if name in READ_COMMANDS and not (name == "sed" and _in_place(words[1:])):
            out += _read_args(name, words[1:])
    return out


def shell_read_paths(call: ToolCall) -> list[str]:
    """The files a shell tool call (``SHELL_TOOLS``) reads with ``cat``, ``head``, ``tail``,
    ``sed``, ``nl`` or ``less`` as the first command of a pipeline (``cat f``, ``sed -n '1,80p' f``,
    ``nl -ba f | sed -n '1,200p'``, ``cd d && cat f``), as written (relative paths stay relative).
    Reads whose output goes to a file, here-documents and ``sed -i`` are not reads (as
    ``classify``). ``[]`` for any other call. Codex and mini-swe-agent read files this way; the
    restore after a compaction treats these like Read tool calls."""
    if call.name.lower() not in SHELL_TOOLS or not isinstance(call.input, dict):
        return []
    cmd = call.input.get("command") or call.input.get("cmd")
    if isinstance(cmd, list):
        cmd = shlex.join(str(c) for c in cmd)
    if not isinstance(cmd, str) or not cmd.strip():
        return []
    return list(dict.fromkeys(_shell_read_paths(cmd)))


# ------------------------------------------------------------------ classifying and measuring


def classify(call: ToolCall) -> ToolUse | None:
    """How ``call`` is measured (see the module docstring), or None: not a read or a search."""
    name = call.name.lower()
    if name in READ_TOOLS:
        paged = isinstance(call.input, dict) and any(call.input.get(k) is not None for k in PAGE_KEYS)
        return ToolUse("read", whole_file=not paged)
    if name in GREP_TOOLS:
        return ToolUse("grep")
    if name in SHELL_TOOLS and isinstance(call.input, dict):
        cmd = call.input.get("command") or call.input.get("cmd")
        if isinstance(cmd, list):
            cmd = shlex.join(str(c) for c in cmd)  # ["bash", "-lc", "cd x && cat f"] keeps its script
        if isinstance(cmd, str) and cmd.strip():
            return _shell_use(cmd)
    return None


def _kind(call: ToolCall) -> str | None:
    use = classify(call)
    return None if use is None else use.kind


def file_bytes(text: str) -> int:
    """The size in bytes of the file a recorded read output shows: the UTF-8 bytes of ``text``,
    without the ``cat -n`` line numbers when its first line is numbered."""
    if _NUMBERED_LINE.match(text):
        text = _NUMBERED_LINE.sub("", text)
    return len(text.encode("utf-8"))


def limited_read(text: str, count: Callable[[str], int], whole_file: bool = False) -> str:
    """The recorded read output as our read tool would have shown it (``""``: refused, by the
    size gate when ``whole_file`` and the file is over 262,144 bytes, or by the token cap)."""
    if whole_file and file_bytes(text) > READ_MAX_BYTES:
        return ""  # refused before reading: the model is told to page or grep
    lines = text.split("\n")
    kept = [
        ln if len(ln) <= READ_MAX_LINE_CHARS else ln[:READ_MAX_LINE_CHARS]
        for ln in lines[:READ_DEFAULT_LINES]
    ]
    out = "\n".join(kept)
    if count(out) > READ_MAX_TOKENS:
        return ""  # refused: the model is told to page instead
    return out


def limited_grep(text: str) -> str:
    """The recorded search output as our grep tool would have paged it."""
    lines = text.split("\n")[:GREP_PAGE_MATCHES]
    return "\n".join(ln if len(ln) <= GREP_MAX_LINE_CHARS else ln[:GREP_MAX_LINE_CHARS] for ln in lines)


def tool_limit_report(messages: Sequence[Message], count: Callable[[str], int]) -> ToolLimitReport:
    """Apply the read and grep limits to every matching recorded tool result."""
    report = ToolLimitReport()
    uses: dict[str, ToolUse] = {}
    for m in messages:
        for b in m.blocks:
            if isinstance(b, ToolCall):
                use = classify(b)
                if use is not None:
                    uses[b.id] = use
            elif isinstance(b, ToolResult) and b.call_id in uses:
                use = uses[b.call_id]
                text = "\n".join(p.text for p in b.content if isinstance(p, Text))
                fig = report.read if use.kind == "read" else report.grep
                fig.results += 1
                limited = (
                    limited_read(text, count, use.whole_file) if use.kind == "read" else limited_grep(text)
                )
                if limited != text:
                    full = count(text)
                    shown = count(limited) if limited else REFUSAL_TOKENS
                    if full > shown:
                        fig.over_limit += 1
                        fig.tokens_kept_out += full - shown
    return report
