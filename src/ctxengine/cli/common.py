"""What the ``ctxengine replay`` and ``ctxengine bench`` commands share: reading transcripts from the
paths given, the ``--llm`` client and the ``--models`` registry (the options and what they build),
and how they talk on stderr.

Errors a user can fix (a missing path, an unknown format, an empty or binary file, a bad ``--llm``
or ``--models``) print one line and raise ``typer.Exit(2)`` (see ``fail``); a malformed record is a
warning naming file and line, and the rest still loads. Depends on no command module, so both
``cli`` and ``bench`` import it without a cycle.
"""

from __future__ import annotations

import os
import sys
import threading
import warnings
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ctxengine.cli.outputs import check_distinct_outputs as check_distinct_outputs
from ctxengine.cli.outputs import check_not_an_input as check_not_an_input
from ctxengine.cli.outputs import check_output as check_output
from ctxengine.cli.progress import progress_bar as progress_bar
from ctxengine.cli.progress import sessions_bar as sessions_bar
from ctxengine.cli.stderr import fail as fail
from ctxengine.cli.stderr import say as say
from ctxengine.formats import link_sidechains, load
from ctxengine.messages.model import Session, TranscriptError
from ctxengine.models.registry import (
    MIN_WINDOW_TOKENS,
    Registry,
    WindowTooSmallError,
    WindowWarning,
    check_window,
)
from ctxengine.policy.registry import Policy, get_policy

if TYPE_CHECKING:
    import typer
    from rich.console import Console

    from ctxengine.llm import CallRecord, LLMClient, LLMRequest, LLMResponse

TABLE_WIDTH = 200  # columns when stdout is not a terminal (a log, a pipe)

_OPTIONS = frozenset({"LlmOption", "LlmBaseUrlOption", "LlmTimeoutOption", "ModelsOption", "ModelOption"})


def __getattr__(name: str) -> Any:
    """The shared typer options (``cli.options``), imported on first use: this module runs
    without typer; ``err`` (``cli.stderr``), made on first use: it runs without rich."""
    if name == "err":
        from ctxengine.cli.stderr import stderr_console

        return stderr_console()
    if name in _OPTIONS:
        from ctxengine.cli import options

        return getattr(options, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

def load_policy(name: str, policy_file: Path | None) -> Policy:
    """The policy of ``--policy NAME`` or ``--policy-file P.toml`` for a command.

    An old flat key in the file still loads; its ``DeprecationWarning`` (which Python hides
    outside ``__main__``) is printed as ``warning: ...`` on stderr, naming the table it belongs in.

    Args:
        name: a built-in policy or preset name (used when ``policy_file`` is None).
        policy_file: a TOML policy file (``Policy.from_toml``).

    Returns:
        The policy.

    Raises:
        typer.Exit: code 2, after ``error: ...``, for an unknown name or a bad file.
    """
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", DeprecationWarning)
        try:
            policy = Policy.from_toml(policy_file) if policy_file else get_policy(name)
        except KeyError:
            from ctxengine.cli.policy_names import unknown_policy_message

            raise fail(unknown_policy_message(name)) from None
        except ValueError as exc:
            raise fail(str(exc.args[0]) if exc.args else str(exc)) from None
    for w in caught:
        if issubclass(w.category, DeprecationWarning):
            say("warning:", f"{policy_file}: {w.message}")
        else:
            warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)
    return policy


def stdout_console() -> Console:
    """The console for tables: the terminal's width, or in a log or pipe ``COLUMNS`` when it is
    set (as rich reads it), else ``TABLE_WIDTH`` columns."""
    from rich.console import Console

    columns = os.environ.get("COLUMNS", "")
    return Console() if sys.stdout.isatty() or columns.isdigit() else Console(width=TABLE_WIDTH)


BREAKER_FAILURES = 3  # consecutive failed LLM calls after which the run makes no more


