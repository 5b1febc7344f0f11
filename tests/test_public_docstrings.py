"""Every public name of ``ctxengine`` has a docstring of one shape (Google style): a one-line
sentence first, then ``Args:`` naming each parameter when the callable takes any and ``Returns:``
when it returns a value. A class documents its constructor's parameters in its own docstring
(``Args:`` or ``Attributes:``); its public methods, its mixins' and its settings base's, are checked
like functions."""

from __future__ import annotations

import inspect
import re
from collections.abc import Callable, Iterator
from typing import Any

import pytest

import ctxengine

# Values, not callables: a policy, an agent spec, a type alias and the version string.
CONSTANTS = {"DEFAULT", "NONE", "RECORDED", "EXPLORE", "Block", "__version__"}
SECTION = re.compile(r"^\s*(Args|Arguments|Attributes|Returns|Yields|Raises|Example|Examples|Note):\s*$")


def _public_names() -> list[str]:
    return [name for name in ctxengine.__all__ if name not in CONSTANTS]


def _members(cls: type) -> Iterator[tuple[str, Any]]:
    """The public methods and properties ``cls`` defines or takes from a ``ctxengine`` base."""
    seen: set[str] = set()
    for klass in cls.__mro__:
        if klass is not cls and not klass.__module__.startswith("ctxengine"):
            continue
        for name, value in vars(klass).items():
            if name.startswith("_") or name in seen:
                continue
            if isinstance(value, (classmethod, staticmethod)):
                value = value.__func__
            if inspect.isfunction(value) or isinstance(value, property):
                seen.add(name)
                yield name, value


def _targets() -> list[tuple[str, Any]]:
    """Each public name and member once; a member of a shared base (``Settings``) under the base's name."""
    out: dict[str, Any] = {}
    for name in _public_names():
        obj = getattr(ctxengine, name)
        out[name] = obj
        if inspect.isclass(obj):
            for member, value in _members(obj):
                owner = next(k for k in obj.__mro__ if member in vars(k))
                label = name if owner is obj or owner.__name__.startswith("Engine") else owner.__name__
                out.setdefault(f"{label}.{member}", value)
    return list(out.items())


def _sections(doc: str) -> dict[str, list[str]]:
    """Each Google-style section of ``doc`` and its lines; the summary and paragraphs under ``""``."""
    sections: dict[str, list[str]] = {"": []}
    current = ""
    for line in doc.splitlines():
        match = SECTION.match(line)
        if match:
            current = match.group(1)
            sections[current] = []
        else:
            sections[current].append(line)
    return sections


def _documented(lines: list[str]) -> set[str]:
    """The names a section's entries document (``name: ...`` or ``name (type): ...``)."""
    names = set()
    for line in lines:
        match = re.match(r"^\s*(\*{0,2}\w+)\s*(\([^)]*\))?\s*:", line)
        if match:
            names.add(match.group(1).lstrip("*"))
    return names


def _params(func: Callable[..., Any]) -> list[str]:
    sig = inspect.signature(func)
    return [name for name in sig.parameters if name not in ("self", "cls")]


def _returns_value(func: Callable[..., Any]) -> bool:
    annotation = inspect.signature(func).return_annotation
    return annotation not in (None, "None", inspect.Signature.empty)


def _check_summary(label: str, doc: str | None) -> str:
    assert doc, f"{label}: no docstring"
    doc = inspect.cleandoc(doc)
    first = doc.splitlines()[0]
    assert first[:1].isupper() or first[:2] == "``", f"{label}: summary does not open a sentence: {first!r}"
    assert first.endswith("."), f"{label}: the summary line is not one sentence ending in '.': {first!r}"
    lines = doc.splitlines()
    assert len(lines) == 1 or not lines[1].strip(), f"{label}: the summary runs past one line"
    return doc


def _check_callable(label: str, func: Callable[..., Any]) -> None:
    doc = _check_summary(label, func.__doc__)
    sections = _sections(doc)
    params = _params(func)
    if params:
        assert "Args" in sections, f"{label}: takes {params} but has no Args: section"
        missing = set(params) - _documented(sections["Args"])
        assert not missing, f"{label}: Args: does not document {sorted(missing)}"
    else:
        assert "Args" not in sections, f"{label}: an Args: section for a callable without parameters"
    if _returns_value(func):
        assert "Returns" in sections or "Yields" in sections, f"{label}: returns a value but has no Returns:"
    else:
        assert "Returns" not in sections, f"{label}: a Returns: section for a callable returning None"


def _documented_flat_fields() -> set[str]:
    """The flat ``Policy`` fields whose settings-record field its record's docstring documents."""
    from ctxengine.policy.fields import SETTINGS

    out = set()
    for record in SETTINGS:
        attributes = _documented(_sections(inspect.cleandoc(record.__doc__ or "")).get("Attributes", []))
        out |= {flat for field, flat in record.flat.items() if field in attributes}
    return out


def _check_class(label: str, cls: type) -> None:
    doc = _check_summary(label, cls.__doc__)
    sections = _sections(doc)
    try:
        params = [name for name in inspect.signature(cls).parameters if name not in ("args", "kwargs")]
    except (TypeError, ValueError):  # no introspectable constructor
        params = []
    documented = _documented(sections.get("Args", [])) | _documented(sections.get("Attributes", []))
    init_doc = vars(cls).get("__init__").__doc__ if "__init__" in vars(cls) else None
    if init_doc:
        documented |= _documented(_sections(inspect.cleandoc(init_doc)).get("Args", []))
    if cls is ctxengine.Policy:
        documented |= _documented_flat_fields()
    missing = set(params) - documented
    assert not missing, f"{label}: the class docstring does not document {sorted(missing)}"
    assert "Returns" not in sections, f"{label}: a class docstring has no Returns:"


@pytest.mark.parametrize(("label", "obj"), _targets(), ids=[label for label, _ in _targets()])
def test_public_docstring_has_the_shape(label: str, obj: Any) -> None:
    if inspect.isclass(obj):
        _check_class(label, obj)
    elif isinstance(obj, property):
        _check_summary(label, obj.__doc__)  # a property documents its value, not a call
    else:
        _check_callable(label, obj)


def test_the_walk_covers_the_engine_and_policy_methods() -> None:
    labels = {label for label, _ in _targets()}
    for method in (
        "bootstrap",
        "ingest",
        "assemble",
        "compact",
        "after_turn",
        "maintain",
        "dispose",
        "retrieve",
        "prepare_subagent_spawn",
        "on_subagent_ended",
    ):
        assert f"ContextEngine.{method}" in labels
    for method in ("compose", "with_", "settings", "all_settings", "from_toml", "for_window"):
        assert f"Policy.{method}" in labels
    for name in ("ContextEngineMiddleware", "EngineSession", "ContextEngineProcessor", "CompactionSettings"):
        assert name in labels
