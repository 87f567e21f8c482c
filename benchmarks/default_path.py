"""What the path users write costs in a long-running service: agents declared with their
model by name and opened one per conversation, with nothing passed by hand.

Two measurements, against satsuma's ``MessagesServer`` (the Anthropic Messages API over
loopback HTTP) in a child process of its own, so that the memory and CPU measured here
are the client's:

1. Idle agents: N agents (1,000 by default) opened with ``open_agent(Notes)`` and held
   open at once, as a service holds its conversations: the time per open, and the RSS
   and the traced Python memory (tracemalloc) they add, per agent. The bars (issue 17):
   at most 0.5 ms and 20 KiB per idle agent.
2. Many conversations in a row: R runs (10,000 by default), each ``async with
   open_agent(Notes) as agent: await agent.run(prompt)`` (two requests: a tool call,
   then the answer). The RSS is read every R/10 runs; printed are the RSS after the
   first tenth (the warm-up: imports, pools, caches) and at the end, and the growth
   between them, next to a hand-written trio loop over one shared ``AsyncAnthropic``
   doing the same conversations. Bar: flat within 5% after warm-up, streamed or not —
   so satsuma runs twice: by name (whole responses, since nothing watches the text
   live) and with one shared ``AnthropicModel(stream=True)`` passed to ``open_agent``.

3. Exact counts of a whole run (``_callcount.py``): the function calls (``sys.setprofile``)
   and trio task steps of ``run.py``'s contenders against its loopback Messages API, the
   same however busy the machine is: satsuma as the docs show it (``satsuma_default``)
   and with a client passed in (``satsuma``), beside the hand-written trio loop over
   ``AsyncAnthropic.messages.create`` (``plain_trio_whole``, the floor of issue 36's
   targets): a text-only run, a 1-call run, per extra tool call (11-call run - 1-call
   run, over 10; and from 2 calls, over 9, which does not charge the extra calls with
   the nursery a lone call runs without) and per turn of 3 calls (10-turn run - 2-turn
   run, over 8).

4. A conversation's first round trip, phase by phase (``_phasecount.py``): the text-only
   run of section 3 as ``open_agent``'s entry, ``agent.run`` and the block's exit, each
   in trio scheduler batches (every hop between the caller's task and the agent's costs
   one), task steps, tasks spawned and function calls, beside the floor's whole run.

Figures are printed, never asserted: the exit status is 0 whatever they are (it is not 0
when the benchmark itself goes wrong, e.g. a run did not complete).

    python benchmarks/default_path.py [--quick] [--runs R] [--idle N]

``--quick`` uses tiny sizes so that a test can exercise the harness in a moment.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import os
import time
import tracemalloc
import warnings
from collections.abc import Awaitable, Callable
from typing import Any

import trio
from _callcount import RunCounts, count_runs
from _harness import header, table
from _phasecount import PHASES, count_phases
from long_lived import ANSWER, PROMPT_PADDING, Notes, _server
from long_lived import _hand_loop as _hand_loop_over_one_client

from satsuma import AnthropicModel, open_agent


def _rss_kib() -> int:
    """The process's resident set now (Linux: /proc/self/statm)."""
    with open("/proc/self/statm", encoding="ascii") as statm:
        pages = int(statm.read().split()[1])
    return pages * os.sysconf("SC_PAGE_SIZE") // 1024


# --- 1. idle agents ----------------------------------------------------------------------


async def _idle(count: int) -> dict[str, float]:
    # A first agent opened and closed: imports, the shared client and its pool.
    async with open_agent(Notes) as agent:
        await agent.run(f"warm-up: {PROMPT_PADDING}")
    gc.collect()
    rss_before = _rss_kib()
    async with contextlib.AsyncExitStack() as stack:
        start = time.perf_counter()
        for _ in range(count):
            await stack.enter_async_context(open_agent(Notes))
        opened = time.perf_counter() - start
        gc.collect()
        rss = _rss_kib() - rss_before
    # Again under tracemalloc (which slows every allocation: not timed).
    tracemalloc.start()
    traced_before = tracemalloc.get_traced_memory()[0]
    async with contextlib.AsyncExitStack() as stack:
        for _ in range(count):
            await stack.enter_async_context(open_agent(Notes))
        gc.collect()
        traced = tracemalloc.get_traced_memory()[0] - traced_before
    tracemalloc.stop()
    return {
        "open_ms": opened / count * 1e3,
        "rss_kib": rss / count,
        "traced_kib": traced / 1024 / count,
    }


# --- 2. many conversations ------------------------------------------------------------------


async def _satsuma_runs(runs: int, on_run: Callable[[int], None], *, stream: bool) -> None:
    model = AnthropicModel(stream=True) if stream else None
    try:
        for index in range(runs):
            async with open_agent(Notes, model=model) as agent:
                result = await agent.run(f"note {index}: {PROMPT_PADDING}")
            if result.status != "completed" or result.output != ANSWER:
                raise SystemExit(f"satsuma run {index} ended {result.status}: {result.error}")
            on_run(index)
    finally:
        if model is not None:
            await model.aclose()


async def _by_name(runs: int, on_run: Callable[[int], None]) -> None:
    await _satsuma_runs(runs, on_run, stream=False)


async def _streamed(runs: int, on_run: Callable[[int], None]) -> None:
    await _satsuma_runs(runs, on_run, stream=True)


async def _hand_loop(runs: int, on_run: Callable[[int], None]) -> None:
    await _hand_loop_over_one_client(runs, on_run, fresh=True)