class GuardedClient:
    """The ``--llm`` client with a run-wide circuit breaker: after ``BREAKER_FAILURES``
    consecutive calls that fail for a reason the next call would share (connection, timeout,
    auth, server error, rate limit: not a request's own prompt-too-long or bad request), every
    further call fails at once with ``LLMConnectionError`` instead of waiting for the server
    again, so an unreachable server costs seconds, not minutes; the engine reads ``open`` and,
    while it is, makes the $0 summaries and notes instead of asking
    (``SessionNotes.llm_declines``). ``ok``, ``failed``, ``skipped`` and ``last_error`` are what
    ``finish_llm`` reports. Thread-safe (notes may update in the background); everything else
    (``provider``, ``model``, ``calls``, ``timeout``, ...) is the wrapped client's."""

    def __init__(self, inner: LLMClient, spec: str, trip_after: int = BREAKER_FAILURES) -> None:
        self.inner = inner
        self.spec = spec
        self.trip_after = trip_after
        self.ok = 0
        self.failed = 0
        self.skipped = 0
        self.consecutive = 0
        self.last_error = ""
        self._lock = threading.Lock()

    @property
    def open(self) -> bool:
        return self.consecutive >= self.trip_after

    @property
    def provider(self) -> str:
        return self.inner.provider

    @property
    def model(self) -> str:
        return self.inner.model

    @property
    def calls(self) -> list[CallRecord]:
        return self.inner.calls

    def __getattr__(self, name: str) -> Any:  # timeout, max_retries, ... of the wrapped client
        return getattr(self.inner, name)

    def complete(self, request: LLMRequest) -> LLMResponse:
        from ctxengine.llm import BadRequestError, LLMConnectionError, LLMError, PromptTooLongError

        with self._lock:
            if self.open:
                self.skipped += 1
                raise LLMConnectionError(
                    f"not sent: the last {self.consecutive} LLM calls failed ({self.last_error})",
                    provider=self.provider,
                    model=self.model,
                )
        try:
            response = self.inner.complete(request)
        except (PromptTooLongError, BadRequestError):
            raise  # this request's own fault: the next one may well succeed
        except LLMError as exc:
            with self._lock:
                self.failed += 1
                self.consecutive += 1
                self.last_error = f"{type(exc).__name__}: {exc}"
            raise
        with self._lock:
            self.ok += 1
            self.consecutive = 0
        return response


def make_llm(llm: str | None, base_url: str | None, timeout: float) -> GuardedClient | None:
    """The client for ``--llm PROVIDER:MODEL`` (``anthropic`` or ``openai``), or ``None`` without one,
    behind the run's circuit breaker (``GuardedClient``; report it with ``finish_llm``).

    ``base_url`` is ``--llm-base-url`` (OpenAI-compatible servers too); ``timeout`` is seconds per
    request. A bad spec, an unknown provider or a missing SDK prints ``error: --llm SPEC: why`` and
    raises ``typer.Exit(2)``.
    """
    if not llm:
        return None
    from ctxengine.llm import LLMError, make_client

    try:
        return GuardedClient(make_client(llm, base_url=base_url, timeout=timeout), llm)
    except (ValueError, LLMError, ImportError) as exc:
        raise fail(f"--llm {llm}: {exc}") from None


def finish_llm(client: GuardedClient | None) -> None:
    """At the end of a run with ``--llm``: when LLM calls failed, say so in one line; when none
    ever succeeded, as an ``error:`` (the run's summaries and notes are all the $0 fallbacks)
    and raise ``typer.Exit(2)``; when the breaker opened after some succeeded, as a ``warning:``."""
    if client is None or not client.failed:
        return
    failed = f"{client.failed} LLM call(s) failed (the last: {client.last_error})"
    skipped = (
        f", {client.skipped} more not sent after {client.trip_after} failures in a row"
        if client.skipped
        else ""
    )
    if not client.ok:
        raise fail(
            f"--llm {client.spec}: no LLM call succeeded: {failed}{skipped}; every summary and notes "
            "update fell back to the $0 structured one (check the server, --llm-base-url and the key)"
        )
    say(
        "warning:",
        f"--llm {client.spec}: {client.ok} LLM call(s) succeeded, {failed}{skipped}; those fell back to $0",
    )


