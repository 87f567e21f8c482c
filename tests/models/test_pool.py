"""The shared clients' connection pool: several small pools, each request to the least
busy one, every slot given back however the request ends (answered, refused, cut,
cancelled), and the SDK's own client behind a proxy."""

from __future__ import annotations

import functools
from typing import Any

import httpx2
import pytest
import trio

import satsuma
from satsuma import AnthropicModel
from satsuma._messages import Message
from satsuma.models import ModelRequest
from satsuma.models._clients import shared_model
from satsuma.models._pool import PER_SHARD, SHARDS, ShardedTransport
from satsuma.testing import Failure, MessagesServer, Reply

PROXY_VARIABLES = ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy")


class Chat(satsuma.Agent):
    name = "chat"
    model = "claude-test-1"


@pytest.fixture(autouse=True)
def _environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", "test-key")
    monkeypatch.delenv("ANTHROPIC_AUTH_TOKEN", raising=False)
    monkeypatch.delenv("ANTHROPIC_BASE_URL", raising=False)
    for name in PROXY_VARIABLES:
        monkeypatch.delenv(name, raising=False)


def _transport(model: AnthropicModel) -> Any:
    return model.client._client._transport


class _Quiet:
    wants_deltas = True

    def text(self, delta: str) -> None:
        pass

    def thinking(self, delta: str) -> None:
        pass

    def retry(self, attempt: int, delay: float, reason: str) -> None:
        pass


async def _create(model: AnthropicModel, text: str, *, stream: bool = False) -> str:
    """One request through satsuma's own request path, on ``model``'s client, no retries."""
    once = AnthropicModel(model.client, max_retries=0, stream=stream)
    request = ModelRequest(
        model="claude-test-1", system=None, messages=(Message.user(text),), max_tokens=100
    )
    return (await once.respond(request, _Quiet())).text


async def test_the_shared_client_spreads_requests_over_small_pools(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    count = 3 * SHARDS + 5
    arrived = 0
    all_in = trio.Event()
    seen: list[tuple[int, ...]] = []

    async def held(body: dict[str, Any]) -> str:
        nonlocal arrived
        arrived += 1
        if arrived == count:
            all_in.set()
        await all_in.wait()
        return "ok"

    async with MessagesServer([held] * count) as server:
        monkeypatch.setenv("ANTHROPIC_BASE_URL", server.base_url)
        model = await shared_model()
        transport = _transport(model)
        assert isinstance(transport, ShardedTransport)

        async def watch() -> None:
            await all_in.wait()
            seen.append(transport.in_flight)

        async with trio.open_nursery() as nursery:
            nursery.start_soon(watch)
            for n in range(count):
                nursery.start_soon(_create, model, f"prompt {n}")
        # While all were in flight, no pool had two more than another.
        (loads,) = seen
        assert sum(loads) == count
        assert max(loads) - min(loads) <= 1
        assert transport.in_flight == (0,) * SHARDS
    assert len(server.requests) == count


async def test_a_quiet_service_reuses_one_connection(monkeypatch: pytest.MonkeyPatch) -> None:
    async with MessagesServer(["one", "two", "three", "four"]) as server:
        monkeypatch.setenv("ANTHROPIC_BASE_URL", server.base_url)
        for prompt in ("a", "b", "c", "d"):
            async with satsuma.open_agent(Chat) as agent:
                assert (await agent.run(prompt)).status == "completed"
                model = agent.model
        assert isinstance(model, AnthropicModel)
        pools = [len(shard._pool.connections) for shard in _transport(model)._shards]
        assert pools == [1] + [0] * (SHARDS - 1)


@pytest.mark.parametrize(
    "item",
    [
        Failure.server_error(500),
        Failure.bad_request("no"),
        Failure.rate_limited(0.0),
        Failure.cut_stream(Reply(text="a long answer " * 20)),
        Failure.stream_error(Reply(text="a long answer " * 20)),
        ValueError("the server broke"),
    ],
    ids=["500", "400", "429", "cut stream", "error event", "raised"],
)
@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
async def test_every_slot_is_given_back_whatever_the_answer(
    monkeypatch: pytest.MonkeyPatch, item: Any, stream: bool
) -> None:
    async with MessagesServer([item, "fine"]) as server:
        monkeypatch.setenv("ANTHROPIC_BASE_URL", server.base_url)
        model = await shared_model()
        with pytest.raises(satsuma.ModelError):
            await _create(model, "hi", stream=stream)
        assert _transport(model).in_flight == (0,) * SHARDS
        assert await _create(model, "again") == "fine"
        assert _transport(model).in_flight == (0,) * SHARDS


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
async def test_a_cancelled_request_gives_its_slot_back(
    monkeypatch: pytest.MonkeyPatch, stream: bool
) -> None:
    asked = trio.Event()

    async def hang(body: dict[str, Any]) -> str:
        asked.set()
        await trio.sleep_forever()
        raise AssertionError("unreachable")

    async with MessagesServer([hang, "after"]) as server:
        monkeypatch.setenv("ANTHROPIC_BASE_URL", server.base_url)
        model = await shared_model()
        async with trio.open_nursery() as nursery:
            nursery.start_soon(functools.partial(_create, model, "hangs", stream=stream))
            await asked.wait()
            assert sum(_transport(model).in_flight) == 1
            nursery.cancel_scope.cancel()
        assert _transport(model).in_flight == (0,) * SHARDS
        assert await _create(model, "and now") == "after"


async def test_a_refused_connection_gives_its_slot_back(monkeypatch: pytest.MonkeyPatch) -> None:
    listener = trio.socket.socket()
    await listener.bind(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    listener.close()  # nothing listens there now
    monkeypatch.setenv("ANTHROPIC_BASE_URL", f"http://127.0.0.1:{port}")
    model = await shared_model()
    with pytest.raises(satsuma.ModelError, match=r"[Cc]onnection"):
        await _create(model, "hi")
    assert _transport(model).in_flight == (0,) * SHARDS


async def test_the_pools_hold_as_many_connections_as_the_sdk_allows() -> None:
    import anthropic._constants

    total = SHARDS * PER_SHARD
    assert total >= anthropic._constants.DEFAULT_CONNECTION_LIMITS.max_connections


@pytest.mark.parametrize("variable", ["HTTPS_PROXY", "https_proxy", "ALL_PROXY"])
async def test_behind_a_proxy_the_sdk_client_is_used_and_honours_it(
    monkeypatch: pytest.MonkeyPatch, variable: str
) -> None:
    monkeypatch.setenv(variable, "http://proxy.invalid:3128")
    model = await shared_model()
    client = model.client._client
    assert not isinstance(client._transport, ShardedTransport)
    mounted = [transport for transport in client._mounts.values() if transport is not None]
    assert mounted and all(isinstance(t, httpx2.AsyncHTTPTransport) for t in mounted)


async def test_closing_the_transport_closes_every_pool(monkeypatch: pytest.MonkeyPatch) -> None:
    async with MessagesServer(["one"]) as server:
        monkeypatch.setenv("ANTHROPIC_BASE_URL", server.base_url)
        transport = ShardedTransport()
        async with httpx2.AsyncClient(transport=transport) as client:
            response = await client.post(
                f"{server.base_url}/v1/messages",
                json={"model": "m", "max_tokens": 5, "messages": []},
            )
            assert response.status_code == 200
        assert all(len(shard._pool.connections) == 0 for shard in transport._shards)
