"""Restart rules: the strategies (which children a restart takes along), the intensity
(how many restarts a supervisor allows within its window) and the backoff before one."""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from typing import Literal, TypeAlias, TypeVar

import attrs

__all__ = ["STRATEGIES", "Backoff", "RestartTimes", "SupervisorStrategy", "restart_group"]

SupervisorStrategy: TypeAlias = Literal["one_for_one", "one_for_all", "rest_for_one"]
STRATEGIES = ("one_for_one", "one_for_all", "rest_for_one")

_ChildT = TypeVar("_ChildT")


@attrs.frozen
class Backoff:
    """Wait before a restart: ``base * 2**(n - 1)`` seconds for the n-th restart within
    the intensity window, at most ``cap``."""

    base: float = 0.1
    cap: float = 5.0

    def delay(self, restarts: int) -> float:
        return float(min(self.cap, self.base * 2.0 ** max(restarts - 1, 0)))


@attrs.define
class RestartTimes:
    """When a supervisor's recent restarts happened, to hold them against its intensity."""

    times: deque[float] = attrs.Factory(deque)

    def note(self, now: float, within: float) -> int:
        """Count a restart at ``now``; return how many fall within the window ending now."""
        self.times.append(now)
        # A restart exactly `within` seconds old still counts (OTP: R >= Now - Period).
        while self.times and self.times[0] < now - within:
            self.times.popleft()
        return len(self.times)

    def clear(self) -> None:
        self.times.clear()


def restart_group(
    strategy: SupervisorStrategy, children: Sequence[_ChildT], failed: _ChildT
) -> list[_ChildT]:
    """The children a restart of ``failed`` takes along, in start order: itself
    (``one_for_one``), every child (``one_for_all``), or itself and those started after
    it (``rest_for_one``)."""
    if strategy == "one_for_one":
        return [failed]
    if strategy == "one_for_all":
        return list(children)
    return list(children[children.index(failed) :])
