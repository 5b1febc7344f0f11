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
"""

from __future__ import annotations

import math
import re
import tomllib
import warnings
from collections.abc import Iterable, Iterator, Mapping
from functools import cache
from importlib.resources import files
from pathlib import Path
from typing import Any, Literal

import msgspec

from ctxengine.messages import Usage

CacheStyle = Literal["explicit", "automatic"]
TokenizerName = Literal["o200k_base", "cl100k_base", "claude", "other"]
MatchKind = Literal["exact", "alias", "dated", "prefix", "fallback"]

MIN_WINDOW_TOKENS = 16_000  # OpenClaw CONTEXT_WINDOW_HARD_MIN_TOKENS: block a run below this
WARN_WINDOW_TOKENS = 32_000  # OpenClaw CONTEXT_WINDOW_WARN_BELOW_TOKENS: warn below this
DEFAULT_WINDOW_TOKENS = 200_000  # OpenClaw's fallback default window; also Claude's window

# Anthropic prompt-cache multipliers of the base input price (docs.anthropic.com, prompt caching).
EXPLICIT_CACHE_WRITE_5M_X = 1.25
EXPLICIT_CACHE_WRITE_1H_X = 2.0
EXPLICIT_CACHE_READ_X = 0.1

# Rates for a model with no known price, USD/MTok: Sonnet-class list prices ($3 in / $15 out,
# writes 1.25x / 2x, reads 0.1x). Mid-range on purpose: a cost report for an unknown model is
# an estimate either way, and it is flagged (``ModelInfo.price_known`` is False). For a model
# with ``automatic`` caching the writes cost the fallback input price (no surcharge).
FALLBACK_PRICES: Mapping[str, float] = {
    "input": 3.0,
    "output": 15.0,
    "cache_write_5m": 3.75,
    "cache_write_1h": 6.0,
    "cache_read": 0.30,
}
FALLBACK_MAX_OUTPUT = 32_000  # tokens; Claude Code's default output cap for unknown models

_PRICE_FIELDS = ("input", "output", "cache_write_5m", "cache_write_1h", "cache_read")
_BUILTIN_TABLE = "models.toml"


class ModelInfo(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """What the engine knows about one model.

    ``context_window``, ``max_input`` and ``max_output`` are in tokens; ``max_input`` is set only
    where the provider caps input below the window (GPT-5 family: 272,000 of 400,000). Prices are
    USD per million tokens. ``cache_style`` is ``explicit`` (Anthropic ``cache_control``
    breakpoints; writes billed at a surcharge) or ``automatic`` (OpenAI / DeepSeek prefix
    caching; no write surcharge). ``tokenizer`` picks the counter: ``o200k_base`` /
    ``cl100k_base`` are exact offline, ``claude`` / ``other`` are calibrated estimates.
    ``price_known`` is False when the fallback rates were applied; ``prices_as_of`` is the ISO
    date of the price list the prices come from.
    """

    name: str
    provider: str
    context_window: int
    max_output: int
    input: float
    output: float
    cache_write_5m: float
    cache_write_1h: float
    cache_read: float
    cache_style: CacheStyle = "explicit"
    tokenizer: TokenizerName = "other"
    prices_as_of: str = ""
    price_known: bool = True
    aliases: tuple[str, ...] = ()
    max_input: int | None = None

    @property
    def input_window(self) -> int:
        """Most input tokens one call may send: ``max_input`` when the provider sets one, else
        the context window."""
        return self.max_input if self.max_input is not None else self.context_window

    def cost_usd(
        self,
        *,
        input_tokens: int = 0,
        cache_read_tokens: int = 0,
        cache_write_5m_tokens: int = 0,
        cache_write_1h_tokens: int = 0,
        output_tokens: int = 0,
    ) -> float:
        """Cost of one call in USD at this model's prices: ``cost_usd(self, ...)``."""
        return cost_usd(
            self,
            input_tokens=input_tokens,
            cache_read_tokens=cache_read_tokens,
            cache_write_5m_tokens=cache_write_5m_tokens,
            cache_write_1h_tokens=cache_write_1h_tokens,
            output_tokens=output_tokens,
        )


class Lookup(msgspec.Struct, frozen=True):
    """The result of a registry lookup and how it was found: ``exact`` name, ``alias``,
    ``dated`` (a date suffix stripped, e.g. ``-20250929``), ``prefix`` (family match, e.g.
    ``gpt-4o-mini-search-preview`` -> ``gpt-4o-mini``) or ``fallback`` (unknown)."""

    info: ModelInfo
    how: MatchKind


class RegistryError(ValueError):
    """A model table (built-in or user TOML file) is malformed. The message names the file and,
    where it applies, the model."""


