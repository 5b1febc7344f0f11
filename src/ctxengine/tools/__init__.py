"""Context-aware agent tools: frugal by design (paged reads, paged search, offloaded results,
an open-files working set), each a Python function with a JSON schema, dispatched by
``ToolExecutor`` and served over MCP by ``ctxengine mcp``.

May import: ``messages``, ``tokens``, ``layers``, ``store``.
"""
