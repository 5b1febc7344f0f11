"""What a compaction writes and keeps: the structured $0 summary (``structured``, its ``state``,
``render``, the presets' ``formats`` and ``styles``), the LLM summarizer (``llm``), the audit and
quality figures (``audit``), the transcript skeleton (``skeleton``), session notes (``notes``), the
restored working set (``restore``, ``file_ledger``) and the user's standing rules (``rules``).

May import: ``messages``, ``layers``, ``llm``, ``tools`` (the shell parser and the instruction
files, below the agent tools); never the engine, ``compaction`` (which imports this package) or
the CLI.
"""
