"""What a model's tokens cost: ``ModelPrices``, the table of known models' prices,
``set_prices`` to override it, and the pricing of a call's usage.

The table is satsuma's own rather than the ``genai-prices`` package's: that package
carries pydantic and a 1.6 MB data module (about 0.3 s to import) and updates itself
from GitHub on a thread, where satsuma needs a dozen rows, read offline, on trio. The
rows are its figures (base prices, before the long-context tiers), and a test checks
them against the version pinned for the benchmarks, so that the table follows it.

Model names are matched as a family, the way the APIs name one model: an alias
(``sonnet``), the id (``claude-sonnet-4-5``), its dated snapshots
(``claude-sonnet-4-5-20250929``) and its names on Bedrock
(``us.anthropic.claude-sonnet-4-5-20250929-v1:0``) and Vertex AI
(``claude-sonnet-4-5@20250929``) all find the same prices.
"""

from __future__ import annotations

import functools
import math
import re
from collections.abc import Mapping
from typing import Final

import attrs

from .._messages import Usage
from ._aliases import MODEL_ALIASES

__all__ = [
    "PRICES",
    "ModelPrices",
    "price_key",
    "priced",
    "prices_for",
    "set_prices",
    "with_compaction",
]

_MILLION: Final = 1_000_000


def _check_price(instance: ModelPrices, attribute: attrs.Attribute[float], value: float) -> None:
    """Refuse a price that makes no sense, naming the field (attrs runs this per field)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(
            f"ModelPrices.{attribute.name} must be a number of USD per million tokens, "
            f"got: {value!r}"
        )
    if not math.isfinite(value) or value < 0:
        raise ValueError(
            f"ModelPrices.{attribute.name} must be a finite number of USD per million "
            f"tokens, 0 or more, got: {value!r}"
        )


@attrs.frozen(kw_only=True)
class ModelPrices:
    """A model's prices, in US dollars per million tokens.

    Give them to ``satsuma.set_prices`` for a model the table does not know (a model
    served on an OpenAI-compatible endpoint) or prices it does not have (a negotiated
    rate). The cache prices default to the input price: a provider that neither charges
    more to write its cache nor less to read it (the OpenAI-compatible endpoints bill a
    cache write as input).

    Attributes:
        input: Input tokens neither written to nor read from the cache.
        output: Output tokens.
        cache_write: Input tokens written to the cache for 5 minutes (Anthropic: 1.25
            times ``input``).
        cache_write_1h: Input tokens written for an hour (Anthropic: 2 times ``input``).
        cache_read: Input tokens read from the cache (Anthropic: 0.1 times ``input``).

    Raises:
        ValueError: A price is negative, NaN or infinite; the message names the field.
        TypeError: A price is not a number.
    """

    input: float = attrs.field(validator=_check_price)
    output: float = attrs.field(validator=_check_price)
    cache_write: float = attrs.field(validator=_check_price)
    cache_write_1h: float = attrs.field(validator=_check_price)
    cache_read: float = attrs.field(validator=_check_price)

    @cache_write.default
    def _cache_write(self) -> float:
        return self.input

    @cache_write_1h.default
    def _cache_write_1h(self) -> float:
        return self.cache_write

    @cache_read.default
    def _cache_read(self) -> float:
        return self.input

    def cost(self, usage: Usage) -> float:
        """What ``usage`` costs at these prices, in US dollars: cache writes at the hour's
        price for those written for an hour, at the 5 minutes' for the rest."""
        hour = min(usage.cache_creation_1h_input_tokens, usage.cache_creation_input_tokens)
        return (
            usage.input_tokens * self.input
            + usage.output_tokens * self.output
            + (usage.cache_creation_input_tokens - hour) * self.cache_write
            + hour * self.cache_write_1h
            + usage.cache_read_input_tokens * self.cache_read
        ) / _MILLION


def _anthropic(input: float, output: float) -> ModelPrices:
    """A Claude model's prices, from its input and output prices as Anthropic's price
    list derives the rest: 5-minute writes 1.25x, 1-hour writes 2x, reads 0.1x input."""
    return ModelPrices(
        input=input,
        output=output,
        cache_write=input * 1.25,
        cache_write_1h=input * 2,
        cache_read=input / 10,
    )


def _openai(input: float, output: float, cache_read: float) -> ModelPrices:
    """An OpenAI model's prices: cache writes cost as input, reads are discounted."""
    return ModelPrices(input=input, output=output, cache_read=cache_read)


