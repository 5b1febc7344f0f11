"""The output limits of ctxengine's read and grep tools (Claude Code's Read and Grep limits).

Below the tools (``ctxengine.tools.read``, ``ctxengine.tools.grep`` use them) and the replay's
tool-limit report (``ctxengine.tools.limits``, which measures what they would have kept out of a
recorded session), so the replay does not reach into the tools.
"""

from __future__ import annotations

READ_MAX_BYTES = 262_144  # bytes (256 KB): whole-file reads above this are refused before reading
READ_DEFAULT_LINES = 2_000  # lines a read returns without a limit
READ_MAX_LINE_CHARS = 2_000  # chars of one line a read shows
READ_MAX_TOKENS = 25_000  # tokens: a read above this is refused (the model pages instead)
GREP_PAGE_MATCHES = 100  # output lines in one page of grep
GREP_MAX_LINE_CHARS = 500  # chars of one grep output line
