"""agent.stream is bounded: a reader that falls behind holds its run before the next model
call (backpressure), and while it is behind, deltas are merged and a call's progress
keeps its latest line, so that what waits for the reader never grows with the run."""

from __future__ import annotations

from typing import Any

import trio

import satsuma
from satsuma import ModelRequest, RunEnd, TextDelta, ToolProgress
from satsuma.agents._stream import STREAM_BUFFER
from satsuma.testing import FunctionModel, Reply, ScriptedModel, check_conversation

TURNS = 300


@satsuma.tool
async def tick(n: int) -> str:
    """Count.

    Args:
        n: The count.
    """
    return str(n)


@satsuma.tool
async def churn(ctx: satsuma.ToolContext) -> str:
    """Report progress, a lot."""
    for n in range(10_000):
        ctx.progress(f"step {n}")
        await trio.lowlevel.checkpoint()
    return "churned"


class Ticker(satsuma.Agent):
    name = "ticker"
    tools = [tick, churn]
    max_iterations = TURNS + 5


def results_in(request: ModelRequest) -> int:
    return sum(
        1
        for message in request.messages
        for block in message.content
        if isinstance(block, dict) and block.get("type") == "tool_result"
    )


async def test_a_slow_reader_holds_the_run_back(autojump_clock: trio.abc.Clock) -> None:
    consumed = 0
    read_at_call: dict[int, int] = {}  # turn -> events the reader had read by its call

    def model(request: ModelRequest) -> Reply | str:
        turn = results_in(request)
        read_at_call[turn] = consumed
        if turn == TURNS:
            return "done"
        return Reply(tool_calls=[("tick", {"n": turn})])

    events: list[Any] = []
    async with satsuma.open_agent(Ticker, model=FunctionModel(model)) as agent:
        async for event in agent.stream("count"):
            events.append(event)
            consumed += 1
            await trio.sleep(1)  # a slow reader
    assert isinstance(events[-1], RunEnd) and events[-1].result.status == "completed"
    # Events emitted before the call of turn k: everything up to the k-th TurnEnd.
    turn_ends = [i + 1 for i, event in enumerate(events) if type(event).__name__ == "TurnEnd"]
    per_turn = turn_ends[1] - turn_ends[0]
    behind = [turn_ends[turn - 1] - read_at_call[turn] for turn in range(1, TURNS + 1)]
    assert max(behind) <= STREAM_BUFFER + per_turn
    assert len(events) > 3 * STREAM_BUFFER  # the run was long enough to need holding


async def test_deltas_merge_while_the_reader_is_behind(autojump_clock: trio.abc.Clock) -> None:
    words = [f"w{n} " for n in range(5_000)]
    model = ScriptedModel(["".join(words)])
    async with satsuma.open_agent(Ticker, model=model) as agent:
        stream = agent.stream("talk")
        first = await stream.__anext__()
        await trio.sleep(100)  # the whole answer streams meanwhile: nothing reads
        rest = [event async for event in stream]
    deltas = [event for event in rest if isinstance(event, TextDelta)]
    assert "".join(delta.text for delta in deltas) == "".join(words)  # nothing lost
    assert len(rest) <= STREAM_BUFFER + 2
    assert type(first).__name__ == "RunStart" and isinstance(rest[-1], RunEnd)


async def test_a_calls_progress_keeps_its_latest_line_while_the_reader_is_behind(
    autojump_clock: trio.abc.Clock,
) -> None:
    model = ScriptedModel([Reply(tool_calls=[("churn", {})]), "done"])
    async with satsuma.open_agent(Ticker, model=model) as agent:
        stream = agent.stream("churn")
        await stream.__anext__()
        await trio.sleep(100)
        rest = [event async for event in stream]
    progress = [event.text for event in rest if isinstance(event, ToolProgress)]
    assert progress[-1] == "step 9999"
    assert len(rest) <= STREAM_BUFFER + 10


async def test_a_reader_that_leaves_while_its_run_waits_ends_the_run(
    autojump_clock: trio.abc.Clock,
) -> None:
    stop = False

    def model(request: ModelRequest) -> Reply | str:
        return "stopped" if stop else Reply(tool_calls=[("tick", {"n": results_in(request)})])

    async with satsuma.open_agent(Ticker, model=FunctionModel(model)) as agent:
        stream = agent.stream("count")
        await stream.__anext__()
        await trio.sleep(100)  # the run fills the buffer, then waits for the reader
        with trio.fail_after(1):  # virtual seconds: leaving cancels the run at once
            await stream.aclose()
        stop = True
        result = await agent.run("again?")  # the agent still serves
        assert result.status == "completed"
        check_conversation(agent.history)
