"""Model registry: lookups, user overrides, window resolution and guard, cost arithmetic."""

from __future__ import annotations

import warnings
from pathlib import Path

import pytest

from ctxengine.messages.model import Usage
from ctxengine.models.registry import (
    DEFAULT_WINDOW_TOKENS,
    FALLBACK_PRICES,
    MIN_WINDOW_TOKENS,
    WARN_WINDOW_TOKENS,
    ModelInfo,
    Registry,
    RegistryError,
    WindowTooSmallError,
    WindowWarning,
    check_window,
    cost_usd,
    fallback_info,
    get_model,
    resolve_window,
    usage_cost_usd,
)


@pytest.fixture(scope="module")
def reg() -> Registry:
    return Registry.default()


# --- lookups -----------------------------------------------------------------------------------

# Every model named in the shared transcripts, and what it must resolve to.
TRANSCRIPT_MODELS = [
    ("claude-sonnet-4-5-20250929", "claude-sonnet-4-5", "anthropic"),
    ("claude-opus-4-5-20251101", "claude-opus-4-5", "anthropic"),
    ("claude-haiku-4-5", "claude-haiku-4-5", "anthropic"),
    ("claude-haiku-4-5-20251001", "claude-haiku-4-5", "anthropic"),
    ("claude-sonnet-4-20250514", "claude-sonnet-4", "anthropic"),
    ("gpt-5.4", "gpt-5.4", "openai"),
    ("gpt-5.2-codex", "gpt-5.2-codex", "openai"),
    ("gpt-4o", "gpt-4o", "openai"),
    ("gpt-4", "gpt-4", "openai"),
    ("deepseek-chat", "deepseek-chat", "deepseek"),
    ("deepseek/deepseek-chat", "deepseek-chat", "deepseek"),
]


@pytest.mark.parametrize(("name", "canonical", "provider"), TRANSCRIPT_MODELS)
def test_transcript_models_are_known_with_prices(
    reg: Registry, name: str, canonical: str, provider: str
) -> None:
    info = reg.get(name)
    assert info.name == canonical
    assert info.provider == provider
    assert info.price_known
    assert reg.known(name)
    assert info.input > 0 and info.output > info.input
    assert info.prices_as_of[:2] == "20"


def test_anthropic_entries(reg: Registry) -> None:
    sonnet = reg.get("claude-sonnet-4-5-20250929")
    assert (sonnet.input, sonnet.output) == (3.0, 15.0)
    assert (sonnet.cache_write_5m, sonnet.cache_write_1h, sonnet.cache_read) == (3.75, 6.0, 0.30)
    assert sonnet.context_window == 200_000 and sonnet.max_output == 64_000
    assert sonnet.cache_style == "explicit" and sonnet.tokenizer == "claude"
    opus = reg.get("claude-opus-4-5-20251101")
    assert (opus.input, opus.output, opus.cache_read) == (5.0, 25.0, 0.5)
    opus41 = reg.get("claude-opus-4-1")
    assert (opus41.input, opus41.output, opus41.max_output) == (15.0, 75.0, 32_000)
    haiku = reg.get("claude-haiku-4-5")
    assert (haiku.input, haiku.output) == (1.0, 5.0)


def test_openai_and_deepseek_entries(reg: Registry) -> None:
    gpt5 = reg.get("gpt-5")
    assert (gpt5.input, gpt5.output, gpt5.cache_read) == (1.25, 10.0, 0.125)
    assert gpt5.context_window == 400_000 and gpt5.max_output == 128_000
    assert gpt5.input_window == 272_000  # Codex reports 258,400 = 95% of it
    assert gpt5.cache_style == "automatic" and gpt5.cache_write_5m == gpt5.input  # no write surcharge
    gpt4o = reg.get("gpt-4o")
    assert (gpt4o.input, gpt4o.output, gpt4o.cache_read, gpt4o.context_window) == (2.5, 10.0, 1.25, 128_000)
    assert gpt4o.tokenizer == "o200k_base"
    gpt4 = reg.get("gpt-4")
    assert gpt4.context_window == 8_192 and gpt4.tokenizer == "cl100k_base"
    ds = reg.get("deepseek-chat")
    assert ds.context_window == 128_000 and ds.max_output == 8_192 and ds.tokenizer == "other"