class WindowTooSmallError(ValueError):
    """The resolved context window is below ``MIN_WINDOW_TOKENS`` (16,000 tokens): too small to
    run an agent (OpenClaw blocks the run)."""

    def __init__(self, tokens: int) -> None:
        super().__init__(
            f"context window of {tokens:,} tokens is below the minimum of {MIN_WINDOW_TOKENS:,} tokens"
        )
        self.tokens = tokens


class WindowWarning(UserWarning):
    """Warning category for a context window below ``WARN_WINDOW_TOKENS`` (32,000 tokens)."""


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
            if any(k in raw for k in _PRICE_FIELDS):
                # cache prices not given follow the new input price (or replace fallback rates)
                rederive = "input" in raw or not entry["price_known"]
                for key in _PRICE_FIELDS[2:]:
                    if rederive and key not in raw:
                        entry.pop(key)
                entry["price_known"] = True
                if as_of:
                    entry["prices_as_of"] = as_of
            entry.update(raw)
        else:
            provider = raw.get("provider")
            if not isinstance(provider, str):
                raise RegistryError(f"{source}: model {name!r} needs a `provider`")
            entry = {"prices_as_of": as_of, **providers.get(provider, {}), **raw}
        entry["name"] = name
        _complete_prices(entry)
        try:
            info = msgspec.convert(entry, ModelInfo)
        except msgspec.ValidationError as exc:
            raise RegistryError(f"{source}: model {name!r}: {exc}") from None
        if info.context_window <= 0 or info.max_output <= 0 or (info.max_input or 1) <= 0:
            raise RegistryError(f"{source}: model {name!r}: windows must be positive token counts")
        if not all(math.isfinite(p) and p >= 0 for p in (getattr(info, k) for k in _PRICE_FIELDS)):
            raise RegistryError(f"{source}: model {name!r}: prices must be non-negative USD/MTok")
        out[name] = info
    return out, providers


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


# --------------------------------------------------------------------------------------------
# Registry
# --------------------------------------------------------------------------------------------


class Registry:
    """Models by name. ``get`` never raises: unknown names resolve to the fallback entry.

    Lookup order (case-insensitive, after dropping ``provider/`` prefixes and Bedrock/Vertex
    decorations): exact name, alias, the name without a date suffix, the longest known name or
    alias that the name extends with a variant suffix (family match: ``gpt-4o-mini-search`` ->
    ``gpt-4o-mini``, but ``gpt-4.5`` is not ``gpt-4``), else fallback.
    """

    def __init__(
        self,
        models: Mapping[str, ModelInfo],
        as_of: str = "",
        providers: Mapping[str, Mapping[str, Any]] | None = None,
    ) -> None:
        self._models: dict[str, ModelInfo] = dict(models)
        self.as_of = as_of  # date of the table's price list (ISO), "" when the file gives none
        self._providers = {k: dict(v) for k, v in (providers or {}).items()}
        self._index = _index(self._models.values())
        # longest first, so the family match picks the most specific entry
        self._prefixes = sorted(self._index, key=len, reverse=True)
        self._memo: dict[str, Lookup] = {}

    @classmethod
    def default(cls) -> Registry:
        """The built-in table (``ctxengine/data/models.toml``), loaded once."""
        return _default_registry()

    @classmethod
    def from_toml(cls, path: str | Path) -> Registry:
        """A registry holding only the models of the TOML file at ``path`` (same schema as the
        built-in table). Raises ``RegistryError`` for a missing or malformed file."""
        p = Path(path)
        doc = _load_toml(p)
        models, providers = _parse_table(doc, str(p))
        return cls(models, as_of=str(doc.get("as_of", "")), providers=providers)

    def with_overrides(self, path: str | Path) -> Registry:
        """A new registry: this one plus the models of the TOML file at ``path``. A model
        already known (by name or alias) is updated field by field, e.g. only its ``input``
        price; a new model is added (it needs ``provider``, ``context_window``, ``max_output``;
        without ``input``/``output`` it gets the fallback rates). Raises ``RegistryError``."""
        p = Path(path)
        doc = _load_toml(p)
        models, providers = _parse_table(doc, str(p), base=self._models, base_providers=self._providers)
        merged = {name: info for name, info in self._models.items() if name not in models}
        merged.update(models)  # the file's models last: their aliases win
        return Registry(merged, as_of=self.as_of, providers=providers)

    def lookup(self, name: str) -> Lookup:
        """Resolve ``name`` and say how it was matched. Never raises."""
        hit = self._memo.get(name)
        if hit is None:
            hit = self._resolve(name)
            self._memo[name] = hit
        return hit

    def get(self, name: str) -> ModelInfo:
        """The entry for ``name`` (canonical ``ModelInfo.name``); the flagged fallback entry
        (``price_known=False``) when the model is unknown. Never raises."""
        return self.lookup(name).info

    def known(self, name: str) -> bool:
        """True when ``name`` resolves to a table entry (any match but ``fallback``). A table
        entry may still lack a price: see ``ModelInfo.price_known``."""
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


