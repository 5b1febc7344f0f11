"""Helpers shared by the transcript reader tests (``test_reader_*.py``)."""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from pathlib import Path
from typing import Any

import pytest

from ctxengine.formats import load
from ctxengine.messages.model import Session, ToolCall, TranscriptError

Reader = Callable[[Path], list[Session]]


def pairing_problems(session: Session) -> list[str]:
    """Tool calls whose results are not in the next message, and results without their call in
    the previous message."""
    problems: list[str] = []
    msgs = session.messages
    for i, m in enumerate(msgs):
        following = {r.call_id for r in msgs[i + 1].tool_results} if i + 1 < len(msgs) else set()
        problems += [f"call {c.id} at {i} unanswered" for c in m.tool_calls if c.id not in following]
        previous = {c.id for c in msgs[i - 1].tool_calls} if i > 0 else set()
        problems += [
            f"result {r.call_id} at {i} without call" for r in m.tool_results if r.call_id not in previous
        ]
    return problems


def tool_calls(session: Session) -> list[ToolCall]:
    return [c for m in session.messages for c in m.tool_calls]


def session_fixture(read: Reader, path: Path) -> Any:
    """A module-scoped fixture, named by the test module's variable it is assigned to: the one
    session ``read`` finds in the real transcript ``path``."""

    @pytest.fixture(scope="module")
    def one_session(transcripts: Path) -> Session:
        [session] = read(path)
        return session

    return one_session


def read_damaged(read: Reader, path: Path, lines: list[int], warning: type[Warning] = UserWarning) -> Session:
    """The one session of the damaged file ``path``: exactly ``lines`` are recorded as malformed
    (with the path), and the first warnings name ``path:line`` for each of them, in order."""
    with pytest.warns(warning) as caught:
        [session] = read(path)
    assert [(m.path, m.line) for m in session.malformed] == [(str(path), n) for n in lines]
    assert len(caught) >= len(lines)
    for n, w in zip(lines, caught, strict=False):
        assert f"{path}:{n}:" in str(w.message), [f"{x.category.__name__}: {x.message}" for x in caught]
    return session


def assert_unreadable(
    read: Reader,
    path: Path,
    content: bytes | None = None,
    *,
    warns: type[Warning] | None = None,
) -> None:
    """The format's ``read`` (warning ``warns``, if given) and the generic ``load`` both raise a
    TranscriptError: naming the path once ``content`` is written to it, or, with no ``content``
    (nothing at ``path``), saying there is no such file."""
    if content is None:
        match = "no such file"
    else:
        path.write_bytes(content)
        match = str(path)
    expect: AbstractContextManager[object] = pytest.warns(warns) if warns else nullcontext()
    with expect, pytest.raises(TranscriptError, match=match):
        read(path)
    with pytest.raises(TranscriptError, match=match):
        load(path)
