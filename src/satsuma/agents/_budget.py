"""Budgets on what an agent's model calls cost: ``Budget`` (an Agent's ``budget``),
``set_budget`` (the process's), and the limits the two make together for an agent.
How a run's calls are checked and charged under them is ``_spending``'s.
"""

from __future__ import annotations

import functools
import math
from typing import Literal

import attrs

__all__ = [
    "Budget",
    "BudgetName",
    "Limit",
    "budgeted",
    "limits",
    "process_budget",
    "set_budget",
]

BudgetName = Literal["usd_per_run", "usd_per_agent", "usd_per_agent_per_day"]


def _check_usd(instance: Budget, attribute: attrs.Attribute[float | None], value: object) -> None:
    """Refuse a limit that makes no sense, naming the field (attrs runs this per field)."""
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(
            f"Budget.{attribute.name} must be a number of US dollars or None, got: {value!r}"
        )
    if not math.isfinite(value) or value <= 0:
        # Zero too: it would fail every run at its first call, which is likelier a
        # mistake than a way to stop an agent (stop it instead).
        raise ValueError(
            f"Budget.{attribute.name} must be a finite number of US dollars above 0 "
            f"(None: no limit), got: {value!r}"
        )


@attrs.frozen(kw_only=True)
class Budget:
    """Limits on what an agent's model calls cost, in US dollars.

    Set one as an Agent's ``budget`` (``budget = satsuma.Budget(usd_per_run=0.50)``),
    or for every agent of the process with ``satsuma.set_budget``; an agent under both
    is held to the tighter limit of each. Each model call is checked before it is sent
    against its estimated cost (its input at the model's input price, its output at
    ``max_tokens``), and charged its actual cost after. A run whose next call would pass
    a limit ends ``failed``, its ``error`` a ``BudgetExceeded`` naming the limit; a
    ``BudgetWarning`` event marks 80 % of a limit spent. See docs/budgets.md.

    Attributes:
        usd_per_run: What one run may spend.
        usd_per_agent: What one agent (one ``agent_id``) may spend, over all its runs,
            counted in the store from the first call a budget applied to.
        usd_per_agent_per_day: What one agent may spend in a day (UTC).

    Raises:
        ValueError: A limit is 0, negative, NaN or infinite, or none is given; the
            message names the field.
        TypeError: A limit is not a number.
    """

    usd_per_run: float | None = attrs.field(default=None, validator=_check_usd)
    usd_per_agent: float | None = attrs.field(default=None, validator=_check_usd)
    usd_per_agent_per_day: float | None = attrs.field(default=None, validator=_check_usd)

    def __attrs_post_init__(self) -> None:
        if self.usd_per_run is self.usd_per_agent is self.usd_per_agent_per_day is None:
            raise ValueError(
                "Budget: give at least one of usd_per_run, usd_per_agent and usd_per_agent_per_day"
            )


_process_budget: Budget | None = None


def set_budget(budget: Budget | None) -> None:
    """Hold every agent of this process to ``budget`` (None: no more), beside the
    budget of its class: each limit is the tighter of the two. Agents already running
    are held to it from their next model call.

    Raises:
        TypeError: ``budget`` is not a Budget or None.
    """
    global _process_budget
    if budget is not None and not isinstance(budget, Budget):
        raise TypeError(f"set_budget: budget must be a satsuma.Budget or None, got: {budget!r}")
    _process_budget = budget


def budgeted(budget: Budget | None) -> bool:
    """Whether a call of an agent whose class has ``budget`` is checked (the default
    path, with no budget anywhere, pays this test only)."""
    return budget is not None or _process_budget is not None


@attrs.frozen
class Limit:
    """One limit that applies to an agent's calls, and whose it is."""

    budget: BudgetName
    source: Literal["agent", "process"]
    usd: float


def process_budget() -> Budget | None:
    """The process's budget (``set_budget``), or None."""
    return _process_budget


@functools.lru_cache(maxsize=64)
def limits(budget: Budget | None, process: Budget | None) -> dict[BudgetName, Limit]:
    """The limits on the calls of an agent whose class has ``budget``, in a process
    whose budget is ``process``: for each field, the tighter of the two. Made once per
    pair (budgets are frozen values), and read-only after."""
    found: dict[BudgetName, Limit] = {}
    for source, declared in (("agent", budget), ("process", process)):
        if declared is None:
            continue
        for name in ("usd_per_run", "usd_per_agent", "usd_per_agent_per_day"):
            usd = getattr(declared, name)
            if usd is not None and (name not in found or usd < found[name].usd):
                found[name] = Limit(name, source, usd)  # type: ignore[arg-type]
    return found
