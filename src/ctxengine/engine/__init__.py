"""Engines: ``ContextEngine`` (``core``) and the parts it holds, one job each: the projection kept
incrementally and its pairing repair (``view``), decisions committed to the store and the view
(``commit``), the ingest of a message (``ingest``), the cascade of ``assemble`` as a list of layer
steps (``cascade``, ``steps``), sub-agent spawning (``subagents``), what they see of the session
(``state``); the shared lifecycle of other engines (``history``), the baseline engines
(``baselines``) and the plugin registry (``plugins``).

May import: ``messages``, ``models``, ``policy``, ``tokens``, ``layers``, ``compaction``, ``summary``,
``store``, ``llm`` (types); ``subagents`` only inside the calls that spawn. Never the CLI, replay or
proxy.
"""

from __future__ import annotations

from ctxengine.compat import successor_getattr

# the names of the flat ``engine.py`` this package replaced (now ``core``), imported on first use
__getattr__ = successor_getattr(__name__, __file__, "core")
