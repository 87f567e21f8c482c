"""MessagesServer bills prompt caching as the API does: breakpoints, the 20-block
lookback, the minimum prefix, both lifetimes, automatic caching, and a prefix that
changes by a byte. Through the real AsyncAnthropic client."""

from __future__ import annotations

from typing import Any

import pytest
import trio
import trio.testing

import satsuma
from satsuma.testing import MessagesServer, Reply
from satsuma.testing._billing import PromptCache

SYSTEM = "You are a careful assistant. " * 40  # 1,160 characters: about 290 tokens
EPHEMERAL: dict[str, Any] = {"type": "ephemeral"}
HOUR: dict[str, Any] = {"type": "ephemeral", "ttl": "1h"}


def _usage(message: Any) -> tuple[int, int, int]:
    usage = message.usage
    return usage.input_tokens, usage.cache_creation_input_tokens, usage.cache_read_input_tokens


async def _ask(client: Any, system: Any, messages: list[dict[str, Any]], **extra: Any) -> Any:
    return await client.messages.create(
        model="claude-test", max_tokens=64, system=system, messages=messages, **extra
    )


def _cached_system(marker: dict[str, Any] = EPHEMERAL) -> list[dict[str, Any]]:
    return [{"type": "text", "text": SYSTEM, "cache_control": marker}]


async def test_a_prefix_is_written_once_then_read() -> None:
    async with MessagesServer(then=lambda _: "ok") as server, server.client() as client:
        server.prompt_cache.min_tokens = 100
        first = await _ask(client, _cached_system(), [{"role": "user", "content": "one"}])
        second = await _ask(client, _cached_system(), [{"role": "user", "content": "two"}])
    input_1, written_1, read_1 = _usage(first)
    input_2, written_2, read_2 = _usage(second)
    assert written_1 > 250 and read_1 == 0
    assert (written_2, read_2) == (0, written_1)
    # The same request size, billed differently: what was read is not input again.
    assert input_1 + written_1 == input_2 + read_2
    assert first.usage.cache_creation.ephemeral_5m_input_tokens == written_1


async def test_a_request_without_breakpoints_is_billed_as_before() -> None:
    async with MessagesServer(then=lambda _: "ok") as server, server.client() as client:
        server.prompt_cache.min_tokens = 1
        for _ in range(2):
            message = await _ask(client, SYSTEM, [{"role": "user", "content": "hi"}])
            assert _usage(message)[1:] == (0, 0)
            assert message.usage.input_tokens > len(SYSTEM) // 4


async def test_a_prefix_below_the_minimum_is_not_cached() -> None:
    async with MessagesServer(then=lambda _: "ok") as server, server.client() as client:
        assert server.prompt_cache.min_tokens == 1024  # the API's minimum for most models
        for _ in range(2):
            message = await _ask(client, _cached_system(), [{"role": "user", "content": "x"}])
            assert _usage(message)[1:] == (0, 0)


@pytest.mark.parametrize(
    "change",
    [
        pytest.param(lambda text: text.replace("careful", "careless", 1), id="a word"),
        pytest.param(lambda text: text + " ", id="a trailing space"),
    ],
)
async def test_a_prefix_changed_by_a_byte_misses(change: Any) -> None:
    async with MessagesServer(then=lambda _: "ok") as server, server.client() as client:
        server.prompt_cache.min_tokens = 100
        await _ask(client, _cached_system(), [{"role": "user", "content": "one"}])
        changed = [{"type": "text", "text": change(SYSTEM), "cache_control": EPHEMERAL}]
        message = await _ask(client, changed, [{"role": "user", "content": "two"}])
    _, written, read = _usage(message)
    assert read == 0 and written > 250


async def test_keys_in_another_order_miss_as_on_the_api() -> None:
    tool = {"name": "lookup", "description": "Look up. " * 60, "input_schema": {"type": "object"}}
    reordered = {key: tool[key] for key in reversed(tool)}
    async with MessagesServer(then=lambda _: "ok") as server, server.client() as client:
        server.prompt_cache.min_tokens = 100
        for tools, expected_read in (([tool], False), ([tool], True), ([reordered], False)):
            marked = [{**tools[0], "cache_control": EPHEMERAL}]
            message = await client.messages.create(
                model="claude-test",
                max_tokens=8,
                tools=marked,
                messages=[{"role": "user", "content": "hi"}],
            )
            assert (message.usage.cache_read_input_tokens > 0) is expected_read


async def test_entries_expire_after_five_minutes_or_an_hour(
    mock_clock: trio.testing.MockClock,
) -> None:
    async with MessagesServer(then=lambda _: "ok") as server, server.client() as client:
        server.prompt_cache.min_tokens = 100
        short = _cached_system(EPHEMERAL)
        await _ask(client, short, [{"role": "user", "content": "a"}])
        mock_clock.jump(299)
        assert _usage(await _ask(client, short, [{"role": "user", "content": "b"}]))[2] > 0
        mock_clock.jump(299)  # read at 299 s: kept for 5 minutes again
        assert _usage(await _ask(client, short, [{"role": "user", "content": "c"}]))[2] > 0
        mock_clock.jump(301)
        assert _usage(await _ask(client, short, [{"role": "user", "content": "d"}]))[2] == 0

        server.prompt_cache.clear()
        long = _cached_system(HOUR)
        first = await _ask(client, long, [{"role": "user", "content": "a"}])
        assert first.usage.cache_creation.ephemeral_1h_input_tokens == _usage(first)[1] > 0
        mock_clock.jump(3000)
        assert _usage(await _ask(client, long, [{"role": "user", "content": "b"}]))[2] > 0
        mock_clock.jump(3601)
        assert _usage(await _ask(client, long, [{"role": "user", "content": "c"}]))[2] == 0


