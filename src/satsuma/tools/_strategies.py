"""Run strategies: how a turn's calls are grouped into units that run one after another.

The calls of a unit start together, each in its own task; the next unit starts when the
last call of the previous one has ended. An interrupt is checked as each call starts, so
under ``sequential`` and ``Batched`` it takes effect between units (and, with
``max_concurrency``, before any call still waiting for a slot).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Literal, Protocol, TypeAlias, final

import attrs

__all__ = ["Batched", "Parallel", "Sequential", "Strategy", "StrategyName", "as_strategy"]


class Strategy(Protocol):
    """Splits ``count`` calls, in call order, into units run one after another."""

    def units(self, count: int) -> Iterator[range]: ...


@final
@attrs.frozen
class Parallel:
    """Every call at once (the default)."""

    def units(self, count: int) -> Iterator[range]:
        if count:
            yield range(count)


@final
@attrs.frozen
class Sequential:
    """One call at a time, in order."""

    def units(self, count: int) -> Iterator[range]:
        for index in range(count):
            yield range(index, index + 1)


def _positive(instance: object, attribute: object, value: int) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise ValueError(f"Batched size must be a positive integer, got: {value!r}")


@final
@attrs.frozen
class Batched:
    """Groups of ``size`` calls: a group runs in parallel, groups run in order."""

    size: int = attrs.field(validator=_positive)

    def units(self, count: int) -> Iterator[range]:
        for start in range(0, count, self.size):
            yield range(start, min(start + self.size, count))


StrategyName: TypeAlias = Literal["parallel", "sequential"]

_NAMED: dict[str, Strategy] = {"parallel": Parallel(), "sequential": Sequential()}


def as_strategy(value: object) -> Strategy:
    """A strategy from its name or an object with ``units``.

    Raises:
        ValueError: an unknown name or object.
    """
    if isinstance(value, str):
        try:
            return _NAMED[value]
        except KeyError:
            raise ValueError(
                f"unknown strategy {value!r}; use 'parallel', 'sequential' or Batched(n)"
            ) from None
    if callable(getattr(value, "units", None)):
        return value  # type: ignore[return-value]
    raise ValueError(f"strategy must be 'parallel', 'sequential' or Batched(n), got: {value!r}")
