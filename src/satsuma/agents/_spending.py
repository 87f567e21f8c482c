"""What a run's model calls spend under its budgets (``_budget``): the check and the
charge around each call that ``_gather`` makes.

Before a call, its most possible cost is estimated (its input as the context window's
check estimates it, at the model's input price, and its output at ``max_tokens``) and
reserved: against the run's own count for ``usd_per_run`` (a run
makes one call at a time, in one process), and on the store's ledgers for
``usd_per_agent`` and ``usd_per_agent_per_day`` (``satsuma.store``'s ledgers, shared by
every process and node on the store's database). A call that does not fit is not sent:
``BudgetExceeded``. After the call, the reservation is settled to the call's actual
cost (``Usage.cost_usd``); a call that failed or was cancelled gives it back.
"""

from __future__ import annotations

import contextlib
import datetime
import functools
import itertools
import logging
import time
import uuid
from typing import TYPE_CHECKING, Any, Final

import attrs
import trio

from .._exceptions import BudgetExceeded, ConfigurationError, StoreError
from .._messages import Usage
from ..models import prices_for
from ..store import Charge, Hold, Shortfall, ledgers_of
from ._budget import Budget, BudgetName, Limit, process_budget
from ._budget import limits as limits_of
from ._events import BudgetWarning

if TYPE_CHECKING:
    from ..models import ModelRequest
    from ._runstate import Run

__all__ = ["HOLD_SECONDS", "WARN_AT", "Held", "reserve", "settle", "wall_clock"]

logger = logging.getLogger("satsuma.agents")

_MILLION: Final = 1_000_000
# The share of a budget spent at which a BudgetWarning is sent (once per budget and
# period: the settlement that crosses it sends it).
WARN_AT: Final = 0.8
# How long a reservation holds if it is never settled (its process died during the
# call): longer than a model call takes, retries included. A settlement after it still
# charges the call's actual cost.
HOLD_SECONDS: Final = 900.0
# How long a settlement may take while its run is cancelled (shielded).
_SETTLE_SECONDS: Final = 10.0
_NO_SCOPE: Final = contextlib.nullcontext()


def wall_clock() -> float:
    """Seconds since the epoch, for the day a call is charged to (tests move it)."""
    return time.time()


@attrs.frozen
class Held:
    """A call's reservation: what it was estimated at, under which limits."""

    estimate: float
    limits: dict[BudgetName, Limit]
    hold: Hold | None
    ledgers: dict[str, BudgetName]  # ledger -> the budget it counts


def _estimate(run: Run, request: ModelRequest, input_tokens: float) -> float:
    prices = prices_for(request.model)
    if prices is None:
        # Never silently unlimited: a budget cannot be kept without a price.
        raise ConfigurationError(
            f"agent {run.ctx.agent_id!r} has a budget, but the prices of model "
            f"{request.model!r} are unknown, so what its calls cost cannot be counted",
            "Set them with satsuma.set_prices(model, satsuma.ModelPrices(...))",
        )
    tokens = max(1.0, input_tokens)
    return (tokens * prices.input + request.max_tokens * prices.output) / _MILLION


_HOLD_IDS: Final = itertools.count()
# Hold ids: unique across processes, without a uuid per call.
_HOLD_PREFIX: Final = uuid.uuid4().hex


async def reserve(run: Run, request: ModelRequest, input_tokens: float) -> Held:
    """Reserve the call's estimated cost under every budget that applies to it:
    ``input_tokens`` (the request's estimate that ``_gather`` made for the context
    window's check, calibrated on the API's last usage) at the input price, and
    ``max_tokens`` at the output price.

    Raises:
        BudgetExceeded: the call would pass a budget; nothing is reserved.
        ConfigurationError: the model has no prices.
        StoreError: the store's ledgers could not be read or written.
    """
    budget, process = run.ctx.spec.budget, process_budget()
    limits = limits_of(budget, process)
    estimate = _estimate(run, request, input_tokens)
    agent_id = run.ctx.agent_id
    per_run = limits.get("usd_per_run")
    if per_run is not None and run.spent_usd + estimate > per_run.usd:
        raise _exceeded(per_run, run.spent_usd, estimate, agent_id)
    now = wall_clock()
    ledgers, charges = _charges(agent_id, _utc_day(now), budget, process)
    hold = None
    if charges:
        store = run.ctx.persistence.store if run.ctx.persistence is not None else None
        taken = await ledgers_of(store).reserve(
            charges,
            estimate,
            hold_id=f"{_HOLD_PREFIX}-{next(_HOLD_IDS)}",
            now=now,
            expires_at=now + HOLD_SECONDS,
        )
        if isinstance(taken, Shortfall):
            limit = limits[ledgers[taken.ledger]]
            raise _exceeded(limit, taken.spent + taken.reserved, estimate, agent_id)
        hold = taken
    return Held(estimate=estimate, limits=limits, hold=hold, ledgers=ledgers)


