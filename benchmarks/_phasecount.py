"""Exact counts of a conversation's first round trip, phase by phase: what
``async with open_agent(BenchAgent) as agent: await agent.run(prompt)`` costs in entering
the block, in the run, and in leaving the block, beside the hand-written trio loop's whole
run (``plain_trio_whole``), against ``run.py``'s loopback Messages API (in a thread of
this process).

For each phase: the trio scheduler's batches (one I/O wait each: every hop between two
tasks costs one), the task steps, the tasks spawned, and the function calls (Python's and
C's, ``sys.setprofile`` in this thread only, as ``_callcount``). Each figure is the least
of ``samples`` conversations, after a few that warm (the pool, first-call caches); the
batches and steps do not depend on how busy the machine is, the calls only on how the
loopback reads fall.
"""

from __future__ import annotations

import sys
import warnings
from collections.abc import Awaitable, Callable
from functools import partial
from typing import Any

import attrs
import trio
import trio.lowlevel
from _contenders import CONTENDERS, Sizes
from _conversation import prompt
from _servers import serve

import satsuma

__all__ = ["PHASES", "PhaseCounts", "count_phases"]

# The phases, in order; the last is the floor's whole run.
PHASES = ("open_agent (enter)", "agent.run", "leaving the block", "satsuma, whole", "floor")


@attrs.frozen
class PhaseCounts:
    batches: int
    steps: int
    spawned: int
    calls: int


class _Counter(trio.abc.Instrument):
    def __init__(self) -> None:
        self.batches = self.steps = self.spawned = self.calls = 0

    def before_io_wait(self, timeout: float) -> None:
        self.batches += 1

    def before_task_step(self, task: trio.lowlevel.Task) -> None:
        self.steps += 1

    def task_spawned(self, task: trio.lowlevel.Task) -> None:
        self.spawned += 1

    def profile(self, frame: object, event: str, arg: object) -> None:
        if event == "call" or event == "c_call":
            self.calls += 1


async def _counted(step: Callable[[], Awaitable[Any]]) -> tuple[PhaseCounts, Any]:
    counter = _Counter()
    trio.lowlevel.add_instrument(counter)
    sys.setprofile(counter.profile)
    try:
        value = await step()
    finally:
        sys.setprofile(None)
        trio.lowlevel.remove_instrument(counter)
    counts = PhaseCounts(counter.batches, counter.steps, counter.spawned, counter.calls)
    return counts, value


async def _measure(anthropic_url: str, openai_url: str, samples: int) -> dict[str, PhaseCounts]:
    text = prompt(1, [])
    agent = CONTENDERS["satsuma_default"](Sizes(), anthropic_url, openai_url)
    floor = CONTENDERS["plain_trio_whole"](Sizes(), anthropic_url, openai_url)
    await agent.open()
    await floor.open()
    seen: dict[str, list[PhaseCounts]] = {phase: [] for phase in _MEASURED}
    try:
        for index in range(samples + 3):
            manager = satsuma.open_agent(agent._agent_class)  # type: ignore[attr-defined]
            entered, handle = await _counted(manager.__aenter__)
            ran, result = await _counted(partial(handle.run, text))
            left, _ = await _counted(partial(manager.__aexit__, None, None, None))
            if result.status != "completed":
                raise SystemExit(f"the counted run ended {result.status}: {result.error}")
            floored, _ = await _counted(partial(floor.run, text))
            if index < 3:
                continue  # warming
            for phase, counts in zip(_MEASURED, (entered, ran, left, floored), strict=True):
                seen[phase].append(counts)
    finally:
        await agent.aclose()
        await floor.aclose()
    least = {
        phase: PhaseCounts(*(min(getattr(c, f) for c in counts) for f in _FIELDS))
        for phase, counts in seen.items()
    }
    # The whole conversation: its phases' figures added up.
    parts = [least[phase] for phase in PHASES[:3]]
    least[PHASES[3]] = PhaseCounts(*(sum(getattr(p, f) for p in parts) for f in _FIELDS))
    return {phase: least[phase] for phase in PHASES}


_FIELDS = ("batches", "steps", "spawned", "calls")
_MEASURED = (*PHASES[:3], PHASES[4])


def count_phases(*, samples: int = 5) -> dict[str, PhaseCounts]:
    """The counts of each of ``PHASES``, the least of ``samples`` conversations."""
    if samples < 1:
        raise ValueError("samples must be at least 1")
    with warnings.catch_warnings(), serve() as servers:
        # The SDK warns, once per process, that a model id is near its end of life.
        warnings.simplefilter("ignore", DeprecationWarning)
        return trio.run(_measure, servers.anthropic_url, servers.openai_url, samples)
