"""Token budget and cost: pure functions over a model's limits and prices.

Matches OpenCode: ``Token.estimate`` (chars / 4), ``isOverflow`` with the reserved buffer
subtracted in both branches (usable is ``limit.input - reserved`` or ``context - max_output -
reserved``, ``reserved = min(20,000, max_output)``) from the model's real output limit, and
``Session.getUsage``'s
tokens and cost arithmetic (output excludes reasoning; reasoning is charged at the output
price), including the >200k tier.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from .messages import Tokens

CHARS_PER_TOKEN = 4
OUTPUT_TOKEN_MAX = 32_000
COMPACTION_BUFFER = 20_000
TIER_THRESHOLD = 200_000


IMAGE_TOKENS = 1_500  # an image content part, as OpenCode estimates media (not its data URL)


def estimate(text: str) -> int:
    """OpenCode's ``Token.estimate``: ``max(0, round(len / 4))``."""
    # JS Math.round rounds .5 up; Python's round() is banker's rounding.
    return max(0, int(len(text) / CHARS_PER_TOKEN + 0.5))


def estimate_sum(texts: Iterable[str]) -> int:
    """The sum of :func:`estimate` over ``texts`` (each rounded on its own, as OpenCode does)."""
    total = 0
    for text in texts:
        total += estimate(text)
    return total


def estimate_chat(value: Any) -> int:
    """``estimate`` of a chat list (or any JSON value) serialised, each image content part
    counted as :data:`IMAGE_TOKENS` rather than by the length of its base64 data URL."""
    text = json.dumps(value, ensure_ascii=False, default=str)
    if '"image_url"' not in text:
        return estimate(text)
    images = 0

    def strip(item: Any) -> Any:
        nonlocal images
        if isinstance(item, dict):
            if item.get("type") == "image_url":
                images += 1
                return {"type": "image_url"}
            return {k: strip(v) for k, v in item.items()}
        if isinstance(item, (list, tuple)):
            return [strip(v) for v in item]
        return item

    stripped = strip(value)
    return estimate(json.dumps(stripped, ensure_ascii=False, default=str)) + images * IMAGE_TOKENS


@dataclass(frozen=True, slots=True)
class Prices:
    """USD per million tokens."""

    input: float = 0.0
    output: float = 0.0
    cache_read: float = 0.0
    cache_write: float = 0.0


