"""Model limits and prices: genai-prices' bundled snapshot plus user overrides.

One module: the catalogue lookup and the overrides build one ``ModelInfo``, and what an
override drops (a catalogue input limit, the over-200k tier) depends on the entry it replaces.

:func:`model_info` answers "how big is this model's context and what does a
token cost" without touching the network: it reads the snapshot that ships
inside ``genai_prices`` (never ``UpdatePrices``). ``genai_prices`` is imported
on the first lookup (measured: ≈0.15 s import + ≈0.02 s to build the
snapshot and find the model; another model ≈0.5 ms; a repeated one is a dict
hit, ≈4 µs), so importing this module is free.

What genai-prices does and does not know:

- prices per million tokens: input, output, cache read, cache write; tiered
  prices ("cliff" model: all tokens at the tier price once the prompt is
  above the threshold). A single >200k tier becomes ``prices_over_200k``
  (what :func:`budget.cost` applies); a tier at another threshold (100k,
  128k, 272k…) is kept in ``extra["price_tiers"]`` only, since budget's tier
  is fixed at 200k;
- ``context_window`` for about 60% of models (→ ``context``); no output or
  separate input limits (→ 0, i.e. ``max_output_tokens`` falls back to 32k).

Unknown provider or model → zeros with ``source="unknown"``: cost 0 and
context 0, so the loop never auto-compacts (use an override to fix that).

Overrides: ``{"provider/model" | "model": {key: value}}`` with the keys in
:data:`OVERRIDE_KEYS`. A bare model id's settings are merged with
``provider/model``'s (the latter win). As in OpenCode's config models, overriding ``context``
drops a catalogue ``input`` limit (unless ``input`` is overridden too) and
overriding any price drops the over-200k tier.
"""

from __future__ import annotations

import dataclasses
import re
import threading
from collections.abc import Mapping
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

from ..core.budget import ModelInfo, Prices
from ..core.errors import ConfigError

__all__ = [
    "model_info",
    "apply_overrides",
    "accepts_images",
    "OVERRIDE_KEYS",
    "PROVIDER_ALIASES",
    "LOCAL_PROVIDERS",
    "clear_cache",
]

OVERRIDE_KEYS = (
    "context",
    "output",
    "input",
    "price_input",
    "price_output",
    "price_cache_read",
    "price_cache_write",
    "compaction_threshold",  # ratio of the usable window where auto compaction starts (→ extra)
    "images",
)  # True/False: the model accepts image content (attached images)
_LIMIT_KEYS = ("context", "output", "input")
_PRICE_FIELDS = {
    "price_input": "input",
    "price_output": "output",
    "price_cache_read": "cache_read",
    "price_cache_write": "cache_write",
}

# Our provider ids (OpenCode / models.dev style) → genai-prices provider ids.
# Anything else is looked up by genai-prices' own provider matching.
PROVIDER_ALIASES: dict[str, str] = {
    "openai": "openai",
    "anthropic": "anthropic",
    "google": "google",
    "gemini": "google",
    "vertex": "google",
    "google-vertex": "google",
    "google-vertex-anthropic": "google",
    "openrouter": "openrouter",
    "xai": "x-ai",
    "x-ai": "x-ai",
    "bedrock": "aws",
    "amazon-bedrock": "aws",
    "aws": "aws",
    "azure": "azure",
    "azure-openai": "azure",
    "mistral": "mistral",
    "groq": "groq",
    "deepseek": "deepseek",
    "together": "together",
    "togetherai": "together",
    "together-ai": "together",
    "fireworks": "fireworks",
    "fireworks-ai": "fireworks",
    "cerebras": "cerebras",
    "moonshot": "moonshotai",
    "moonshotai": "moonshotai",
    "zai": "zai",
    "z-ai": "zai",
    "zhipuai": "zhipuai",
    "perplexity": "perplexity",
    "cohere": "cohere",
    "github-copilot": "github-copilot",
    "minimax": "minimax",
    "novita": "novita",
    "huggingface": "huggingface_together",
}
# Servers whose model names mean nothing to a price list (and cost nothing).
LOCAL_PROVIDERS = frozenset(
    {
        "local",
        "llamacpp",
        "llama.cpp",
        "llama-cpp",
        "ollama",
        "vllm",
        "lmstudio",
        "lm-studio",
        "scripted",
        "sglang",
    }
)

_TIER_200K = (199_999, 200_000)  # x-ai states its tier as "above 199,999"

