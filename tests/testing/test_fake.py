"""The offline fake model: deterministic, does what the prompt names, answers with the tool
results, and makes up arguments that fit each tool's schema."""

from __future__ import annotations

from typing import Any, Literal

import attrs
import pytest

import satsuma
from satsuma.testing import FakeModel, MessagesServer, check_conversation, fake_reply
from satsuma.testing._fake import example_arguments


@attrs.frozen
class Point:
    x: int
    y: int = 0


@satsuma.tool
async def describe(
    name: str,
    count: int,
    ratio: float,
    flag: bool,
    colour: Literal["red", "green"],
    tags: list[str],
    where: Point,
    note: str | None = None,
) -> str:
    """Describe a thing.

    Args:
        name: Its name.
        count: How many.
        ratio: A ratio.
        flag: A flag.
        colour: Its colour.
        tags: Tags.
        where: Where it is.
        note: A note.
    """
    return f"{name} {count} {ratio} {flag} {colour} {tags} {where.x},{where.y}"


@satsuma.tool
async def add(a: int, b: int) -> str:
    """Add.

    Args:
        a: First.
        b: Second.
    """
    return str(a + b)


class Helper(satsuma.Agent):
    name = "helper"
    tools = [describe, add]


def test_made_up_arguments_validate_against_the_tool_s_own_schema() -> None:
    (definition,) = satsuma.ToolRunner([describe]).definitions
    arguments = example_arguments(definition.schema()["input_schema"])
    assert set(arguments) == {"name", "count", "ratio", "flag", "colour", "tags", "where"}
    _, errors = definition.check(arguments)
    assert errors == []


@pytest.mark.parametrize(
    ("schema", "expected"),
    [
        (
            {
                "type": "object",
                "properties": {"n": {"type": "integer", "minimum": 5}},
                "required": ["n"],
            },
            {"n": 5},
        ),
        (
            {
                "type": "object",
                "properties": {"n": {"type": "integer", "exclusiveMinimum": 5}},
                "required": ["n"],
            },
            {"n": 6},
        ),
        (
            {
                "type": "object",
                "properties": {"s": {"type": "string", "minLength": 10}},
                "required": ["s"],
            },
            {"s": "examplexxx"},
        ),
        (
            {
                "type": "object",
                "properties": {"a": {"type": "array", "items": {"type": "boolean"}, "minItems": 2}},
                "required": ["a"],
            },
            {"a": [False, False]},
        ),
        (
            {
                "type": "object",
                "properties": {"o": {"anyOf": [{"type": "null"}, {"const": 3}]}},
                "required": ["o"],
            },
            {"o": 3},
        ),
        ({"type": "object", "properties": {"x": {"type": "string"}}}, {}),
        ({}, {}),
    ],
    ids=["minimum", "exclusive", "min length", "array", "any of", "optional only", "empty"],
)
def test_example_arguments_of_schemas(schema: dict[str, Any], expected: dict[str, Any]) -> None:
    assert example_arguments(schema) == expected


async def test_a_prompt_that_names_tools_calls_them_and_gets_their_answers() -> None:
    model = FakeModel()
    async with satsuma.open_agent(Helper, model=model) as agent:
        result = await agent.run('add {"a": 2, "b": 40} and then describe it')
        history = agent.history
    assert result.status == "completed"
    check_conversation(history)
    calls = [b for b in history[1].content if b["type"] == "tool_use"]
    assert (calls[0]["name"], calls[0]["input"]) == ("add", {"a": 2, "b": 40})
    assert calls[1]["name"] == "describe"
    lines = result.output.splitlines()
    assert lines[0] == "(fake model) The tools answered:"
    assert lines[1] == "- add: 42"
    assert lines[2].startswith("- describe: example 1 1 False red [] 1,0")
    assert len(model.requests) == 2


async def test_a_prompt_that_names_no_tool_is_echoed() -> None:
    async with satsuma.open_agent(Helper, model=FakeModel()) as agent:
        result = await agent.run("hello, additional words")  # "add" inside a word is no call
    assert result.output == "(fake model) You said: hello, additional words"


def test_a_failed_call_is_reported_as_one() -> None:
    messages = [
        {"role": "user", "content": "add"},
        {
            "role": "assistant",
            "content": [{"type": "tool_use", "id": "t1", "name": "add", "input": {}}],
        },
        {
            "role": "user",
            "content": [
                {
                    "type": "tool_result",
                    "tool_use_id": "t1",
                    "content": "Error: no",
                    "is_error": True,
                }
            ],
        },
    ]
    assert (
        fake_reply(messages).text == "(fake model) The tools answered:\n- add (an error): Error: no"
    )


async def test_the_fake_answers_over_a_messages_server_forever() -> None:
    def answer(body: dict[str, Any]) -> Any:
        return fake_reply(body["messages"], body.get("tools", []))

    async with MessagesServer(then=answer, keep_requests=1) as server, server.client() as client:
        for n in range(3):
            message = await client.messages.create(
                model="claude-test-1",
                max_tokens=50,
                messages=[{"role": "user", "content": f"ping {n}"}],
            )
            assert message.content[0].text == f"(fake model) You said: ping {n}"  # type: ignore[union-attr]
        assert len(server.requests) == 1  # only the last one kept
