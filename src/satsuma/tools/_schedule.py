"""How one ``execute`` runs its calls: unit by unit of the runner's strategy, each call of
a unit in its own task (one nursery per unit; a unit of one call is awaited in place), a
slot of the runner's cap taken for each call in call order, and each call within its
``execute_tool`` span when a tracer is set."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence

import trio

from ._calls import ToolCall
from ._environment import Environment
from ._results import ToolOutcome
from ._spans import traced
from ._strategies import Strategy

__all__ = ["Supervised", "run_call", "run_units"]

# The runner's one call: runs ``call``, puts its outcome in ``outcomes[index]`` and
# returns it (``ToolRunner._run_supervised``).
Supervised = Callable[
    [ToolCall, Environment, list[ToolOutcome | None], int], Awaitable[ToolOutcome]
]


async def run_units(
    supervised: Supervised,
    strategy: Strategy,
    limiter: trio.CapacityLimiter | None,
    calls: Sequence[ToolCall],
    env: Environment,
    outcomes: list[ToolOutcome | None],
) -> None:
    """Run every call, filling ``outcomes``; a unit's calls all end before the next
    unit's start."""
    # Without a cap or a tracer, a call's own coroutine is its task (or, alone in its
    # unit, awaited here): no frame around it.
    bare = limiter is None and env.tracer is None
    for unit in strategy.units(len(calls)):
        if len(unit) == 1:
            index = unit[0]
            if bare:
                await supervised(calls[index], env, outcomes, index)
            elif limiter is None:
                await run_call(supervised, None, calls[index], env, outcomes, index, None)
            else:
                async with limiter:
                    await run_call(supervised, None, calls[index], env, outcomes, index, None)
            continue
        async with trio.open_nursery() as nursery:
            for index in unit:
                if bare:
                    nursery.start_soon(supervised, calls[index], env, outcomes, index)
                    continue
                if limiter is None:
                    nursery.start_soon(
                        run_call, supervised, None, calls[index], env, outcomes, index, None
                    )
                    continue
                # The slot is taken here, before the task exists, so that calls start
                # in call order (trio starts new tasks in no particular order).
                slot = object()
                await limiter.acquire_on_behalf_of(slot)
                nursery.start_soon(
                    run_call, supervised, limiter, calls[index], env, outcomes, index, slot
                )


async def run_call(
    supervised: Supervised,
    limiter: trio.CapacityLimiter | None,
    call: ToolCall,
    env: Environment,
    outcomes: list[ToolOutcome | None],
    index: int,
    slot: object | None,
) -> None:
    """``supervised``, within the call's span when traced; then the call's ``slot`` of
    ``limiter`` (taken on its behalf) let go."""
    try:
        if env.tracer is None:
            await supervised(call, env, outcomes, index)
        else:
            await traced(supervised, call, env, outcomes, index)
    finally:
        if slot is not None:
            assert limiter is not None
            limiter.release_on_behalf_of(slot)
