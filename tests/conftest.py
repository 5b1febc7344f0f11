"""Shared test fixtures. Real transcripts are read from ``../shared/data/transcripts`` beside the
checkout (never copied into the repo; ``CTXENGINE_SHARED`` names another place).

Without that folder, a test that needs it (one that uses the ``transcripts`` fixture, or whose
code, its fixtures' or its helpers' refers to a module-level path under ``../shared``, or whose
parameters are such paths) is skipped with the reason, decided here in one place
(``pytest_collection_modifyitems``); under ``CI=true`` it fails instead: CI must run them all.
"""

from __future__ import annotations

import os
import types
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[1]
SHARED = Path(os.environ.get("CTXENGINE_SHARED") or REPO.parent / "shared")
TRANSCRIPTS = SHARED / "data" / "transcripts"
CLAUDE_CODE = TRANSCRIPTS / "claude-code-jsonl"
CODEX = TRANSCRIPTS / "codex-rollout-jsonl"
SWE_AGENT = TRANSCRIPTS / "swe-agent-traj"
OPENAI_CHAT = TRANSCRIPTS / "openai-chat-tool-calls"


_HERE = globals()
MISSING = f"needs the shared corpus at {SHARED} (../shared beside the clone), which is absent"
IN_CI = os.environ.get("CI", "").lower() in ("true", "1")


@pytest.fixture(scope="session")
def transcripts() -> Path:
    if not TRANSCRIPTS.is_dir():
        pytest.fail(f"real transcripts not found at {TRANSCRIPTS}: ../shared must sit beside the checkout")
    return TRANSCRIPTS


def _under_shared(value: Any) -> bool:
    """Whether ``value`` is (or holds) a path under ``SHARED`` that does not exist."""
    if isinstance(value, Path):
        return value.is_relative_to(SHARED) and not value.exists()
    if isinstance(value, (tuple, list, frozenset, set)):
        return any(_under_shared(v) for v in value)
    return False


def _code_needs_shared(code: types.CodeType, scope: dict[str, Any], seen: set[int], depth: int = 0) -> bool:
    """Whether ``code`` (or a function of its module it calls, three calls deep, or a code
    object nested in it) names a missing path under ``SHARED``."""
    if id(code) in seen or depth > 3:
        return False
    seen.add(id(code))
    for name in code.co_names:
        value = scope.get(name, _HERE.get(name))  # ``from conftest import CLAUDE_CODE`` in a body
        if _under_shared(value):
            return True
        called = isinstance(value, types.FunctionType)
        if called and _code_needs_shared(value.__code__, scope, seen, depth + 1):
            return True
    return any(
        _code_needs_shared(c, scope, seen, depth) for c in code.co_consts if isinstance(c, types.CodeType)
    )


def _function_needs_shared(f: Any, seen: set[int]) -> bool:
    """Whether the function ``f`` (a test, a fixture, a parameter) reaches a missing path under
    ``SHARED``: through its code, the functions it calls, or its closure (a fixture factory's)."""
    f = getattr(f, "__wrapped__", f)
    if not isinstance(f, types.FunctionType):
        return False
    cells = [c.cell_contents for c in f.__closure__ or () if c.cell_contents is not None]
    return any(_under_shared(v) for v in cells) or _code_needs_shared(f.__code__, f.__globals__, seen)


def _needs_shared(item: pytest.Item) -> bool:
    if "transcripts" in getattr(item, "fixturenames", ()):
        return True
    callspec = getattr(item, "callspec", None)
    params = tuple(callspec.params.values()) if callspec is not None else ()
    if _under_shared(params):
        return True
    functions: list[Any] = [getattr(item, "function", None), *params]
    info = getattr(item, "_fixtureinfo", None)
    for defs in info.name2fixturedefs.values() if info is not None else ():
        functions.extend(d.func for d in defs)
    seen: set[int] = set()
    return any(_function_needs_shared(f, seen) for f in functions)


def pytest_collection_modifyitems(config: pytest.Config, items: Iterable[pytest.Item]) -> None:
    """Without ``../shared``: skip (or under ``CI=true`` fail) each test that needs it."""
    if SHARED.is_dir() and TRANSCRIPTS.is_dir():
        return
    for item in items:
        if _needs_shared(item):
            item.add_marker(pytest.mark.shared_corpus_missing)
            if not IN_CI:
                item.add_marker(pytest.mark.skip(reason=MISSING))


def pytest_runtest_setup(item: pytest.Item) -> None:
    if IN_CI and item.get_closest_marker("shared_corpus_missing") is not None:
        pytest.fail(f"CI=true: {MISSING}", pytrace=False)


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "shared_corpus_missing: the test needs ../shared, which is absent")


# environment variables through which real credentials, base URLs, profiles or logging could
# reach the LLM clients' SDKs
LLM_ENV = (
    "ANTHROPIC_API_KEY",
    "ANTHROPIC_AUTH_TOKEN",
    "ANTHROPIC_BASE_URL",
    "ANTHROPIC_PROFILE",
    "ANTHROPIC_CUSTOM_HEADERS",
    "ANTHROPIC_LOG",
    "OPENAI_API_KEY",
    "OPENAI_BASE_URL",
    "OPENAI_ORG_ID",
    "OPENAI_PROJECT_ID",
    "OPENAI_ADMIN_KEY",
    "OPENAI_LOG",
)


@pytest.fixture
def clean_llm_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """No real credentials, base URLs or profiles leak into the tests (``LLM_ENV`` unset, the
    Anthropic config directory an empty one under ``tmp_path``). Use it with
    ``pytestmark = pytest.mark.usefixtures("clean_llm_env")`` or as a test's argument."""
    for name in LLM_ENV:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("ANTHROPIC_CONFIG_DIR", str(tmp_path / "anthropic-config"))


@pytest.fixture(autouse=True, scope="session")
def no_columns_setting() -> Iterator[None]:
    """pytest-xdist's workers export ``COLUMNS=80``, which the tables keep to when piped (as a
    user's exported ``COLUMNS``): tests see the piped default width unless they set it."""
    columns = os.environ.pop("COLUMNS", None)
    yield
    if columns is not None:
        os.environ["COLUMNS"] = columns