def test_mimo_has_no_price_and_gets_fallback_rates(reg: Registry) -> None:
    info = reg.get("mimo-v2.5-pro")
    assert reg.known("mimo-v2.5-pro")  # in the table ...
    assert not info.price_known  # ... without a price
    assert info.provider == "xiaomi"
    assert (info.input, info.output, info.cache_read) == (
        FALLBACK_PRICES["input"],
        FALLBACK_PRICES["output"],
        FALLBACK_PRICES["cache_read"],
    )


def test_lookup_kinds(reg: Registry) -> None:
    assert reg.lookup("gpt-4o").how == "exact"
    assert reg.lookup("GPT-4o").how == "exact"
    assert reg.lookup("claude-sonnet-4-5-20250929").how == "alias"
    assert reg.lookup("sonnet").info.name == "claude-sonnet-4-5"
    assert reg.lookup("claude-4-sonnet").info.name == "claude-sonnet-4"  # SWE-agent's spelling
    dated = reg.lookup("openai/gpt-4o-2024-08-06")
    assert (dated.how, dated.info.name) == ("dated", "gpt-4o")
    assert reg.lookup("claude-3-7-sonnet-latest").info.name == "claude-3-7-sonnet"
    assert reg.get("us.anthropic.claude-sonnet-4-5-20250929-v1:0").name == "claude-sonnet-4-5"  # Bedrock
    assert reg.get("claude-sonnet-4-5@20250929").name == "claude-sonnet-4-5"  # Vertex
    family = reg.lookup("gpt-4o-mini-search-preview")
    assert (family.how, family.info.name) == ("prefix", "gpt-4o-mini")
    # an exact entry beats the date rule: the first gpt-4o snapshot kept its launch price
    assert reg.get("gpt-4o-2024-05-13").input == 5.0


def test_newer_version_is_not_a_family_match(reg: Registry) -> None:
    # gpt-4.5 is not gpt-4 (8K window, $30/$60); an unknown Opus is not Opus 4
    for name in ("gpt-4.5-preview", "claude-opus-4-9", "gpt-5.9"):
        assert reg.lookup(name).how == "fallback", name


def test_unknown_model_gets_flagged_fallback(reg: Registry) -> None:
    info = reg.get("totally-new-model-7b")
    assert not reg.known("totally-new-model-7b")
    assert "totally-new-model-7b" not in reg
    assert not info.price_known
    assert info.name == "totally-new-model-7b"
    assert info.context_window == DEFAULT_WINDOW_TOKENS
    assert (info.input, info.output, info.cache_write_5m, info.cache_write_1h, info.cache_read) == (
        3.0,
        15.0,
        3.75,
        6.0,
        0.30,
    )
    assert fallback_info("claude-next").tokenizer == "claude"
    assert fallback_info("gpt-9").tokenizer == "o200k_base"


def test_get_model_shorthand() -> None:
    assert get_model("gpt-4o") is Registry.default().get("gpt-4o")


def test_builtin_table_is_consistent(reg: Registry) -> None:
    assert len(reg) >= 30
    assert reg.as_of
    names = [n.lower() for info in reg for n in (info.name, *info.aliases)]
    assert len(names) == len(set(names)), "a name or alias is listed twice"
    for info in reg:
        assert info.context_window > 0 and info.max_output > 0
        assert info.max_output <= info.context_window
        assert info.prices_as_of, info.name
        if info.cache_style == "explicit" and info.price_known and info.name != "claude-3-haiku":
            # (Claude 3 Haiku's published cache prices are not the usual multiples)
            assert info.cache_write_5m == pytest.approx(info.input * 1.25), info.name
            assert info.cache_write_1h == pytest.approx(info.input * 2.0), info.name
            assert info.cache_read == pytest.approx(info.input * 0.1), info.name
        if info.cache_style == "automatic":
            assert info.cache_write_5m == info.input and info.cache_read <= info.input, info.name


