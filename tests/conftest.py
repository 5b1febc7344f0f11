"""Shared test fixtures. Real transcripts are read from ``../shared/data/transcripts`` beside the
checkout (never copied into the repo)."""

from __future__ import annotations

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
