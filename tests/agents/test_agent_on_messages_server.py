"""Agents end to end on the real AsyncAnthropic client, through AnthropicModel, against
the loopback MessagesServer: no mocks, no network."""

from __future__ import annotations

from typing import Any

import pytest
import trio

import satsuma
from satsuma import AnthropicModel, ModelRetry, TextDelta
from satsuma.testing import Failure, MessagesServer, Reply, check_conversation, tool_call


@satsuma.tool
async def weather(city: str) -> str:
    """Current weather.

    Args:
        city: The city.
    """
    return f"{city}: 14°C"


class Forecaster(satsuma.Agent):
    name = "forecaster"
    system = "You tell the weather."
    tools = [weather]


def fast_retries(server: MessagesServer) -> AnthropicModel:
    return AnthropicModel(server.client(), backoff_base=0.001, backoff_cap=0.01, jitter=False)


async def test_a_multi_turn_run_with_parallel_tools_over_http() -> None:
    script = [
        Reply(
            text="Checking both.",
            tool_calls=[("weather", {"city": "Oslo"}), ("weather", {"city": "Lima"})],
        ),
        "Oslo and Lima are both at 14°C.",
    ]
    events: list[Any] = []
    async with (
        MessagesServer(script) as server,
        satsuma.open_agent(Forecaster, model=fast_retries(server)) as agent,
    ):
        result = await agent.run("Weather in Oslo and Lima?", events=events.append)
        history = agent.history
        first, second = server.requests
    assert result.status == "completed"
    assert result.output == "Oslo and Lima are both at 14°C."
    assert result.usage.input_tokens > 0 and result.usage.output_tokens > 0
    check_conversation(history)
    assert [r["content"] for r in history[2].tool_results] == ["Oslo: 14°C", "Lima: 14°C"]
    # What went over the wire: the model id, the system prompt and tools with cache
    # breakpoints, and the tool results in the second request.
    assert first["model"] == "claude-sonnet-5-5"
    assert first["stream"] is True
    assert first["tools"][-1]["cache_control"] == {"type": "ephemeral"}
    assert second["messages"][-1]["content"][0]["type"] == "tool_result"
    assert "".join(e.text for e in events if isinstance(e, TextDelta) and e.iteration == 2) == (
        "Oslo and Lima are both at 14°C."
    )


@pytest.mark.parametrize(
    "failure",
    [
        Failure.rate_limited(retry_after=0.001),
        Failure.overloaded(),
        Failure.server_error(),
        Failure.cut_stream("partial answer", after_events=2),
        Failure.stream_error("partial answer", after_events=2),
    ],
    ids=["429", "529", "500", "cut", "error-event"],
)
async def test_each_injected_failure_is_retried_and_reported(failure: Failure) -> None:
    events: list[Any] = []
    async with (
        MessagesServer([failure, "All clear."]) as server,
        satsuma.open_agent(Forecaster, model=fast_retries(server)) as agent,
    ):
        result = await agent.run("Weather?", events=events.append)
    assert result.status == "completed"
    assert result.output == "All clear."
    retries = [e for e in events if isinstance(e, ModelRetry)]
    assert len(retries) == 1
    assert retries[0].attempt == 1
    assert retries[0].iteration == 1


async def test_retries_exhausted_fail_the_run_and_the_agent_goes_on() -> None:
    script = [Failure.overloaded()] * 3 + ["Back again."]
    async with MessagesServer(script) as server:
        model = AnthropicModel(server.client(), max_retries=2, backoff_base=0.001, jitter=False)
        async with satsuma.open_agent(Forecaster, model=model) as agent:
            failed = await agent.run("Weather?")
            again = await agent.run("And now?")
            history = agent.history
    assert failed.status == "failed"
    assert failed.error is not None and failed.error.startswith("529")
    assert again.output == "Back again."
    check_conversation(history)


async def test_prompt_too_long_fails_at_once_with_the_apis_message() -> None:
    script = [
        Failure.bad_request("prompt is too long: 210000 tokens > 200000 maximum"),
        "Shorter, thanks.",
    ]
    events: list[Any] = []
    async with (
        MessagesServer(script) as server,
        satsuma.open_agent(Forecaster, model=fast_retries(server)) as agent,
    ):
        failed = await agent.run("x" * 1000, events=events.append)
        again = await agent.run("Weather?")
    assert failed.status == "failed"
    assert failed.error == "400: prompt is too long: 210000 tokens > 200000 maximum"
    assert not any(isinstance(e, ModelRetry) for e in events)
    assert again.status == "completed"


