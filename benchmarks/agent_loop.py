"""What the agent loop costs per turn, what an idle agent weighs, and how many agents run
at once.

Three measurements, against models that answer at once (no network):

1. Loop overhead per turn: one agent, one run of many turns; each turn the model asks for
   two calls of a no-op tool, the last turn answers text. The whole run is timed; so is
   its floor, the parts that are not the loop, in the same ``trio.run``: as many
   ``ToolRunner.execute`` calls with the same two calls (the tools), and as many bare
   ``model.respond(request, listener)`` calls, replaying the requests the loop sent, with
   a no-op listener (the model). Loop overhead = whole - floor, from the medians of
   several interleaved repetitions. Target: < 200 µs per turn.
2. Memory per idle agent: 10,000 agents opened with ``open_agent`` in one
   ``AsyncExitStack``, sharing one ``ScriptedModel([])``; the memory traced by
   ``tracemalloc`` after opening them minus before, per agent. Target: < 20 KiB. All
   are then closed, and each is checked to have stopped.
3. Many agents at once: 1,000 agents, each in its own task of one nursery, each opened
   with its own ScriptedModel and running three turns (two tool calls of a tool that
   yields once, twice, then a text answer). Wall time of the whole nursery, opening and
   closing included. Target: < 10 s. Every run is checked to have completed.

Figures are printed, never asserted: the exit status is 0 whether a target is met or not
(it is not 0 when a run did not complete: that is a broken benchmark, not a slow one).

    python benchmarks/agent_loop.py [--quick]

``--quick`` uses tiny sizes so that a test can exercise the harness in a moment.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import os
import platform
import statistics
import sys
import time
import tracemalloc
from collections.abc import Sequence
from importlib import metadata
from typing import Any, ClassVar

import trio
import trio.lowlevel
import trio.testing

from satsuma import (
    Agent,
    AgentHandle,
    AgentUnavailable,
    ModelRequest,
    Tool,
    ToolCall,
    ToolContext,
    ToolRunner,
    Usage,
    open_agent,
)
from satsuma.testing import Reply, ScriptedModel

FULL_TURNS = 200
FULL_REPEATS = 7
FULL_IDLE_AGENTS = 10_000
FULL_CONCURRENT_AGENTS = 1_000
QUICK_TURNS = 20
QUICK_REPEATS = 2
QUICK_IDLE_AGENTS = 200
QUICK_CONCURRENT_AGENTS = 50

LOOP_TARGET_US = 200.0
IDLE_TARGET_KIB = 20.0
CONCURRENT_TARGET_SECONDS = 10.0

CALLS_PER_TURN = 2
CONCURRENT_TURNS = 3
FINAL_TEXT = "done"
# Given with every reply, so that the scripted model does not estimate it from the size
# of the whole conversation (a cost of the test model that grows with each turn).
REPLY_USAGE = Usage(input_tokens=10, output_tokens=5)


class NoOp(Tool):
    name = "noop"
    description = "Do nothing."
    parameters: ClassVar[dict[str, Any]] = {"n": {"type": "integer", "required": True}}

    async def run(self, args: dict[str, Any], ctx: ToolContext) -> Any:
        return ("ok", "")


class Yield(Tool):
    name = "yield_once"
    description = "Let the other tasks run once."
    parameters: ClassVar[dict[str, Any]] = {"n": {"type": "integer", "required": True}}

    async def run(self, args: dict[str, Any], ctx: ToolContext) -> Any:
        await trio.lowlevel.checkpoint()
        return ("ok", "")


class LoopAgent(Agent):
    name = "loop"
    tools: ClassVar[Sequence[object]] = [NoOp]
    max_iterations = 1_000_000


class IdleAgent(Agent):
    name = "idle"


class BusyAgent(Agent):
    name = "busy"
    tools: ClassVar[Sequence[object]] = [Yield]


class _NullListener:
    def text(self, delta: str) -> None:
        pass

    def thinking(self, delta: str) -> None:
        pass

    def retry(self, attempt: int, delay: float, reason: str) -> None:
        pass


def turn_calls(tool_name: str, turns: int) -> list[list[ToolCall]]:
    """The calls of each turn but the last. Every call has its own arguments, so that the
    loop guard (three identical calls in a row) never trips."""
    return [
        [
            ToolCall(
                id=f"toolu_{turn:05d}_{index}",
                name=tool_name,
                input={"n": turn * CALLS_PER_TURN + index},
            )
            for index in range(CALLS_PER_TURN)
        ]
        for turn in range(turns - 1)
    ]


def script(calls: Sequence[Sequence[ToolCall]]) -> list[Reply]:
    """One reply per turn: the calls of each turn, then a text answer."""
    return [
        *(Reply(tool_calls=tuple(turn), usage=REPLY_USAGE) for turn in calls),
        Reply(text=FINAL_TEXT, usage=REPLY_USAGE),
    ]


def _check_run(result: Any, turns: int) -> None:
    # Not a timing check: a run that did not complete measured the wrong path.
    if result.status != "completed" or result.output != FINAL_TEXT or result.iterations != turns:
        raise RuntimeError(
            f"run ended {result.status!r} after {result.iterations} turns "
            f"(expected completed after {turns}): {result.error}"
        )
    expected_messages = 2 * turns  # the prompt, then (assistant, tool results) pairs, answer
    if len(result.messages) != expected_messages:
        raise RuntimeError(f"run left {len(result.messages)} messages, not {expected_messages}")


# --- 1. loop overhead per turn ------------------------------------------------------------


async def _run_loop(replies: Sequence[Reply], turns: int) -> tuple[float, list[ModelRequest]]:
    """Time one run of ``turns`` turns; return the time and the requests the model got."""
    # Every request kept (not only the last 100): the model floor replays them all.
    model = ScriptedModel(replies, keep_requests=None)
    async with open_agent(LoopAgent, model=model) as agent:
        gc.collect()
        start = time.perf_counter()
        result = await agent.run("go")
        elapsed = time.perf_counter() - start
    _check_run(result, turns)
    return elapsed, model.requests


async def _run_tools(calls: Sequence[Sequence[ToolCall]]) -> float:
    """Time the tool part alone: one ``execute`` per turn, as the loop calls it."""
    runner = ToolRunner([NoOp])
    context: dict[str, Any] = {}
    interrupt = trio.Event()
    gc.collect()
    start = time.perf_counter()
    for turn in calls:
        outcomes = await runner.execute(turn, context, interrupt=interrupt)
        if any(outcome.is_error for outcome in outcomes):
            raise RuntimeError(f"a no-op call failed: {outcomes}")
    return time.perf_counter() - start


async def _run_model(replies: Sequence[Reply], requests: Sequence[ModelRequest]) -> float:
    """Time the model part alone: the requests of a loop run, replayed."""
    model = ScriptedModel(replies)
    listener = _NullListener()
    gc.collect()
    start = time.perf_counter()
    for request in requests:
        await model.respond(request, listener)
    return time.perf_counter() - start


async def _loop_samples(turns: int, repeats: int) -> dict[str, list[float]]:
    calls = turn_calls(NoOp.name, turns)
    replies = script(calls)
    # Warm up every path once, untimed; the warm-up's requests feed the first model floor.
    _, requests = await _run_loop(replies, turns)
    if len(requests) != turns:
        raise RuntimeError(f"the model got {len(requests)} requests, not {turns}")
    await _run_tools(calls)
    await _run_model(replies, requests)

    samples: dict[str, list[float]] = {"whole": [], "tools": [], "model": []}
    steps = list(samples)
    for repeat in range(repeats):
        # Interleaved, and in turn reversed, so that no measurement always goes first. The
        # model part replays the requests of the latest loop run.
        for name in steps if repeat % 2 == 0 else reversed(steps):
            if name == "whole":
                elapsed, requests = await _run_loop(replies, turns)
            elif name == "tools":
                elapsed = await _run_tools(calls)
            else:
                elapsed = await _run_model(replies, requests)
            samples[name].append(elapsed)
    gc.collect()
    return samples


def measure_loop(turns: int, repeats: int) -> dict[str, Any]:
    """Time a ``turns``-turn run of one agent (two no-op calls a turn) and its floor (the
    tool part and the model part alone), ``repeats`` times each, interleaved, in one
    ``trio.run``.

    Returns the medians in µs per turn (``whole_us``, ``tools_us``, ``model_us``,
    ``floor_us`` = tools + model, ``overhead_us`` = whole - floor), ``target_met``, and
    every sample in seconds (``samples``: name to list).
    """
    if turns < 2 or repeats < 1:
        raise ValueError("turns must be at least 2 and repeats at least 1")
    samples = trio.run(_loop_samples, turns, repeats)
    medians = {name: statistics.median(values) / turns * 1e6 for name, values in samples.items()}
    floor = medians["tools"] + medians["model"]
    overhead = medians["whole"] - floor
    return {
        "turns": turns,
        "repeats": repeats,
        "whole_us": medians["whole"],
        "tools_us": medians["tools"],
        "model_us": medians["model"],
        "floor_us": floor,
        "overhead_us": overhead,
        "target_met": overhead < LOOP_TARGET_US,
        "samples": samples,
    }


# --- 2. memory per idle agent -------------------------------------------------------------


async def _idle_memory(count: int) -> dict[str, Any]:
    model = ScriptedModel([])
    # Warm up: the first agent loads and caches what every later one shares.
    async with open_agent(IdleAgent, model=model):
        pass
    handles: list[AgentHandle] = []
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        start = time.perf_counter()
        async with contextlib.AsyncExitStack() as stack:
            for _ in range(count):
                handles.append(await stack.enter_async_context(open_agent(IdleAgent, model=model)))
            await trio.testing.wait_all_tasks_blocked()
            opened = time.perf_counter() - start
            gc.collect()
            after = tracemalloc.get_traced_memory()[0]
            start = time.perf_counter()
        closed = time.perf_counter() - start
    finally:
        tracemalloc.stop()
    # Not a timing check: every agent must have stopped with its block.
    running = 0
    for handle in handles:
        try:
            await handle.reset()
        except AgentUnavailable:
            continue
        running += 1
    if running:
        raise RuntimeError(f"{running} of {count} agents still answer after their block ended")
    if model.requests:
        raise RuntimeError("an idle agent called its model")
    return {
        "agents": count,
        "kib_per_agent": (after - before) / count / 1024,
        "open_seconds": opened,
        "close_seconds": closed,
    }


def measure_idle_memory(count: int) -> dict[str, Any]:
    """Open ``count`` agents (one shared ScriptedModel) and return ``kib_per_agent`` (the
    memory traced by tracemalloc while they are open, per agent), ``target_met``, and the
    wall times to open and to close them all (``open_seconds``, ``close_seconds``, under
    tracemalloc, for information)."""
    if count < 1:
        raise ValueError("count must be at least 1")
    result = trio.run(_idle_memory, count)
    result["target_met"] = result["kib_per_agent"] < IDLE_TARGET_KIB
    return result


# --- 3. many agents at once ---------------------------------------------------------------


async def _one_busy_agent(replies: Sequence[Reply], results: list[Any]) -> None:
    async with open_agent(BusyAgent, model=ScriptedModel(replies)) as agent:
        results.append(await agent.run("go"))


async def _concurrent(count: int) -> float:
    calls = turn_calls(Yield.name, CONCURRENT_TURNS)
    replies = script(calls)
    warm: list[Any] = []
    await _one_busy_agent(replies, warm)
    results: list[Any] = []
    gc.collect()
    start = time.perf_counter()
    async with trio.open_nursery() as nursery:
        for _ in range(count):
            nursery.start_soon(_one_busy_agent, replies, results)
    elapsed = time.perf_counter() - start
    # Not a timing check: every agent must have done its whole run.
    if len(results) != count:
        raise RuntimeError(f"{len(results)} of {count} runs ended")
    for result in results:
        _check_run(result, CONCURRENT_TURNS)
    return elapsed


def measure_concurrent(count: int) -> float:
    """Wall time in seconds of ``count`` agents, each opened in its own task and running
    three turns with two tool calls in each of the first two, all at once."""
    if count < 1:
        raise ValueError("count must be at least 1")
    return trio.run(_concurrent, count)


# --- report -------------------------------------------------------------------------------


def _verdict(met: bool) -> str:
    return "target met" if met else "target MISSED"


def _spread(samples: Sequence[float], turns: int) -> str:
    low, high = min(samples) / turns * 1e6, max(samples) / turns * 1e6
    return f"{low:.1f}-{high:.1f}"


def format_report(
    loop: dict[str, Any], idle: dict[str, Any], concurrent_agents: int, concurrent_seconds: float
) -> str:
    turns = loop["turns"]
    samples = loop["samples"]
    header = ("measurement", "size", "whole", "floor", "figure", "target", "result")
    rows = [
        (
            "loop overhead (µs/turn)",
            f"{turns:,} turns",
            f"{loop['whole_us']:.1f}",
            f"{loop['floor_us']:.1f}",
            f"{loop['overhead_us']:.1f}",
            f"< {LOOP_TARGET_US:g}",
            _verdict(loop["target_met"]),
        ),
        (
            "memory per idle agent (KiB)",
            f"{idle['agents']:,} agents",
            "-",
            "-",
            f"{idle['kib_per_agent']:.2f}",
            f"< {IDLE_TARGET_KIB:g}",
            _verdict(idle["target_met"]),
        ),
        (
            f"concurrent {CONCURRENT_TURNS}-turn runs (s)",
            f"{concurrent_agents:,} agents",
            "-",
            "-",
            f"{concurrent_seconds:.3f}",
            f"< {CONCURRENT_TARGET_SECONDS:g}",
            _verdict(concurrent_seconds < CONCURRENT_TARGET_SECONDS),
        ),
    ]
    widths = [max(len(row[column]) for row in (header, *rows)) for column in range(len(header))]

    def line(cells: Sequence[str]) -> str:
        first = cells[0].ljust(widths[0])
        rest = [cell.rjust(width) for cell, width in zip(cells[1:-1], widths[1:-1], strict=True)]
        return "  ".join([first, *rest, cells[-1]]).rstrip()

    try:
        satsuma_version = metadata.version("satsuma")
    except metadata.PackageNotFoundError:
        satsuma_version = "unknown"
    out = [
        "satsuma agent loop benchmark",
        f"{platform.python_implementation()} {platform.python_version()}, "
        f"trio {trio.__version__}, satsuma {satsuma_version}",
        f"machine: {platform.platform()}, {os.cpu_count()} CPUs",
        f"loop: median of {loop['repeats']} interleaved runs, perf_counter, one trio.run, "
        f"{CALLS_PER_TURN} no-op calls a turn; floor = ToolRunner.execute + model.respond alone",
        "",
        line(header),
        line(["-" * width for width in widths]),
        *(line(row) for row in rows),
        "",
        f"loop floor split (µs/turn): tools {loop['tools_us']:.1f}, model {loop['model_us']:.1f}",
        "loop µs/turn min-max over the runs: "
        f"whole {_spread(samples['whole'], turns)}, "
        f"tools {_spread(samples['tools'], turns)}, "
        f"model {_spread(samples['model'], turns)}",
        f"idle agents: opened in {idle['open_seconds']:.2f} s, closed in "
        f"{idle['close_seconds']:.2f} s (under tracemalloc, for information)",
        f"concurrent: {concurrent_seconds / concurrent_agents * 1e3:.2f} ms per agent "
        "(open, run, close), for information",
    ]
    return "\n".join(out)


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="tiny sizes, to test the harness")
    options = parser.parse_args(argv)
    if options.quick:
        turns, repeats = QUICK_TURNS, QUICK_REPEATS
        idle_agents, concurrent_agents = QUICK_IDLE_AGENTS, QUICK_CONCURRENT_AGENTS
    else:
        turns, repeats = FULL_TURNS, FULL_REPEATS
        idle_agents, concurrent_agents = FULL_IDLE_AGENTS, FULL_CONCURRENT_AGENTS
    loop = measure_loop(turns, repeats)
    idle = measure_idle_memory(idle_agents)
    concurrent_seconds = measure_concurrent(concurrent_agents)
    print(format_report(loop, idle, concurrent_agents, concurrent_seconds))


if __name__ == "__main__":
    main(sys.argv[1:])
