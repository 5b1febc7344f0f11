"""Evaluation of what a compaction kept: fidelity measured on content (``fidelity``, ``file_state``),
the LLM-judged probes (``probes``) and their judge (``judge``), and the ``ctxengine eval`` command
(``command``).

May import: ``messages``, ``tokens``, ``models``, ``policy``, ``layers``, ``summary``, ``llm``,
``engine``, ``replay``; ``cli`` (the command only).
"""

from __future__ import annotations

from ctxengine.compat import successor_getattr

# the names of the flat ``eval.py`` this package replaced (now ``probes``), imported on first use
__getattr__ = successor_getattr(__name__, __file__, "probes")
