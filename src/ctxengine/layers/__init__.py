"""The compaction cascade: one module per layer, plus ``pairing`` (the tool call/result invariant
and the cut-point helpers every layer uses). Layers are pure functions of a ``LayerContext``; see
``ctxengine.layers.base``.

May import: ``messages``, ``tokens``, ``policy``, ``summary``.
"""