def require_paths(paths: Iterable[Path]) -> None:
    """Raise ``typer.Exit(2)`` (after ``error: PATH: no such file or directory``) at the first
    path that does not exist."""
    for p in paths:
        if not p.exists():
            raise fail(f"{p}: no such file or directory")


def load_registry(models: Path | None) -> Registry:
    """The model registry (prices, windows), overridden by the ``--models`` TOML file if given.

    An unreadable or invalid file prints ``error: FILE: why`` and raises ``typer.Exit(2)``.
    """
    try:
        return Registry.default().with_overrides(models) if models else Registry.default()
    except (OSError, ValueError) as exc:
        why = str(exc)  # a RegistryError names the file already
        raise fail(why if why.startswith(f"{models}:") else f"{models}: {why}") from None


def collect(path: Path) -> tuple[list[Session], list[str]]:
    """Sessions under ``path`` (a file or a folder, recursively) and notes on skipped files.

    Raises ``TranscriptError`` when ``path`` is a single file that cannot be read.
    """
    notes: list[str] = []
    if path.is_dir():
        sessions: list[Session] = []
        for f in sorted(p for p in path.rglob("*") if p.is_file()):
            try:
                sessions.extend(load(f))
            except TranscriptError as exc:
                notes.append(f"skipped {exc}")
        link_sidechains(sessions)
        return sessions, notes
    sessions = load(path)
    link_sidechains(sessions)  # a main file's own sidechain records
    return sessions, notes


def collect_all(paths: Iterable[Path]) -> tuple[list[Session], list[str]]:
    """``collect`` over each of ``paths`` in turn: all the sessions, and all the notes.

    Raises ``TranscriptError`` at the first path that is a single file that cannot be read.
    """
    sessions: list[Session] = []
    notes: list[str] = []
    for p in paths:
        found, more = collect(p)
        sessions.extend(found)
        notes.extend(more)
    return sessions, notes


def assume_model(sessions: Sequence[Session], model: str | None) -> int:
    """Give ``model`` to the sessions whose transcript names no model; returns how many."""
    if not model:
        return 0
    unnamed = [s for s in sessions if not s.model]
    for s in unnamed:
        s.model = model
    return len(unnamed)


def check_window_option(window: int | None) -> None:
    """``--window``: not positive, or under 16,000 tokens (``WindowTooSmallError``), prints
    ``error: ...`` and raises ``typer.Exit(2)``; under 32,000 prints one ``warning:`` line. The
    per-session ``WindowWarning`` the engine emits is then silenced for this process (and the
    bench workers, which call this too): it would repeat the same line for every session."""
    if window is None:
        return
    if window <= 0:
        raise fail(f"--window must be a positive number of tokens, not {window}")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", WindowWarning)
        try:
            check_window(window)
        except WindowTooSmallError as exc:
            raise fail(str(exc)) from None
    for w in caught:
        say("warning:", str(w.message))
    warnings.filterwarnings("ignore", category=WindowWarning)


def window_error(exc: WindowTooSmallError, session: Session | None = None) -> typer.Exit:
    """``fail`` with what a user can do about a window the engine refuses (``window_message``)."""
    return fail(window_message(exc, session))


def window_message(exc: WindowTooSmallError, session: Session | None = None) -> str:
    """What a user can do about a window the engine refuses: a fixed prefix larger than the
    window says which window would do (its own message); a model window under the minimum
    (16,000 tokens, the overflow guard's: room for the newest round and the response) names the
    session and model, and the options that replay it."""
    message = str(exc)
    if type(exc) is WindowTooSmallError:
        whose = f"{session.source}: model {session.model}: " if session is not None else ""
        message = (
            f"{whose}{message} (the overflow guard's minimum); replay it as if the window were "
            f"larger with --window {MIN_WINDOW_TOKENS} or more, or name a model with a larger window "
            "(--model for transcripts that name none, --models FILE.toml to change a window)"
        )
    return message


