"""satsuma inside asyncio (``satsuma.aio``) against satsuma under plain trio, side by side.

The same workloads, in one run, against the same loopback Messages API server (satsuma's
``MessagesServer``, in a thread of this process, playing ``_conversation``'s plans):

1. a 10-turn conversation (one tool call a turn), one run after another on one agent
   (``reset`` after each, so that every run is the same): runs per second;
2. 200 agents at once, each opened, run once on a 3-turn conversation, and closed:
   wall time;
3. a crossing: ``await rt.run(trio.lowlevel.checkpoint)`` from asyncio, against the
   checkpoint awaited in trio itself: what each call from asyncio pays on its own;
4. the loop's responsiveness: a ticker that wants to wake every 10 ms, while agents run
   20 parallel tool calls (each sleeping 200 ms) a turn, one run after another: how late
   each tick wakes, p50, p99 and max. Under plain trio the ticker is a trio task; under
   satsuma.aio it is an asyncio task on the loop trio is a guest of; and, as the floor,
   an asyncio ticker on a loop with nothing else to do.

Each mode is measured in a fresh interpreter (its CPU and memory its own); the modes
alternate for each repetition, and the table shows medians. The bars are issue 34's:
runs/s at least 0.85x plain trio's, 200 agents at most 1.3x its wall time, and the
ticker never more than 20 ms late at p99.

Run: ``python benchmarks/aio.py`` (``--quick`` for a short run that checks it works).
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import trio
import trio.lowlevel
from _conversation import FINAL_TEXT, prompt
from _harness import header, median, ratio, spread, table
from _servers import serve

import satsuma
from satsuma.aio import Runtime

MODES = ("trio", "aio")
LABELS = {"trio": "plain trio", "aio": "satsuma.aio"}
TICK = 0.010
TOOL_SLEEP = 0.2


@satsuma.tool
async def noop(n: int) -> str:
    """Do nothing."""
    return f"ok {n}"


@satsuma.tool
async def sleep(n: int) -> str:
    """Wait a little, as an I/O-bound tool does."""
    await trio.sleep(TOOL_SLEEP)
    return f"slept {n}"


class BenchAgent(satsuma.Agent):
    name = "bench"
    model = "claude-sonnet-4-5"
    tools = [noop, sleep]
    max_iterations = 100
    max_tokens = 1024


def _check(result: satsuma.RunResult[Any]) -> None:
    # Not a timing check: a run that did not end as scripted measured the wrong path.
    if result.output != FINAL_TEXT:
        raise RuntimeError(f"the run ended {result.status} with {result.output!r}")


def _model(url: str) -> satsuma.Model:
    import anthropic

    client = anthropic.AsyncAnthropic(api_key="test-key", base_url=url, max_retries=0)
    return satsuma.AnthropicModel(client)


# --- the child: one mode's measurements ------------------------------------------------


def _lateness(wakes: list[float]) -> list[float]:
    return [max(0.0, later - earlier - TICK) for earlier, later in itertools.pairwise(wakes)]


async def _trio_workloads(url: str, settings: dict[str, int]) -> dict[str, Any]:
    model = _model(url)
    out: dict[str, Any] = {}
    text = prompt(10, [("noop", 1)])
    async with satsuma.open_agent(BenchAgent, model=model) as agent:
        _check(await agent.run(text))
        await agent.reset()
        start = time.perf_counter()
        for _ in range(settings["conversation_runs"]):
            _check(await agent.run(text))
            await agent.reset()
        out["runs_per_s"] = settings["conversation_runs"] / (time.perf_counter() - start)

    many = prompt(3, [("noop", 1)])

    async def one() -> None:
        async with satsuma.open_agent(BenchAgent, model=model) as agent:
            _check(await agent.run(many))

    start = time.perf_counter()
    async with trio.open_nursery() as nursery:
        for _ in range(settings["agents"]):
            nursery.start_soon(one)
    out["many_wall"] = time.perf_counter() - start

    start = time.perf_counter()
    for _ in range(settings["crossings"]):
        await trio.lowlevel.checkpoint()
    out["crossing"] = (time.perf_counter() - start) / settings["crossings"]

    wakes: list[float] = []
    parallel = prompt(2, [("sleep", 20)])
    async with trio.open_nursery() as nursery:

        async def ticker() -> None:
            while True:
                await trio.sleep(TICK)
                wakes.append(time.perf_counter())

        nursery.start_soon(ticker)
        async with satsuma.open_agent(BenchAgent, model=model) as agent:
            for _ in range(settings["lag_runs"]):
                _check(await agent.run(parallel))
                await agent.reset()
        nursery.cancel_scope.cancel()
    out["lag"] = _lateness(wakes)
    return out


async def _aio_workloads(url: str, settings: dict[str, int]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    async with Runtime() as rt:
        # The client is made inside trio: its connection pool belongs to the trio run.
        model = await rt.run(_async_model, url)
        text = prompt(10, [("noop", 1)])
        agent = await rt.open_agent(BenchAgent, model=model)
        _check(await agent.run(text))
        await agent.reset()
        start = time.perf_counter()
        for _ in range(settings["conversation_runs"]):
            _check(await agent.run(text))
            await agent.reset()
        out["runs_per_s"] = settings["conversation_runs"] / (time.perf_counter() - start)
        await agent.aclose()

        many = prompt(3, [("noop", 1)])

        async def one() -> None:
            agent = await rt.open_agent(BenchAgent, model=model)
            _check(await agent.run(many))
            await agent.aclose()

        start = time.perf_counter()
        await asyncio.gather(*(one() for _ in range(settings["agents"])))
        out["many_wall"] = time.perf_counter() - start

        start = time.perf_counter()
        for _ in range(settings["crossings"]):
            await rt.run(trio.lowlevel.checkpoint)
        out["crossing"] = (time.perf_counter() - start) / settings["crossings"]

        wakes: list[float] = []

        async def ticker() -> None:
            while True:
                await asyncio.sleep(TICK)
                wakes.append(time.perf_counter())

        ticking = asyncio.create_task(ticker())
        parallel = prompt(2, [("sleep", 20)])
        agent = await rt.open_agent(BenchAgent, model=model)
        for _ in range(settings["lag_runs"]):
            _check(await agent.run(parallel))
            await agent.reset()
        ticking.cancel()
        await agent.aclose()
        out["lag"] = _lateness(wakes)

    wakes = []

    async def idle_ticker() -> None:
        for _ in range(len(out["lag"])):
            await asyncio.sleep(TICK)
            wakes.append(time.perf_counter())

    await idle_ticker()
    out["idle_lag"] = _lateness(wakes)
    return out


async def _async_model(url: str) -> satsuma.Model:
    return _model(url)


def child_main(mode: str, url: str, settings: dict[str, int]) -> None:
    if mode == "trio":
        out = trio.run(_trio_workloads, url, settings)
    else:
        out = asyncio.run(_aio_workloads(url, settings))
    print(json.dumps(out))


# --- the parent: servers, children, report ------------------------------------------------


def _child(mode: str, url: str, settings: dict[str, int]) -> dict[str, Any]:
    command = [sys.executable, str(Path(__file__).resolve()), "--child", mode, url]
    done = subprocess.run(
        [*command, json.dumps(settings)], capture_output=True, encoding="utf-8", check=False
    )
    if done.returncode != 0:
        raise RuntimeError(f"the {mode} child failed:\n{done.stderr}")
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def _percentile(samples: list[float], q: float) -> float:
    if len(samples) < 2:
        return samples[0] if samples else 0.0
    return statistics.quantiles(samples, n=100, method="inclusive")[int(q) - 1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a short run that checks it works")
    parser.add_argument("--child", nargs=3, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        mode, url, settings = args.child
        child_main(mode, url, json.loads(settings))
        return
    settings = (
        {"conversation_runs": 5, "agents": 20, "lag_runs": 2, "repeats": 1, "crossings": 100}
        if args.quick
        else {
            "conversation_runs": 100,
            "agents": 200,
            "lag_runs": 10,
            "repeats": 5,
            "crossings": 5000,
        }
    )
    results: dict[str, list[dict[str, Any]]] = {mode: [] for mode in MODES}
    with serve() as servers:
        for _ in range(settings["repeats"]):
            for mode in MODES:
                results[mode].append(_child(mode, servers.anthropic_url, settings))
    _report(results, settings)


def _report(results: dict[str, list[dict[str, Any]]], settings: dict[str, int]) -> None:
    lines = header("satsuma.aio against plain trio: the same workloads, one run", "asyncio")
    lines.append(
        f"{settings['repeats']} repetitions, alternating; medians (min-max); "
        f"{settings['conversation_runs']} runs of the conversation, {settings['agents']} agents"
    )
    runs = {mode: [r["runs_per_s"] for r in results[mode]] for mode in MODES}
    walls = {mode: [r["many_wall"] for r in results[mode]] for mode in MODES}
    rows: list[list[str]] = []
    trio_runs, aio_runs = median(runs["trio"]), median(runs["aio"])
    rows.append(
        [
            "10-turn conversation (runs/s)",
            f"{trio_runs:.1f} ({spread(runs['trio'])})",
            f"{aio_runs:.1f} ({spread(runs['aio'])})",
            ratio(aio_runs, trio_runs),
            _verdict(aio_runs / trio_runs >= 0.85, ">= 0.85x"),
        ]
    )
    trio_wall, aio_wall = median(walls["trio"]), median(walls["aio"])
    rows.append(
        [
            f"{settings['agents']} agents at once (wall s)",
            f"{trio_wall:.2f} ({spread(walls['trio'], digits=2)})",
            f"{aio_wall:.2f} ({spread(walls['aio'], digits=2)})",
            ratio(aio_wall, trio_wall),
            _verdict(aio_wall / trio_wall <= 1.3, "<= 1.3x"),
        ]
    )
    crossing = {mode: [r["crossing"] * 1e6 for r in results[mode]] for mode in MODES}
    rows.append(
        [
            "a call from asyncio, round trip (µs)",
            f"{median(crossing['trio']):.1f}",
            f"{median(crossing['aio']):.1f}",
            "",
            "trio: the checkpoint awaited in trio",
        ]
    )
    lag = {mode: [x for r in results[mode] for x in r["lag"]] for mode in MODES}
    idle = [x for r in results["aio"] for x in r["idle_lag"]]
    for name, q in (("p50", 50), ("p99", 99)):
        trio_q, aio_q = _percentile(lag["trio"], q), _percentile(lag["aio"], q)
        verdict = _verdict(aio_q <= 0.020, "<= 20 ms") if q == 99 else ""
        rows.append(
            [
                f"10 ms ticker, 20 parallel calls: lateness {name} (ms)",
                f"{trio_q * 1000:.2f}",
                f"{aio_q * 1000:.2f}",
                "",
                verdict,
            ]
        )
    rows.append(
        [
            "10 ms ticker: lateness max (ms)",
            f"{max(lag['trio'], default=0) * 1000:.2f}",
            f"{max(lag['aio'], default=0) * 1000:.2f}",
            "",
            f"{len(lag['aio'])} ticks",
        ]
    )
    rows.append(
        [
            "idle asyncio loop, same ticker: p99 (ms)",
            "",
            f"{_percentile(idle, 99) * 1000:.2f}",
            "",
            "the floor: nothing else runs",
        ]
    )
    lines += ["", *table(["figure", LABELS["trio"], LABELS["aio"], "ratio", "bar"], rows)]
    print("\n".join(lines))


def _verdict(met: bool, bar: str) -> str:
    return f"{bar}: {'target met' if met else 'target MISSED'}"


if __name__ == "__main__":
    main()
