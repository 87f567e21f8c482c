"""``write_step``: a ``Step`` written through any ``Store``, in one transaction on
satsuma's stores (``BaseStore.write_step``), one call each on any other.

A step of an agent that a cluster's node opened for a run carries the run's recorded
events that wait (``rider``: the node's ``_opening.Taken``) in its transaction; a step refused with them
is written again without them, so that an agent's write never fails for its events."""

from __future__ import annotations

import logging
from typing import Final

import attrs

from .._exceptions import LeaseLost, StoreClosed, StoreError, StoreUnavailable
from ._base import BaseStore, Store
from ._lease import Lease
from ._opening import Rider
from ._step import Step

__all__ = ["write_step"]

logger = logging.getLogger("satsuma.store")


async def write_step(
    store: Store, step: Step, *, lease: Lease | None = None, rider: Rider | None = None
) -> None:
    """Write ``step`` under ``lease``: in one transaction on satsuma's stores (nothing of it
    is written if any of it fails), or one call after the other, in the step's order, on
    any other ``Store``; there an outcome that its ``call_finished`` cannot write
    (``StoreError``) is logged and the rest written, as a lone outcome's write is.
    ``rider``: what may ride in the step's transaction (see the module's notes).

    Raises:
        StoreError: it could not be written (``LeaseLost``: another owner has the agent).
    """
    if step.empty:
        return
    if isinstance(store, BaseStore) and _at_once(type(store)):
        # A step that ends its run carries nothing: its run's end, which a node writes
        # right after it, takes what waits (one write of events and one NOTIFY less).
        ride = None if step.ends or rider is None else rider.ride()
        if ride is None:
            await store.write_step(step, lease=lease)
            return
        try:
            await store.write_step(attrs.evolve(step, riders=(ride.write,)), lease=lease)
        except (LeaseLost, StoreClosed):
            ride.settle(False)
            raise
        except StoreError as exc:
            if isinstance(exc, StoreUnavailable):
                # The database lost: whether the step, and the ride with it, was
                # written is unknown.
                ride.settle(None)
                raise
            # Refused, and nothing of it written: perhaps for what it carried, which
            # must never fail the agent's write. Written again without it (what it
            # carried waits for its own transaction).
            ride.settle(False)
            await store.write_step(step, lease=lease)
            return
        except BaseException:
            ride.settle(None)  # cancelled: abandoned, perhaps after its COMMIT went out
            raise
        ride.settle(True)
        return
    for entry in step.finished:
        try:
            await store.call_finished(
                entry.run_id,
                entry.tool_use_id,
                content=entry.content,
                is_error=entry.is_error,
                error_kind=entry.error_kind,
                lease=lease,
            )
        except (LeaseLost, StoreClosed):
            raise
        except StoreError:
            # As an outcome written on its own: logged, and the outcome stands (on
            # resume the call counts as unfinished).
            logger.warning(
                "could not journal the outcome of call %s", entry.tool_use_id, exc_info=True
            )
    if step.start is not None:
        await store.write_tail(step.agent_id, step.start, step.messages, lease=lease)
    for entry in step.started:
        await store.call_started(
            entry.run_id, entry.tool_use_id, entry.tool_name, entry.input, lease=lease
        )
    for end in step.ends:
        await store.end_run(
            end.run_id,
            status=end.status,
            ended_at=end.ended_at,
            usage=end.usage,
            error=end.error,
            lease=lease,
        )


# The writes a step is made of: a subclass of a store that overrides one of them (to
# watch it, or to fail it in a test) has them called one by one, so that its own
# method runs, unless it overrides write_step too.
_SINGLE_WRITES: Final = ("call_finished", "write_tail", "call_started", "end_run")
_AT_ONCE: dict[type, bool] = {}


def _at_once(kind: type) -> bool:
    try:
        return _AT_ONCE[kind]
    except KeyError:
        owner = next(klass for klass in kind.__mro__ if "write_step" in vars(klass))
        found = _AT_ONCE[kind] = all(
            getattr(kind, name) is getattr(owner, name) for name in _SINGLE_WRITES
        )
        return found
