"""A node's claim of a queued run, with the run's agent taken, the run started and the
agent loaded, in one transaction of PostgresStore's.

A node used to make these four changes in three transactions (the claim; the lease's
take with the run's start; the agent's load). Here they go in one, in three round
trips: the claim (its run names the agent), the lease row read ``FOR UPDATE`` (its
holder decides the epoch, in Python, as every take does), then the lease written, the
run marked ``running``, the agent's conversation and runs read (running ones marked
``interrupted``) and ``COMMIT``, all sent together and read after. What the node took
is a ``Taken`` (``_opening``) that it passes to the agent it opens.

The locks are taken in the order of the sweep of dead nodes (``_nodes.sweep``): the
node's row (``FOR SHARE``: a node counted dead claims, and so takes, nothing), the
queue's row, the lease's row.

The transaction commits without waiting for its flush to disk (``synchronous_commit =
off``, for it alone), as the claim and the load already did apart: a flush (an fsync)
was most of the take's time. A lease must not be lost to a crash of the server once its
holder has written under it, and it is not: the node's next write after the claim, on
every path (the run's record, a resume's repair, a paused run's claim, the run's end),
waits for its own flush, and the WAL is flushed (and replicated) in order, so that
flush carries the claim's. Nothing leaves the node on the claim before that write (the
model is called after the run's record). A crash of the server before it loses the
claim, the take and the start together: the run is ``queued`` again after recovery,
and the node's writes under the lost lease are refused (its owner no longer holds
the row).

A lease another owner holds (a node that died on another host, whose lease has not
expired) is not taken: the claim alone commits, and the node hands the run back for
later (``ClaimTaken.refusal``), as when opening its agent failed. Anything else that
fails (the database is away) rolls the whole transaction back: the run stays queued,
its agent untouched; and should the answer be lost as it commits, ``undo_lost_claim``
puts back what it may have claimed and taken.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Final

import attrs

from .._exceptions import StoreError, StoreUnreadable
from ._dialect import NOW, POSTGRES
from ._lease import Lease, Owner, hold
from ._load_agent import Loaded, load_sent
from ._nodes import QUEUED_CHANNEL
from ._opening import Taken
from ._postgres_lease import take
from ._queue import QueuedRun, claim_statement, claimed
from ._rows import Damaged

if TYPE_CHECKING:
    import psycopg

    from ._postgres import PostgresStore

__all__ = ["ClaimTaken", "claim_and_take", "undo_lost_claim"]

_START: Final = "UPDATE run_queue SET status = 'running' WHERE run_id = %s"


@attrs.frozen
class ClaimTaken:
    """What a node's claim got.

    Attributes:
        run: The run claimed (None: none could be).
        more: Whether another queued run of the classes was seen.
        taken: Its agent, taken and loaded, the run marked ``running`` (None with a
            run: see ``refusal``).
        refusal: Why its agent was not taken (another owner holds it; or what it
            holds cannot be read, ``StoreUnreadable``): the run is the node's,
            ``claimed``, for it to hand back (or fail).
    """

    run: QueuedRun | None
    more: bool
    taken: Taken | None = None
    refusal: StoreError | None = None


async def claim_and_take(
    store: PostgresStore,
    node_id: str,
    agent_names: Sequence[str],
    owner: Owner,
    *,
    seconds: float,
) -> ClaimTaken:
    """Claim the oldest run that may run now (``run_queue.claim``) and take its agent for
    ``owner`` for ``seconds`` (``Store.acquire_lease``), in one transaction (see the
    module's notes). The lease is held in this process once this returns: the agent
    opened with ``taken`` lets it go, else the caller (``Store.release_lease``).

    Raises:
        StoreError: the database did not take it (nothing of it was written, unless
            its answer was lost as it committed: ``StoreUnavailable``).
    """
    where = store.location

    def work(db: psycopg.Connection[Any]) -> ClaimTaken | _Sent:
        db.execute("SET LOCAL synchronous_commit = off")  # see the module's notes
        got = claimed(claim_statement(db, node_id, agent_names).fetchone())
        run = got.run
        if run is None:
            return ClaimTaken(None, got.more)
        try:
            lease = take(db, where, run.agent_id, owner, seconds)
        except StoreError as exc:
            return ClaimTaken(run, got.more, refusal=exc)  # held: the claim alone commits
        db.execute(_START, (run.run_id,))
        return _Sent(run, got.more, lease, load_sent(db, POSTGRES, run.agent_id))

    answer = await store.transaction(work)
    if isinstance(answer, ClaimTaken):
        return answer
    hold(owner)  # as Store.acquire_lease: let go by the lease's release
    try:
        # Read once the answers came back with the COMMIT (see _queue.claim_next).
        loaded = answer.read()
    except Damaged as exc:
        # Committed, but the agent cannot open: the node fails the run, as when its
        # agent's load cannot read what it finds.
        await store.release_lease(answer.lease)
        unreadable = StoreUnreadable(where, f"{exc}; nothing was guessed in its place")
        return ClaimTaken(answer.run, answer.more, refusal=unreadable)
    return ClaimTaken(answer.run, answer.more, taken=Taken(answer.lease, loaded))


@attrs.frozen
class _Sent:
    """A claim whose agent's take, start and load were sent, to read after COMMIT."""

    run: QueuedRun
    more: bool
    lease: Lease
    read: Callable[[], Loaded]


async def undo_lost_claim(
    store: PostgresStore, node_id: str, owner: Owner, *, keep: Sequence[str]
) -> int:
    """After a ``claim_and_take`` whose answer was lost (``StoreUnavailable``: it may
    have committed as its connection broke), put back in the queue every run the node
    holds but ``keep`` (the runs it runs), and let go every lease ``owner`` (that
    claim's) holds; how many runs went back. One transaction; a claim that did not
    commit leaves nothing for it to do."""

    def work(db: psycopg.Connection[Any]) -> int:
        # The queue's rows, then the leases: the sweep's order.
        back = db.execute(
            f"UPDATE run_queue SET status = 'queued', node_id = NULL, available_at = {NOW} "
            "WHERE node_id = %s AND status IN ('claimed', 'running') "
            "AND NOT run_id = ANY(%s) RETURNING agent_name",
            (node_id, list(keep)),
        ).fetchall()
        db.execute("UPDATE leases SET owner_id = NULL WHERE owner_id = %s", (owner.owner_id,))
        for (agent_name,) in back:
            db.execute("SELECT pg_notify(%s, %s)", (QUEUED_CHANNEL, agent_name))
        return len(back)

    return await store.transaction(work)