@dataclass(frozen=True, slots=True)
class ModelInfo:
    """Limits and prices of one model. ``context == 0`` means unknown."""

    provider_id: str
    model_id: str
    context: int = 0
    output: int = 0
    input: int = 0  # an explicit input limit (0: none)
    prices: Prices = Prices()
    prices_over_200k: Prices | None = None
    source: str = "default"  # where the numbers came from: catalogue, override, server, default
    extra: Mapping[str, Any] = field(default_factory=dict)
    # accepts image content parts (attached images are sent as images; else as placeholders)
    images: bool = False

    @property
    def max_output_tokens(self) -> int:
        """``ProviderTransform.maxOutputTokens``: min(output, 32k) or 32k."""
        return min(self.output, OUTPUT_TOKEN_MAX) or OUTPUT_TOKEN_MAX

    @property
    def output_limit(self) -> int:
        """The most the model may answer, capped at 32k: its output limit when known, else
        32k or, for a window under 128k, a quarter of it (a 16k window is not all answer)."""
        if self.output:
            return min(self.output, OUTPUT_TOKEN_MAX)
        if self.context:
            return min(OUTPUT_TOKEN_MAX, max(1, self.context // 4))
        return OUTPUT_TOKEN_MAX


@dataclass(frozen=True, slots=True)
class Budget:
    """Where a model's context goes, for one ``reserved`` setting."""

    context: int
    max_output: int
    reserved: int
    usable: int  # overflow when the last step's count >= usable

    def headroom(self, used: int) -> int:
        return self.usable - used


def budget(model: ModelInfo, reserved: int | None = None) -> Budget:
    """The usable input budget (OpenCode's current rule): the input limit minus ``reserved``,
    else the context minus the output limit minus ``reserved``; ``reserved`` defaults to
    ``min(20,000, the output limit)``. The output limit is the model's real one
    (:attr:`ModelInfo.output_limit`): a 32k default on a small window would leave nothing
    of any window up to 52k."""
    max_out = model.output_limit
    reserved = min(COMPACTION_BUFFER, max_out) if reserved is None else reserved
    if model.input:
        usable = max(0, model.input - reserved)
    else:
        usable = max(0, model.context - max_out - reserved)
    return Budget(model.context, max_out, reserved, usable)


def is_overflow(
    tokens: Tokens, model: ModelInfo, *, auto: bool = True, reserved: int | None = None
) -> bool:
    """OpenCode's ``isOverflow`` (as fixed upstream): the last step's count >= usable."""
    if not auto or model.context == 0:
        return False
    return tokens.count >= budget(model, reserved).usable


def price_source(model: ModelInfo) -> str:
    """Where a step's price comes from when the server reports no cost: ``catalogue``
    (genai-prices), ``override`` (model_overrides), ``local`` (a self-hosted server: free)
    or ``unknown`` (no price known: cost 0)."""
    return model.source if model.source in ("catalogue", "override", "local") else "unknown"


def cost(tokens: Tokens, model: ModelInfo) -> float:
    """USD for one step: ``output`` excludes reasoning (:func:`normalise_usage`), and
    reasoning is charged at the output price, so a token is never charged twice."""
    prices = model.prices
    if model.prices_over_200k and tokens.input + tokens.cache_read > TIER_THRESHOLD:
        prices = model.prices_over_200k
    total = (
        Decimal(tokens.input) * Decimal(str(prices.input))
        + Decimal(tokens.output) * Decimal(str(prices.output))
        + Decimal(tokens.cache_read) * Decimal(str(prices.cache_read))
        + Decimal(tokens.cache_write) * Decimal(str(prices.cache_write))
        + Decimal(tokens.reasoning) * Decimal(str(prices.output))
    ) / Decimal(1_000_000)
    return float(total)


def normalise_usage(
    *,
    prompt_tokens: int = 0,
    completion_tokens: int = 0,
    cached_tokens: int = 0,
    cache_write_tokens: int = 0,
    reasoning_tokens: int = 0,
    total_tokens: int | None = None,
    input_excludes_cache: bool = False,
    estimated: bool = False,
) -> Tokens:
    """OpenCode's ``getUsage`` token fields from an OpenAI-style usage object.

    ``input`` excludes cache reads and writes unless the server already reports
    it that way (Anthropic-style, ``input_excludes_cache``). ``output`` excludes
    reasoning: OpenAI-compatible servers count reasoning inside ``completion_tokens``
    (then it is taken out), unless it cannot be (more reasoning than completion) or
    ``total_tokens`` says it is not (``total == prompt + completion + reasoning``).
    Non-finite or negative numbers become 0.
    """

    def clean(n: Any) -> int:
        try:
            value = int(n or 0)
        except (TypeError, ValueError, OverflowError):
            return 0
        return max(0, value)

    prompt, out = clean(prompt_tokens), clean(completion_tokens)
    read, write, reasoning = (
        clean(cached_tokens),
        clean(cache_write_tokens),
        clean(reasoning_tokens),
    )
    inp = prompt if input_excludes_cache else max(0, prompt - read - write)
    outside = reasoning > out or (
        reasoning > 0
        and total_tokens is not None
        and clean(total_tokens) == prompt + out + reasoning
    )
    if not outside:
        out -= reasoning
    total = (
        clean(total_tokens) if total_tokens is not None else inp + out + reasoning + read + write
    )
    return Tokens(
        input=inp,
        output=out,
        reasoning=reasoning,
        cache_read=read,
        cache_write=write,
        total=total,
        estimated=True if estimated else None,
    )
