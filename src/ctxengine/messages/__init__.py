"""The neutral message model and what reads it without a policy: ``model`` (``Message``, its blocks,
``Session``, ``Usage``), ``identifiers`` (exact identifiers in text), ``media`` (image and document
sizes), ``tool_turns`` / ``tool_failures`` (assistant turns, unanswered calls, failed results),
``file_writes`` (what a tool call wrote), ``view_counts`` (messages of a view holding each key).

May import: the standard library, msgspec and imagesize; nothing else of ctxengine (everything
else imports this package).
"""

from __future__ import annotations

from ctxengine.compat import successor_getattr

# the names of the flat ``messages.py`` this package replaced (now ``model``), imported on first use
__getattr__ = successor_getattr(__name__, __file__, "model")