PRICES: Final[dict[str, ModelPrices]] = {
    # Anthropic's models the pinned SDK lists (on its API; Bedrock's and Vertex AI's
    # global endpoints charge the same), then earlier ones still served.
    "claude-opus-5-5": ModelPrices(input=4, output=20, cache_write=5, cache_write_1h=8, cache_read=0.2),
    "claude-sonnet-5-5": ModelPrices(input=2, output=10, cache_write=2.5, cache_write_1h=4, cache_read=0.1),
    "claude-haiku-5-5": ModelPrices(input=0.1, output=0.5, cache_write=0.125, cache_write_1h=0.2, cache_read=0.01),
    "claude-opus-5": _anthropic(5, 25),
    "claude-sonnet-5": _anthropic(2, 10),
    "claude-opus-4-8": _anthropic(5, 25),
    "claude-opus-4-7": _anthropic(5, 25),
    "claude-opus-4-6": _anthropic(5, 25),
    "claude-opus-4-5": _anthropic(5, 25),
    "claude-sonnet-4-6": _anthropic(3, 15),
    "claude-sonnet-4-5": _anthropic(3, 15),
    "claude-haiku-4-5": _anthropic(1, 5),
    "claude-opus-4-1": _anthropic(15, 75),
    "claude-opus-4": _anthropic(15, 75),
    "claude-sonnet-4": _anthropic(3, 15),
    "claude-3-7-sonnet": _anthropic(3, 15),
    "claude-3-5-haiku": _anthropic(0.8, 4),
    "claude-3-haiku": ModelPrices(input=0.25, output=1.25, cache_write=0.3, cache_write_1h=0.5, cache_read=0.03),
    # OpenAI's, for the OpenAI-compatible path on OpenAI's own endpoint.
    "gpt-5.1": _openai(1.25, 10, 0.125),
    "gpt-5": _openai(1.25, 10, 0.125),
    "gpt-5-mini": _openai(0.25, 2, 0.025),
    "gpt-5-nano": _openai(0.05, 0.4, 0.005),
    "gpt-4.1": _openai(2, 8, 0.5),
    "gpt-4.1-mini": _openai(0.4, 1.6, 0.1),
    "gpt-4.1-nano": _openai(0.1, 0.4, 0.025),
    "gpt-4o": _openai(2.5, 10, 1.25),
    "gpt-4o-mini": _openai(0.15, 0.6, 0.075),
    "o3": _openai(2, 8, 0.5),
    "o4-mini": _openai(1.1, 4.4, 0.275),
}  # fmt: skip
"""The prices satsuma knows, by model family (see ``price_key``)."""

_overrides: dict[str, ModelPrices] = {}

# What a name carries beside its family, stripped in this order: the provider's prefix
# (openai:, bedrock:, vertex:), Bedrock's region and vendor (us.anthropic.) and version
# (-v1:0), Vertex AI's snapshot (@20250929), a dated snapshot (-20250929,
# -2024-08-06), -latest and the -0 of claude-opus-4-0.
_PREFIX: Final = re.compile(r"^(?:openai|bedrock|vertex|anthropic):")
_BEDROCK: Final = re.compile(r"^(?:(?:us|eu|apac|au|jp|global)\.)?anthropic\.|-v\d+(?::\d+)?$")
_SNAPSHOT: Final = re.compile(r"(?:@[\w-]+|-\d{8}|-\d{4}-\d{2}-\d{2}|-latest|(?<=-\d)-0)$")


# Every model call prices its usage by one or two names: three regular expressions each,
# for the handful of names a process uses (bounded: names may come from requests).
@functools.lru_cache(maxsize=256)
def price_key(model: str) -> str:
    """The family a model name prices as: ``claude-sonnet-4-5`` for the alias, every
    dated snapshot and the Bedrock and Vertex AI names of that model."""
    name = MODEL_ALIASES.get(model, model).lower()
    name = _PREFIX.sub("", name)
    name = _BEDROCK.sub("", name)
    return _SNAPSHOT.sub("", name)


def set_prices(model: str, prices: ModelPrices | None) -> None:
    """Set the prices of a model for this process, over the table's.

    Every call of the model prices its usage with them from then on (``Usage.cost_usd``),
    in every agent of the process. The model is named as agents name it, and its whole
    family takes the prices: ``set_prices("claude-sonnet-4-5", ...)`` holds for
    ``claude-sonnet-4-5-20250929`` and for that model on Bedrock and Vertex AI too.

    Args:
        model: A model string (``sonnet``, ``claude-sonnet-4-5``, ``openai:my-llama``).
        prices: The prices, or None to go back to the table's (none for a model it does
            not know: its cost is unknown again).

    Raises:
        TypeError: ``model`` is not a str, or ``prices`` not a ModelPrices or None.
        ValueError: ``model`` is empty.
    """
    if not isinstance(model, str):
        raise TypeError(f"set_prices: model must be a model string, got: {model!r}")
    if prices is not None and not isinstance(prices, ModelPrices):
        raise TypeError(f"set_prices: prices must be a ModelPrices or None, got: {prices!r}")
    key = price_key(model)
    if not key:
        raise ValueError(f"set_prices: {model!r} names no model")
    if prices is None:
        _overrides.pop(key, None)
    else:
        _overrides[key] = prices


def prices_for(model: str) -> ModelPrices | None:
    """The prices a model's calls are charged: set by ``set_prices``, else the table's;
    None for a model neither knows."""
    key = price_key(model)
    return _overrides.get(key) or PRICES.get(key)


def priced(usage: Usage, *models: str) -> Usage:
    """``usage`` with its cost, at the prices of the first of ``models`` that has some
    (the model asked for, then the one that answered); its cost None if none has."""
    for model in models:
        prices = prices_for(model)
        if prices is not None:
            # Built field by field, not by attrs.evolve (a dozen calls, on every turn);
            # tests/models check that every field of Usage is kept.
            return Usage(
                input_tokens=usage.input_tokens,
                output_tokens=usage.output_tokens,
                cache_creation_input_tokens=usage.cache_creation_input_tokens,
                cache_read_input_tokens=usage.cache_read_input_tokens,
                cache_creation_1h_input_tokens=usage.cache_creation_1h_input_tokens,
                cost_usd=prices.cost(usage),
            )
    return usage


def with_compaction(usage: Usage, steps: Mapping[str, int] | None, *models: str) -> Usage:
    """``usage`` with the cost of the API's server-side compaction steps (``steps``:
    their summed tokens, which the usage's counts leave out) added to its cost. The
    counts stay the request's own, which the next request's estimate is calibrated on."""
    if steps is None or usage.cost_usd is None:
        return usage
    step = priced(Usage(**steps), *models)
    if step.cost_usd is None:
        return usage
    return attrs.evolve(usage, cost_usd=usage.cost_usd + step.cost_usd)
