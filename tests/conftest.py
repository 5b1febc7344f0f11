"""Shared test fixtures. Real transcripts are read from ``../shared/data/transcripts`` beside the
checkout (never copied into the repo)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared"
TRANSCRIPTS = SHARED / "data" / "transcripts"
CLAUDE_CODE = TRANSCRIPTS / "claude-code-jsonl"
CODEX = TRANSCRIPTS / "codex-rollout-jsonl"
SWE_AGENT = TRANSCRIPTS / "swe-agent-traj"
OPENAI_CHAT = TRANSCRIPTS / "openai-chat-tool-calls"


@pytest.fixture(scope="session")
def transcripts() -> Path:
    if not TRANSCRIPTS.is_dir():
        pytest.fail(f"real transcripts not found at {TRANSCRIPTS}: ../shared must sit beside the checkout")
    return TRANSCRIPTS


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