# --- user overrides ----------------------------------------------------------------------------


def test_override_file_changes_a_price_and_adds_a_model(reg: Registry, tmp_path: Path) -> None:
    path = tmp_path / "models.toml"
    path.write_text(
        """
as_of = "2026-04-01"

[models."claude-sonnet-4-5-20250929"]  # an alias: updates the canonical entry
input = 2.0

[models."my-local-model"]
provider = "anthropic"      # provider defaults apply: explicit cache, claude tokenizer, 200K window
max_output = 8000
input = 1.0
output = 2.0

[models."mimo-v2.5-pro"]
input = 0.5
output = 1.5
cache_read = 0.1
""",
        encoding="utf-8",
    )
    custom = reg.with_overrides(path)
    sonnet = custom.get("claude-sonnet-4-5")
    assert sonnet.input == 2.0 and sonnet.output == 15.0
    assert sonnet.cache_write_5m == pytest.approx(2.5)  # derived cache prices follow the new input
    assert sonnet.cache_read == pytest.approx(0.2)
    assert sonnet.prices_as_of == "2026-04-01"
    assert sonnet.context_window == 200_000  # untouched fields kept
    added = custom.get("my-local-model")
    assert custom.known("my-local-model")
    assert added.context_window == 200_000 and added.cache_style == "explicit" and added.tokenizer == "claude"
    assert added.cache_write_1h == pytest.approx(2.0)
    mimo = custom.get("mimo-v2.5-pro")
    assert mimo.price_known and (mimo.input, mimo.cache_read, mimo.cache_write_5m) == (0.5, 0.1, 0.5)
    # a user model's alias wins over a built-in alias; names with a routing prefix work
    extra = tmp_path / "extra.toml"
    extra.write_text(
        '[models."my/router-model"]\nprovider = "acme"\ncontext_window = 64000\nmax_output = 4000\n'
        'input = 1.0\noutput = 1.0\naliases = ["sonnet"]\n',
        encoding="utf-8",
    )
    custom2 = custom.with_overrides(extra)
    assert custom2.get("sonnet").name == "my/router-model"
    assert custom2.lookup("My/Router-Model").how == "exact"
    assert custom2.get("claude-sonnet-4-5").input == 2.0  # earlier override kept
    # the default registry is untouched
    assert reg.get("claude-sonnet-4-5").input == 3.0
    assert not reg.known("my-local-model")


def test_from_toml_and_errors(tmp_path: Path) -> None:
    good = tmp_path / "only.toml"
    good.write_text(
        '[models.tiny]\nprovider = "acme"\ncontext_window = 20000\nmax_output = 1000\n', encoding="utf-8"
    )
    only = Registry.from_toml(good)
    assert len(only) == 1
    assert not only.get("tiny").price_known  # no input/output price: fallback rates
    bad = tmp_path / "bad.toml"
    bad.write_text(
        '[models.x]\nprovider = "acme"\ncontext_window = "big"\nmax_output = 1\n', encoding="utf-8"
    )
    with pytest.raises(RegistryError, match=r"bad\.toml"):
        Registry.from_toml(bad)
    no_provider = tmp_path / "np.toml"
    no_provider.write_text("[models.x]\ncontext_window = 1000\nmax_output = 1\n", encoding="utf-8")
    with pytest.raises(RegistryError, match="provider"):
        Registry.from_toml(no_provider)
    with pytest.raises(RegistryError, match="no such file"):
        Registry.from_toml(tmp_path / "missing.toml")
    broken = tmp_path / "broken.toml"
    broken.write_text("[models\n", encoding="utf-8")
    with pytest.raises(RegistryError, match="invalid TOML"):
        Registry.default().with_overrides(broken)


