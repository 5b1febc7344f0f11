"""The model table read into ``ModelInfo`` entries: model-name normalisation (routing
prefixes, Bedrock / Vertex decorations, date suffixes), the entry for an unknown model
(``fallback_info``), and the TOML schema of ``ctxengine/data/models.toml`` and of user files
(``RegistryError`` when malformed). Prices USD/MTok, windows tokens.
"""

from __future__ import annotations

import math
import re
import tomllib
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import msgspec

from ctxengine.models.info import (
    EXPLICIT_CACHE_READ_X,
    EXPLICIT_CACHE_WRITE_1H_X,
    EXPLICIT_CACHE_WRITE_5M_X,
    FALLBACK_MAX_OUTPUT,
    FALLBACK_PRICES,
    PRICE_FIELDS,
    CacheStyle,
    ModelInfo,
    TokenizerName,
)
from ctxengine.models.window import DEFAULT_WINDOW_TOKENS


class RegistryError(ValueError):
    """A model table (built-in or user TOML file) is malformed. The message names the file and,
    where it applies, the model."""


# --------------------------------------------------------------------------------------------
# Name normalisation
# --------------------------------------------------------------------------------------------

_BEDROCK_PREFIX = re.compile(r"^(?:(?:us|eu|apac|global|au|jp)\.)?anthropic\.")
_BEDROCK_SUFFIX = re.compile(r"-v\d+(?::\d+)?$")
_DATE_SUFFIX = re.compile(r"(?:-(?:\d{8}|\d{4}-\d{2}-\d{2}|\d{4})|-latest)$")
# A family match needs the known name followed by "-", ":" or "_" and then a non-digit: a variant
# (``gpt-4o-mini-search``), not a newer version (``gpt-4.5``, ``claude-opus-4-7``, ``gpt-5.3``),
# whose prices and window may differ.
_FAMILY_SUFFIX = re.compile(r"[-:_][^0-9]")


def _normalise(name: str) -> str:
    """Lower-case, drop routing prefixes (``openai/``, ``openrouter/anthropic/``), Bedrock's
    ``us.anthropic.`` / ``-v1:0`` and Vertex's ``@`` date separator."""
    n = name.strip().lower()
    if "/" in n:
        n = n.rsplit("/", 1)[1]
    n = _BEDROCK_SUFFIX.sub("", _BEDROCK_PREFIX.sub("", n))
    return n.replace("@", "-")


def _strip_date(name: str) -> str:
    """``claude-sonnet-4-5-20250929`` -> ``claude-sonnet-4-5``; ``gpt-4o-2024-08-06`` -> ``gpt-4o``;
    ``gpt-4-0613`` -> ``gpt-4``; ``claude-3-7-sonnet-latest`` -> ``claude-3-7-sonnet``."""
    return _DATE_SUFFIX.sub("", name)


def _guess_provider(name: str) -> str:
    n = _normalise(name)
    if n.startswith("claude") or n in ("sonnet", "opus", "haiku"):
        return "anthropic"
    if n.startswith(("gpt", "o1", "o3", "o4", "chatgpt", "codex")):
        return "openai"
    if n.startswith("deepseek"):
        return "deepseek"
    if n.startswith("mimo"):
        return "xiaomi"
    return "unknown"


# Cache style and tokenizer of an unknown model, by guessed provider. Anything unrecognised is
# costed like an Anthropic-style endpoint (reported cache writes billed at the surcharge).
_PROVIDER_DEFAULTS: dict[str, tuple[CacheStyle, TokenizerName]] = {
    "anthropic": ("explicit", "claude"),
    "openai": ("automatic", "o200k_base"),
    "deepseek": ("automatic", "other"),
    "xiaomi": ("automatic", "other"),
}


def _fallback_prices(cache_style: str) -> dict[str, float]:
    """``FALLBACK_PRICES``; an ``automatic``-style model has no write surcharge, so its writes
    cost the fallback input price."""
    prices = dict(FALLBACK_PRICES)
    if cache_style == "automatic":
        prices["cache_write_5m"] = prices["cache_write_1h"] = prices["input"]
    return prices


def fallback_info(name: str) -> ModelInfo:
    """The entry for a model the table does not know: ``FALLBACK_PRICES``, a
    ``DEFAULT_WINDOW_TOKENS`` window, ``FALLBACK_MAX_OUTPUT`` and ``price_known=False``. Provider,
    cache style and tokenizer are guessed from the name (``claude*`` -> Anthropic rules)."""
    provider = _guess_provider(name)
    style, tokenizer = _PROVIDER_DEFAULTS.get(provider, ("explicit", "other"))
    prices = _fallback_prices(style)
    return ModelInfo(
        name=name.strip(),
        provider=provider,
        context_window=DEFAULT_WINDOW_TOKENS,
        max_output=FALLBACK_MAX_OUTPUT,
        cache_style=style,
        tokenizer=tokenizer,
        input=prices["input"],
        output=prices["output"],
        cache_write_5m=prices["cache_write_5m"],
        cache_write_1h=prices["cache_write_1h"],
        cache_read=prices["cache_read"],
        price_known=False,
    )


# --------------------------------------------------------------------------------------------
# TOML table -> ModelInfo
# --------------------------------------------------------------------------------------------


