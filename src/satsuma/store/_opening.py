"""An agent taken with its queued run's claim, handed explicitly to the agent that opens.

A cluster node claims a run, takes its agent's lease, marks the run ``running`` and
loads the agent's conversation and runs in one transaction (``_claim_take``). What it
took is a ``Taken``, which the node passes to the agent it opens (the agents room's
``internal.open_taken``): the agent starts from that lease and that state, rather than
taking and loading its own. Nothing reaches the agent any other way: a sub-agent, or
an agent of another store, opens as any agent does.

``Taken`` then carries two things between the node and that one agent:

- ``events``: the run's event recorder, once the node has one; the agent's steps carry
  its waiting events in their transactions (``Ride``, ``Rider``, see ``_write_step``);
- ``released``: the run's end, written by the node before the agent closes, let the
  lease go in its transaction (``run_queue.finish(release=...)``), so that the next
  run of the conversation finds its agent free at once; the agent's own release, as it
  closes, then writes nothing (``released_by_end``).
"""

from __future__ import annotations

from typing import Any, Protocol

import attrs

from ._lease import Lease, let_go
from ._load_agent import Loaded

__all__ = ["Ride", "Rider", "Taken"]


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


@attrs.define(eq=False)
class Taken:
    """An agent's lease and state, taken with the claim of a run of it (``_claim_take``).

    Attributes:
        lease: The agent's lease, held in this process (``Store.release_lease`` lets it
            go, or ``released_by_end``).
        loaded: Its conversation and runs, read under that lease (running runs marked
            ``interrupted``), as ``load_agent`` reads them.
        events: The recorder of the run's events, whose waiting events the agent's
            steps carry (set by the node once it has one; None: nothing rides).
        released: The run's end, committed, let ``lease`` go.
        adopted: An agent opened with it: its release is the agent's from then on.
    """

    lease: Lease
    loaded: Loaded
    events: Rider | None = None
    released: bool = False
    adopted: bool = False

    def adopt(self) -> Loaded:
        """Called once by the agent that opens with it: the state to start from.

        Raises:
            RuntimeError: an agent opened with it already (a lease is held once).
        """
        if self.adopted:
            raise RuntimeError(f"the lease on agent {self.lease.agent_id!r} was adopted already")
        self.adopted = True
        return self.loaded

    def ride(self) -> Ride | None:
        """What a step of the agent carries: the run's waiting events, if any."""
        return None if self.events is None else self.events.ride()

    def released_by_end(self, lease: Lease) -> bool:
        """Whether ``lease`` (the agent's copy: a renewal moved its expiry) is the one the
        run's end let go; then this process's record of it is dropped here, as
        ``Store.release_lease`` would, and nothing is left to write."""
        held = self.lease
        if not self.released or (held.owner.owner_id, held.epoch) != (
            lease.owner.owner_id,
            lease.epoch,
        ):
            return False
        let_go(lease.owner)
        return True