def check_model(model: str | None, registry: Registry) -> None:
    """``--model`` must be in the registry (else its prices and window would be guesses): an
    unknown name prints ``error: ...`` and raises ``typer.Exit(2)``."""
    if model and model not in registry:
        raise fail(f"--model {model}: unknown model (add it with --models FILE.toml)")


def load_for_replay(path: Path, model: str | None, *, settle: bool) -> list[Session]:
    """``load_transcripts([path], model)``, then the tokenizer built (``tokens.encoders.encoder``:
    once here, before any replay worker forks, so that each inherits it); with ``settle`` (a
    process that replays and ends), the collector then tuned for the replay
    (``replay.pool.settle_collector``). Errors as ``load_transcripts``."""
    from ctxengine.tokens.encoders import encoder

    sessions = load_transcripts([path], model)
    encoder()
    if settle:
        from ctxengine.replay.pool import settle_collector

        settle_collector()
    return sessions


def load_transcripts(paths: Sequence[Path], model: str | None = None) -> list[Session]:
    """Every session under ``paths`` (files, or folders read recursively), for a command.

    Warnings raised while loading (a malformed record: file and line) are printed as
    ``warning: ...`` lines, then the notes on skipped files and the count of malformed records as
    ``note: ...``. A single file that cannot be read (unknown format, empty, binary), no session
    at all, or sessions none of which records a model call print one ``error:`` line and raise
    ``typer.Exit(2)`` (sessions without a call among others are left out with a ``note:``).
    Check the paths exist first (``require_paths``).
    """
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            sessions, notes = collect_all(paths)
        except TranscriptError as exc:
            raise fail(str(exc)) from None
    for w in caught:
        say("warning:", str(w.message))
    for n in notes:
        say("note:", n)
    if not sessions:
        raise fail(f"{', '.join(map(str, paths))}: no transcripts found")
    malformed = sum(len(s.malformed) for s in sessions)
    if malformed:
        what = "left out, or read without their bad part"
        say("note:", f"{malformed} malformed record(s) in all ({what}); the rest loaded")
    callless = [s for s in sessions if not has_model_calls(s)]
    if len(callless) == len(sessions):
        what = (
            "the transcript records no"
            if len(sessions) == 1
            else f"none of {len(sessions)} sessions records an"
        )
        raise fail(
            f"{', '.join(map(str, paths))}: no model calls to replay ({what} assistant turn, "
            "only user messages or metadata)"
        )
    if callless:
        named = ", ".join(os.path.basename(s.source) + (f" {s.name}" if s.name else "") for s in callless[:3])
        more = f" and {len(callless) - 3} more" if len(callless) > 3 else ""
        say("note:", f"{len(callless)} session(s) with no model calls left out: {named}{more}")
        sessions = [s for s in sessions if has_model_calls(s)]
    assumed = assume_model(sessions, model)
    if assumed:
        say("note:", f"{assumed} session(s) name no model: replayed as {model}")
    return sessions


def has_model_calls(session: Session) -> bool:
    """Whether ``session`` records a model call (an assistant message the harness did not make up),
    the replay's measure of a call."""
    return any(m.role == "assistant" and not m.meta.get("synthetic") for m in session.messages)


def report_layer_failures(failures: int, where: str) -> None:
    """One ``warning:`` line when the engine caught layer exceptions (``failures`` > 0) and went on
    without the layer: counted and reported (``where`` says where the count is), never silent."""
    if failures:
        say(
            "warning:",
            f"{failures} layer failure(s): the engine caught a layer's exception and went on without it "
            f"(the session unchanged by that layer); counted in {where}",
        )
