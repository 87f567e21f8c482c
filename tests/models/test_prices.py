"""Prices and cost: ModelPrices' checks, the table's names for a model, set_prices, and
the cost of real calls, billed by the loopback servers through the real SDK clients."""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import Any

import attrs
import pytest

import satsuma
from satsuma.models import AnthropicModel, OpenAIModel, prices_for
from satsuma.models._prices import PRICES, price_key, priced
from satsuma.testing import ChatCompletionsServer, MessagesServer, Reply

HAIKU = PRICES["claude-haiku-4-5"]
# Long enough that the system prompt and the tools pass the lowered minimum to be cached.
SYSTEM = "You help with sums. " * 40


@pytest.fixture(autouse=True)
def _no_overrides() -> Iterator[None]:
    """Each test sets its own prices; none outlives it."""
    yield
    for model in ("claude-haiku-4-5", "openai:my-llama", "sonnet"):
        satsuma.set_prices(model, None)


def expected_cost(usage: satsuma.Usage, prices: satsuma.ModelPrices) -> float:
    return (
        usage.input_tokens * prices.input
        + usage.output_tokens * prices.output
        + usage.cache_creation_input_tokens * prices.cache_write
        + usage.cache_read_input_tokens * prices.cache_read
    ) / 1_000_000


class Summer(satsuma.Agent):
    name = "summer"
    model = "claude-haiku-4-5"
    system = SYSTEM


async def run_turns(
    agent: type[satsuma.Agent], model: Any, prompts: list[str]
) -> tuple[list[satsuma.Usage], list[satsuma.RunResult]]:
    """Run ``prompts`` in one conversation; the usage of each call, and each run's result."""
    calls: list[satsuma.Usage] = []
    results = []
    async with satsuma.open_agent(agent, model=model) as handle:
        for prompt in prompts:
            results.append(
                await handle.run(
                    prompt,
                    events=lambda e: (
                        calls.append(e.usage) if isinstance(e, satsuma.TurnEnd) else None
                    ),
                )
            )
    return calls, results


# --- ModelPrices ----------------------------------------------------------------------


@pytest.mark.parametrize(
    "field", ["input", "output", "cache_write", "cache_write_1h", "cache_read"]
)
@pytest.mark.parametrize("bad", [-0.01, math.nan, math.inf])
def test_a_price_that_makes_no_sense_is_refused_naming_its_field(field: str, bad: float) -> None:
    given: dict[str, Any] = {"input": 3, "output": 15, field: bad}
    with pytest.raises(
        ValueError, match=rf"^ModelPrices\.{field} must be a finite number .* got: {bad!r}"
    ):
        satsuma.ModelPrices(**given)


def test_a_price_that_is_no_number_is_refused_naming_its_field() -> None:
    with pytest.raises(TypeError, match=r"ModelPrices\.output must be a number .* got: '15'"):
        satsuma.ModelPrices(input=3, output="15")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"ModelPrices\.input"):
        satsuma.ModelPrices(input=True, output=1)


def test_cache_prices_default_to_the_input_price() -> None:
    prices = satsuma.ModelPrices(input=0.5, output=1.5)
    assert (prices.cache_write, prices.cache_write_1h, prices.cache_read) == (0.5, 0.5, 0.5)
    assert satsuma.ModelPrices(input=1, output=2, cache_write=3).cache_write_1h == 3


def test_claude_prices_follow_anthropics_multipliers() -> None:
    assert (HAIKU.input, HAIKU.output) == (1, 5)
    assert HAIKU.cache_write == pytest.approx(1.25)
    assert HAIKU.cache_write_1h == pytest.approx(2)
    assert HAIKU.cache_read == pytest.approx(0.1)


# --- names ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "name",
    [
        "claude-haiku-4-5",
        "claude-haiku-4-5-20251001",
        "bedrock:anthropic.claude-haiku-4-5-20251001-v1:0",
        "us.anthropic.claude-haiku-4-5-20251001-v1:0",
        "vertex:claude-haiku-4-5@20251001",
    ],
)
def test_a_model_is_priced_by_its_family_under_every_name(name: str) -> None:
    assert price_key(name) == "claude-haiku-4-5"
    assert prices_for(name) == HAIKU


def test_aliases_dated_openai_ids_and_unknown_models() -> None:
    assert prices_for("sonnet") == PRICES[satsuma.MODEL_ALIASES["sonnet"]]
    assert prices_for("claude-opus-4-0") == PRICES["claude-opus-4"]
    assert prices_for("openai:gpt-4o-2024-08-06") == PRICES["gpt-4o"]
    assert prices_for("openai:llama3") is None
    assert prices_for("claude-unknown-9") is None


