"""Which settings record owns each flat ``Policy`` field, and the translations between the two.

A ``Policy`` stores its settings as flat fields (``tool_result_max_chars``: what the engine
reads); each layer's record (``ToolResultBudget.max_chars``) names the flat field it lives in.
This module turns records, policy-file tables (``[tool_result_budget] max_chars = 20000``) and the
old flat keys (kept working with a ``DeprecationWarning`` naming the new place) into flat field
changes, and checks a flat policy's ranges. It sits below ``ctxengine.policy.record`` (which
imports it) and knows ``Policy`` only as a record of flat fields.
"""

from __future__ import annotations

import difflib
import tomllib
import warnings
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any, TypeVar

import msgspec

from ctxengine.policy.compaction_settings import COMPACTION_SETTINGS
from ctxengine.policy.layer_settings import LAYER_SETTINGS
from ctxengine.policy.settings_base import Settings, value_problem

P = TypeVar("P", bound=msgspec.Struct)

SETTINGS: tuple[type[Settings], ...] = LAYER_SETTINGS + COMPACTION_SETTINGS
"""Every settings record a policy composes: the layers before compaction, then compaction's."""
BY_TABLE: dict[str, type[Settings]] = {cls.table: cls for cls in SETTINGS}
"""Each record by its policy-file table name."""
PLACE: dict[str, tuple[type[Settings], str]] = {
    flat: (cls, attr) for cls in SETTINGS for attr, flat in cls.flat.items()
}
"""Each flat ``Policy`` field -> the record and the record's field that own it."""
TOP_LEVEL = frozenset({"name", "description", "shares_of_free_window"})
"""The ``Policy`` fields that belong to no layer (top-level keys of a policy file)."""

AT_LEAST_ONE = frozenset(cls.flat[attr] for cls in SETTINGS for attr in cls.at_least_one)
"""Flat fields that 0 would make meaningless (a 0-char cap offloads every result)."""
_SHARE_FIELDS = frozenset(cls.flat[attr] for cls in SETTINGS for attr in cls.shares)
SHARES = frozenset(name for name in _SHARE_FIELDS if not name.endswith("_share"))
"""Flat fields that are shares of something (0..1) besides the ``*_share`` ones."""


def new_place(flat: str) -> str:
    """Where the old flat key ``flat`` lives now: ``[table] field``."""
    cls, attr = PLACE[flat]
    return f"[{cls.table}] {attr}"


def warn_deprecated(flat: str, *, stacklevel: int) -> None:
    """The ``DeprecationWarning`` for an old flat key, naming its new place."""
    warnings.warn(
        f"{flat} is deprecated: use {new_place(flat)}", DeprecationWarning, stacklevel=stacklevel + 1
    )


def record_fields(settings: Iterable[Settings]) -> dict[str, Any]:
    """The flat fields that store ``settings`` (one record per kind). Raises ``TypeError`` for a
    record given twice or an object that is not a settings record of a policy."""
    fields: dict[str, Any] = {}
    seen: set[type[Settings]] = set()
    for record in settings:
        kind = type(record)
        if kind not in BY_TABLE.values():
            raise TypeError(f"not a policy settings record: {record!r}")
        if kind in seen:
            raise TypeError(f"{kind.__name__} given twice")
        seen.add(kind)
        fields.update(record.flat_fields())
    return fields


def composed_fields(settings: Iterable[Settings]) -> dict[str, Any]:
    """The flat fields of a policy made of ``settings``: each record as given; a layer with an
    on/off switch that is not given is off (its other settings at their defaults); any other
    record not given takes its defaults."""
    given = tuple(settings)
    fields = record_fields(given)
    kinds = {type(record) for record in given}
    for cls in SETTINGS:
        if cls not in kinds:
            fields.update((cls(enabled=False) if cls.switchable() else cls()).flat_fields())
    return fields


def keyword_fields(changes: Mapping[str, Any], *, stacklevel: int) -> dict[str, Any]:
    """``Policy.with_``'s keyword changes as flat fields: top-level fields as they are, an old
    flat key with its ``DeprecationWarning`` (``stacklevel``: frames up to ``with_``'s caller).
    Unknown names are passed on (``msgspec`` raises ``TypeError`` for them). Code that derives
    a resolved policy's flat storage (``Policy.for_window``, the compaction's session-memory
    context) sets the fields with ``msgspec.structs.replace``, not through here."""
    for name in changes:
        if name in PLACE:
            warn_deprecated(name, stacklevel=stacklevel + 1)
    return dict(changes)


