"""How much ToolRunner adds to a tool call, next to a floor measured in the same run.

Two measurements:

1. Per-call overhead: ``await ToolRunner([NoOp]).execute(calls)`` for many calls of a
   no-op async tool with five parameters (every call passes valid values for all five),
   strategy "parallel", default timeout. The floor is a bare trio nursery spawning as
   many no-op tasks, each in its own ``trio.CancelScope`` with a deadline: the least any
   supervised runner on trio does per call. Both are timed several times, interleaved so
   that they share the machine's noise, inside one ``trio.run``; the medians are
   compared. Target: satsuma / floor <= 2.0. A "sequential" run is shown for information.
2. Parallel I/O: calls of a tool that sleeps 0.1 s, strategy "parallel", timed on the
   real clock. The floor is the ideal 0.1 s. Target: under 0.3 s.

Figures are printed, never asserted: the exit status is 0 whether a target is met or not.

    python benchmarks/runner_overhead.py [--quick]

``--quick`` uses tiny sizes so that a test can exercise the harness in a moment.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import os
import platform
import statistics
import sys
import time
from collections.abc import Awaitable, Callable, Sequence
from importlib import metadata
from typing import Any, ClassVar, Literal

import trio

from satsuma import Tool, ToolCall, ToolContext, ToolRunner

FULL_CALLS = 10_000
FULL_REPEATS = 7
FULL_IO_CALLS = 1_000
QUICK_CALLS = 200
QUICK_REPEATS = 2
QUICK_IO_CALLS = 50
# Calls of the first turn of the counted agent runs (past one); the turn's request and its
# hundred-odd results stay small enough for the loopback server.
FULL_AGENT_CALLS = 40
QUICK_AGENT_CALLS = 5

OVERHEAD_TARGET_RATIO = 2.0
IO_SLEEP = 0.1
IO_TARGET_SECONDS = 0.3
FLOOR_DEADLINE = 120.0  # the runner's default timeout, so the floor's scopes match


class NoOp(Tool):
    name = "noop"
    description = "Do nothing with five arguments."
    parameters: ClassVar[dict[str, Any]] = {
        "text": {"type": "string", "required": True},
        "count": {"type": "integer", "minimum": 0, "maximum": 1_000_000, "required": True},
        "ratio": {"type": "number", "required": True},
        "flag": {"type": "boolean", "required": True},
        "tags": {"type": "array", "items": {"type": "string"}, "required": True},
    }

    async def run(self, args: dict[str, Any], ctx: ToolContext) -> Any:
        return ("ok", "")


class Sleep(Tool):
    name = "sleep"
    description = "Wait a tenth of a second, as a tool waiting on I/O would."

    async def run(self, args: dict[str, Any], ctx: ToolContext) -> Any:
        await trio.sleep(IO_SLEEP)
        return ("ok", "")


def noop_calls(count: int) -> list[ToolCall]:
    """Calls of NoOp, each with its own valid arguments (built before any timing)."""
    return [
        ToolCall(
            id=f"toolu_{index:06d}",
            name="noop",
            input={
                "text": f"call {index}",
                "count": index,
                "ratio": index / 7,
                "flag": index % 2 == 0,
                "tags": ["a", "b", str(index)],
            },
        )
        for index in range(count)
    ]


async def _noop() -> None:
    return None


async def _floor_task() -> None:
    with trio.CancelScope(deadline=trio.current_time() + FLOOR_DEADLINE):
        await _noop()


async def run_floor(count: int) -> None:
    """The floor: a nursery spawning ``count`` tasks, each in its own cancel scope."""
    async with trio.open_nursery() as nursery:
        for _ in range(count):
            nursery.start_soon(_floor_task)


def _check_outcomes(outcomes: Sequence[Any], count: int) -> None:
    # Not a timing check: a run whose calls failed validation would measure the wrong path.
    if len(outcomes) != count:
        raise RuntimeError(f"expected {count} outcomes, got {len(outcomes)}")
    failed = [outcome for outcome in outcomes if outcome.is_error]
    if failed:
        raise RuntimeError(f"{len(failed)} calls failed; first: {failed[0].content}")


async def run_satsuma(
    calls: Sequence[ToolCall], strategy: Literal["parallel", "sequential"]
) -> None:
    outcomes = await ToolRunner([NoOp], strategy=strategy).execute(calls)
    _check_outcomes(outcomes, len(calls))


async def _timed(action: Callable[[], Awaitable[None]]) -> float:
    gc.collect()
    start = time.perf_counter()
    await action()
    return time.perf_counter() - start


async def _overhead_samples(calls: int, repeats: int) -> dict[str, list[float]]:
    call_list = noop_calls(calls)
    actions: dict[str, Callable[[], Awaitable[None]]] = {
        "floor": lambda: run_floor(calls),
        "parallel": lambda: run_satsuma(call_list, "parallel"),
        "sequential": lambda: run_satsuma(call_list, "sequential"),
    }
    # Warm up every path once, untimed.
    warm = min(calls, 1_000)
    await run_floor(warm)
    await run_satsuma(call_list[:warm], "parallel")
    await run_satsuma(call_list[:warm], "sequential")

    samples: dict[str, list[float]] = {name: [] for name in actions}
    order = list(actions)
    for repeat in range(repeats):
        # Interleaved, and in turn reversed, so no measurement always goes first.
        for name in order if repeat % 2 == 0 else reversed(order):
            samples[name].append(await _timed(actions[name]))
    gc.collect()
    return samples


def measure_overhead(calls: int, repeats: int) -> dict[str, Any]:
    """Time the floor, satsuma "parallel" and satsuma "sequential" on ``calls`` no-op
    calls, ``repeats`` times each, interleaved, in one ``trio.run``.

    Returns the medians in µs per call (``floor_us``, ``parallel_us``, ``sequential_us``),
    ``ratio`` (parallel / floor), ``target_met``, and every sample in seconds
    (``samples``: name to list).
    """
    if calls < 1 or repeats < 1:
        raise ValueError("calls and repeats must be at least 1")
    samples = trio.run(_overhead_samples, calls, repeats)
    medians = {name: statistics.median(values) / calls * 1e6 for name, values in samples.items()}
    ratio = medians["parallel"] / medians["floor"]
    return {
        "calls": calls,
        "repeats": repeats,
        "floor_us": medians["floor"],
        "parallel_us": medians["parallel"],
        "sequential_us": medians["sequential"],
        "ratio": ratio,
        "target_met": ratio <= OVERHEAD_TARGET_RATIO,
        "samples": samples,
    }


def _calls_made(action: Callable[[], Awaitable[None]]) -> int:
    """How many functions (Python's and C's) one run of ``action`` calls, counted by a
    profile hook in a trio.run of its own."""
    count = 0

    def profile(frame: object, event: str, arg: object) -> None:
        nonlocal count
        if event in ("call", "c_call"):
            count += 1

    async def counted() -> None:
        await action()  # warm: first-call caches are not per-call work
        sys.setprofile(profile)
        try:
            await action()
        finally:
            sys.setprofile(None)

    trio.run(counted)
    return count


def count_calls(calls: int) -> dict[str, float]:
    """Function calls per extra tool call, satsuma's "parallel" runner and the floor:
    a run of ``calls + 1`` calls minus a run of one, over ``calls``. The same on every
    machine, however busy: the CPU figure that noise does not move.

    Returns ``satsuma`` and ``floor`` (calls per extra call) and ``ratio``.
    """
    if calls < 1:
        raise ValueError("calls must be at least 1")
    call_list = noop_calls(calls + 1)
    per_call = {}
    for name, run in (
        ("satsuma", lambda n: run_satsuma(call_list[:n], "parallel")),
        ("floor", run_floor),
    ):
        more = _calls_made(lambda run=run: run(calls + 1))
        one = _calls_made(lambda run=run: run(1))
        per_call[name] = (more - one) / calls
    return {**per_call, "ratio": per_call["satsuma"] / per_call["floor"]}


def _run_counted(contender: Any, text: str) -> int:
    """Function calls of one run of ``contender`` (the second: the first warms), counted
    in this thread only: the loopback server's thread is not."""
    count = 0

    def profile(frame: object, event: str, arg: object) -> None:
        nonlocal count
        if event in ("call", "c_call"):
            count += 1

    async def counted() -> None:
        await contender.open()
        try:
            await contender.run(text)
            sys.setprofile(profile)
            try:
                await contender.run(text)
            finally:
                sys.setprofile(None)
        finally:
            await contender.aclose()

    if contender.flavour == "trio":
        trio.run(counted)
    else:
        asyncio.run(counted())
    return count


