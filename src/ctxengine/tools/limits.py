"""Deprecated alias of ``ctxengine.tool_limits`` (the replay's tool-limit report), which moved below
the tools so that the replay does not import them; every name stays importable from here."""

from __future__ import annotations

from ctxengine.tool_limits import (
    GREP_TOOLS,
    PAGE_KEYS,
    READ_TOOLS,
    REFUSAL_TOKENS,
    LimitFigures,
    ToolLimitReport,
    ToolUse,
    classify,
    file_bytes,
    limited_grep,
    limited_read,
    shell_read_paths,
    split_commands,
    tool_limit_report,
)

__all__ = [
    "GREP_TOOLS",
    "PAGE_KEYS",
    "READ_TOOLS",
    "REFUSAL_TOKENS",
    "LimitFigures",
    "ToolLimitReport",
    "ToolUse",
    "classify",
    "file_bytes",
    "limited_grep",
    "limited_read",
    "shell_read_paths",
    "split_commands",
    "tool_limit_report",
]