@functools.lru_cache(maxsize=256)
def _charges(
    agent_id: str, day: str, budget: Budget | None, process: Budget | None
) -> tuple[dict[str, BudgetName], list[Charge]]:
    """The ledgers an agent's call charges on ``day``, and the budget each counts for:
    made once per agent, day and budgets (read-only after), not at every call."""
    limits = limits_of(budget, process)
    ledgers: dict[str, BudgetName] = {}
    charges = []
    for name, ledger in (
        ("usd_per_agent", f"agent:{agent_id}"),
        ("usd_per_agent_per_day", f"day:{agent_id}:{day}"),
    ):
        limit = limits.get(name)  # type: ignore[call-overload]
        if limit is not None:
            ledgers[ledger] = limit.budget
            charges.append(Charge(ledger=ledger, limit=limit.usd))
    return ledgers, charges


async def settle(run: Run, held: Held, usage: Usage | None) -> None:
    """Charge the call's actual cost (``usage``; None: it cost nothing, it failed or was
    cancelled) in place of its reservation, and send a BudgetWarning for each budget
    the charge takes past 80 %. Shielded: a cancelled run settles too. A store that
    cannot be written is logged, and the reservation expires in time."""
    cost = 0.0
    if usage is not None:
        if usage.cost_usd is None:
            logger.warning(
                "agent %s: a call's cost is unknown (the model that answered has no "
                "prices): its budget is charged the call's estimate",
                run.ctx.agent_id,
            )
        cost = held.estimate if usage.cost_usd is None else usage.cost_usd
    before, run.spent_usd = run.spent_usd, run.spent_usd + cost
    per_run = held.limits.get("usd_per_run")
    if per_run is not None:
        _warn(run, per_run, before, run.spent_usd)
    if held.hold is None:
        return
    store = run.ctx.persistence.store if run.ctx.persistence is not None else None
    ledgers = ledgers_of(store)
    changed = None
    # Ledgers in memory never suspend: no shield to pay for.
    with trio.move_on_after(_SETTLE_SECONDS, shield=True) if not ledgers.in_memory else _NO_SCOPE:
        try:
            changed = await ledgers.settle(held.hold, cost)
        except StoreError:
            logger.warning(
                "agent %s: could not charge a call's cost to its budget's ledgers (its "
                "reservation expires in %g s)",
                run.ctx.agent_id,
                HOLD_SECONDS,
                exc_info=True,
            )
    for ledger, (spent_before, spent_after) in (changed or {}).items():
        _warn(run, held.limits[held.ledgers[ledger]], spent_before, spent_after)


def _warn(run: Run, limit: Limit, before: float, after: float) -> None:
    threshold = limit.usd * WARN_AT
    if before < threshold <= after:
        run.emit(
            run.event(
                BudgetWarning,
                budget=limit.budget,
                source=limit.source,
                limit_usd=limit.usd,
                spent_usd=after,
            )
        )


def _exceeded(limit: Limit, spent: float, estimate: float, agent_id: str) -> BudgetExceeded:
    return BudgetExceeded(
        limit.budget,
        source=limit.source,
        limit=limit.usd,
        spent=spent,
        estimate=estimate,
        agent_id=agent_id,
    )


_day: list[Any] = [None, ""]  # the last day asked for: its number since the epoch, its date


def _utc_day(now: float) -> str:
    number = int(now // 86_400)
    if _day[0] != number:
        _day[:] = [number, datetime.datetime.fromtimestamp(now, datetime.UTC).date().isoformat()]
    return str(_day[1])
