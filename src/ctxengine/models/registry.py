"""Model registry: context windows, output limits, prices and prompt-cache rules per model.

The table ships inside the package (``ctxengine/data/models.toml``, dated, read with ``tomllib``);
a user TOML file with the same schema overrides or adds models. Lookups never fail: an unknown
model gets the documented ``FALLBACK_PRICES`` and a 200,000-token window, flagged
``price_known=False``.

Window resolution and the guard follow OpenClaw's ``src/agents/context-window-guard.ts`` (see
``shared/reference/openclaw.md`` section 3): user override > model window > 200,000 default, then
the agent cap applied last via ``min``; block below 16,000 tokens, warn below 32,000.

Units everywhere: tokens for windows and limits, USD per million tokens (USD/MTok) for prices,
USD for costs.

This module holds the ``Registry`` (lookup by name); the rest lives beside it and is importable
from here too: ``model_info`` (``ModelInfo``, prices, ``cost_usd``), ``model_table`` (the TOML
schema, name normalisation, ``fallback_info``), ``model_window`` (window resolution and guard).
"""

from __future__ import annotations

import tomllib
from collections.abc import Iterator, Mapping
from functools import cache
from importlib.resources import files
from pathlib import Path
from typing import Any, Literal

import msgspec

from ctxengine.models.info import (
    EXPLICIT_CACHE_READ_X,
    EXPLICIT_CACHE_WRITE_1H_X,
    EXPLICIT_CACHE_WRITE_5M_X,
    FALLBACK_MAX_OUTPUT,
    FALLBACK_PRICES,
    CacheStyle,
    ModelInfo,
    TokenizerName,
    cost_usd,
    usage_cost_usd,
)
from ctxengine.models.table import (
    _FAMILY_SUFFIX,
    RegistryError,
    _index,
    _load_toml,
    _normalise,
    _parse_table,
    _strip_date,
    fallback_info,
)
from ctxengine.models.window import (
    DEFAULT_WINDOW_TOKENS,
    MIN_WINDOW_TOKENS,
    WARN_WINDOW_TOKENS,
    ModelWindowWarning,
    WindowTooSmallError,
    WindowWarning,
    check_model_window,
    check_window,
    resolve_window,
    window_above_model,
)

__all__ = [  # the names moved to model_info, model_table and model_window stay importable here
    "DEFAULT_WINDOW_TOKENS",
    "EXPLICIT_CACHE_READ_X",
    "EXPLICIT_CACHE_WRITE_1H_X",
    "EXPLICIT_CACHE_WRITE_5M_X",
    "FALLBACK_MAX_OUTPUT",
    "FALLBACK_PRICES",
    "MIN_WINDOW_TOKENS",
    "WARN_WINDOW_TOKENS",
    "CacheStyle",
    "Lookup",
    "MatchKind",
    "ModelInfo",
    "ModelWindowWarning",
    "Registry",
    "RegistryError",
    "TokenizerName",
    "WindowTooSmallError",
    "WindowWarning",
    "check_model_window",
    "check_window",
    "cost_usd",
    "fallback_info",
    "get_model",
    "resolve_window",
    "usage_cost_usd",
    "window_above_model",
]

MatchKind = Literal["exact", "alias", "dated", "prefix", "fallback"]

_BUILTIN_TABLE = "models.toml"


class Lookup(msgspec.Struct, frozen=True):
    """The result of a registry lookup and how it was found: ``exact`` name, ``alias``,
    ``dated`` (a date suffix stripped, e.g. ``-20250929``), ``prefix`` (family match, e.g.
    ``gpt-4o-mini-search-preview`` -> ``gpt-4o-mini``) or ``fallback`` (unknown)."""

    info: ModelInfo
    how: MatchKind


# --------------------------------------------------------------------------------------------
# Registry
# --------------------------------------------------------------------------------------------