def test_set_prices_overrides_the_family_and_none_restores_the_table() -> None:
    mine = satsuma.ModelPrices(input=1, output=2)
    satsuma.set_prices("claude-haiku-4-5-20251001", mine)
    assert prices_for("claude-haiku-4-5") == mine
    assert prices_for("vertex:claude-haiku-4-5@20251001") == mine
    satsuma.set_prices("claude-haiku-4-5", None)
    assert prices_for("claude-haiku-4-5") == HAIKU
    satsuma.set_prices("openai:my-llama", mine)
    assert prices_for("openai:my-llama") == mine
    satsuma.set_prices("openai:my-llama", None)
    assert prices_for("openai:my-llama") is None


def test_set_prices_refuses_what_is_not_a_model_and_prices() -> None:
    with pytest.raises(TypeError, match="set_prices: model must be a model string, got: 3"):
        satsuma.set_prices(3, satsuma.ModelPrices(input=1, output=1))  # type: ignore[arg-type]
    with pytest.raises(
        TypeError, match=r"set_prices: prices must be a ModelPrices or None, got: \{"
    ):
        satsuma.set_prices("sonnet", {"input": 1})  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="set_prices: '' names no model"):
        satsuma.set_prices("", satsuma.ModelPrices(input=1, output=1))


# --- sums -----------------------------------------------------------------------------


def test_a_sum_is_unknown_once_a_call_of_unknown_cost_is_in_it() -> None:
    known = satsuma.Usage(input_tokens=10, cost_usd=0.25)
    unknown = satsuma.Usage(input_tokens=10)
    assert (satsuma.Usage() + known).cost_usd == 0.25
    assert (known + known).cost_usd == 0.5
    assert (known + unknown).cost_usd is None
    assert (unknown + known).cost_usd is None
    assert (satsuma.Usage() + unknown).cost_usd is None
    assert (satsuma.Usage() + satsuma.Usage()).cost_usd is None


# --- real calls -----------------------------------------------------------------------


async def test_calls_and_runs_cost_what_the_server_billed_cache_writes_and_reads_included() -> None:
    async with MessagesServer(["Three.", "Seven."]) as server:
        server.prompt_cache.min_tokens = 8
        calls, results = await run_turns(
            Summer, AnthropicModel(server.client()), ["1 + 2?", "3 + 4?"]
        )
    first, second = calls
    # The first call writes the system prompt to the cache, the second reads it back.
    assert first.cache_creation_input_tokens > 0
    assert second.cache_read_input_tokens > 0
    for usage in calls:
        assert usage.cost_usd == pytest.approx(expected_cost(usage, HAIKU))
    assert [result.usage.cost_usd for result in results] == [first.cost_usd, second.cost_usd]
    assert server.requests[0]["model"] == "claude-haiku-4-5"


async def test_a_dated_id_an_alias_and_an_override_price_real_calls() -> None:
    class Dated(Summer):
        model = "claude-haiku-4-5-20251001"

    class Aliased(Summer):
        model = "sonnet"

    async with MessagesServer(["One.", "Two.", "Three."]) as server:
        model = AnthropicModel(server.client())
        (dated,), _ = await run_turns(Dated, model, ["go"])
        (aliased,), _ = await run_turns(Aliased, model, ["go"])
        mine = satsuma.ModelPrices(input=100, output=1000)
        satsuma.set_prices("claude-haiku-4-5", mine)
        (overridden,), _ = await run_turns(Dated, model, ["go"])
    assert dated.cost_usd == pytest.approx(expected_cost(dated, HAIKU))
    assert aliased.cost_usd == pytest.approx(
        expected_cost(aliased, PRICES[satsuma.MODEL_ALIASES["sonnet"]])
    )
    assert overridden.cost_usd == pytest.approx(expected_cost(overridden, mine))
    assert overridden.cost_usd != pytest.approx(expected_cost(overridden, HAIKU))


async def test_an_unknown_model_costs_none_in_its_calls_and_its_run() -> None:
    class Unknown(Summer):
        model = "claude-unknown-9"

    async with MessagesServer([Reply(tool_calls=[("nothing", {})]), "Done."]) as server:
        calls, (result,) = await run_turns(Unknown, AnthropicModel(server.client()), ["go"])
    assert len(calls) == 2
    assert all(usage.input_tokens > 0 and usage.cost_usd is None for usage in calls)
    assert result.usage.input_tokens > 0
    assert result.usage.cost_usd is None