def _complete_prices(entry: dict[str, Any]) -> None:
    """Fill missing prices in place: no input/output price -> fallback rates and
    ``price_known=False``; missing cache prices derived from ``input`` by cache style."""
    if "input" not in entry or "output" not in entry or entry.get("price_known") is False:
        for key, value in _fallback_prices(entry.get("cache_style", "explicit")).items():
            entry.setdefault(key, value)
        entry["price_known"] = False
        return
    base = float(entry["input"])
    if entry.get("cache_style", "explicit") == "explicit":
        entry.setdefault("cache_write_5m", base * EXPLICIT_CACHE_WRITE_5M_X)
        entry.setdefault("cache_write_1h", base * EXPLICIT_CACHE_WRITE_1H_X)
        entry.setdefault("cache_read", base * EXPLICIT_CACHE_READ_X)
    else:  # automatic prefix caching: writes cost plain input; reads undiscounted unless stated
        entry.setdefault("cache_write_5m", base)
        entry.setdefault("cache_write_1h", base)
        entry.setdefault("cache_read", base)


def _parse_table(
    doc: Mapping[str, Any],
    source: str,
    base: Mapping[str, ModelInfo] | None = None,
    base_providers: Mapping[str, Mapping[str, Any]] | None = None,
) -> tuple[dict[str, ModelInfo], dict[str, dict[str, Any]]]:
    """Build ``ModelInfo`` entries from a parsed TOML document; also return the provider
    defaults in force (``base_providers`` updated by the document's ``[providers.*]``).

    With ``base``, an entry whose name or alias is already known is merged field by field over
    the known entry (a changed ``input`` price alone re-derives the cache prices)."""
    unknown = set(doc) - {"as_of", "providers", "models"}
    if unknown:
        raise RegistryError(f"{source}: unknown top-level keys {sorted(unknown)}")
    as_of = doc.get("as_of", "")
    doc_providers = doc.get("providers", {})
    models = doc.get("models", {})
    if not isinstance(as_of, str) or not isinstance(doc_providers, dict) or not isinstance(models, dict):
        raise RegistryError(f"{source}: `as_of` must be a string, `providers` and `models` tables")
    providers: dict[str, dict[str, Any]] = {k: dict(v) for k, v in (base_providers or {}).items()}
    for provider, defaults in doc_providers.items():
        if not isinstance(defaults, dict):
            raise RegistryError(f"{source}: [providers.{provider}] must be a table")
        providers.setdefault(provider, {}).update(defaults)
    base_index = _index(base.values()) if base else {}
    out: dict[str, ModelInfo] = {}
    for name, raw in models.items():
        if not isinstance(raw, dict):
            raise RegistryError(f"{source}: [models.{name!r}] must be a table")
        known = base_index.get(name.lower()) or base_index.get(_normalise(name))
        entry: dict[str, Any]
        if base is not None and known is not None:
            name = known  # the file may name an alias or use other case: update the canonical entry
            entry = msgspec.structs.asdict(base[known])
            if any(k in raw for k in PRICE_FIELDS):
                # cache prices not given follow the new input price (or replace fallback rates)
                rederive = "input" in raw or not entry["price_known"]
                for key in PRICE_FIELDS[2:]:
                    if rederive and key not in raw:
                        entry.pop(key)
                entry["price_known"] = True
                if as_of:
                    entry["prices_as_of"] = as_of
            entry.update(raw)
        elif base is not None and "provider" not in raw:
            # a user's new model: what the file leaves out is guessed from its name as for an
            # unknown model (provider, tokenizer, cache style, max output; the README's example)
            guess = msgspec.structs.asdict(fallback_info(name))
            for key in (*PRICE_FIELDS, "price_known"):
                guess.pop(key)
            entry = {**guess, "prices_as_of": as_of, **providers.get(guess["provider"], {}), **raw}
        else:
            provider = raw.get("provider")
            if not isinstance(provider, str):
                raise RegistryError(f"{source}: model {name!r} needs a `provider`")
            entry = {"prices_as_of": as_of, **providers.get(provider, {}), **raw}
        entry["name"] = name
        _complete_prices(entry)
        out[name] = _checked_info(entry, name, source)
    return out, providers


def _checked_info(entry: dict[str, Any], name: str, source: str) -> ModelInfo:
    """``entry`` (prices completed) as a ``ModelInfo``; ``RegistryError`` for a wrong field,
    a window that is not a positive token count, or a negative or non-finite price."""
    try:
        info = msgspec.convert(entry, ModelInfo)
    except msgspec.ValidationError as exc:
        raise RegistryError(f"{source}: model {name!r}: {exc}") from None
    if info.context_window <= 0 or info.max_output <= 0 or (info.max_input or 1) <= 0:
        raise RegistryError(f"{source}: model {name!r}: windows must be positive token counts")
    if not all(math.isfinite(p) and p >= 0 for p in (getattr(info, k) for k in PRICE_FIELDS)):
        raise RegistryError(f"{source}: model {name!r}: prices must be non-negative USD/MTok")
    return info


def _index(infos: Iterable[ModelInfo]) -> dict[str, str]:
    """Lower-cased name and alias -> canonical name. A name beats an alias; between aliases the
    later model wins (user-file models come last, so they win)."""
    infos = list(infos)
    index = {alias.lower(): info.name for info in infos for alias in info.aliases}
    index.update((info.name.lower(), info.name) for info in infos)
    return index


def _load_toml(path: Path) -> dict[str, Any]:
    try:
        with path.open("rb") as fh:
            return tomllib.load(fh)
    except FileNotFoundError:
        raise RegistryError(f"{path}: no such file") from None
    except tomllib.TOMLDecodeError as exc:
        raise RegistryError(f"{path}: invalid TOML: {exc}") from None