class Registry:
    """Models by name: windows and max output in tokens, prices in USD per MTok.

    ``get`` never raises: unknown names resolve to the fallback entry. Lookup order
    (case-insensitive, after dropping ``provider/`` prefixes and Bedrock/Vertex decorations):
    exact name, alias, the name without a date suffix, the longest known name or alias that the
    name extends with a variant suffix (family match: ``gpt-4o-mini-search`` -> ``gpt-4o-mini``,
    but ``gpt-4.5`` is not ``gpt-4``), else fallback.

    Args:
        models: the entries by canonical name.
        as_of: date of the table's price list (ISO), "" when the file gives none.
        providers: per-provider settings of the table, by provider name.
    """

    def __init__(
        self,
        models: Mapping[str, ModelInfo],
        as_of: str = "",
        providers: Mapping[str, Mapping[str, Any]] | None = None,
    ) -> None:
        self._models: dict[str, ModelInfo] = dict(models)
        self.as_of = as_of
        self._providers = {k: dict(v) for k, v in (providers or {}).items()}
        self._index = _index(self._models.values())
        # longest first, so the family match picks the most specific entry
        self._prefixes = sorted(self._index, key=len, reverse=True)
        self._memo: dict[str, Lookup] = {}

    @classmethod
    def default(cls) -> Registry:
        """The built-in table (``ctxengine/data/models.toml``), loaded once.

        Returns:
            The shared registry.

        Raises:
            RegistryError: when the built-in table cannot be read (a broken install).
        """
        return _default_registry()

    @classmethod
    def from_toml(cls, path: str | Path) -> Registry:
        """A registry holding only the models of a TOML file (same schema as the built-in table).

        Args:
            path: the TOML file.

        Returns:
            The new registry.

        Raises:
            RegistryError: for a missing or malformed file.
        """
        p = Path(path)
        doc = _load_toml(p)
        models, providers = _parse_table(doc, str(p))
        return cls(models, as_of=str(doc.get("as_of", "")), providers=providers)

    def with_overrides(self, path: str | Path) -> Registry:
        """A new registry: this one plus the models of a TOML file.

        A model already known (by name or alias) is updated field by field, e.g. only its
        ``input`` price; a new model is added (it needs ``provider``, ``context_window``,
        ``max_output``; without ``input``/``output`` it gets the fallback rates).

        Args:
            path: the TOML file of overrides.

        Returns:
            The new registry (this one is unchanged).

        Raises:
            RegistryError: for a missing or malformed file.
        """
        p = Path(path)
        doc = _load_toml(p)
        models, providers = _parse_table(doc, str(p), base=self._models, base_providers=self._providers)
        merged = {name: info for name, info in self._models.items() if name not in models}
        merged.update(models)  # the file's models last: their aliases win
        return Registry(merged, as_of=self.as_of, providers=providers)

    def lookup(self, name: str) -> Lookup:
        """Resolve a model name and say how it was matched. Never raises.

        Args:
            name: the model's name, as a harness or provider writes it.

        Returns:
            The ``Lookup``: the entry and how it was found ("exact", "alias", "dated", "prefix"
            or "fallback").
        """
        hit = self._memo.get(name)
        if hit is None:
            hit = self._resolve(name)
            self._memo[name] = hit
        return hit

    def get(self, name: str) -> ModelInfo:
        """The entry of a model. Never raises.

        Args:
            name: the model's name.

        Returns:
            Its ``ModelInfo`` (canonical ``ModelInfo.name``); the flagged fallback entry
            (``price_known=False``) when the model is unknown.
        """
        return self.lookup(name).info

    def known(self, name: str) -> bool:
        """Whether a model name resolves to a table entry (any match but ``fallback``).

        A table entry may still lack a price: see ``ModelInfo.price_known``.

        Args:
            name: the model's name.

        Returns:
            True when the name is known.
        """
        return self.lookup(name).how != "fallback"

    def _resolve(self, name: str) -> Lookup:
        raw = name.strip().lower()
        n = raw if raw in self._index else _normalise(name)  # a table name may contain "/"
        canonical = self._index.get(n)
        if canonical is not None:
            return Lookup(self._models[canonical], "exact" if canonical.lower() == n else "alias")
        undated = _strip_date(n)
        if undated != n and undated in self._index:
            return Lookup(self._models[self._index[undated]], "dated")
        for key in self._prefixes:
            if undated.startswith(key) and _FAMILY_SUFFIX.match(undated, len(key)):
                return Lookup(self._models[self._index[key]], "prefix")
        return Lookup(fallback_info(name), "fallback")

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and self.known(name)

    def __iter__(self) -> Iterator[ModelInfo]:
        return iter(self._models.values())

    def __len__(self) -> int:
        return len(self._models)


@cache
def _default_registry() -> Registry:
    resource = files("ctxengine") / "data" / _BUILTIN_TABLE
    source = f"ctxengine/data/{_BUILTIN_TABLE}"
    try:
        doc = tomllib.loads(resource.read_text(encoding="utf-8"))
    except (OSError, tomllib.TOMLDecodeError) as exc:  # a broken install, not a user error
        raise RegistryError(f"{source}: {exc}") from None
    models, providers = _parse_table(doc, source)
    return Registry(models, as_of=str(doc.get("as_of", "")), providers=providers)


def get_model(name: str) -> ModelInfo:
    """Shorthand for ``Registry.default().get(name)``."""
    return Registry.default().get(name)
