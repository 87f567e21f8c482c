"""Strategies and max_concurrency, measured with a peak-concurrency tracker on trio's
virtual clock; interruption between units."""

from __future__ import annotations

from typing import Any

import pytest
import trio

import satsuma
from satsuma import Batched, ToolRunner
from satsuma.testing import tool_call


class Tracker:
    def __init__(self) -> None:
        self.running = 0
        self.peak = 0
        self.starts: list[float] = []


def tracked(tracker: Tracker, seconds: float = 1.0) -> type[satsuma.Tool]:
    class Work(satsuma.Tool):
        name = "work"
        description = "Work for a while"

        async def run(self, args: dict[str, Any], ctx: satsuma.ToolContext) -> Any:
            tracker.starts.append(trio.current_time())
            tracker.running += 1
            tracker.peak = max(tracker.peak, tracker.running)
            try:
                await trio.sleep(seconds)
            finally:
                tracker.running -= 1
            return "done"

    return Work


@pytest.mark.parametrize(
    ("strategy", "max_concurrency", "peak", "starts"),
    [
        ("parallel", None, 7, [0] * 7),
        ("sequential", None, 1, [0, 1, 2, 3, 4, 5, 6]),
        (Batched(3), None, 3, [0, 0, 0, 1, 1, 1, 2]),
        ("parallel", 2, 2, [0, 0, 1, 1, 2, 2, 3]),
        (Batched(4), 2, 2, [0, 0, 1, 1, 2, 2, 3]),
    ],
)
async def test_peak_concurrency_and_start_times(
    autojump_clock: trio.abc.Clock,
    strategy: Any,
    max_concurrency: int | None,
    peak: int,
    starts: list[float],
) -> None:
    tracker = Tracker()
    runner = ToolRunner([tracked(tracker)], strategy=strategy, max_concurrency=max_concurrency)
    outcomes = await runner.execute([tool_call("work") for _ in range(7)])
    assert [o.content for o in outcomes] == ["done"] * 7
    assert tracker.peak == peak
    assert sorted(tracker.starts) == starts


async def test_max_concurrency_holds_across_concurrent_executes(
    autojump_clock: trio.abc.Clock,
) -> None:
    tracker = Tracker()
    runner = ToolRunner([tracked(tracker)], max_concurrency=3)
    async with trio.open_nursery() as nursery:
        for _ in range(3):
            nursery.start_soon(runner.execute, [tool_call("work") for _ in range(4)])
    assert tracker.peak == 3


async def test_the_deadline_starts_when_the_call_starts_not_while_it_waits(
    autojump_clock: trio.abc.Clock,
) -> None:
    tracker = Tracker()
    runner = ToolRunner([tracked(tracker, seconds=4)], max_concurrency=1, timeout=5)
    outcomes = await runner.execute([tool_call("work") for _ in range(3)])
    assert [o.error_kind for o in outcomes] == [None, None, None]
    assert [o.duration for o in outcomes] == [4, 4, 4]


def test_batched_needs_a_positive_size() -> None:
    with pytest.raises(ValueError, match="Batched size must be a positive integer"):
        Batched(0)


def interrupting(event: trio.Event, *, at: int) -> type[satsuma.Tool]:
    class Step(satsuma.Tool):
        name = "step"
        description = "One step; one of them queues a user message"
        parameters = {"n": {"type": "integer", "required": True}}

        async def run(self, args: dict[str, Any], ctx: satsuma.ToolContext) -> Any:
            await trio.sleep(1)
            if args["n"] == at:
                event.set()
            return f"step {args['n']}"

    return Step


SKIPPED = "Error: Skipped due to queued user message."


async def test_interrupt_under_sequential_skips_every_call_not_started(
    autojump_clock: trio.abc.Clock,
) -> None:
    event = trio.Event()
    runner = ToolRunner([interrupting(event, at=1)], strategy="sequential")
    outcomes = await runner.execute(
        [tool_call("step", {"n": n}) for n in range(4)], interrupt=event
    )
    assert [o.content for o in outcomes] == ["step 0", "step 1", SKIPPED, SKIPPED]
    assert [o.error_kind for o in outcomes] == [None, None, "skipped", "skipped"]
    assert all(o.is_error for o in outcomes[2:])


async def test_interrupt_under_batched_is_checked_between_batches(
    autojump_clock: trio.abc.Clock,
) -> None:
    event = trio.Event()
    runner = ToolRunner([interrupting(event, at=0)], strategy=Batched(2))
    outcomes = await runner.execute(
        [tool_call("step", {"n": n}) for n in range(5)], interrupt=event
    )
    # The first batch had started together; the rest had not.
    assert [o.content for o in outcomes] == ["step 0", "step 1", SKIPPED, SKIPPED, SKIPPED]


async def test_interrupt_under_parallel_skips_calls_still_waiting_for_a_slot(
    autojump_clock: trio.abc.Clock,
) -> None:
    event = trio.Event()
    runner = ToolRunner([interrupting(event, at=0)], max_concurrency=2)
    outcomes = await runner.execute(
        [tool_call("step", {"n": n}) for n in range(4)], interrupt=event
    )
    assert [o.content for o in outcomes] == ["step 0", "step 1", SKIPPED, SKIPPED]


async def test_an_interrupt_set_before_execute_skips_everything() -> None:
    event = trio.Event()
    event.set()
    runner = ToolRunner([interrupting(event, at=-1)])
    outcomes = await runner.execute(
        [tool_call("step", {"n": n}) for n in range(3)], interrupt=event
    )
    assert [o.content for o in outcomes] == [SKIPPED] * 3


async def test_a_threading_event_works_as_an_interrupt() -> None:
    import threading

    event = threading.Event()
    event.set()
    runner = ToolRunner([interrupting(trio.Event(), at=-1)])
    (outcome,) = await runner.execute([tool_call("step", {"n": 0})], interrupt=event)
    assert outcome.content == SKIPPED
