"""The steps of the cascade ``ContextEngine.assemble`` runs before every call, one class per layer,
each with one protocol (``base.CascadeLayer``: ``apply(context) -> LayerEvent | None``), built from
the parts of an engine (``base.EngineParts``). Which steps run, in which order, is the policy's
(``ctxengine.policy.cascade``): a new layer is a new module here and one line there.

May import: ``layers``, ``compaction``, ``policy``, ``messages`` and the engine's parts (``state``,
``view``, ``commit``); never ``core``.
"""
