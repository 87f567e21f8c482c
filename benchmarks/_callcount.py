"""Exact counts of a whole agent run: the CPU figures that a busy machine does not move.

``run.py``'s contenders (``_contenders.py``) against its loopback Messages API
(``_servers.py``, in a thread of this process): for each, the function calls (Python's
and C's, counted by ``sys.setprofile`` in this thread only, so the server's are not) and
the trio task steps (an instrument's ``before_task_step``) of one run of each plan:

- ``text``: one request, answered with text;
- ``1 call``, ``2 calls`` and ``N calls``: a first turn asking for that many no-op
  calls, then the answer; per extra call = (N-call run - 1-call run) / (N - 1), which
  includes the larger request the extra results make, as run.py's dispatch figure does.
  A runner may run a lone call in place, without a task or a nursery (satsuma does), so
  that figure also charges the extra calls with the first one's task and nursery; the
  slope from 2 calls, (N-call run - 2-call run) / (N - 2), has both ends pay them;
- ``2 turns`` and ``T turns`` of 3 calls each: per turn = the difference / (T - 2).

A run's counts vary a little with how the loopback reads fall (an HTTP response read in
one piece or two): each is the least of ``samples`` runs, after one that warms.
"""

from __future__ import annotations

import gc
import sys
import warnings
from collections.abc import Sequence

import attrs
import trio
from _contenders import CONTENDERS, Contender, Sizes
from _conversation import prompt
from _servers import serve

__all__ = ["RunCounts", "count_runs"]


@attrs.frozen(kw_only=True)
class RunCounts:
    """One contender's counts: function calls and task steps, per plan and derived."""

    calls: dict[str, int]
    steps: dict[str, int]
    many: int  # calls of the N-call plan
    turns: int  # turns of the T-turn plan

    def per_extra_call(self, what: str = "calls", *, base: int = 1) -> float:
        """Per call past ``base`` (1 or 2) calls: the slope from the ``base``-call run."""
        counts = getattr(self, what)
        start = counts["1 call"] if base == 1 else counts["2 calls"]
        return (counts["N calls"] - start) / (self.many - base)

    def per_turn(self, what: str = "calls") -> float:
        counts = getattr(self, what)
        return (counts["T turns"] - counts["2 turns"]) / (self.turns - 2)


class _Steps(trio.abc.Instrument):
    def __init__(self) -> None:
        self.count = 0

    def before_task_step(self, task: trio.lowlevel.Task) -> None:
        self.count += 1


async def _counted(contender: Contender, text: str) -> tuple[int, int]:
    calls = 0

    def profile(frame: object, event: str, arg: object) -> None:
        nonlocal calls
        if event == "call" or event == "c_call":
            calls += 1

    steps = _Steps()
    # No collection inside a counted run: one would count the finalizers and weakref
    # callbacks of whatever it freed, hundreds of calls that belong to no run.
    gc.collect()
    gc.disable()
    trio.lowlevel.add_instrument(steps)
    sys.setprofile(profile)
    try:
        await contender.run(text)
    finally:
        sys.setprofile(None)
        trio.lowlevel.remove_instrument(steps)
        gc.enable()
    return calls, steps.count


async def _measure(
    contender: Contender, plans: dict[str, str], samples: int
) -> tuple[dict[str, int], dict[str, int]]:
    calls: dict[str, int] = {}
    steps: dict[str, int] = {}
    await contender.open()
    try:
        for plan, text in plans.items():
            await contender.run(text)  # warm: first-call caches, the pool
            counted = [await _counted(contender, text) for _ in range(samples)]
            calls[plan] = min(count for count, _ in counted)
            steps[plan] = min(step for _, step in counted)
    finally:
        await contender.aclose()
    return calls, steps


def count_runs(
    keys: Sequence[str], *, many: int = 11, turns: int = 10, samples: int = 5
) -> dict[str, RunCounts]:
    """The counts of each contender in ``keys`` (``_contenders.CONTENDERS``' keys)."""
    if many < 3 or turns < 3 or samples < 1:
        raise ValueError("many must be at least 3, turns at least 3, samples at least 1")
    plans = {
        "text": prompt(1, []),
        "1 call": prompt(2, [("noop", 1)]),
        "2 calls": prompt(2, [("noop", 2)]),
        "N calls": prompt(2, [("noop", many)]),
        "2 turns": prompt(2, [("noop", 3)]),
        "T turns": prompt(turns, [("noop", 3)]),
    }
    out: dict[str, RunCounts] = {}
    with warnings.catch_warnings(), serve() as servers:
        # The SDK warns, once per process, that a model id is near its end of life.
        warnings.simplefilter("ignore", DeprecationWarning)
        for key in keys:
            contender = CONTENDERS[key](Sizes(), servers.anthropic_url, servers.openai_url)
            calls, steps = trio.run(_measure, contender, plans, samples)
            out[key] = RunCounts(calls=calls, steps=steps, many=many, turns=turns)
    return out
