"""Sub-agents: context isolation by delegation (``spawn``, ``spec``, ``runner``) and, for the
replay, the link between a recorded sub-agent run and the call that spawned it (``linking``).

May import: ``messages``, ``tokens``, ``models``, ``policy``, ``layers``, ``compaction``, ``store``,
``tools``.
"""