def table_fields(cls: type[Settings], table: Mapping[str, Any], base: object) -> dict[str, Any]:
    """A policy file's ``[table]`` as flat field changes: the base policy's record with the
    table's keys applied, converted and validated. Raises ``ValueError`` naming the table."""
    unknown = sorted(set(table) - set(cls.__struct_fields__))
    if unknown:
        raise ValueError(f"[{cls.table}] {unknown_key_message(unknown[0], cls.__struct_fields__)}")
    start = msgspec.structs.asdict(cls.read(base))
    try:
        record = msgspec.convert(start | dict(table), cls)
    except msgspec.ValidationError as exc:
        raise ValueError(f"[{cls.table}] {exc}") from None
    return {cls.flat[attr]: getattr(record, attr) for attr in table}


def unknown_key_message(key: str, valid: Iterable[str], what: str = "valid keys") -> str:
    """``unknown key 'KEY'`` with the closest valid key (``difflib``) and every valid one, for a
    policy file's typo."""
    names = list(valid)
    close = difflib.get_close_matches(key, names, n=1)
    hint = f" (did you mean {close[0]}?)" if close else ""
    return f"unknown key {key!r}{hint}; {what}: {', '.join(names)}"


def file_fields(data: Mapping[str, Any], base: object, *, stacklevel: int) -> dict[str, Any]:
    """A policy file's keys (``base`` already taken out) as flat field changes over the policy
    ``base``: top-level keys, one table per record, and the old flat keys (each with its
    ``DeprecationWarning``). Raises ``ValueError`` for an unknown key, a bad table, or a field
    given both as an old key and in its table."""
    changes: dict[str, object] = {}
    for key, value in data.items():
        cls = BY_TABLE.get(key)
        if cls is not None and isinstance(value, dict):
            found = table_fields(cls, value, base)
        elif key in TOP_LEVEL or key in PLACE:
            if key in PLACE:
                warn_deprecated(key, stacklevel=stacklevel + 1)
            found = {key: value}
        else:
            valid = (*BY_TABLE, *sorted(TOP_LEVEL))
            raise ValueError(unknown_key_message(key, valid, what="tables and keys"))
        twice = sorted(found.keys() & changes.keys())
        if twice:
            raise ValueError(f"{twice[0]} is given twice (as {twice[0]} and as {new_place(twice[0])})")
        changes.update(found)
    return changes


def load_file(path: Path, lookup: Callable[[str], P], kind: type[P]) -> P:
    """The policy of the TOML file ``path`` (``Policy.from_toml``): ``base`` (default
    ``default``) looked up with ``lookup``, the file's keys applied (``file_fields``), the result
    converted to ``kind`` and its ranges checked. A file without ``name`` is named after itself,
    not reported as its base. Raises ``ValueError`` naming the file."""
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except UnicodeDecodeError as exc:
        line = path.read_bytes().count(b"\n", 0, exc.start) + 1
        raise ValueError(f"{path}:{line}: cannot read policy: not UTF-8 text (TOML is UTF-8)") from None
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise ValueError(f"{path}: cannot read policy: {exc}") from None
    base_name = str(data.pop("base", "default"))
    try:
        base = lookup(base_name)
    except KeyError as exc:
        raise ValueError(f"{path}: {exc.args[0]}") from None
    data.setdefault("name", path.stem)
    try:
        changes = file_fields(data, base, stacklevel=3)
        policy = msgspec.convert(msgspec.structs.asdict(base) | changes, kind)
    except (ValueError, msgspec.ValidationError) as exc:
        raise ValueError(f"{path}: invalid policy: {exc}") from None
    problems = range_problems(policy)
    if problems:
        raise ValueError(f"{path}: invalid policy: {'; '.join(problems)}")
    return policy


def range_problems(policy: Any) -> list[str]:
    """What is out of range in ``policy``, one phrase per flat field (empty when it is sound):
    every number finite and not negative; the sizes and counts in ``AT_LEAST_ONE`` at least 1;
    every share (``*_share`` and ``SHARES``) at most 1; the clearing target not above its
    trigger. The rules are the records' own (``Settings.at_least_one``, ``Settings.shares``)."""
    problems: list[str] = []
    for name in policy.__struct_fields__:
        if name not in PLACE:
            continue
        value = getattr(policy, name)
        phrase = value_problem(value, at_least_one=name in AT_LEAST_ONE, share=name in _SHARE_FIELDS)
        if phrase:
            problems.append(f"{name} {phrase}")
    target, trigger = policy.cache_clear_target, policy.cache_clear_trigger
    if not problems and target > trigger:
        problems.append(f"cache_clear_target ({target}) must not exceed cache_clear_trigger ({trigger})")
    soft, hard = policy.ttl_prune_soft_ratio, policy.ttl_prune_hard_ratio
    if not problems and soft > hard:
        problems.append(f"ttl_prune_soft_ratio ({soft}) must not exceed ttl_prune_hard_ratio ({hard})")
    return problems
