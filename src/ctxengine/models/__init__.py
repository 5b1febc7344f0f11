"""Models: the shipped model table (``table``, ``data/models.toml``), one model's facts and prices
(``info``), the registry (``registry``: ``Registry``, ``usage_cost_usd``), the context window's
resolution and guard (``window``) and the prompt-cache model (``prompt_cache``).

May import: ``messages`` and the standard library; nothing of the engine or the policy.
"""

from __future__ import annotations

from ctxengine.compat import successor_getattr

# the names of the flat ``models.py`` this package replaced (now ``registry``), imported on first use
__getattr__ = successor_getattr(__name__, __file__, "registry")
