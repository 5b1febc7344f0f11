"""The LLM summarizer (Claude Code's nine-section summary): ``summarizer`` (``LLMSummarizer``),
``requests`` (one request and its audit), ``chunks`` (a span too large for one request), ``prompts``,
``retry`` (backoff), ``result`` (what it returns).

May import: ``messages``, ``models``, ``llm``, ``tokens``, ``summary`` modules.
"""
