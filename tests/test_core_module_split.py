"""The names that moved out of engine, models, tokens.counter, llm.base and layers.pairing (issue
11, split by concern) stay importable from their old modules, as the same objects."""

from __future__ import annotations

import importlib

import pytest

MOVED = {
    "ctxengine.engine.core": {"ctxengine.engine.view": ["Projection"]},
    "ctxengine.models.registry": {
        "ctxengine.models.info": ["ModelInfo", "FALLBACK_PRICES", "cost_usd", "usage_cost_usd"],
        "ctxengine.models.table": ["RegistryError", "fallback_info"],
        "ctxengine.models.window": [
            "MIN_WINDOW_TOKENS",
            "WARN_WINDOW_TOKENS",
            "DEFAULT_WINDOW_TOKENS",
            "WindowTooSmallError",
            "WindowWarning",
            "ModelWindowWarning",
            "resolve_window",
            "check_window",
            "check_model_window",
            "window_above_model",
        ],
    },
    "ctxengine.tokens.counter": {
        "ctxengine.tokens.encoders": ["count_tokens", "encoder"],
        "ctxengine.tokens.estimate": [
            "CLAUDE_PROFILE",
            "GENERIC_PROFILE",
            "EstimateProfile",
            "classify_text",
            "count_cjk",
        ],
        "ctxengine.tokens.media": [
            "ANTHROPIC_IMAGE_UNKNOWN_TOKENS",
            "PDF_TOKENS_PER_PAGE",
            "anthropic_image_size",
            "anthropic_image_tokens",
            "openai_image_tokens",
            "pdf_pages",
        ],
    },
    "ctxengine.llm.base": {
        "ctxengine.llm.calls": [
            "LLMRequest",
            "LLMResponse",
            "CallRecord",
            "CallStats",
            "LLMClient",
            "ToolDefinition",
            "call_stats",
        ],
        "ctxengine.llm.provider": [
            "ProviderClient",
            "Reply",
            "SDKErrors",
            "ClientOptions",
            "NO_KEY_PLACEHOLDER",
            "MAX_RETRY_WAIT_S",
        ],
    },
    "ctxengine.layers.pairing": {
        "ctxengine.layers.pairing_plan": ["MISSING_RESULT_TEXT", "PairingViolation"],
        "ctxengine.layers.pairing_cuts": ["tool_groups", "safe_cut_points"],
    },
}

CASES = [(old, new, name) for old, homes in MOVED.items() for new, names in homes.items() for name in names]


@pytest.mark.parametrize(("old", "new", "name"), CASES)
def test_a_moved_name_is_the_same_object_at_its_old_path(old: str, new: str, name: str) -> None:
    assert getattr(importlib.import_module(old), name) is getattr(importlib.import_module(new), name)


def test_the_engine_keeps_its_public_names() -> None:
    engine = importlib.import_module("ctxengine.engine.core")
    for name in ("ContextEngine", "Projection", "CompactionError", "RECORDED_ORIGINS", "resolve_model"):
        assert hasattr(engine, name), name
