"""``Settings``: the base of every layer's settings record, and the range checks they share.

A settings record is one layer's (or one compaction step's) constants: a small frozen
``msgspec.Struct`` with named defaults, validated at construction. Each record says where it lives
in a policy file (``table``: ``[tool_result_budget]``), which flat ``Policy`` field stores each of
its own fields (``flat``: the engine reads the flat fields), and which of its numbers are counts
that 0 would make meaningless (``at_least_one``) or shares of something (``shares``, 0 to 1).
The records themselves are in ``ctxengine.policy.layer_settings`` and
``ctxengine.policy.compaction_settings``.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping
from typing import Any, ClassVar, Self, cast

import msgspec

RECORDS_KEPT = 512  # records ``Settings.of`` remembers (policies x kinds), then it starts over
_RECORDS: dict[tuple[int, type[Settings]], tuple[object, Settings]] = {}


def value_problem(value: object, *, at_least_one: bool, share: bool) -> str | None:
    """What is wrong with one setting's value, as a phrase to follow its name (None: sound).
    Every number finite and not negative; a count or size that 0 would make meaningless at least
    1; a share at most 1. Booleans, strings, tuples and records are not numbers here."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    if math.isnan(value) or math.isinf(value):
        return f"must be a finite number, not {value}"
    if at_least_one and value < 1:
        return f"must be at least 1, not {value}"
    if value < 0:
        return f"must not be negative, not {value}"
    if share and value > 1:
        return f"is a share (0 to 1), not {value}"
    return None


class Settings(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """The settings of one layer: frozen, validated at construction.

    Subclasses set the class variables below and declare their fields, documented with their units
    under ``Attributes:``.

    Raises:
        ValueError: at construction, when a field is out of range; the message names each such
            field and its range (``problems``).
    """

    table: ClassVar[str]
    """The policy file's table for this record (``[table]``)."""
    flat: ClassVar[Mapping[str, str]]
    """Each field of the record -> the flat ``Policy`` field that stores it."""
    at_least_one: ClassVar[frozenset[str]] = frozenset()
    """Sizes and counts that 0 would make meaningless (a 0-char cap offloads every result)."""
    shares: ClassVar[frozenset[str]] = frozenset()
    """Fields that are shares of something, 0 to 1."""

    def __post_init__(self) -> None:
        problems = [f"{type(self).__name__}.{attr} {phrase}" for attr, phrase in self.problems()]
        if problems:
            raise ValueError("; ".join(problems))

    def problems(self) -> Iterator[tuple[str, str]]:
        """Each field out of range, with the phrase saying why (``value_problem``).

        Records with a rule across fields add it (``CacheClear``: the target not above the
        trigger).

        Returns:
            An iterator of ``(field, phrase)`` pairs; empty when the record is sound.
        """
        for attr in self.__struct_fields__:
            phrase = value_problem(
                getattr(self, attr), at_least_one=attr in self.at_least_one, share=attr in self.shares
            )
            if phrase:
                yield attr, phrase

    def with_(self, **changes: Any) -> Self:
        """A copy with ``changes`` applied, validated again.

        Args:
            **changes: new values by this record's own field names.

        Returns:
            The new record, of this record's class.

        Raises:
            TypeError: when a name is not a field of this record.
            ValueError: when a new value is out of range.
        """
        return msgspec.structs.replace(self, **changes)

    def flat_fields(self) -> dict[str, Any]:
        """This record as the flat ``Policy`` fields that store it.

        Returns:
            A dict, flat ``Policy`` field name -> value.
        """
        return {flat: getattr(self, attr) for attr, flat in self.flat.items()}

    @classmethod
    def read(cls, policy: object) -> Self:
        """The record a policy stores in its flat fields (``Policy.settings(cls)``).

        Args:
            policy: the ``Policy`` (or any object with the flat fields as attributes).

        Returns:
            The record of this class.

        Raises:
            ValueError: when a value is out of range.
        """
        return cls(**{attr: getattr(policy, flat) for attr, flat in cls.flat.items()})

    @classmethod
    def of(cls, policy: object) -> Self:
        """The record of ``policy``, as ``read``, made once per policy object.

        A layer calls it at every model call, with the engine's resolved policy (the same object
        until the window or the policy changes); the last ``RECORDS_KEPT`` records are kept.

        Args:
            policy: the ``Policy`` (frozen: its record never changes).

        Returns:
            The record of this class.

        Raises:
            ValueError: when a value is out of range.
        """
        key = (id(policy), cls)
        hit = _RECORDS.get(key)
        if hit is not None and hit[0] is policy:
            return cast(Self, hit[1])
        record = cls.read(policy)
        if len(_RECORDS) >= RECORDS_KEPT:
            _RECORDS.clear()
        _RECORDS[key] = (policy, record)  # the policy kept alive, so its id is not reused meanwhile
        return record

    @classmethod
    def switchable(cls) -> bool:
        """Whether the layer has an on/off switch (an ``enabled`` field).

        A composed policy that does not list such a layer has it off.

        Returns:
            True when the record has an ``enabled`` field.
        """
        return "enabled" in cls.__struct_fields__