# --------------------------------------------------------------------------------------------
# Context window resolution and guard (OpenClaw src/agents/context-window-guard.ts)
# --------------------------------------------------------------------------------------------


def resolve_window(
    model: ModelInfo | None,
    *,
    user_override: int | None = None,
    agent_cap: int | None = None,
    default: int = DEFAULT_WINDOW_TOKENS,
) -> int:
    """The context window to budget against, in tokens.

    First of: ``user_override``, the model's input window (``ModelInfo.input_window``, i.e.
    ``max_input`` when set, else ``context_window``), ``default``. Then ``agent_cap`` is applied
    last and can only lower it (``min``), as OpenClaw's ``agents.defaults.contextTokens`` does.
    The result is not guarded: pass it to ``check_window``. Raises ``ValueError`` for a
    non-positive override, cap or default (a configuration error).
    """
    for label, value in (("user_override", user_override), ("agent_cap", agent_cap), ("default", default)):
        if value is not None and value <= 0:
            raise ValueError(f"{label} must be a positive number of tokens, got {value}")
    if user_override is not None:
        window = user_override
    elif model is not None:
        window = model.input_window
    else:
        window = default
    if agent_cap is not None:
        window = min(window, agent_cap)
    return window


def check_window(tokens: int) -> str | None:
    """Guard a resolved window (tokens), as OpenClaw does before a run.

    Raises ``WindowTooSmallError`` below ``MIN_WINDOW_TOKENS`` (16,000; OpenClaw ``shouldBlock``).
    Below ``WARN_WINDOW_TOKENS`` (32,000; ``shouldWarn``) it emits a ``WindowWarning`` and returns
    the warning text; otherwise returns None. Unlike OpenClaw, which treats 0 as "unknown" and
    lets it pass, a window of 0 or less is blocked: ``resolve_window`` never yields one.
    """
    if tokens < MIN_WINDOW_TOKENS:
        raise WindowTooSmallError(tokens)
    if tokens < WARN_WINDOW_TOKENS:
        message = (
            f"context window of {tokens:,} tokens is below {WARN_WINDOW_TOKENS:,} tokens: "
            "expect frequent compaction"
        )
        warnings.warn(message, WindowWarning, stacklevel=2)
        return message
    return None


class ModelWindowWarning(UserWarning):
    """Warning category for a window set above the model's own context window."""


def window_above_model(tokens: int, model: ModelInfo, *, known: bool) -> str | None:
    """The warning text when a window of ``tokens`` (e.g. ``--window 200000``) is above the
    known model's own input window (``ModelInfo.input_window``, e.g. 128,000 for gpt-4o):
    requests the engine lets grow past the model's window would be refused by the provider.
    None when it is not, or the model is unknown (its window is a default, not a fact)."""
    if not known or tokens <= model.input_window:
        return None
    return (
        f"window of {tokens:,} tokens is above {model.name}'s own context window of "
        f"{model.input_window:,} tokens: requests over {model.input_window:,} would be refused"
    )


def check_model_window(tokens: int, model: ModelInfo, *, known: bool) -> str | None:
    """``window_above_model``, emitted as a ``ModelWindowWarning`` (returns the text)."""
    message = window_above_model(tokens, model, known=known)
    if message is not None:
        warnings.warn(message, ModelWindowWarning, stacklevel=2)
    return message


# --------------------------------------------------------------------------------------------
# Cost
# --------------------------------------------------------------------------------------------


def cost_usd(
    model: ModelInfo,
    *,
    input_tokens: int = 0,
    cache_read_tokens: int = 0,
    cache_write_5m_tokens: int = 0,
    cache_write_1h_tokens: int = 0,
    output_tokens: int = 0,
) -> float:
    """Cost of one model call in USD. Token arguments are disjoint (Anthropic semantics, as in
    ``messages.Usage``): ``input_tokens`` excludes cached and cache-written tokens. Each is
    billed at its USD/MTok price; for ``automatic``-style models the table sets write prices to
    the input price, so reported writes (if any) cost plain input."""
    total = (
        input_tokens * model.input
        + cache_read_tokens * model.cache_read
        + cache_write_5m_tokens * model.cache_write_5m
        + cache_write_1h_tokens * model.cache_write_1h
        + output_tokens * model.output
    )
    return total / 1_000_000


def usage_cost_usd(model: ModelInfo, usage: Usage) -> float:
    """``cost_usd`` of a recorded ``Usage`` (its ``cache_write_tokens`` are 5-minute writes)."""
    return cost_usd(
        model,
        input_tokens=usage.input_tokens,
        cache_read_tokens=usage.cache_read_tokens,
        cache_write_5m_tokens=usage.cache_write_tokens,
        cache_write_1h_tokens=usage.cache_write_1h_tokens,
        output_tokens=usage.output_tokens,
    )
