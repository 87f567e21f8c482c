"""``prepare_tools``: a runner's tools and options checked once, and runners built from
them that behave as runners built from the tools, each with what is its own."""

from __future__ import annotations

from typing import Any, ClassVar

import pytest

import satsuma
from satsuma.tools import PreparedTools, ToolRunner, prepare_tools


@satsuma.tool
async def echo(text: str) -> str:
    """Echo.

    Args:
        text: What to say back.
    """
    return text


class Tally(satsuma.Tool):
    name = "tally"
    description = "Count the calls of this instance"
    parameters: ClassVar[dict[str, Any]] = {}

    def __init__(self) -> None:
        self.calls = 0

    async def run(self, args: dict[str, Any], ctx: satsuma.ToolContext) -> str:
        self.calls += 1
        return str(self.calls)


async def test_runners_from_prepared_tools_run_as_runners_from_the_tools() -> None:
    prepared = prepare_tools([echo, Tally], timeout=5, max_concurrency=2)
    assert isinstance(prepared, PreparedTools)
    assert list(prepared) == [echo, Tally]
    calls = [
        {"id": "toolu_1", "name": "echo", "input": {"text": "hi"}},
        {"id": "toolu_2", "name": "tally", "input": {}},
    ]
    first, second, plain = ToolRunner(prepared), ToolRunner(prepared), ToolRunner([echo, Tally])
    assert first.definitions == plain.definitions
    assert first.schemas() == plain.schemas()
    for runner in (first, first, second):
        outcomes = await runner.execute(calls)
        assert outcomes[0].content == "hi"
    # Each runner has its own Tally (2 calls on the first, 1 on the second).
    assert (await first.execute(calls[1:]))[0].content == "3"
    assert (await second.execute(calls[1:]))[0].content == "2"
    assert prepared.timeout == 5.0
    assert prepared.max_concurrency == 2


def test_prepared_tools_are_taken_as_they_are() -> None:
    prepared = prepare_tools([echo])
    assert prepare_tools(prepared, timeout=1) is prepared
    with pytest.raises(TypeError):
        prepared.entries["other"] = prepared.entries["echo"]  # type: ignore[index]


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"timeout": 0}, "timeout must be a positive number or None"),
        ({"max_concurrency": 0}, "max_concurrency must be an integer >= 1 or None"),
        ({"strategy": "sideways"}, "unknown strategy 'sideways'"),
        ({"hook_timeout": None}, "hook_timeout must be a positive number"),
        ({"max_result_chars": 10}, "max_result_chars must be an integer >= 100 or None"),
        ({"max_threads": 0}, "max_threads must be an integer >= 1 or None"),
    ],
)
def test_bad_options_are_refused_when_prepared(options: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        prepare_tools([echo], **options)
    with pytest.raises(ValueError, match=message):
        ToolRunner([echo], **options)


def test_a_bad_event_sink_is_refused_when_prepared() -> None:
    with pytest.raises(TypeError, match=r"events must be a trio\.MemorySendChannel or a callable"):
        prepare_tools([echo], events=42)  # type: ignore[arg-type]
