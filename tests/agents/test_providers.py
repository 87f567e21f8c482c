"""One agent class on every provider, changing only its ``model`` string: the model is
resolved from the string and the environment (as a service's agents get it), the
requests really go out in each provider's dialect to its loopback server, and satsuma's
contract holds identically: one tool_result per call, is_error, usage, streaming."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import attrs
import pytest

import satsuma
from satsuma import ConfigurationError, Message, TextDelta
from satsuma.agents._clients import shared_model
from satsuma.agents._openai import OpenAIModel
from satsuma.testing import MessagesServer, Reply, check_conversation
from satsuma.testing._chat_server import ChatCompletionsServer
from satsuma.testing._server import ScriptedServer


@satsuma.tool
async def weather(city: str) -> str:
    """Current weather.

    Args:
        city: The city.
    """
    return f"{city}: 14°C"


@satsuma.tool
async def forecast(city: str) -> str:
    """Tomorrow's weather.

    Args:
        city: The city.
    """
    raise OSError(f"no forecast for {city}")


@satsuma.tool
async def radar(city: str) -> tuple[str, str]:
    """The rain radar.

    Args:
        city: The city.
    """
    return ("error", f"radar offline in {city}")


@satsuma.tool
async def alerts(city: str) -> Any:
    """Weather alerts.

    Args:
        city: The city.
    """
    return ("ok", f"storm warning for {city}", True)


class Forecaster(satsuma.Agent):
    name = "forecaster"
    system = "You tell the weather."
    tools = [weather, forecast, radar, alerts]


class OnOpenAI(Forecaster):
    model = "openai:gpt-test"


BAD_ARGUMENTS = (
    "Error: Invalid arguments: expected arguments to be an object, got: invalid JSON "
    "(Expecting value: line 1 column 10 (char 9))"
)

SCRIPT = [
    Reply(
        text="Checking.",
        tool_calls=[
            ("weather", {"city": "Oslo"}),
            ("forecast", {"city": "Oslo"}),
            ("radar", {"city": "Oslo"}),
            ("alerts", {"city": "Oslo"}),
            ("weather", '{"city": '),  # arguments that are not JSON
        ],
    ),
    "Oslo: 14°C, more unknown.",
]


@attrs.frozen
class Provider:
    agent: type[satsuma.Agent[Any]]
    server: Callable[[list[Any]], ScriptedServer]
    environment: Callable[[ScriptedServer], dict[str, str]]


PROVIDERS = {
    "anthropic": Provider(
        Forecaster,
        MessagesServer,
        lambda server: {"ANTHROPIC_API_KEY": "test-key", "ANTHROPIC_BASE_URL": server.base_url},
    ),
    "openai": Provider(
        OnOpenAI,
        ChatCompletionsServer,
        lambda server: {
            "OPENAI_API_KEY": "test-key",
            "OPENAI_BASE_URL": f"{server.base_url}/v1",
        },
    ),
}


@asynccontextmanager
async def serving(
    name: str, script: list[Any], monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[ScriptedServer]:
    provider = PROVIDERS[name]
    async with provider.server(script) as server:
        for key, value in provider.environment(server).items():
            monkeypatch.setenv(key, value)
        yield server


def tool_results(history: tuple[Message, ...]) -> list[tuple[Any, bool]]:
    return [
        (block["content"], block["is_error"])
        for message in history
        for block in message.tool_results
    ]


async def run_scenario(name: str, monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    events: list[Any] = []
    async with (
        serving(name, SCRIPT, monkeypatch) as server,
        satsuma.open_agent(PROVIDERS[name].agent) as agent,
    ):
        result = await agent.run("Weather in Oslo?", events=events.append)
        history = agent.history
        model = agent.model
    return {
        "result": result,
        "history": history,
        "model": model,
        "requests": server.requests,
        "text": "".join(event.text for event in events if isinstance(event, TextDelta)),
    }


async def test_one_agent_class_runs_alike_on_anthropic_and_openai(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    anthropic = await run_scenario("anthropic", monkeypatch)
    openai = await run_scenario("openai", monkeypatch)
    assert isinstance(openai["model"], OpenAIModel)
    for run in (anthropic, openai):
        assert run["result"].status == "completed"
        assert run["result"].output == "Oslo: 14°C, more unknown."
        assert run["result"].usage.input_tokens > 0 and run["result"].usage.output_tokens > 0
        assert run["text"] == "Checking.Oslo: 14°C, more unknown."
        check_conversation(run["history"])
    # The same results, in the same satsuma history, whichever provider answered.
    expected = [
        ("Oslo: 14°C", False),
        ("Error: Tool crashed: OSError: no forecast for Oslo", True),
        ("Error: radar offline in Oslo", True),
        ("storm warning for Oslo", True),
        (BAD_ARGUMENTS, True),
    ]
    assert tool_results(anthropic["history"]) == expected
    assert tool_results(openai["history"]) == expected
    # On the wire, in each dialect.
    last = anthropic["requests"][1]["messages"][-1]["content"]
    assert [(block["content"], block["is_error"]) for block in last] == expected
    assert openai["requests"][0]["model"] == "gpt-test"
    tool_messages = [m for m in openai["requests"][1]["messages"] if m["role"] == "tool"]
    # No is_error field in Chat Completions: the text says it, as satsuma's own
    # failure texts already do.
    assert [m["content"] for m in tool_messages] == [
        "Oslo: 14°C",
        "Error: Tool crashed: OSError: no forecast for Oslo",
        "Error: radar offline in Oslo",
        "Error: storm warning for Oslo",
        BAD_ARGUMENTS,
    ]
    calls = openai["requests"][1]["messages"][-len(tool_messages) - 1]["tool_calls"]
    assert [m["tool_call_id"] for m in tool_messages] == [call["id"] for call in calls]


async def test_agents_naming_one_configuration_share_one_model(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    async with serving("openai", ["one", "two"], monkeypatch):
        models = []
        for prompt in ("a", "b"):
            async with satsuma.open_agent(OnOpenAI) as agent:
                assert (await agent.run(prompt)).status == "completed"
                models.append(agent.model)
        assert models[0] is models[1]
        # Another base URL is another configuration.
        monkeypatch.setenv("OPENAI_BASE_URL", "http://127.0.0.1:9/v1")
        other = await shared_model("forecaster", "openai:gpt-test")
        assert other is not models[0]
        # An Anthropic model string in the same run gets Anthropic's.
        monkeypatch.setenv("ANTHROPIC_API_KEY", "test-key")
        assert not isinstance(await shared_model("forecaster", "claude-test"), OpenAIModel)


async def test_an_openai_model_without_a_key_is_a_clear_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    with pytest.raises(ConfigurationError) as caught:
        async with satsuma.open_agent(OnOpenAI):
            pass
    assert str(caught.value).startswith(
        "OPENAI_API_KEY is not set: agent 'forecaster' declares its model by name "
        "('openai:gpt-test') and needs an OpenAI API key"
    )


@pytest.mark.parametrize("url", ["localhost:8000/v1", "ftp://host/v1", "http://"])
async def test_a_base_url_that_is_not_one_is_a_clear_error(
    url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "test-key")
    monkeypatch.setenv("OPENAI_BASE_URL", url)
    with pytest.raises(ConfigurationError, match="OPENAI_BASE_URL is not an http"):
        await shared_model("forecaster", "openai:gpt-test")


@pytest.mark.parametrize(
    ("model", "problem"),
    [
        ("openai:", "unknown model 'openai:': name the model after 'openai:'"),
        ("mistral:large", "unknown model 'mistral:large': unknown provider 'mistral'"),
        ("gpt-5", "unknown model 'gpt-5': use an alias"),
    ],
)
def test_a_model_string_naming_no_model_is_refused_at_declaration(model: str, problem: str) -> None:
    declared = model
    with pytest.raises(satsuma.AgentDefinitionError, match=problem):

        class Broken(satsuma.Agent):
            name = "broken"
            model = declared