def count_agent_calls(calls: int) -> dict[str, float]:
    """Function calls per extra tool call of a whole agent run, satsuma's and the floor's
    (``_contenders.PlainLoop``, a hand-written loop over ``AsyncAnthropic``), both against
    the loopback Messages API: a run whose first turn asks for ``calls + 1`` calls of a
    one-argument no-op tool minus one that asks for one, over ``calls``.

    Returns ``satsuma`` and ``floor`` (calls per extra call) and ``ratio``.
    """
    if calls < 1:
        raise ValueError("calls must be at least 1")
    # The benchmarks' own modules: importable when this file runs as a script.
    from _contenders import PlainLoop, Satsuma, Sizes
    from _conversation import prompt
    from _servers import serve

    per_call = {}
    with serve() as servers:
        for name, kind in (("satsuma", Satsuma), ("floor", PlainLoop)):
            made = {
                n: _run_counted(
                    kind(Sizes(), servers.anthropic_url, servers.openai_url),
                    prompt(2, [("noop", n)]),
                )
                for n in (calls + 1, 1)
            }
            per_call[name] = (made[calls + 1] - made[1]) / calls
    return {**per_call, "ratio": per_call["satsuma"] / per_call["floor"]}


async def _parallel_io(calls: int) -> float:
    call_list = [
        ToolCall(id=f"toolu_{index:06d}", name="sleep", input={}) for index in range(calls)
    ]
    runner = ToolRunner([Sleep], strategy="parallel")
    gc.collect()
    start = time.perf_counter()
    outcomes = await runner.execute(call_list)
    elapsed = time.perf_counter() - start
    _check_outcomes(outcomes, calls)
    return elapsed