# Models that accept image content, by name (genai-prices does not say; an override's
# "images" decides for any other). Matched anywhere in "provider/model", case-insensitive.
_IMAGE_MODELS = re.compile(
    r"gpt-4o|gpt-4\.1|gpt-4\.5|gpt-4-turbo|gpt-4-vision|gpt-5|chatgpt-4o|(?:^|/)o1(?!-mini)|"
    r"(?:^|/)o3(?!-mini)|(?:^|/)o4|claude-3|claude-(?:opus|sonnet|haiku)-4|claude-4|gemini|"
    r"gemma-?3|grok-(?:2-)?vision|grok-4|pixtral|mistral-(?:small|medium)-(?:3|25)|"
    r"llama-?3\.2-?(?:\d+b-)?vision|llama-?4|llava|moondream|minicpm-v|qwen[\d.]*-?vl|qvq|"
    r"internvl|glm-4\.?\d*v|-vl\b|vision",
    re.I,
)


def accepts_images(provider_id: str, model_id: str) -> bool:
    """Whether the model takes image content parts, by its name (see ``_IMAGE_MODELS``)."""
    return _IMAGE_MODELS.search(f"{provider_id}/{model_id}") is not None


_cache: dict[tuple[str, str], ModelInfo] = {}
_lock = threading.Lock()


def clear_cache() -> None:
    """Forget cached catalogue lookups (tests, or after swapping snapshots)."""
    with _lock:
        _cache.clear()


def model_info(
    provider_id: str, model_id: str, overrides: Mapping[str, Mapping] | None = None
) -> ModelInfo:
    """Limits and prices for ``provider_id/model_id``, then ``overrides`` applied.

    ``source`` is ``"catalogue"`` (genai-prices), ``"unknown"`` (not found:
    all zeros) or ``"override"`` (an override changed something). Raises
    :class:`ConfigError` for an unknown override key or a bad value.
    """
    patch = _matching_override(provider_id, model_id, overrides)  # validates first
    key = (provider_id, model_id)
    info = _cache.get(key)
    if info is None:
        info = _lookup(provider_id, model_id)
        with _lock:
            _cache[key] = info
    return _apply(info, patch) if patch else info


def apply_overrides(info: ModelInfo, overrides: Mapping[str, Mapping] | None) -> ModelInfo:
    """``overrides`` applied to a ``ModelInfo`` from elsewhere (e.g. the local
    server's), matched by its ``provider_id``/``model_id`` as in :func:`model_info`."""
    patch = _matching_override(info.provider_id, info.model_id, overrides)
    return _apply(info, patch) if patch else info


# --------------------------------------------------------------------------
# overrides


def _matching_override(
    provider_id: str, model_id: str, overrides: Mapping[str, Mapping] | None
) -> dict:
    """Every entry is validated (a typo fails whatever model runs); the bare
    model id's settings, then ``provider/model``'s on top, merged into one."""
    if not overrides:
        return {}
    if not isinstance(overrides, Mapping):
        raise ConfigError(
            f"model_overrides must be a mapping of model id → settings, got {type(overrides).__name__}"
        )
    for name, patch in overrides.items():
        _validate(name, patch)
    merged: dict[str, Any] = {}
    for k in (model_id, f"{provider_id}/{model_id}"):
        merged.update(overrides.get(k) or {})
    return merged


def _validate(name: Any, patch: Any) -> None:
    if not isinstance(patch, Mapping):
        raise ConfigError(
            f"model_overrides[{name!r}] must be a mapping with keys {', '.join(OVERRIDE_KEYS)}"
        )
    unknown = sorted(str(k) for k in patch if k not in OVERRIDE_KEYS)
    if unknown:
        raise ConfigError(
            f"model_overrides[{name!r}]: unknown key(s) {', '.join(unknown)}; valid keys: {', '.join(OVERRIDE_KEYS)}"
        )
    for k, value in patch.items():
        if k in _LIMIT_KEYS:
            ok = isinstance(value, int) and not isinstance(value, bool) and value >= 0
            what = "a whole number of tokens >= 0"
        elif k == "images":
            ok, what = isinstance(value, bool), "True or False"
        elif k == "compaction_threshold":
            ok = isinstance(value, (int, float)) and not isinstance(value, bool) and 0 < value <= 1
            what = "a ratio of the usable window, 0 < r <= 1"
        else:
            ok = (
                isinstance(value, (int, float, Decimal))
                and not isinstance(value, bool)
                and 0 <= value < float("inf")
            )
            what = "USD per million tokens, a number >= 0"
        if not ok:
            raise ConfigError(f"model_overrides[{name!r}][{k!r}] must be {what}, got {value!r}")