async def test_the_openai_compatible_path_prices_known_models_and_not_local_ones() -> None:
    class Gpt(satsuma.Agent):
        name = "gpt"
        model = "openai:gpt-4o"

    class Llama(satsuma.Agent):
        name = "llama"
        model = "openai:my-llama"

    async with ChatCompletionsServer(["Hi.", "Hi.", "Hi."]) as server:
        model = OpenAIModel(server.client())
        (gpt,), _ = await run_turns(Gpt, model, ["hello"])
        (llama,), _ = await run_turns(Llama, model, ["hello"])
        satsuma.set_prices("openai:my-llama", satsuma.ModelPrices(input=0.1, output=0.2))
        (priced_llama,), (result,) = await run_turns(Llama, model, ["hello"])
    assert gpt.input_tokens > 0
    assert gpt.cost_usd == pytest.approx(expected_cost(gpt, PRICES["gpt-4o"]))
    assert llama.cost_usd is None
    assert priced_llama.cost_usd == pytest.approx(
        (priced_llama.input_tokens * 0.1 + priced_llama.output_tokens * 0.2) / 1_000_000
    )
    assert result.usage.cost_usd == priced_llama.cost_usd


# --- the table follows genai-prices ----------------------------------------------------


@pytest.mark.parametrize("model", sorted(PRICES))
def test_the_table_agrees_with_genai_prices(model: str) -> None:
    """satsuma's table is its own (see models/_prices.py), checked against the
    genai-prices that the benchmarks' group pins: a price that moves there fails here,
    and the row is updated by hand. Priced on 1,000 tokens, below any long-context tier."""
    import genai_prices

    provider = "openai" if not model.startswith("claude-") else "anthropic"
    prices = PRICES[model]

    def theirs(**tokens: int) -> float:
        usage = genai_prices.Usage(**tokens)  # type: ignore[arg-type]
        return float(genai_prices.calc_price(usage, model, provider_id=provider).total_price)

    assert theirs(input_tokens=1000) * 1000 == pytest.approx(prices.input)
    assert theirs(output_tokens=1000) * 1000 == pytest.approx(prices.output)
    assert theirs(input_tokens=1000, cache_read_tokens=1000) * 1000 == pytest.approx(
        prices.cache_read
    )
    assert theirs(input_tokens=1000, cache_write_tokens=1000) * 1000 == pytest.approx(
        prices.cache_write
    )


# --- the hour's cache writes -----------------------------------------------------------


def test_writes_for_an_hour_cost_the_hours_price_and_the_rest_the_five_minutes() -> None:
    usage = satsuma.Usage(
        input_tokens=1000,
        output_tokens=100,
        cache_creation_input_tokens=3000,
        cache_creation_1h_input_tokens=2000,
        cache_read_input_tokens=10_000,
    )
    assert HAIKU.cost(usage) == pytest.approx(
        (1000 * 1 + 100 * 5 + 1000 * 1.25 + 2000 * 2 + 10_000 * 0.1) / 1_000_000
    )


async def test_a_call_that_wrote_for_an_hour_is_priced_so_through_the_real_client() -> None:
    written = satsuma.Usage(
        input_tokens=50, output_tokens=10, cache_creation_input_tokens=400,
        cache_creation_1h_input_tokens=300,
    )  # fmt: skip
    async with MessagesServer([Reply(text="Hi.", usage=written)]) as server:
        (usage,), (result,) = await run_turns(Summer, AnthropicModel(server.client()), ["go"])
    # The API's split (cache_creation.ephemeral_1h_input_tokens) reached the usage.
    assert usage.cache_creation_1h_input_tokens == 300
    assert usage.cost_usd == pytest.approx((50 * 1 + 10 * 5 + 100 * 1.25 + 300 * 2) / 1_000_000)
    assert result.usage.cache_creation_1h_input_tokens == 300
    assert result.usage.cost_usd == usage.cost_usd


def test_priced_keeps_every_field_of_the_usage_and_sets_only_its_cost() -> None:
    # priced builds the Usage field by field (no attrs.evolve, on every turn): a field
    # added to Usage and not copied there would be lost, and this fails.
    counts = {
        field.name: index + 1 for index, field in enumerate(attrs.fields(satsuma.Usage))
        if field.name != "cost_usd"
    }  # fmt: skip
    usage = satsuma.Usage(**counts)
    out = priced(usage, "claude-sonnet-4-5")
    prices = prices_for("claude-sonnet-4-5")
    assert prices is not None
    assert out == attrs.evolve(usage, cost_usd=prices.cost(usage))
    assert out.cost_usd is not None and out.cost_usd > 0
    assert priced(usage, "local-model-nobody-prices") is usage
