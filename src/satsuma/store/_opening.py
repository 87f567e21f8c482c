"""A queued run's start, made in the transaction that takes its agent's lease.

A node that opens the agent of a run it claimed used to mark the run ``running`` in a
call of its own once the agent was open (``run_queue.start_running``). Here the node
says, before ``open_agent`` (``run_queue.opening(...)``), which run it starts; when the agent takes its lease on PostgreSQL (``_postgres_lease.take``), the
start goes first in that transaction: the node's row locked ``FOR SHARE`` (a node
counted dead starts nothing), the run marked ``running`` if the node still holds it,
and whether the agent has a record of the run read. A run that is no longer the node's
fails the take (a ``StoreError``; the opening says ``refused``), so its agent is not even taken. The lease taken is
kept for the node, whose run's end lets it go in the same transaction
(``run_queue.finish(release=...)``), so that the next run of the conversation finds
its agent free the moment it can be claimed; the agent's own release, as it closes,
then sends nothing (``let_go_with_end``).

The start comes before the lease's statements so that the locks are taken in the
order the sweep of dead nodes takes them (nodes, then the queue, then leases), which
cannot deadlock with it. It goes with the take through a context variable that trio
hands to the tasks ``open_agent`` starts and to their worker threads; only a take of
the same agent, while the node opens it, uses it: a sub-agent's, another agent's, or
one after ``open_agent`` returned, never. A take that is tried again (a connection
that broke idle) makes the start again, in its own transaction: what the opening
holds is what the last one said, and only a take that returned committed it.
"""

from __future__ import annotations

from contextvars import ContextVar
from typing import TYPE_CHECKING, Any, Final, Protocol

import attrs

from .._exceptions import StoreError
from ._lease import Lease

if TYPE_CHECKING:
    import psycopg

__all__ = [
    "Opening",
    "Ride",
    "Rider",
    "let_go_with_end",
    "opening",
    "start_with_take",
    "take_ride",
]


@attrs.define(eq=False)
class Opening:
    """What a node learns of a run's start as its agent opens.

    Attributes:
        started: The start was made with the lease's take (False: no take of the
            agent saw it; the node starts the run in a call of its own).
        recorded: Whether the agent has a record of the run already.
        refused: The run was no longer the node's: the take failed, nothing was
            written.
        lease: The lease the agent took.
        released: The run's end let ``lease`` go (``run_queue.finish``), committed:
            the agent's own release, as it closes, has nothing left to write.
    """

    run_id: str
    node_id: str
    agent_id: str
    started: bool = False
    recorded: bool = False
    refused: bool = False
    lease: Lease | None = None
    released: bool = False  # the run's end, committed, let ``lease`` go
    # Its recorded events, which the agent's steps carry in their transactions.
    events: Rider | None = None
    store: object = None  # the node's store: a step of another store carries nothing
    _open: bool = True  # False once the agent is open: later takes go on their own

    def close(self) -> Opening:
        """Stop starting the run with a take (call it once the agent is open, or failed
        to open); the opening, to read."""
        self._open = False
        return self


_OPENING: ContextVar[Opening | None] = ContextVar("satsuma_run_opening", default=None)

_START: Final = (
    "UPDATE run_queue SET status = 'running' WHERE run_id = %(run)s "
    "AND node_id = %(node)s AND status IN ('claimed', 'running') "
    "AND EXISTS (SELECT 1 FROM nodes WHERE node_id = %(node)s FOR SHARE) "
    "RETURNING EXISTS (SELECT 1 FROM runs WHERE run_id = %(run)s)"
)


def opening(run_id: str, node_id: str, agent_id: str) -> Opening:
    """Start ``run_id`` (held by ``node_id``) with the lease its agent takes from now on
    in this task and the tasks and threads it starts (see the module's notes), until
    ``Opening.close``."""
    state = Opening(run_id, node_id, agent_id)
    _OPENING.set(state)
    return state


class Ride(Protocol):
    """What a step carries for its run's recorder (``Rider.ride``)."""

    def write(self, db: Any) -> None:
        """Its statements, in the step's transaction (in the store's thread)."""

    def settle(self, written: bool | None) -> None:
        """After the step: written, not written (the step failed), or unknown (it was
        abandoned or its connection lost)."""


class Rider(Protocol):
    """A run's event recorder, whose waiting events a step of its agent may carry."""

    def ride(self) -> Ride | None:
        """What waits, taken for a step to write (None: nothing, or not now)."""


def take_ride(store: object, agent_id: str) -> Ride | None:
    """What a step of ``agent_id`` on ``store`` carries: the waiting events of the run a
    node runs on that agent, if any."""
    state = _OPENING.get()
    if state is None or state.events is None or state.store is not store:
        return None
    if state.agent_id != agent_id:
        return None
    return state.events.ride()


def let_go_with_end(lease: Lease) -> bool:
    """Whether ``lease`` was let go with the end of the run its agent was opened for
    (``Opening.released``): then its release writes nothing (a no-op on the server:
    the row no longer has this owner), and is not sent."""
    state = _OPENING.get()
    if state is None or not state.released or state.lease is None:
        return False
    held = state.lease  # as taken: a renewal moved the expiry of the agent's copy
    return (held.agent_id, held.owner.owner_id, held.epoch) == (
        lease.agent_id,
        lease.owner.owner_id,
        lease.epoch,
    )


def start_with_take(db: psycopg.Connection[Any], agent_id: str) -> _Start | None:
    """In the transaction of a take of ``agent_id``'s lease, before its statements: the
    start of the run a node opens the agent for, if it opens it now, sent (its answer
    comes with the take's first: no round trip of its own). None when there is none;
    else ``settle`` it once the take has read its row, before it writes."""
    state = _OPENING.get()
    if state is None or not state._open or state.agent_id != agent_id:
        return None
    cursor = db.execute(_START, {"run": state.run_id, "node": state.node_id})
    return _Start(state, cursor)


@attrs.frozen
class _Start:
    """A start sent with a take, whose answer is read by ``settle``."""

    opening: Opening
    cursor: Any  # psycopg's, in the take's pipeline

    def settle(self, where: str, lease: Lease | None = None) -> None:
        """Read the start's answer into the opening (``lease``: the one taken).

        Raises:
            StoreError: the run is no longer the node's (``refused``; the transaction
                is rolled back, and with it the take).
        """
        row = self.cursor.fetchone()
        state = self.opening
        state.started, state.refused = row is not None, row is None
        if row is None:
            raise StoreError(
                where, f"run {state.run_id} is no longer this node's; its agent was not taken"
            )
        state.recorded = bool(row[0])
        state.lease = lease
