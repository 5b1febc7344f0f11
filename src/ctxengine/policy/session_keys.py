"""Session keys of a many-user gateway, and the per-kind history limits they select.

Follows OpenClaw (``src/agents/pi-embedded-runner/history.ts``; reference/openclaw.md §6.1): a
session key reads ``agent:<agentId>:<provider>:<kind>:<peer>``, optionally followed by
``:thread:<n>`` or ``:topic:<n>`` (stripped for the limit lookup). ``kind`` is ``dm`` (older
versions; ``direct`` in newer ones, read as ``dm``), ``channel`` or ``group``. The limit of a
session is a number of **user turns**: for a direct message the peer's own limit
(``channels.<provider>.dms.<userId>.historyLimit``) before the DM default (``dmHistoryLimit``);
for a group or channel the kind's limit (``historyLimit``). ``0`` means no limit.

A session whose id is not such a key (a replayed transcript, a CLI session) gets ``unkeyed``
(0 by default: no limit), which lets ``ctxengine replay`` measure a limit on recorded sessions.
"""

from __future__ import annotations

import math
from typing import Literal

import msgspec

SessionKind = Literal["dm", "channel", "group"]
KIND_ALIASES: dict[str, SessionKind] = {"dm": "dm", "direct": "dm", "channel": "channel", "group": "group"}
SUFFIXES = ("thread", "topic")


class SessionKeyError(ValueError):
    """A string that should be a session key is not one (the message says which part is wrong)."""


class SessionKey(msgspec.Struct, frozen=True):
    """A gateway's session key, ``agent:<agent>:<provider>:<kind>:<peer>`` (OpenClaw).

    Optionally followed by ``:thread:<n>`` / ``:topic:<n>``; ``str(key)`` writes it back.

    Attributes:
        agent: the agent's id.
        provider: the channel provider (``telegram``, ``slack``, ...).
        kind: "dm", "channel" or "group" (``direct`` is read as "dm").
        peer: the user or room the session is with.
        thread: "thread:<n>" or "topic:<n>", or None.
    """

    agent: str
    provider: str
    kind: SessionKind
    peer: str
    thread: str | None = None

    def __str__(self) -> str:
        base = f"agent:{self.agent}:{self.provider}:{self.kind}:{self.peer}"
        return f"{base}:{self.thread}" if self.thread else base

    @classmethod
    def parse(cls, text: str) -> SessionKey:
        """Parse a session key.

        Args:
            text: the key, ``agent:<agent>:<provider>:<kind>:<peer>[:thread:<n>|:topic:<n>]``.

        Returns:
            The key.

        Raises:
            SessionKeyError: naming what is wrong (the shape, an unknown kind, an empty part).
        """
        parts = text.split(":")
        thread = None
        if len(parts) >= 7 and parts[-2] in SUFFIXES:
            thread = f"{parts[-2]}:{parts[-1]}"
            parts = parts[:-2]
        if len(parts) != 5 or parts[0] != "agent":
            raise SessionKeyError(f"{text!r} is not a session key agent:<id>:<provider>:<kind>:<peer>")
        kind = KIND_ALIASES.get(parts[3])
        if kind is None:
            raise SessionKeyError(f"{text!r}: unknown kind {parts[3]!r} (dm, direct, channel or group)")
        if not all(parts[1:]) or not parts[4]:
            raise SessionKeyError(f"{text!r}: empty part")
        return cls(parts[1], parts[2], kind, parts[4], thread)

    @classmethod
    def find(cls, text: str) -> SessionKey | None:
        """The key ``text`` is, if it is one.

        Args:
            text: a session id that may be a key.

        Returns:
            The key, or None when ``text`` is not one.
        """
        try:
            return cls.parse(text)
        except SessionKeyError:
            return None


class HistoryLimits(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """User-turn limits per session kind, after OpenClaw's ``historyLimit`` (0: none).

    Attributes:
        dm: user turns kept in a direct-message session (OpenClaw's ``dmHistoryLimit``).
        channel: user turns kept in a channel session (``historyLimit``).
        group: user turns kept in a group session (``historyLimit``).
        unkeyed: user turns kept in a session whose id is not a key (a replay, the CLI).
        peers: overrides the DM limit for one peer, keyed ``<provider>:<peer>`` (OpenClaw's
            ``dms.<userId>.historyLimit``), user turns.
        batch: evict in batches (OpenClaw's newer behaviour, keeps the prompt-cache prefix
            stable); False keeps exactly the last N turns at every call (the older one).

    Raises:
        ValueError: at construction, for a negative limit.
    """

    dm: int = 0
    channel: int = 0
    group: int = 0
    unkeyed: int = 0
    peers: dict[str, int] = msgspec.field(default_factory=dict)
    batch: bool = True

    def __post_init__(self) -> None:
        named = {"dm": self.dm, "channel": self.channel, "group": self.group, "unkeyed": self.unkeyed}
        for name, value in (named | self.peers).items():
            if value < 0:
                raise ValueError(f"history limit {name} must not be negative, not {value}")

    @property
    def active(self) -> bool:
        """Whether any limit is set (a kind's, ``unkeyed`` or a peer's)."""
        return bool(self.dm or self.channel or self.group or self.unkeyed or any(self.peers.values()))

    def limit_for(self, session_id: str) -> int:
        """The user-turn limit of one session.

        Args:
            session_id: the session's id; a session key selects its kind's (or peer's) limit,
                any other id ``unkeyed``.

        Returns:
            The limit, user turns (0: none).
        """
        key = SessionKey.find(session_id)
        if key is None:
            return self.unkeyed
        if key.kind == "dm":
            return self.peers.get(f"{key.provider}:{key.peer}", self.dm)
        return self.channel if key.kind == "channel" else self.group


def turns_to_keep(count: int, limit: int, *, batch: bool = True) -> int:
    """How many of ``count`` user turns stay under ``limit`` (0: no limit). Batched (OpenClaw):
    nothing goes until the count exceeds ceil(1.5 x limit), then it drops back to ``limit``; so
    the first kept turn, hence the cached prefix, changes once per ceil(1.5N) - N + 1 turns.
    Unbatched: the last ``limit``."""
    if limit <= 0 or count <= limit:
        return count
    if not batch:
        return limit
    return limit if count > math.ceil(1.5 * limit) else count
