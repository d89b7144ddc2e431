"""catalog.model_info: genai-prices' bundled snapshot (offline) + overrides."""

from __future__ import annotations

import socket
import subprocess
import sys
from decimal import Decimal

import pytest

from jupyter_session_agent.core import budget
from jupyter_session_agent.core.errors import ConfigError
from jupyter_session_agent.core.messages import Tokens
from jupyter_session_agent.providers import prices


@pytest.fixture(autouse=True)
def offline(monkeypatch):
    """Any network access during a lookup fails the test."""
    prices.clear_cache()

    def refuse(*args, **kwargs):
        raise AssertionError("catalog touched the network")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)
    monkeypatch.setattr(socket, "getaddrinfo", refuse)
    yield
    prices.clear_cache()


def test_import_is_lazy():
    code = (
        "import sys, jupyter_session_agent.providers.prices as c; "
        "assert 'genai_prices' not in sys.modules, 'imported at module load'; "
        "c.model_info('openai', 'gpt-4o-mini'); assert 'genai_prices' in sys.modules"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_gpt_4o_mini():
    info = prices.model_info("openai", "gpt-4o-mini")
    assert info.source == "catalogue"
    assert (info.provider_id, info.model_id) == ("openai", "gpt-4o-mini")
    assert info.context == 128_000
    assert info.output == 0 and info.input == 0  # genai-prices has no output/input limits
    assert info.prices == budget.Prices(input=0.15, output=0.6, cache_read=0.075, cache_write=0.0)
    assert info.prices_over_200k is None
    assert info.extra["genai_prices_model"] == "gpt-4o-mini"


def test_dated_and_prefixed_ids_resolve():
    base = prices.model_info("openai", "gpt-4o-mini")
    assert prices.model_info("openai", "gpt-4o-mini-2024-07-18").prices == base.prices
    assert prices.model_info("openai", "openai/gpt-4o-mini").prices == base.prices


def test_openrouter_ids_keep_their_prefix():
    info = prices.model_info("openrouter", "openai/gpt-4o-mini")
    assert info.source == "catalogue" and info.context == 128_000
    assert info.extra["genai_prices_provider"] == "openrouter"


def test_anthropic_has_cache_write_and_200k_tier():
    info = prices.model_info("anthropic", "claude-sonnet-4-5")
    assert info.context == 200_000
    assert info.prices == budget.Prices(input=3.0, output=15.0, cache_read=0.3, cache_write=3.75)
    assert info.prices_over_200k == budget.Prices(
        input=6.0, output=22.5, cache_read=0.6, cache_write=7.5
    )


@pytest.mark.parametrize(
    ("provider", "model", "genai_provider"),
    [
        ("google", "gemini-2.5-pro", "google"),
        ("gemini", "gemini-2.5-pro", "google"),
        ("xai", "grok-4.20", "x-ai"),
        ("deepseek", "deepseek-chat", "deepseek"),
        ("azure", "gpt-4o", "azure"),  # via genai-prices' fallback to openai
        ("mistral", "mistral-large-latest", "mistral"),
        ("groq", "llama-3.3-70b-versatile", "groq"),
    ],
)
def test_provider_aliases(provider, model, genai_provider):
    info = prices.model_info(provider, model)
    assert info.source == "catalogue"
    assert info.extra["genai_prices_provider"] == genai_provider
    assert info.prices.input > 0 and info.prices.output > 0


def test_tier_at_other_threshold_is_kept_aside():
    info = prices.model_info("openai", "gpt-5.4")
    assert info.prices_over_200k is None  # budget.cost's tier is fixed at 200k
    (tier,) = info.extra["price_tiers"]
    assert tier["above"] == 272_000 and tier["prices"].input > info.prices.input


def test_xai_199999_tier_counts_as_200k():
    assert prices.model_info("xai", "grok-4.20").prices_over_200k is not None


@pytest.mark.parametrize(
    ("provider", "model", "source"),
    [
        ("openai", "no-such-model-xyz", "unknown"),
        ("nope", "gpt-4o", "unknown"),
        ("local", "smollm2-135m", "local"),  # a self-hosted server: free, not unknown
        ("ollama", "llama3.2", "local"),
    ],
)
def test_unknown_is_zeros(provider, model, source):
    info = prices.model_info(provider, model)
    assert info.source == source and budget.price_source(info) == source
    assert (info.context, info.output, info.input) == (0, 0, 0)
    assert info.prices == budget.Prices()
    assert budget.cost(Tokens(input=1000, output=1000), info) == 0.0
    assert not budget.is_overflow(Tokens(input=10**9), info)  # never auto-compacts


def test_lookups_are_cached():
    first = prices.model_info("openai", "gpt-4o")
    assert prices.model_info("openai", "gpt-4o") is first
    prices.clear_cache()
    again = prices.model_info("openai", "gpt-4o")
    assert again is not first and again == first


@pytest.mark.parametrize(
    ("input_tokens", "cache_read", "cache_write", "output"),
    [(10_000, 2_000, 1_000, 500), (150_000, 100_000, 10_000, 2_000), (1_000_000, 0, 0, 100_000)],
)
def test_cost_matches_genai_prices(input_tokens, cache_read, cache_write, output):
    """budget.cost over our ModelInfo == genai-prices' own calc_price."""
    import genai_prices

    for provider, model in (("anthropic", "claude-sonnet-4-5"), ("openai", "gpt-4o-mini")):
        info = prices.model_info(provider, model)
        tokens = Tokens(
            input=input_tokens, output=output, cache_read=cache_read, cache_write=cache_write
        )
        usage = genai_prices.Usage(
            input_tokens=input_tokens
            + cache_read
            + cache_write,  # genai-prices' input includes cache
            cache_read_tokens=cache_read,
            cache_write_tokens=cache_write,
            output_tokens=output,
        )
        expected = genai_prices.calc_price(usage, model, provider_id=provider).total_price
        if info.prices.cache_write == 0 and cache_write:
            # genai-prices bills unpriced cache writes at the input rate; budget at 0
            expected -= Decimal(str(info.prices.input)) * cache_write / 1_000_000
        assert budget.cost(tokens, info) == pytest.approx(float(expected), rel=1e-9)


# --------------------------------------------------------------------------
# overrides


def test_override_bare_model_id():
    info = prices.model_info(
        "openai", "gpt-4o-mini", {"gpt-4o-mini": {"context": 32_000, "price_input": 1}}
    )
    assert info.source == "override"
    assert info.context == 32_000
    assert info.prices.input == 1.0 and info.prices.output == 0.6  # others kept


def test_override_provider_model_wins_over_bare():
    overrides = {
        "gpt-4o-mini": {"context": 1000, "output": 100},
        "openai/gpt-4o-mini": {"context": 2000},
        "anthropic/gpt-4o-mini": {"context": 3000},  # another provider: ignored
    }
    info = prices.model_info("openai", "gpt-4o-mini", overrides)
    assert (info.context, info.output) == (2000, 100)


def test_override_makes_unknown_models_usable():
    info = prices.model_info(
        "local", "smollm2", {"local/smollm2": {"context": 8192, "output": 2048, "price_output": 0}}
    )
    assert info.source == "override"
    assert (info.context, info.output) == (8192, 2048)
    assert budget.budget(info).usable == 8192 - 2048 - 2048


def test_override_context_drops_catalogue_input_limit_and_prices_drop_tier():
    base = prices.model_info("anthropic", "claude-sonnet-4-5")

    def override(info, patch):
        return prices.apply_overrides(info, {info.model_id: patch})

    with_input = override(base, {"input": 150_000})
    assert with_input.input == 150_000
    assert override(with_input, {"context": 100_000}).input == 0
    assert override(with_input, {"context": 100_000, "input": 90_000}).input == 90_000
    repriced = prices.model_info(
        "anthropic", "claude-sonnet-4-5", {"claude-sonnet-4-5": {"price_output": 10}}
    )
    assert repriced.prices_over_200k is None
    limits_only = prices.model_info(
        "anthropic", "claude-sonnet-4-5", {"claude-sonnet-4-5": {"output": 64_000}}
    )
    assert limits_only.prices_over_200k == base.prices_over_200k


def test_override_does_not_touch_the_cache():
    prices.model_info("openai", "gpt-4o-mini", {"gpt-4o-mini": {"context": 5}})
    assert prices.model_info("openai", "gpt-4o-mini").context == 128_000


@pytest.mark.parametrize(
    ("overrides", "fragment"),
    [
        ({"gpt-4o-mini": {"contxt": 5}}, "unknown key(s) contxt"),
        (
            {"other-model": {"max_tokens": 5}},
            "unknown key(s) max_tokens",
        ),  # validated even if unused
        ({"gpt-4o-mini": {"context": -1}}, "whole number"),
        ({"gpt-4o-mini": {"context": 1.5}}, "whole number"),
        ({"gpt-4o-mini": {"context": True}}, "whole number"),
        ({"gpt-4o-mini": {"price_input": "1"}}, "USD per million"),
        ({"gpt-4o-mini": {"price_input": float("nan")}}, "USD per million"),
        ({"gpt-4o-mini": 5}, "must be a mapping"),
        (["gpt-4o-mini"], "must be a mapping"),
    ],
)
def test_bad_overrides(overrides, fragment):
    with pytest.raises(ConfigError) as info:
        prices.model_info("openai", "gpt-4o-mini", overrides)
    message = str(info.value)
    assert fragment in message
    assert "\n" not in message
    if "unknown key" in fragment:
        assert all(k in message for k in prices.OVERRIDE_KEYS)  # names the valid keys


def test_apply_overrides_to_a_model_info_from_elsewhere():
    local = budget.ModelInfo(
        provider_id="local", model_id="smollm2", context=8192, output=2048, source="local"
    )
    assert prices.apply_overrides(local, None) is local
    assert prices.apply_overrides(local, {"other": {"context": 1}}) is local
    patched = prices.apply_overrides(local, {"local/smollm2": {"context": 4096}})
    assert (patched.context, patched.output, patched.source) == (4096, 2048, "override")
    with pytest.raises(ConfigError, match="valid keys"):
        prices.apply_overrides(local, {"smollm2": {"ctx": 1}})