def _turns(count: int, marker_on_last: bool = True) -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = []
    for n in range(count):
        messages.append(
            {"role": "user", "content": [{"type": "text", "text": f"question {n} " * 30}]}
        )
        messages.append({"role": "assistant", "content": [{"type": "text", "text": f"answer {n}"}]})
    messages.append({"role": "user", "content": [{"type": "text", "text": "and now?"}]})
    if marker_on_last:
        last = messages[-1]["content"][-1]
        last["cache_control"] = EPHEMERAL
    return messages


async def test_a_breakpoint_moving_with_the_conversation_reads_the_last_turns_prefix() -> None:
    turn = [{"role": "user", "content": [{"type": "text", "text": "question " * 200}]}]
    async with MessagesServer(then=lambda _: "ok") as server, server.client() as client:
        server.prompt_cache.min_tokens = 100
        first = await _ask(client, SYSTEM, _marked_last(turn))
        turn += [
            {"role": "assistant", "content": [{"type": "text", "text": "ok"}]},
            {"role": "user", "content": [{"type": "text", "text": "and then? " * 50}]},
        ]
        second = await _ask(client, SYSTEM, _marked_last(turn))
    # The first request's breakpoint prefix is the second's, two blocks before its own
    # breakpoint: read, and only the two new blocks are written.
    _, written_1, _ = _usage(first)
    _, written_2, read_2 = _usage(second)
    assert read_2 == written_1 > 0
    assert 0 < written_2 < written_1


def _marked_last(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """A copy of ``messages`` with a breakpoint on the last block only."""
    copied = [{**m, "content": [dict(b) for b in m["content"]]} for m in messages]
    copied[-1]["content"][-1]["cache_control"] = EPHEMERAL
    return copied


async def test_the_lookback_stops_twenty_blocks_before_a_breakpoint() -> None:
    cache = PromptCache(min_tokens=1)
    base: dict[str, Any] = {"model": "m", "system": SYSTEM}
    user = {"role": "user", "content": [{"type": "text", "text": "more"}]}
    start = [{"role": "user", "content": [{"type": "text", "text": "first " * 100}]}]
    written = cache.bill({**base, "messages": _marked_last(start)}, 10_000, 0.0)
    assert written.cache_creation_input_tokens > 0
    # Blocks: the system (0), the first message (1), then the "more"s. The first's
    # prefix ends at block 1: a breakpoint at block 21 looks back to it, one at 22 no.
    within = cache.bill({**base, "messages": _marked_last(start + [user] * 20)}, 10_000, 1.0)
    assert within.cache_read_input_tokens == written.cache_creation_input_tokens
    cache = PromptCache(min_tokens=1)
    cache.bill({**base, "messages": _marked_last(start)}, 10_000, 0.0)
    beyond = cache.bill({**base, "messages": _marked_last(start + [user] * 21)}, 10_000, 1.0)
    assert beyond.cache_read_input_tokens == 0


async def test_a_top_level_cache_control_marks_the_last_block() -> None:
    async with MessagesServer(then=lambda _: "ok") as server, server.client() as client:
        server.prompt_cache.min_tokens = 100
        messages = _turns(2, marker_on_last=False)
        extra = {"extra_body": {"cache_control": EPHEMERAL}}
        first = await _ask(client, SYSTEM, messages, **extra)
        again = await _ask(client, SYSTEM, messages, **extra)
    assert _usage(first)[1] > 0
    assert _usage(again)[2] == _usage(first)[1]


def test_min_tokens_must_be_a_positive_int() -> None:
    for bad in (0, -5, 1.5, True, "10"):
        with pytest.raises(ValueError, match="min_tokens must be a positive int"):
            PromptCache(min_tokens=bad)  # type: ignore[arg-type]


async def test_an_agent_conversation_reads_its_system_and_tools_from_the_cache() -> None:
    @satsuma.tool
    def lookup(order: str) -> str:
        """Look an order up in the shop's records, by its number."""
        return f"order {order}: shipped"

    class Support(satsuma.Agent):
        name = "support"
        model = "claude-test"
        system = SYSTEM
        tools = [lookup]

    script = [Reply(tool_calls=[("lookup", {"order": "42"})]), "It shipped."]
    async with MessagesServer(script) as server:
        server.prompt_cache.min_tokens = 100
        model = satsuma.AnthropicModel(server.client())
        async with satsuma.open_agent(Support, model=model) as agent:
            result = await agent.run("Where is order 42?")
    assert result.status == "completed"
    assert result.usage.cache_creation_input_tokens > 0
    assert result.usage.cache_read_input_tokens > 0