def _apply(info: ModelInfo, patch: Mapping[str, Any]) -> ModelInfo:
    if not patch:
        return info
    changes: dict[str, Any] = {"source": "override"}
    for k in _LIMIT_KEYS:
        if k in patch:
            changes[k] = int(patch[k])
    if "context" in patch and "input" not in patch:
        changes["input"] = 0  # a catalogue input limit belongs to the catalogue context
    price_changes = {_PRICE_FIELDS[k]: float(v) for k, v in patch.items() if k in _PRICE_FIELDS}
    if price_changes:
        changes["prices"] = dataclasses.replace(info.prices, **price_changes)
        changes["prices_over_200k"] = None
    if "images" in patch:
        changes["images"] = bool(patch["images"])
    if "compaction_threshold" in patch:
        changes["extra"] = {
            **info.extra,
            "compaction_threshold": float(patch["compaction_threshold"]),
        }
    return dataclasses.replace(info, **changes)


# --------------------------------------------------------------------------
# catalogue


def _unknown(provider_id: str, model_id: str, why: str, source: str = "unknown") -> ModelInfo:
    return ModelInfo(
        provider_id=provider_id,
        model_id=model_id,
        source=source,
        extra={"why": why},
        images=accepts_images(provider_id, model_id),
    )


def _candidates(provider_id: str, model_id: str) -> list[str]:
    """The model id as given, then without a ``provider/`` prefix."""
    refs = [model_id]
    head, sep, tail = model_id.partition("/")
    if (
        sep
        and tail
        and head.lower() in (provider_id.lower(), PROVIDER_ALIASES.get(provider_id.lower(), ""))
    ):
        refs.append(tail)
    return refs


def _lookup(provider_id: str, model_id: str) -> ModelInfo:
    pid = provider_id.strip().lower()
    if pid in LOCAL_PROVIDERS:
        return _unknown(provider_id, model_id, "local server: no catalogue entry", "local")
    from genai_prices import data_snapshot  # lazy: ≈0.15 s on first use

    snapshot = data_snapshot.get_snapshot()
    try:
        gp_provider_id = PROVIDER_ALIASES.get(pid, pid)
        provider = snapshot.find_provider(None, gp_provider_id, None)
    except LookupError:
        return _unknown(provider_id, model_id, f"provider {provider_id!r} not in genai-prices")
    for ref in _candidates(provider_id, model_id):
        try:
            provider, model = snapshot.find_provider_model(ref, provider, None, None)
        except LookupError:
            continue
        return _from_genai(provider_id, model_id, provider, model)
    return _unknown(
        provider_id, model_id, f"model {model_id!r} not in genai-prices for {provider.id!r}"
    )


def _price(value: Any) -> float:
    base = getattr(value, "base", value)  # TieredPrices → its base price
    return float(base) if base is not None else 0.0


def _tier_prices(model_price: Any, start: int) -> Prices:
    """Prices that apply above ``start``: tiered keys at that tier, the rest as-is."""

    def at(value: Any) -> float:
        for tier in getattr(value, "tiers", None) or ():
            if tier.start == start:
                return float(tier.price)
        return _price(value)

    inp = at(model_price.input_mtok)
    read = model_price.cache_read_mtok
    return Prices(
        input=inp,
        output=at(model_price.output_mtok),
        cache_read=inp if read is None else at(read),
        cache_write=at(model_price.cache_write_mtok),
    )


def _from_genai(provider_id: str, model_id: str, provider: Any, model: Any) -> ModelInfo:
    mp = model.get_prices(datetime.now(tz=UTC))  # time-conditional prices: today's
    fields = (mp.input_mtok, mp.output_mtok, mp.cache_read_mtok, mp.cache_write_mtok)
    prices = Prices(*(_price(v) for v in fields))
    # no cache-read price listed: cached tokens are not discounted (billed as input, as
    # genai-prices computes it), not free
    if mp.cache_read_mtok is None:
        prices = dataclasses.replace(prices, cache_read=prices.input)
    starts = sorted({t.start for v in fields for t in (getattr(v, "tiers", None) or ())})
    over_200k = None
    extra: dict[str, Any] = {"genai_prices_provider": provider.id, "genai_prices_model": model.id}
    if model.name:
        extra["name"] = model.name
    for start in starts:
        tier = _tier_prices(mp, start)
        if start in _TIER_200K and over_200k is None:
            over_200k = tier
        else:
            extra.setdefault("price_tiers", []).append({"above": start, "prices": tier})
    return ModelInfo(
        provider_id=provider_id,
        model_id=model_id,
        context=int(model.context_window or 0),
        prices=prices,
        prices_over_200k=over_200k,
        source="catalogue",
        extra=extra,
        images=accepts_images(provider_id, model_id),
    )