# --- window resolution and guard -----------------------------------------------------------------


def test_resolve_window_order_and_agent_cap(reg: Registry) -> None:
    sonnet = reg.get("claude-sonnet-4-5")
    assert resolve_window(sonnet) == 200_000
    assert resolve_window(reg.get("gpt-4")) == 8_192
    assert resolve_window(reg.get("gpt-5.4")) == 272_000  # input limit of the GPT-5 family
    assert resolve_window(None) == DEFAULT_WINDOW_TOKENS
    assert resolve_window(None, default=100_000) == 100_000
    assert resolve_window(sonnet, user_override=150_000) == 150_000  # override beats the model
    assert resolve_window(sonnet, user_override=500_000) == 500_000  # ... even upward
    assert resolve_window(sonnet, agent_cap=120_000) == 120_000  # the cap only lowers
    assert resolve_window(sonnet, agent_cap=900_000) == 200_000
    assert resolve_window(sonnet, user_override=500_000, agent_cap=300_000) == 300_000  # cap applied last
    with pytest.raises(ValueError):
        resolve_window(sonnet, agent_cap=0)


def test_check_window_blocks_and_warns() -> None:
    assert MIN_WINDOW_TOKENS == 16_000 and WARN_WINDOW_TOKENS == 32_000
    with pytest.raises(WindowTooSmallError) as err:
        check_window(15_999)
    assert err.value.tokens == 15_999
    with pytest.raises(WindowTooSmallError):
        check_window(0)
    with pytest.warns(WindowWarning, match="31,999"):
        message = check_window(31_999)
    assert message is not None and "32,000" in message
    with pytest.warns(WindowWarning):
        assert check_window(16_000) is not None  # the minimum itself is allowed, with a warning
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert check_window(32_000) is None
        assert check_window(200_000) is None


# --- cost ----------------------------------------------------------------------------------------


def test_cost_of_an_anthropic_call_with_cache(reg: Registry) -> None:
    sonnet = reg.get("claude-sonnet-4-5-20250929")
    cost = cost_usd(
        sonnet,
        input_tokens=1_000,
        cache_read_tokens=100_000,
        cache_write_5m_tokens=10_000,
        cache_write_1h_tokens=2_000,
        output_tokens=500,
    )
    # 1,000 x $3 + 100,000 x $0.30 + 10,000 x $3.75 + 2,000 x $6 + 500 x $15, per million
    expected = (3_000 + 30_000 + 37_500 + 12_000 + 7_500) / 1_000_000
    assert cost == pytest.approx(expected)
    assert cost == pytest.approx(0.09)
    usage = Usage(
        input_tokens=1_000,
        cache_read_tokens=100_000,
        cache_write_tokens=10_000,
        cache_write_1h_tokens=2_000,
        output_tokens=500,
    )
    assert usage_cost_usd(sonnet, usage) == pytest.approx(expected)
    assert sonnet.cost_usd(cache_read_tokens=100_000, output_tokens=500) == pytest.approx(0.0375)


def test_cost_of_an_openai_call_has_no_write_surcharge(reg: Registry) -> None:
    gpt4o = reg.get("gpt-4o")
    assert cost_usd(gpt4o, input_tokens=1_000_000) == pytest.approx(2.5)
    assert cost_usd(gpt4o, cache_read_tokens=1_000_000) == pytest.approx(1.25)
    assert cost_usd(gpt4o, cache_write_5m_tokens=1_000_000) == pytest.approx(2.5)
    assert cost_usd(gpt4o) == 0.0


def test_model_info_is_frozen(reg: Registry) -> None:
    info = reg.get("gpt-4o")
    assert isinstance(info, ModelInfo)
    with pytest.raises(AttributeError):
        info.input = 0.0  # type: ignore[misc]
