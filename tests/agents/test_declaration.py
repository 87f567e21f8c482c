"""Agent declarations are checked when the class is created."""

from __future__ import annotations

from typing import Any

import pytest

import satsuma
from satsuma import AgentDefinitionError


@satsuma.tool
async def ping(host: str) -> str:
    """Ping a host."""
    return f"pong {host}"


@satsuma.tool(name="ping")
async def another_ping(host: str) -> str:
    """Ping again."""
    return host


def declare(**attributes: Any) -> type[satsuma.Agent]:
    namespace = {"name": "probe", **attributes}
    return type("Probe", (satsuma.Agent,), namespace)


def test_a_good_declaration_passes_and_fills_defaults() -> None:
    agent = declare(tools=[ping], system="Be brief.")
    spec = agent.__satsuma_agent__
    assert spec is not None
    assert spec.model == "sonnet"
    assert spec.max_iterations == 10
    assert spec.loop_guard == 3


@pytest.mark.parametrize(
    ("attributes", "message"),
    [
        ({"name": ""}, "has no name"),
        ({"name": "has space"}, "name must match"),
        ({"tools": [42]}, "Agent probe: tools: ToolRunner takes Tool classes"),
        ({"tools": [ping, another_ping]}, "Agent probe: tools: Tool ping: is declared twice"),
        ({"model": "gpt-5"}, "unknown model 'gpt-5': use an alias"),
        ({"max_iterations": 0}, "max_iterations must be an integer >= 1"),
        ({"max_iterations": 2.5}, "max_iterations must be an integer >= 1"),
        ({"max_duration": -1}, "max_duration must be a positive number"),
        ({"max_tokens": 0}, "max_tokens must be an integer >= 1"),
        ({"loop_guard": 0}, "loop_guard must be an integer >= 1 or None"),
        ({"verifiers": [42]}, "verifiers must be Verifier classes"),
        ({"tools": "ping"}, "tools must be a list"),
        ({"strategy": "random"}, "unknown strategy 'random'"),
        ({"max_concurrency": 0}, "max_concurrency must be an integer >= 1"),
        ({"history": "all"}, "history must be a HistoryProcessor"),
        ({"system": 3}, "system must be a str or None"),
    ],
)
def test_every_mistake_raises_at_class_creation(attributes: dict[str, Any], message: str) -> None:
    with pytest.raises(AgentDefinitionError, match=message):
        declare(**attributes)


def test_model_aliases_and_ids() -> None:
    assert set(satsuma.MODEL_ALIASES) == {"sonnet", "opus", "haiku"}
    for alias in satsuma.MODEL_ALIASES:
        declare(model=alias)
    declare(model="claude-some-future-model")


def test_an_abstract_base_needs_no_name() -> None:
    class Base(satsuma.Agent, abstract=True):
        tools = [ping]

    class Concrete(Base):
        name = "concrete"

    assert Concrete.__satsuma_agent__ is not None
    assert Base.__satsuma_agent__ is None


async def test_open_agent_refuses_what_is_not_an_agent() -> None:
    with pytest.raises(TypeError, match=r"expected a concrete satsuma\.Agent subclass"):
        async with satsuma.open_agent(int):
            pass


async def test_tool_definitions_are_rendered_once_per_class_not_per_agent() -> None:
    from satsuma.testing import ScriptedModel

    agent = declare(tools=[ping])
    model = ScriptedModel(["one", "two"])
    for _ in range(2):
        async with satsuma.open_agent(agent, model=model) as opened:
            await opened.run("hi")
    first, second = (request.tools for request in model.requests)
    assert first == (ping.schema(),)
    assert first is second  # one rendering, shared by every agent of the class
