"""FakeModel bills the prompt cache as MessagesServer bills the same request sent by an
AnthropicModel: the same usage, turn by turn, offline."""

from __future__ import annotations

import itertools
from typing import Any

import attrs
import pytest

import satsuma
from satsuma.models import AnthropicModel, ModelRequest
from satsuma.testing import FakeModel, MessagesServer, fake_reply


@satsuma.tool
async def add(a: int, b: int) -> str:
    """Add two numbers.

    Args:
        a: First.
        b: Second.
    """
    return str(a + b)


class Clerk(satsuma.Agent):
    name = "clerk"
    system = "You are a careful clerk. " * 40
    tools = [add]


class Plain(Clerk):
    name = "plain"
    cache = None


PROMPTS = [f"note {n}: " + "the ledger balances. " * 8 for n in range(9)] + ["use add"]


def _tokens(usage: satsuma.Usage) -> tuple[int, int, int, int, int]:
    return (
        usage.input_tokens,
        usage.output_tokens,
        usage.cache_creation_input_tokens,
        usage.cache_read_input_tokens,
        usage.cache_creation_1h_input_tokens,
    )


async def _conversation(model: Any, agent: type[satsuma.Agent]) -> list[satsuma.Usage]:
    usages = []
    async with satsuma.open_agent(agent, model=model) as handle:
        for prompt in PROMPTS:
            result = await handle.run(prompt)
            assert result.status == "completed"
            usages.append(result.usage)
    return usages


async def test_the_fake_bills_ten_turns_as_the_messages_server_does() -> None:
    def answer(body: dict[str, Any]) -> Any:
        return fake_reply(body["messages"], body.get("tools", []))

    fake = FakeModel()
    fake.prompt_cache.min_tokens = 200
    offline = await _conversation(fake, Clerk)
    async with MessagesServer(then=answer) as server, server.client() as client:
        server.prompt_cache.min_tokens = 200
        online = await _conversation(AnthropicModel(client), Clerk)
    assert [_tokens(u) for u in offline] == [_tokens(u) for u in online]
    # The first turn writes the prefix; every later one reads what the turn before wrote.
    assert offline[0].cache_creation_input_tokens > 0
    assert offline[0].cache_read_input_tokens == 0
    for before, usage in itertools.pairwise(offline):
        assert usage.cache_read_input_tokens > before.cache_read_input_tokens
    # The last turn calls a tool: two calls, the second reading what the first wrote.
    assert fake.request_count == 11


async def test_an_hour_s_cache_bills_its_writes_for_an_hour() -> None:
    class Hourly(Clerk):
        cache = "1h"

    fake = FakeModel()
    fake.prompt_cache.min_tokens = 200
    usages = await _conversation(fake, Hourly)
    assert usages[0].cache_creation_1h_input_tokens == usages[0].cache_creation_input_tokens > 0
    assert all(u.cache_read_input_tokens > 0 for u in usages[1:])


async def test_without_a_cache_nothing_is_read_or_written() -> None:
    fake = FakeModel()
    fake.prompt_cache.min_tokens = 1
    for usage in await _conversation(fake, Plain):
        assert usage.input_tokens > 0
        assert usage.cache_creation_input_tokens == 0
        assert usage.cache_read_input_tokens == 0


@attrs.define
class _Listener:
    """Without deltas wanted, AnthropicModel asks for the answer whole, else streamed."""

    wants_deltas: bool

    def text(self, delta: str) -> None:
        pass

    def thinking(self, delta: str) -> None:
        pass

    def retry(self, attempt: int, delay: float, reason: str) -> None:
        pass


@pytest.mark.parametrize("streamed", [False, True])
async def test_a_request_bills_as_the_server_bills_it_whole_or_streamed(streamed: bool) -> None:
    request = ModelRequest(
        model="claude-test-1",
        system="You are a careful clerk. " * 40,
        messages=(satsuma.Message(role="user", content=({"type": "text", "text": "hello"},)),),
        max_tokens=100,
    )

    def answer(body: dict[str, Any]) -> Any:
        assert body.get("stream", False) is streamed
        return fake_reply(body["messages"], body.get("tools", []))

    fake = FakeModel()
    fake.prompt_cache.min_tokens = 100
    offline = [await fake.respond(request, _Listener(streamed)) for _ in range(2)]
    async with MessagesServer(then=answer) as server, server.client() as client:
        server.prompt_cache.min_tokens = 100
        model = AnthropicModel(client)
        online = [await model.respond(request, _Listener(streamed)) for _ in range(2)]
    assert [_tokens(r.usage) for r in offline] == [_tokens(r.usage) for r in online]
    assert offline[1].usage.cache_read_input_tokens > 0
