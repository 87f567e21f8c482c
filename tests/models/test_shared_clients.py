"""Agents that declare their model by name share one client per trio run and
configuration: opened one per conversation, they reuse its connections; nothing an agent
does closes it under another; the run's end closes it."""

from __future__ import annotations

import threading
from typing import Any

import pytest
import trio

import satsuma
from satsuma import AnthropicModel, Supervisor
from satsuma.models import _anthropic as _clients  # builds the default provider's model
from satsuma.models._clients import shared_model
from satsuma.testing import MessagesServer


class Chat(satsuma.Agent):
    name = "chat"
    model = "claude-test-1"


@pytest.fixture(autouse=True)
def _environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", "test-key")
    monkeypatch.delenv("ANTHROPIC_AUTH_TOKEN", raising=False)
    monkeypatch.delenv("ANTHROPIC_BASE_URL", raising=False)


async def test_agents_opened_one_per_conversation_share_one_client(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    async with MessagesServer(["one", "two", "three"]) as server:
        monkeypatch.setenv("ANTHROPIC_BASE_URL", server.base_url)
        models = []
        for prompt in ("a", "b", "c"):
            async with satsuma.open_agent(Chat) as agent:
                assert (await agent.run(prompt)).status == "completed"
                models.append(agent.model)
        assert models[0] is models[1] is models[2]
        assert isinstance(models[0], AnthropicModel)
        # Still open for the next conversation: closing an agent never closes it.
        assert not models[0].client.is_closed()
        assert str(models[0].client.base_url).startswith(server.base_url)
    assert [request["messages"][0]["content"][0]["text"] for request in server.requests] == [
        "a",
        "b",
        "c",
    ]


async def test_concurrent_agents_share_it_too(monkeypatch: pytest.MonkeyPatch) -> None:
    async with MessagesServer([f"answer {n}" for n in range(20)]) as server:
        monkeypatch.setenv("ANTHROPIC_BASE_URL", server.base_url)
        models: list[Any] = []

        async def conversation(n: int) -> None:
            async with satsuma.open_agent(Chat) as agent:
                assert (await agent.run(f"prompt {n}")).status == "completed"
                models.append(agent.model)

        async with trio.open_nursery() as nursery:
            for n in range(20):
                nursery.start_soon(conversation, n)
    assert len(models) == 20
    assert len({id(model) for model in models}) == 1


async def test_each_configuration_gets_its_own_client(monkeypatch: pytest.MonkeyPatch) -> None:
    async with MessagesServer(["first"]) as first, MessagesServer(["second"]) as second:
        monkeypatch.setenv("ANTHROPIC_BASE_URL", first.base_url)
        async with satsuma.open_agent(Chat) as agent:
            assert (await agent.run("hi")).output == "first"
            on_first = agent.model
        monkeypatch.setenv("ANTHROPIC_BASE_URL", second.base_url)
        async with satsuma.open_agent(Chat) as agent:
            assert (await agent.run("hi")).output == "second"
            on_second = agent.model
        monkeypatch.setenv("ANTHROPIC_API_KEY", "another-key")
        with_another_key = await shared_model()
    assert on_first is not on_second
    assert with_another_key is not on_second
    assert len(first.requests) == len(second.requests) == 1


async def test_a_cancelled_agent_leaves_the_shared_client_working(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    asked = trio.Event()

    async def hang(body: dict[str, Any]) -> str:
        asked.set()
        await trio.sleep_forever()
        raise AssertionError("unreachable")

    async with MessagesServer([hang, "after the cancel"]) as server:
        monkeypatch.setenv("ANTHROPIC_BASE_URL", server.base_url)
        with trio.CancelScope() as scope:
            async with satsuma.open_agent(Chat) as agent, trio.open_nursery() as nursery:
                nursery.start_soon(agent.run, "this one hangs")
                await asked.wait()
                scope.cancel()  # mid-request: the response is being awaited
        assert scope.cancelled_caught
        async with satsuma.open_agent(Chat) as agent:
            result = await agent.run("and this one?")
            model = agent.model
        assert result.output == "after the cancel"
        assert isinstance(model, AnthropicModel)
        assert not model.client.is_closed()


async def test_a_model_passed_in_is_used_as_it_is(monkeypatch: pytest.MonkeyPatch) -> None:
    async with MessagesServer(["mine"]) as server, server.client() as client:
        mine = AnthropicModel(client)
        async with satsuma.open_agent(Chat, model=mine) as agent:
            assert agent.model is mine
            assert (await agent.run("hi")).output == "mine"
        assert not client.is_closed()


async def test_aclose_on_the_shared_model_does_not_close_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    async with MessagesServer(["one", "two"]) as server:
        monkeypatch.setenv("ANTHROPIC_BASE_URL", server.base_url)
        async with satsuma.open_agent(Chat) as agent:
            await agent.run("a")
            model = agent.model
            assert isinstance(model, AnthropicModel)
            await model.aclose()  # a user reaching for it: it is not theirs to close
            assert (await agent.run("b")).output == "two"


async def test_supervised_agents_share_it(monkeypatch: pytest.MonkeyPatch) -> None:
    async with MessagesServer(["one", "two"]) as server:
        monkeypatch.setenv("ANTHROPIC_BASE_URL", server.base_url)
        async with Supervisor("one_for_one", name="root") as root:
            first = await root.start_child(Chat)
            second = await root.start_child(Chat)
            assert (await first.run("a")).output == "one"
            assert (await second.run("b")).output == "two"
            assert first.model is second.model
            async with satsuma.open_agent(Chat) as alone:
                assert alone.model is first.model


def test_the_run_end_closes_it_and_runs_do_not_share(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", "test-key")

    async def one_run() -> AnthropicModel:
        async with MessagesServer(["hello"]) as server:
            monkeypatch.setenv("ANTHROPIC_BASE_URL", server.base_url)
            async with satsuma.open_agent(Chat) as agent:
                assert (await agent.run("hi")).output == "hello"
                model = agent.model
                assert isinstance(model, AnthropicModel)
                assert not model.client.is_closed()
                return model

    first = trio.run(one_run)
    second = trio.run(one_run)
    assert first is not second
    assert first.client.is_closed()
    assert second.client.is_closed()


async def test_the_client_is_built_in_a_worker_thread(monkeypatch: pytest.MonkeyPatch) -> None:
    # Importing the SDK and building a client takes over a second the first time: off
    # the trio thread, so that the run's other tasks go on meanwhile.
    built_in: list[int] = []
    real_build = _clients._build

    def build() -> AnthropicModel:
        built_in.append(threading.get_ident())
        return real_build()

    monkeypatch.setattr(_clients, "_build", build)
    monkeypatch.setenv("ANTHROPIC_BASE_URL", "http://127.0.0.1:9")
    models = [await shared_model() for _ in range(3)]
    assert models[0] is models[1] is models[2]
    assert len(built_in) == 1
    assert built_in[0] != threading.get_ident()


async def test_agents_opening_together_build_one_client(monkeypatch: pytest.MonkeyPatch) -> None:
    builds: list[None] = []
    real_build = _clients._build

    def build() -> AnthropicModel:
        builds.append(None)
        return real_build()

    monkeypatch.setattr(_clients, "_build", build)
    monkeypatch.setenv("ANTHROPIC_BASE_URL", "http://127.0.0.1:9")
    models: list[AnthropicModel] = []

    async def get() -> None:
        models.append(await shared_model())

    async with trio.open_nursery() as nursery:
        for _ in range(10):
            nursery.start_soon(get)
    assert len(builds) == 1
    assert len({id(model) for model in models}) == 1
