"""An agent class prepares its tools once (``AgentSpec.prepared_tools``) and each agent's
runner is built from them: what each agent must have of its own stays its own (Tool
class instances, concurrency limits), subclasses prepare their own, and what the model
is sent always matches what the runner runs."""

from __future__ import annotations

from typing import Any, ClassVar

import pytest

import satsuma
from satsuma.agents._agent import spec_of
from satsuma.testing import Reply, ScriptedModel


@satsuma.tool
async def ping(n: int) -> str:
    """Ping.

    Args:
        n: A number.
    """
    return f"pong {n}"


@satsuma.tool
async def pong(n: int) -> str:
    """Pong.

    Args:
        n: A number.
    """
    return f"ping {n}"


class Counter(satsuma.Tool):
    """A tool with state: each agent must count its own calls."""

    name = "count"
    description = "Count this agent's calls"
    parameters: ClassVar[dict[str, Any]] = {}

    def __init__(self) -> None:
        self.calls = 0

    async def run(self, args: dict[str, Any], ctx: satsuma.ToolContext) -> str:
        self.calls += 1
        return str(self.calls)


class Notebook(satsuma.Toolset):
    def __init__(self) -> None:
        self.notes: list[str] = []

    @satsuma.tool
    async def note(self, text: str) -> int:
        """Keep a note.

        Args:
            text: The note.
        """
        self.notes.append(text)
        return len(self.notes)


BOOK = Notebook()


class Counting(satsuma.Agent):
    name = "counting"
    tools: ClassVar[list[object]] = [ping, Counter, BOOK]
    max_concurrency = 1


class Narrower(Counting):
    name = "narrower"
    tools: ClassVar[list[object]] = [pong]


def _runner_of(agent: satsuma.AgentHandle[Any]) -> satsuma.ToolRunner:
    actor = agent._target.current_actor()
    assert actor is not None
    return actor.tools.runner


def _counting_model(note: str) -> ScriptedModel:
    return ScriptedModel([Reply(tool_calls=[("count", {}), ("note", {"text": note})]), "done"])


async def test_each_agent_has_its_own_tool_class_instances_and_limits() -> None:
    async with (
        satsuma.open_agent(Counting, model=_counting_model("first")) as first,
        satsuma.open_agent(Counting, model=_counting_model("second")) as second,
    ):
        assert (await first.run("count")).status == "completed"
        assert (await second.run("count")).status == "completed"
        # Each agent's Counter counted one call (its own instance); the toolset is one.
        for agent in (first, second):
            results = [
                str(block["content"])
                for message in agent.history
                for block in message.content
                if block.get("type") == "tool_result"
            ]
            assert len(results) == 2
            assert results[0] == "1", results
        assert BOOK.notes == ["first", "second"]
        one, two = _runner_of(first), _runner_of(second)
        assert one is not two
        assert one._entries["count"].instance is not two._entries["count"].instance
        # Functions and a toolset's tools are one object, as declared.
        assert one._entries["ping"].instance is two._entries["ping"].instance is ping
        # max_concurrency is per agent, not per class.
        assert one._limiter is not None and two._limiter is not None
        assert one._limiter is not two._limiter
        assert one._thread_limiter is not two._thread_limiter


async def test_the_class_prepares_once_and_a_subclass_its_own() -> None:
    spec = spec_of(Counting)
    assert spec.prepared_tools is spec.prepared_tools
    assert [d.name for d in spec.make_runner().definitions] == ["ping", "count", "note"]
    narrower = spec_of(Narrower)
    assert narrower.prepared_tools is not spec.prepared_tools
    assert [d.name for d in narrower.make_runner().definitions] == ["pong"]
    assert [schema["name"] for schema in narrower.tool_schemas] == ["pong"]
    model = ScriptedModel([Reply(tool_calls=[("pong", {"n": 1})]), "done"])
    async with satsuma.open_agent(Narrower, model=model) as agent:
        assert (await agent.run("go")).status == "completed"
    assert [tool["name"] for tool in model.requests[0].tools] == ["pong"]


async def test_tools_changed_after_the_declaration_change_neither_schemas_nor_runner() -> None:
    class Late(satsuma.Agent):
        name = "late"
        tools: ClassVar[list[object]] = [ping]

    Late.tools.append(pong)  # after the class was declared (and checked)
    Late.tools = [pong]
    model = ScriptedModel([Reply(tool_calls=[("pong", {"n": 1})]), "done"])
    async with satsuma.open_agent(Late, model=model) as agent:
        result = await agent.run("go")
    # The declaration is what the class had when it was created, as before: the model
    # is sent ping only, and the runner runs ping only (pong is unknown to it).
    assert [tool["name"] for tool in model.requests[0].tools] == ["ping"]
    assert result.status == "completed"
    tool_results = [
        block
        for message in result.messages
        for block in message.content
        if block.get("type") == "tool_result"
    ]
    assert len(tool_results) == 1
    assert tool_results[0]["is_error"] is True

    # A subclass declared now sees the class attribute as it is now.
    class Later(Late):
        name = "later"

    assert [schema["name"] for schema in spec_of(Later).tool_schemas] == ["pong"]


async def test_an_approval_timeout_given_to_open_agent_keeps_the_tools() -> None:
    model = ScriptedModel([Reply(tool_calls=[("ping", {"n": 2})]), "done"])
    async with satsuma.open_agent(Counting, model=model, approval_timeout=5) as agent:
        result = await agent.run("go")
    assert result.status == "completed"
    assert "pong 2" in str(result.messages[2].content)


def test_another_approval_timeout_keeps_what_the_class_prepared() -> None:
    # open_agent(approval_timeout=...) and a supervisor's child with its own use this:
    # each such open would otherwise prepare the class's tools again.
    spec = spec_of(Counting)
    other = spec.with_approval_timeout(5.0)
    assert other.approval_timeout == 5.0 and spec.approval_timeout != 5.0
    assert other.prepared_tools is spec.prepared_tools
    assert other.tool_schemas is spec.tool_schemas
    assert other.tool_sources is spec.tool_sources
    assert [d.name for d in other.make_runner().definitions] == ["ping", "count", "note"]


def test_a_tool_class_that_needs_arguments_fails_the_declaration() -> None:
    class Needy(satsuma.Tool):
        name = "needy"
        description = "Needs an argument"
        parameters: ClassVar[dict[str, Any]] = {}

        def __init__(self, value: int) -> None:
            self.value = value

        async def run(self, args: dict[str, Any], ctx: satsuma.ToolContext) -> str:
            return "never"

    with pytest.raises(satsuma.AgentDefinitionError, match="cannot be created without arguments"):

        class Bad(satsuma.Agent):
            name = "bad"
            tools: ClassVar[list[object]] = [Needy]


async def test_the_runner_is_built_at_the_first_call_unless_tool_classes_need_instances() -> None:
    model = ScriptedModel(["text only", Reply(tool_calls=[("pong", {"n": 1})]), "done"])
    async with satsuma.open_agent(Narrower, model=model) as agent:
        actor = agent._target.current_actor()
        assert actor is not None
        assert actor.tools._runner is None
        assert (await agent.run("no tools needed")).output == "text only"
        assert actor.tools._runner is None
        assert (await agent.run("call one")).status == "completed"
        assert actor.tools._runner is not None
    # A Tool class's instance is made as the agent opens, as it always was.
    async with satsuma.open_agent(Counting, model=ScriptedModel([])) as agent:
        actor = agent._target.current_actor()
        assert actor is not None
        assert actor.tools._runner is not None