async def _memory_over_runs(
    contender: Callable[[int, Callable[[int], None]], Awaitable[None]], runs: int
) -> dict[str, float]:
    step = max(1, runs // 10)
    samples: list[int] = []
    start = time.perf_counter()

    def on_run(index: int) -> None:
        if (index + 1) % step == 0:
            samples.append(_rss_kib())

    await contender(runs, on_run)
    took = time.perf_counter() - start
    warm, end = samples[0], samples[-1]
    return {
        "warm_mib": warm / 1024,
        "end_mib": end / 1024,
        "growth": (end - warm) / warm * 100,
        "peak_mib": max(samples) / 1024,
        "ms_per_run": took / runs * 1e3,
    }


# --- 3. exact counts ----------------------------------------------------------------------

COUNTED = (
    ("satsuma_default", "satsuma, as the docs show it"),
    ("satsuma", "satsuma, client passed in"),
    ("plain_trio_whole", "hand trio loop (floor)"),
)


def _count_rows(counts: dict[str, RunCounts]) -> list[list[str]]:
    floor = counts["plain_trio_whole"]
    figures: list[tuple[str, Any]] = [
        ("function calls, text-only run", lambda c: c.calls["text"]),
        ("function calls, 1-call run", lambda c: c.calls["1 call"]),
        ("function calls per extra tool call", lambda c: c.per_extra_call()),
        ("function calls per extra tool call from 2 calls", lambda c: c.per_extra_call(base=2)),
        ("function calls per turn (3 calls)", lambda c: c.per_turn()),
        (f"function calls, {floor.turns}-turn run", lambda c: c.calls["T turns"]),
        ("task steps, 1-call run", lambda c: c.steps["1 call"]),
        ("task steps per extra tool call", lambda c: c.per_extra_call("steps")),
        (
            "task steps per extra tool call from 2 calls",
            lambda c: c.per_extra_call("steps", base=2),
        ),
        ("task steps per turn (3 calls)", lambda c: c.per_turn("steps")),
    ]
    rows = []
    for label, figure in figures:
        # Whole runs' counts are whole; per call and per turn, differences over several.
        cells = [f"{figure(counts[key]):,.1f}".removesuffix(".0") for key, _ in COUNTED]
        first = figure(counts[COUNTED[0][0]])
        ratio = first / figure(floor) if figure(floor) else float("nan")
        rows.append([label, *cells, f"{ratio:.2f}x"])
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="tiny sizes, for a test")
    parser.add_argument("--runs", type=int, default=10_000, help="conversations in a row")
    parser.add_argument("--idle", type=int, default=1_000, help="idle agents held open")
    args = parser.parse_args()
    # The SDK warns, once per process, that a model id is near its end of life.
    warnings.simplefilter("ignore", DeprecationWarning)
    runs, idle = (50, 20) if args.quick else (args.runs, args.idle)
    with _server() as base_url:
        os.environ["ANTHROPIC_BASE_URL"] = base_url
        os.environ.setdefault("ANTHROPIC_API_KEY", "test-key")
        idle_figures = trio.run(_idle, idle)
        memory = {
            label: trio.run(_memory_over_runs, contender, runs)
            for label, contender in (
                ("hand trio loop, one client (peer)", _hand_loop),
                ("satsuma, model by name", _by_name),
                ("satsuma, AnthropicModel(stream=True)", _streamed),
            )
        }
    if args.quick:
        counts = count_runs([key for key, _ in COUNTED], many=3, turns=3, samples=3)
        phases = count_phases(samples=1)
    else:
        counts = count_runs([key for key, _ in COUNTED])
        phases = count_phases()
    floor_counts = counts["plain_trio_whole"]
    lines = header("The default path: agents by name, one open_agent per conversation")
    lines += [
        "",
        f"1. {idle:,} idle agents held open (bars: 0.5 ms, 20 KiB per agent):",
        "",
        *table(
            ["", "per agent"],
            [
                ["open_agent(Notes)", f"{idle_figures['open_ms']:.3f} ms"],
                ["RSS", f"{idle_figures['rss_kib']:.1f} KiB"],
                ["traced Python memory", f"{idle_figures['traced_kib']:.1f} KiB"],
            ],
        ),
        "",
        f"2. {runs:,} conversations in a row, RSS after the first tenth and at the end "
        "(bar: flat within 5%):",
        "",
        *table(
            ["", "ms/run", "RSS warm", "RSS end", "growth", "peak"],
            [
                [
                    label,
                    f"{m['ms_per_run']:.2f}",
                    f"{m['warm_mib']:.1f} MiB",
                    f"{m['end_mib']:.1f} MiB",
                    f"{m['growth']:+.1f}%",
                    f"{m['peak_mib']:.1f} MiB",
                ]
                for label, m in memory.items()
            ],
        ),
    ]
    lines += [
        "",
        "3. Exact counts of one run (the least of several), against run.py's loopback "
        "Messages API;",
        f"   per extra call: ({floor_counts.many}-call run - 1-call run) / "
        f"{floor_counts.many - 1}, and from 2 calls: ({floor_counts.many}-call run - 2-call "
        f"run) / {floor_counts.many - 2};",
        f"   per turn: ({floor_counts.turns}-turn run - 2-turn run) / "
        f"{floor_counts.turns - 2}. Ratio: as the docs show it / the floor.",
        "",
        *table(["", *(label for _, label in COUNTED), "ratio"], _count_rows(counts)),
        "",
        "4. The text-only run of 3 as satsuma's phases, beside the floor's whole run (the "
        "least of several):",
        "",
        *table(
            ["", "scheduler batches", "task steps", "tasks spawned", "function calls"],
            [
                [
                    phase,
                    f"{c.batches:,}",
                    f"{c.steps:,}",
                    f"{c.spawned:,}",
                    f"{c.calls:,}",
                ]
                for phase, c in ((phase, phases[phase]) for phase in PHASES)
            ],
        ),
    ]
    print("\n".join(lines))


if __name__ == "__main__":
    main()
