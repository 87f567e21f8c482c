"""The cluster's node table in PostgreSQL, and the NOTIFY channels of its queue
(``_queue`` holds the runs; satsuma.cluster uses both through ``run_queue``).

A node keeps its row alive with a heartbeat; any node's heartbeat sweeps the rows that
expired, putting their runs back in the queue. A node whose row is gone was counted
dead: its claims and starts check its row (locked FOR SHARE until their transaction
ends, so that a sweep that counts it dead waits for them, or comes first and they see
the row gone), so it claims nothing more and starts no run it had claimed: it would run
them with its agents' leases taken anew after the sweep let them go, and so write into
them, while the runs are back in the queue. Times are on the database's clock.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Final

import attrs

from ._dialect import NOW
from ._postgres import PostgresStore

if TYPE_CHECKING:
    import psycopg

__all__ = [
    "CANCEL_CHANNEL",
    "DONE_CHANNEL",
    "QUEUED_CHANNEL",
    "WATCH_CHANNEL",
    "Heartbeat",
    "heartbeat",
    "register_node",
    "sweep",
    "unregister_node",
]

# NOTIFY channels. Payloads: a run id (done, cancel, watch) or an agent name (queued).
DONE_CHANNEL: Final = "satsuma_run_done"
QUEUED_CHANNEL: Final = "satsuma_run_queued"
CANCEL_CHANNEL: Final = "satsuma_run_cancel"
WATCH_CHANNEL: Final = "satsuma_run_watch"  # a run in flight is now watched (_run_events)


async def register_node(
    store: PostgresStore,
    node_id: str,
    *,
    name: str,
    host: str,
    pid: int,
    agents: Sequence[str],
    lease_seconds: float,
) -> None:
    def work(db: psycopg.Connection[Any]) -> None:
        db.execute(
            "INSERT INTO nodes (node_id, name, host, pid, agents, started_at, heartbeat_at, "
            f"expires_at) VALUES (%s, %s, %s, %s, %s, {NOW}, {NOW}, {NOW} + %s) "
            "ON CONFLICT (node_id) DO UPDATE SET heartbeat_at = excluded.heartbeat_at, "
            "expires_at = excluded.expires_at",
            (node_id, name, host, pid, json.dumps(list(agents)), lease_seconds),
        )

    await store.transaction(work)


@attrs.frozen(kw_only=True)
class Heartbeat:
    """What a node learns from its heartbeat."""

    registered: bool  # False: it had been declared dead (its row was gone)
    cancels: tuple[str, ...]  # its runs whose cancellation was asked


async def heartbeat(store: PostgresStore, node_id: str, *, lease_seconds: float) -> Heartbeat:
    """Push the node's expiry ahead, and read the cancellations asked of its runs (in
    case a NOTIFY was missed). It touches the node's own row only, so it never waits on
    another node's locks (``sweep`` does that apart)."""

    def work(db: psycopg.Connection[Any]) -> Heartbeat:
        alive = db.execute(
            f"UPDATE nodes SET heartbeat_at = {NOW}, expires_at = {NOW} + %s "
            "WHERE node_id = %s RETURNING node_id",
            (lease_seconds, node_id),
        ).fetchone()
        cancels = db.execute(
            "SELECT run_id FROM run_queue WHERE node_id = %s AND cancel_requested "
            "AND status IN ('claimed', 'running')",
            (node_id,),
        ).fetchall()
        return Heartbeat(
            registered=alive is not None,
            cancels=tuple(run_id for (run_id,) in cancels),
        )

    return await store.transaction(work)


async def sweep(store: PostgresStore, *, lock_timeout: float) -> int:
    """Put the runs of nodes whose expiry passed back in the queue, and let go of the
    leases their processes held on those runs' agents (any node does it, after its
    heartbeat: whichever comes first); how many runs.

    A node paused in the middle of a transaction holds its locks until the server ends
    that transaction (PostgresStore's ``idle_transaction_timeout``): rows it holds are
    waited for ``lock_timeout`` seconds at most, then the sweep fails (StoreError,
    nothing done) and the next one tries again.
    """

    def work(db: psycopg.Connection[Any]) -> int:
        db.execute(
            "SELECT set_config('lock_timeout', %s, true)",
            (f"{max(1, round(lock_timeout * 1000))}ms",),
        )
        # A node's lease counts from its last heartbeat, or from the server's start when
        # that is later: after a restart of the server, the nodes had no chance to send
        # one, and the first node back would otherwise count all the others dead.
        dead = db.execute(
            "DELETE FROM nodes WHERE greatest(expires_at, "
            "extract(epoch from pg_postmaster_start_time())::float8 "
            f"+ (expires_at - heartbeat_at)) < {NOW} RETURNING node_id, host, pid"
        ).fetchall()
        requeued = db.execute(
            f"UPDATE run_queue SET status = 'queued', node_id = NULL, available_at = {NOW} "
            "WHERE status IN ('claimed', 'running') AND (node_id = ANY(%s) "
            "OR node_id NOT IN (SELECT node_id FROM nodes)) RETURNING agent_name, agent_id",
            ([dead_id for dead_id, _, _ in dead],),
        ).fetchall()
        if dead and requeued:
            # The agents of those runs are still held by the dead node's process, which
            # may not be dead at all: paused (SIGSTOP, a long GC), or cut off. On its
            # host a live pid would keep the lease for as long as the process lives;
            # letting it go here (no owner: the epoch stays, a takeover adds one) frees
            # the agent for the node that claims the run, and refuses from now on
            # every write the old process makes under it.
            agent_ids = sorted({agent_id for _, agent_id in requeued})
            for _, host, pid in dead:
                db.execute(
                    "UPDATE leases SET owner_id = NULL WHERE agent_id = ANY(%s) "
                    "AND host = %s AND pid = %s AND owner_id IS NOT NULL",
                    (agent_ids, host, pid),
                )
        for agent_name, _ in requeued:
            db.execute("SELECT pg_notify(%s, %s)", (QUEUED_CHANNEL, agent_name))
        return len(requeued)

    return await store.transaction(work)


async def unregister_node(store: PostgresStore, node_id: str) -> int:
    """Remove the node's row, putting back in the queue what it still held; how many."""

    def work(db: psycopg.Connection[Any]) -> int:
        db.execute("DELETE FROM nodes WHERE node_id = %s", (node_id,))
        rows = db.execute(
            f"UPDATE run_queue SET status = 'queued', node_id = NULL, available_at = {NOW} "
            "WHERE node_id = %s AND status IN ('claimed', 'running') RETURNING agent_name",
            (node_id,),
        ).fetchall()
        for (agent_name,) in rows:
            db.execute("SELECT pg_notify(%s, %s)", (QUEUED_CHANNEL, agent_name))
        return len(rows)

    return await store.transaction(work)
