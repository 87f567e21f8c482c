"""What ``satsuma cluster status`` shows: the nodes, the agents' leases, the queue's
depth, the runs in flight and the size of each table of a cluster's PostgreSQL
database, read in one snapshot.

Read-only, and apart from the queue (``_queue``) on purpose: it only reads the tables
that the nodes and the clients write. Ages and expiries are computed on the database's
clock, the one clock every machine of a cluster shares.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any, Final

import attrs

from ._dialect import NOW
from ._postgres import PostgresStore

if TYPE_CHECKING:
    import psycopg

__all__ = [
    "ClusterStatus",
    "InFlightRun",
    "LeaseStatus",
    "NodeStatus",
    "TableSize",
    "cluster_status",
]

QUEUE_STATUSES: Final = ("queued", "claimed", "running", "completed", "failed", "cancelled")
# satsuma's tables, in the order the status lists them.
TABLES: Final = (
    "messages",
    "runs",
    "tool_calls",
    "approvals",
    "leases",
    "run_queue",
    "run_events",
    "run_event_streams",
    "nodes",
)


@attrs.frozen(kw_only=True)
class NodeStatus:
    """A row of the node table.

    ``expires_in`` is negative for a node whose heartbeat stopped (dead, not yet
    removed by a live node's heartbeat)."""

    node_id: str
    name: str
    host: str
    pid: int
    agents: tuple[str, ...]
    heartbeat_age: float
    expires_in: float
    in_flight: int

    @property
    def alive(self) -> bool:
        return self.expires_in > 0


@attrs.frozen(kw_only=True)
class LeaseStatus:
    """A held lease: its agent, holder (and the node with the holder's host and pid, if
    any), epoch and expiry (negative once expired)."""

    agent_id: str
    owner_id: str
    host: str
    pid: int
    epoch: int
    expires_in: float
    node: str | None


@attrs.frozen(kw_only=True)
class InFlightRun:
    """A claimed or running run of the queue; ``node`` is the name of the node holding
    it (None when that node is no longer in the table)."""

    run_id: str
    agent_name: str
    agent_id: str
    status: str
    node_id: str | None
    node: str | None
    attempts: int
    claimed_age: float | None
    cancel_requested: bool


@attrs.frozen(kw_only=True)
class TableSize:
    """One of satsuma's tables: its rows (counted) and what it takes on disk, with its
    indexes and TOAST data (``pg_total_relation_size``, in bytes)."""

    name: str
    rows: int
    bytes: int


@attrs.frozen(kw_only=True)
class ClusterStatus:
    """One snapshot of a cluster. ``leases`` and ``in_flight`` are the first ``limit``
    of ``leases_held`` and ``in_flight_count``; ``queue`` counts runs by agent name and
    status (every status present, 0 when none)."""

    nodes: tuple[NodeStatus, ...]
    leases: tuple[LeaseStatus, ...]
    leases_held: int
    queue: dict[str, dict[str, int]]
    in_flight: tuple[InFlightRun, ...]
    in_flight_count: int
    tables: tuple[TableSize, ...] = ()


async def cluster_status(store: PostgresStore, *, limit: int = 20) -> ClusterStatus:
    """Read the cluster's state, in one read-only transaction (one snapshot)."""

    def work(db: psycopg.Connection[Any]) -> ClusterStatus:
        db.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
        nodes = tuple(
            NodeStatus(
                node_id=row[0],
                name=row[1],
                host=row[2],
                pid=row[3],
                agents=tuple(json.loads(row[4])),
                heartbeat_age=row[5],
                expires_in=row[6],
                in_flight=row[7],
            )
            for row in db.execute(
                f"SELECT n.node_id, n.name, n.host, n.pid, n.agents, {NOW} - n.heartbeat_at, "
                f"n.expires_at - {NOW}, (SELECT count(*) FROM run_queue q "
                "WHERE q.node_id = n.node_id AND q.status IN ('claimed', 'running')) "
                "FROM nodes n ORDER BY n.name, n.started_at"
            ).fetchall()
        )
        (leases_held,) = _one(db.execute("SELECT count(*) FROM leases WHERE owner_id IS NOT NULL"))
        # A lease's holder is an opened agent; the node is the process that opened it.
        leases = tuple(
            LeaseStatus(
                agent_id=row[0],
                owner_id=row[1],
                host=row[2],
                pid=row[3],
                epoch=row[4],
                expires_in=row[5],
                node=row[6],
            )
            for row in db.execute(
                f"SELECT l.agent_id, l.owner_id, l.host, l.pid, l.epoch, l.expires_at - {NOW}, "
                "(SELECT min(n.name) FROM nodes n WHERE n.host = l.host AND n.pid = l.pid) "
                "FROM leases l WHERE l.owner_id IS NOT NULL ORDER BY l.agent_id LIMIT %s",
                (limit,),
            ).fetchall()
        )
        queue: dict[str, dict[str, int]] = {}
        for agent_name, status, count in db.execute(
            "SELECT agent_name, status, count(*) FROM run_queue GROUP BY agent_name, status "
            "ORDER BY agent_name"
        ).fetchall():
            counts = queue.setdefault(agent_name, dict.fromkeys(QUEUE_STATUSES, 0))
            counts[status] = count
        (in_flight_count,) = _one(
            db.execute("SELECT count(*) FROM run_queue WHERE status IN ('claimed', 'running')")
        )
        in_flight = tuple(
            InFlightRun(
                run_id=row[0],
                agent_name=row[1],
                agent_id=row[2],
                status=row[3],
                node_id=row[4],
                node=row[5],
                attempts=row[6],
                claimed_age=row[7],
                cancel_requested=row[8],
            )
            for row in db.execute(
                "SELECT q.run_id, q.agent_name, q.agent_id, q.status, q.node_id, n.name, "
                f"q.attempts, {NOW} - q.claimed_at, q.cancel_requested FROM run_queue q "
                "LEFT JOIN nodes n ON n.node_id = q.node_id "
                "WHERE q.status IN ('claimed', 'running') ORDER BY q.seq LIMIT %s",
                (limit,),
            ).fetchall()
        )
        # Counted, not estimated (pg_class.reltuples lags until the next ANALYZE): a
        # count reads the table, which the status of a cluster can afford.
        tables = tuple(
            TableSize(name=name, rows=count, bytes=size)
            for name, count, size in (
                _one(
                    db.execute(
                        f"SELECT %s, (SELECT count(*) FROM {name}), "
                        "pg_total_relation_size(%s::regclass)",
                        (name, name),
                    )
                )
                for name in TABLES
            )
        )
        return ClusterStatus(
            tables=tables,
            nodes=nodes,
            leases=leases,
            leases_held=leases_held,
            queue=queue,
            in_flight=in_flight,
            in_flight_count=in_flight_count,
        )

    return await store.transaction(work)


def _one(cursor: psycopg.Cursor[Any]) -> tuple[Any, ...]:
    row = cursor.fetchone()
    assert row is not None  # an aggregate without GROUP BY has one row
    return tuple(row)
