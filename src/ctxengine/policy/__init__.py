"""Policies as data: the record (``record``: ``Policy``), each layer's settings record
(``settings_base``, ``layer_settings``, ``compaction_settings``, ``fields``: which record owns each
flat field), the harness presets (``harnesses``), session keys and their history limits
(``session_keys``), the built-in policies and the registry (``registry``: ``get_policy``, ``DEFAULT``),
and the order of the cascade (``cascade``).

May import: nothing else of ctxengine (the settings are data; ``cascade`` names the engine's
steps by path, and the engine, the layers and the CLI import this package).
"""

from __future__ import annotations

from ctxengine.compat import successor_getattr

# the names of the flat ``policy.py`` this package replaced (now ``registry``), imported on first use
__getattr__ = successor_getattr(__name__, __file__, "registry")
