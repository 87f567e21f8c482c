"""Prompt caching of the conversation, through the real AsyncAnthropic client (and its
Vertex AI one) against the loopback Messages API, which bills cache writes and reads as
the API does: where the breakpoints go, that there are never more than 4, that the
prefix stays byte-identical from turn to turn, and what the declaration refuses."""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterator, Mapping
from typing import Any

import anthropic
import pytest

import satsuma
from satsuma import AgentDefinitionError, AnthropicModel, TokenBudget, tool
from satsuma.testing import MessagesServer, Reply


@tool
async def fetch(page: int) -> str:
    """Fetch a page of the log."""
    return f"page {page}: " + "log line. " * 200


SYSTEM = "You read logs. " * 40


class Reader(satsuma.Agent):
    name = "cache_reader"
    system = SYSTEM
    tools = [fetch]


def script(exchanges: int) -> list[Reply]:
    """Each exchange: two tool calls, then an answer."""
    out: list[Reply] = []
    for n in range(exchanges):
        out += [
            Reply(tool_calls=[("fetch", {"page": 2 * n})]),
            Reply(tool_calls=[("fetch", {"page": 2 * n + 1})]),
            Reply(text=f"answer {n}"),
        ]
    return out


def markers(body: Mapping[str, Any]) -> Iterator[Mapping[str, Any]]:
    """Every cache_control in a request body."""
    if "cache_control" in body:
        yield body["cache_control"]
    for key in ("tools", "system"):
        for block in body.get(key, []):
            if "cache_control" in block:
                yield block["cache_control"]
    for message in body["messages"]:
        for block in message["content"]:
            if "cache_control" in block:
                yield block["cache_control"]


def unmarked(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: unmarked(v) for k, v in value.items() if k != "cache_control"}
    if isinstance(value, list):
        return [unmarked(item) for item in value]
    return value


def prefix_text(body: Mapping[str, Any], messages: int) -> str:
    """The JSON of what a request sends before its ``messages``-th message, in the key
    order sent, without breakpoints (the billing compares prefixes this way)."""
    head = {"tools": body.get("tools"), "system": body.get("system")}
    return json.dumps(unmarked({**head, "messages": body["messages"][:messages]}))


async def converse(
    agent_class: type[satsuma.Agent], server: MessagesServer, runs: int
) -> list[Any]:
    results = []
    async with satsuma.open_agent(agent_class, model=AnthropicModel(server.client())) as agent:
        for n in range(runs):
            results.append(await agent.run(f"question {n}"))
    return results


async def test_the_breakpoint_moves_with_the_conversation_and_the_cache_serves_it() -> None:
    async with MessagesServer(script(4)) as server:
        server.prompt_cache.min_tokens = 100
        results = await converse(Reader, server, 4)
        bodies = server.requests
    assert len(bodies) == 12
    for n, body in enumerate(bodies):
        found = list(markers(body))
        assert len(found) <= 4, (n, found)
        # The API's automatic breakpoint (the last block), plus system and tools.
        assert body["cache_control"] == {"type": "ephemeral"}
        assert body["system"][-1]["cache_control"] == {"type": "ephemeral"}
        assert body["tools"][-1]["cache_control"] == {"type": "ephemeral"}
        if n > 0:
            # The end of the previous request carries one too (it reads that entry).
            previous = len(bodies[n - 1]["messages"])
            assert "cache_control" in body["messages"][previous - 1]["content"][-1]
            # Byte for byte, the previous request is where this one begins.
            assert prefix_text(body, previous) == prefix_text(bodies[n - 1], previous)
    # And so the API reads it back: every call after the first reads most of its input.
    usage = [result.usage for result in results]
    assert usage[0].cache_creation_input_tokens > 0
    for later in usage[1:]:
        assert (
            later.cache_read_input_tokens > later.input_tokens + later.cache_creation_input_tokens
        )


async def test_cache_none_sends_no_breakpoint() -> None:
    class Uncached(Reader):
        name = "cache_none"
        cache = None

    async with MessagesServer(script(2)) as server:
        results = await converse(Uncached, server, 2)
        bodies = server.requests
    assert all("cache_control" not in json.dumps(body) for body in bodies)
    assert all(r.usage.cache_read_input_tokens == 0 for r in results)


async def test_an_hour_long_cache_marks_every_breakpoint_for_an_hour() -> None:
    class Hour(Reader):
        name = "cache_hour"
        cache = "1h"

    async with MessagesServer(script(2)) as server:
        server.prompt_cache.min_tokens = 100
        results = await converse(Hour, server, 2)
        bodies = server.requests
    for body in bodies:
        found = list(markers(body))
        assert found and all(m == {"type": "ephemeral", "ttl": "1h"} for m in found)
        assert len(found) <= 4
    assert results[1].usage.cache_read_input_tokens > 0


async def test_on_vertex_the_breakpoints_are_on_blocks() -> None:
    async with MessagesServer(script(2)) as server:
        client = anthropic.AsyncAnthropicVertex(
            region="us-east5",
            project_id="p",
            access_token="token",
            base_url=f"{server.base_url}/v1",
            max_retries=0,
        )
        async with client, satsuma.open_agent(Reader, model=AnthropicModel(client)) as agent:
            for n in range(2):
                await agent.run(f"question {n}")
        bodies = server.requests
    assert len(bodies) == 6
    for n, body in enumerate(bodies):
        assert "cache_control" not in body  # Vertex takes no automatic breakpoint
        assert body["messages"][-1]["content"][-1]["cache_control"] == {"type": "ephemeral"}
        assert len(list(markers(body))) <= 4
        if n > 0:
            previous = len(bodies[n - 1]["messages"])
            assert "cache_control" in body["messages"][previous - 1]["content"][-1]


async def test_a_trimmed_conversation_keeps_its_prefix_between_cuts() -> None:
    class Trimmed(Reader):
        name = "cache_trimmed"
        history = TokenBudget(16_000)

    async with MessagesServer(script(30), keep_requests=None) as server:
        server.prompt_cache.min_tokens = 100
        await converse(Trimmed, server, 30)
        bodies = server.requests
    firsts = [json.dumps(unmarked(body["messages"][0])) for body in bodies]
    cuts = sum(1 for a, b in itertools.pairwise(firsts) if a != b)
    assert cuts >= 2
    assert cuts * 5 <= len(bodies) // 3, cuts  # at most once every 5 exchanges
    tokens = [len(json.dumps(body)) / 4 for body in bodies]
    assert max(tokens) <= 16_000  # the loopback counts 4 characters a token


def declare(**attributes: Any) -> type[satsuma.Agent]:
    return type("Bad", (satsuma.Agent,), {"name": "bad", **attributes})


@pytest.mark.parametrize("bad", ["2h", "5m", True, 1, ""])
def test_a_bad_cache_setting_is_refused_when_the_class_is_declared(bad: object) -> None:
    with pytest.raises(AgentDefinitionError, match='cache must be "auto", "1h" or None'):
        declare(cache=bad)


async def test_a_system_prompt_that_changes_between_runs_is_warned_about() -> None:
    def agent_class(prompt: str) -> type[satsuma.Agent]:
        # A class declared per request, its system prompt stamped with the time.
        class Stamped(satsuma.Agent):
            name = "cache_stamped"
            system = prompt

        return Stamped

    async with MessagesServer(["a", "b", "c"]) as server:
        await converse(agent_class("It is 10:00."), server, 1)
        await converse(agent_class("It is 10:00."), server, 1)  # the same: no warning
        with pytest.warns(UserWarning, match="cache_stamped.*system prompt changed"):
            await converse(agent_class("It is 10:05."), server, 1)