def measure_parallel_io(calls: int) -> float:
    """Wall time in seconds (real clock) of ``calls`` parallel calls that each sleep 0.1 s."""
    if calls < 1:
        raise ValueError("calls must be at least 1")
    return trio.run(_parallel_io, calls)


def _verdict(met: bool) -> str:
    return "target met" if met else "target MISSED"


def _spread(samples: Sequence[float], calls: int) -> str:
    low, high = min(samples) / calls * 1e6, max(samples) / calls * 1e6
    return f"{low:.2f}-{high:.2f}"


def format_report(
    overhead: dict[str, Any],
    io_calls: int,
    io_seconds: float,
    counted: dict[str, float] | None = None,
    agent_counted: dict[str, float] | None = None,
    agent_calls: int = 0,
) -> str:
    calls = overhead["calls"]
    samples = overhead["samples"]
    io_ratio = io_seconds / IO_SLEEP
    io_met = io_seconds < IO_TARGET_SECONDS
    header = ("measurement", "calls", "satsuma", "floor", "ratio", "target", "result")
    rows = [
        (
            "parallel overhead (µs/call)",
            f"{calls:,}",
            f"{overhead['parallel_us']:.2f}",
            f"{overhead['floor_us']:.2f}",
            f"{overhead['ratio']:.2f}x",
            f"<= {OVERHEAD_TARGET_RATIO:.1f}x",
            _verdict(overhead["target_met"]),
        ),
        (
            "sequential (µs/call)",
            f"{calls:,}",
            f"{overhead['sequential_us']:.2f}",
            "-",
            f"{overhead['sequential_us'] / overhead['floor_us']:.2f}x",
            "-",
            "information",
        ),
        (
            f"parallel I/O, sleep {IO_SLEEP:g} s (s)",
            f"{io_calls:,}",
            f"{io_seconds:.3f}",
            f"{IO_SLEEP:.3f}",
            f"{io_ratio:.2f}x",
            f"< {IO_TARGET_SECONDS:g} s",
            _verdict(io_met),
        ),
    ]
    if counted is not None:
        rows.insert(
            1,
            (
                "function calls per call",
                f"{calls:,}",
                f"{counted['satsuma']:.1f}",
                f"{counted['floor']:.1f}",
                f"{counted['ratio']:.2f}x",
                "-",
                "information",
            ),
        )
    if agent_counted is not None:
        rows.insert(
            2 if counted is not None else 1,
            (
                "agent run, function calls per call",
                f"{agent_calls:,}",
                f"{agent_counted['satsuma']:.1f}",
                f"{agent_counted['floor']:.1f}",
                f"{agent_counted['ratio']:.2f}x",
                "-",
                "information",
            ),
        )
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
        "satsuma ToolRunner benchmark",
        f"{platform.python_implementation()} {platform.python_version()}, "
        f"trio {trio.__version__}, satsuma {satsuma_version}",
        f"machine: {platform.platform()}, {os.cpu_count()} CPUs",
        f"overhead: median of {overhead['repeats']} interleaved runs, perf_counter, "
        f"one trio.run; floor = nursery + CancelScope per task",
        "",
        line(header),
        line(["-" * width for width in widths]),
        *(line(row) for row in rows),
        "",
        "µs/call min-max over the runs: "
        f"floor {_spread(samples['floor'], calls)}, "
        f"parallel {_spread(samples['parallel'], calls)}, "
        f"sequential {_spread(samples['sequential'], calls)}",
        "sequential ratio is against the parallel floor, for information only.",
        "function calls per call: Python and C functions a tool call calls (sys.setprofile),",
        "the same however busy the machine is.",
        "agent run: a whole run of a one-argument tool against the loopback Messages API,",
        "per extra call of its first turn; its floor is a hand-written loop over",
        "AsyncAnthropic (_contenders.PlainLoop, asyncio). The server's thread is not counted.",
    ]
    return "\n".join(out)


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="tiny sizes, to test the harness")
    options = parser.parse_args(argv)
    if options.quick:
        calls, repeats, io_calls = QUICK_CALLS, QUICK_REPEATS, QUICK_IO_CALLS
    else:
        calls, repeats, io_calls = FULL_CALLS, FULL_REPEATS, FULL_IO_CALLS
    overhead = measure_overhead(calls, repeats)
    io_seconds = measure_parallel_io(io_calls)
    counted = count_calls(calls)
    agent_calls = QUICK_AGENT_CALLS if options.quick else FULL_AGENT_CALLS
    agent_counted = count_agent_calls(agent_calls)
    print(format_report(overhead, io_calls, io_seconds, counted, agent_counted, agent_calls))


if __name__ == "__main__":
    main(sys.argv[1:])