async def test_unparseable_streamed_tool_input_fails_only_that_call() -> None:
    script = [
        Reply(
            tool_calls=[
                tool_call("weather", '{"city": "Os', id="bad"),
                tool_call("weather", {"city": "Rome"}, id="good"),
            ]
        ),
        "Rome is at 14°C; the other call was malformed.",
    ]
    async with MessagesServer(script) as server:
        streamed = AnthropicModel(server.client(), max_retries=0, stream=True)
        async with satsuma.open_agent(Forecaster, model=streamed) as agent:
            result = await agent.run("Weather?")
            history = agent.history
        sent_back = server.requests[1]["messages"]
    assert result.status == "completed"
    check_conversation(history)
    results = {r["tool_use_id"]: r for r in history[2].tool_results}
    assert results["bad"]["is_error"]
    assert results["bad"]["content"].startswith(
        "Error: Invalid arguments: expected arguments to be an object"
    )
    assert results["good"]["content"] == "Rome: 14°C"
    assert sent_back[1]["content"][0]["input"] == {}


async def test_without_a_model_the_agent_builds_one_from_the_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    async with MessagesServer(["From the environment."]) as server:
        monkeypatch.setenv("ANTHROPIC_API_KEY", "env-key")
        monkeypatch.setenv("ANTHROPIC_BASE_URL", server.base_url)
        async with satsuma.open_agent(Forecaster) as agent:
            result = await agent.run("Weather?")
    assert result.output == "From the environment."


async def test_a_slow_response_past_max_duration_ends_the_run_with_a_valid_history() -> None:
    class Hurried(Forecaster):
        name = "hurried"
        max_duration = 0.2

    async with (
        MessagesServer([Failure.slow("too late", delay=5)]) as server,
        satsuma.open_agent(Hurried, model=fast_retries(server)) as agent,
    ):
        with trio.fail_after(4):
            result = await agent.run("Weather?")
        history = agent.history
    assert result.status == "deadline_exceeded"
    check_conversation(history)


async def test_a_run_nobody_watches_asks_for_whole_responses() -> None:
    # Whole responses cost the client less; nothing is lost when no one reads the text
    # as it is written.
    async with MessagesServer(["Quiet.", "Watched.", "Streamed."]) as server:
        model = AnthropicModel(server.client(), max_retries=0)
        async with satsuma.open_agent(Forecaster, model=model) as agent:
            quiet = await agent.run("Weather?")
            events: list[Any] = []
            watched = await agent.run("Weather?", events=events.append)
            streamed = [event async for event in agent.stream("Weather?")]
        modes = [request.get("stream", False) for request in server.requests]
    assert modes == [False, True, True]
    assert quiet.output == "Quiet." and watched.output == "Watched."
    assert "".join(e.text for e in events if isinstance(e, TextDelta)) == "Watched."
    assert "".join(e.text for e in streamed if isinstance(e, TextDelta)) == "Streamed."


@pytest.mark.parametrize(("stream", "modes"), [(True, [True, True]), (False, [False, False])])
async def test_stream_true_or_false_is_kept_whatever_listens(
    stream: bool, modes: list[bool]
) -> None:
    async with MessagesServer(["One.", "Two."]) as server:
        model = AnthropicModel(server.client(), max_retries=0, stream=stream)
        async with satsuma.open_agent(Forecaster, model=model) as agent:
            await agent.run("Weather?")
            events: list[Any] = []
            await agent.run("Weather?", events=events.append)
        assert [request.get("stream", False) for request in server.requests] == modes
    # Whole, the text still reaches a listener, in one piece.
    assert "".join(e.text for e in events if isinstance(e, TextDelta)) == "Two."


class LongWriter(Forecaster):
    name = "long_writer"
    max_tokens = 128_000


async def test_a_response_too_long_to_ask_for_whole_is_streamed() -> None:
    # The SDK refuses to wait for a whole response that could take over 10 minutes.
    async with MessagesServer(["Long.", "Long."]) as server:
        model = AnthropicModel(server.client(), max_retries=0)
        async with satsuma.open_agent(LongWriter, model=model) as agent:
            result = await agent.run("Write a book.")
        assert result.output == "Long."
        assert [request.get("stream", False) for request in server.requests] == [True]
        whole = AnthropicModel(server.client(), max_retries=0, stream=False)
        async with satsuma.open_agent(LongWriter, model=whole) as agent:
            failed = await agent.run("Write a book.")
        assert failed.status == "failed"
        assert failed.error is not None and "stream=False cannot be used here" in failed.error
