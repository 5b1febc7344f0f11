"""Every policy name the command line knows, in one list for ``replay`` and ``bench`` alike: ours
(``policy.BUILTIN``), the harness presets (``policy.presets``), the baselines
(``baselines.BASELINES``, engines of their own) and the Python peers (``peers.PEERS``, extra
``peers``); and the one message an unknown name gets, naming the closest and every known one.
"""

from __future__ import annotations

import difflib

from ctxengine import peers
from ctxengine.engine import baselines
from ctxengine.policy.registry import BUILTIN, presets

__all__ = ["known_policies", "policy_groups", "unknown_policy_message"]


def policy_groups() -> dict[str, tuple[str, ...]]:
    """The known policy names by kind: ``ours``, ``presets``, ``baselines``, ``peers``."""
    return {
        "ours": tuple(BUILTIN),
        "presets": tuple(presets()),
        "baselines": tuple(baselines.BASELINES),
        "peers": tuple(peers.PEERS),
    }


def known_policies() -> tuple[str, ...]:
    """Every known policy name, in ``policy_groups`` order."""
    return tuple(name for names in policy_groups().values() for name in names)


def unknown_policy_message(name: str) -> str:
    """``unknown policy 'NAME'`` with the closest known name and every known one, by kind."""
    close = difflib.get_close_matches(name, known_policies(), n=1)
    hint = f" (did you mean {close[0]}?)" if close else ""
    kinds = "; ".join(f"{kind}: {', '.join(names)}" for kind, names in policy_groups().items() if names)
    return f"unknown policy {name!r}{hint}; known: {kinds}"
