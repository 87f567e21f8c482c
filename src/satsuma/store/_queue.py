"""The cluster's run queue and node table in PostgreSQL (satsuma.cluster uses them).

Each function is one transaction of PostgresStore's (see ``_postgres``), so a change and
its NOTIFY commit together: a listener never hears of a change it cannot read yet. The
tables are migration 2 of ``_postgres``. Times are on the database's clock, the one
clock every machine of a cluster shares.

A run's life: ``queued`` (submitted, or handed back) → ``claimed`` (by one node) →
``running`` (its agent is open) → ``completed`` / ``failed`` / ``cancelled``. A node
writes to a run only while it is the run's claimer (``node_id``, status claimed or
running): a node declared dead and replaced cannot overwrite what its successor does.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Final, Literal

import attrs

from ._dialect import NOW
from ._postgres import PostgresStore
from ._run_events import Entry, write_batch

if TYPE_CHECKING:
    import psycopg

__all__ = [
    "DONE_CHANNEL",
    "Claimed",
    "LastEvents",
    "QUEUED_CHANNEL",
    "QueuedRun",
    "QueuedRunStatus",
]

QueuedRunStatus = Literal["queued", "claimed", "running", "completed", "failed", "cancelled"]
ENDED: Final = ("completed", "failed", "cancelled")

# NOTIFY channels. Payloads: a run id (done, cancel) or an agent name (queued).
DONE_CHANNEL: Final = "satsuma_run_done"
QUEUED_CHANNEL: Final = "satsuma_run_queued"
CANCEL_CHANNEL: Final = "satsuma_run_cancel"

_COLUMNS: Final = (
    "run_id, agent_name, agent_id, prompt, status, node_id, attempts, cancel_requested, "
    "submitted_at, claimed_at, ended_at, error"
)


@attrs.frozen(kw_only=True)
class QueuedRun:
    """A run in the cluster's queue, as ``Cluster.runs`` lists it.

    Attributes:
        run_id: The run's id (the agent's run record and RunResult carry it too).
        agent_name: The ``Agent.name`` of the class that runs it.
        agent_id: The conversation it runs in.
        prompt: The user's message.
        status: ``queued``, ``claimed``, ``running``, ``completed``, ``failed`` or
            ``cancelled`` (``completed`` means the run ended: its RunResult says how).
        node_id: The node that holds it while claimed or running, else None.
        attempts: How many times a node claimed it (more than one after a failover or
            a hand-back), since it was submitted or last resumed after approval.
        cancel_requested: ``Cluster.cancel`` was called while it was in flight.
        submitted_at: When it was submitted (seconds since the epoch).
        claimed_at: When a node last claimed it.
        ended_at: When it ended.
        error: Why it failed, when no RunResult could be had.
    """

    run_id: str
    agent_name: str
    agent_id: str
    prompt: str
    status: QueuedRunStatus
    node_id: str | None
    attempts: int
    cancel_requested: bool
    submitted_at: float
    claimed_at: float | None
    ended_at: float | None
    error: str | None


def _queued_run(row: Sequence[Any]) -> QueuedRun:
    return QueuedRun(
        run_id=row[0],
        agent_name=row[1],
        agent_id=row[2],
        prompt=row[3],
        status=row[4],
        node_id=row[5],
        attempts=row[6],
        cancel_requested=row[7],
        submitted_at=row[8],
        claimed_at=row[9],
        ended_at=row[10],
        error=row[11],
    )


# --- the client's side -------------------------------------------------------------------


async def enqueue(
    store: PostgresStore, run_id: str, agent_name: str, agent_id: str, prompt: str
) -> None:
    def work(db: psycopg.Connection[Any]) -> None:
        db.execute(
            "INSERT INTO run_queue (run_id, agent_name, agent_id, prompt, status, "
            f"submitted_at, available_at) VALUES (%s, %s, %s, %s, 'queued', {NOW}, {NOW})",
            (run_id, agent_name, agent_id, prompt),
        )
        db.execute("SELECT pg_notify(%s, %s)", (QUEUED_CHANNEL, agent_name))

    await store.transaction(work)


async def outcome(store: PostgresStore, run_id: str) -> tuple[QueuedRun, str | None] | None:
    """The run and its result (JSON text, once ended), or None for an unknown run."""

    def work(db: psycopg.Connection[Any]) -> tuple[QueuedRun, str | None] | None:
        row = db.execute(
            f"SELECT {_COLUMNS}, result FROM run_queue WHERE run_id = %s", (run_id,)
        ).fetchone()
        return None if row is None else (_queued_run(row), row[-1])

    return await store.read(work)


async def listing(
    store: PostgresStore, agent_id: str | None, statuses: Sequence[str], limit: int
) -> list[QueuedRun]:
    def work(db: psycopg.Connection[Any]) -> list[QueuedRun]:
        rows = db.execute(
            f"SELECT {_COLUMNS} FROM run_queue WHERE (%s::text IS NULL OR agent_id = %s) "
            "AND (cardinality(%s::text[]) = 0 OR status = ANY(%s::text[])) "
            "ORDER BY seq DESC LIMIT %s",
            (agent_id, agent_id, list(statuses), list(statuses), limit),
        ).fetchall()
        return [_queued_run(row) for row in reversed(rows)]

    return await store.read(work)


Requeued = Literal["requeued", "taken", "pausing", "not paused"]


async def requeue_decided(
    store: PostgresStore, run_id: str, decisions: str
) -> tuple[Requeued, str | None] | None:
    """Put a run that paused awaiting approval back in the queue with ``decisions``
    (JSON text), for a node to resume: atomically, so that of two resumes sent at once
    one wins. None for an unknown run; else what happened, and the status of the
    agent's record of the run:

    - ``requeued``: it was paused (queue ``completed``, record ``awaiting_approval``);
    - ``taken``: another resume requeued it first (its decisions wait on the row);
    - ``pausing``: its record says paused but its node has not yet written the pause to
      the queue (a moment: try again);
    - ``not paused``: anything else (it runs, ended, was gone past)."""

    def work(db: psycopg.Connection[Any]) -> tuple[Requeued, str | None] | None:
        row = db.execute(
            "SELECT q.status, q.agent_name, q.decisions IS NOT NULL, r.status FROM run_queue q "
            "LEFT JOIN runs r ON r.run_id = q.run_id WHERE q.run_id = %s FOR UPDATE OF q",
            (run_id,),
        ).fetchone()
        if row is None:
            return None
        status, agent_name, decided, recorded = row
        if status in ("queued", "claimed", "running") and decided:
            return "taken", recorded
        if recorded != "awaiting_approval":
            return "not paused", recorded
        if status != "completed":
            return "pausing", recorded
        db.execute(
            # attempts from 0: the claim that takes the decisions up is the first of
            # this part of the run (a stream says RunResumed only after a failover).
            f"UPDATE run_queue SET status = 'queued', decisions = %s, available_at = {NOW}, "
            "ended_at = NULL, result = NULL, error = NULL, attempts = 0 WHERE run_id = %s",
            (decisions, run_id),
        )
        db.execute("SELECT pg_notify(%s, %s)", (QUEUED_CHANNEL, agent_name))
        return "requeued", recorded

    return await store.transaction(work)


async def decisions(store: PostgresStore, run_id: str) -> str | None:
    """The decisions a paused run was requeued with (JSON text), or None."""

    def work(db: psycopg.Connection[Any]) -> str | None:
        row = db.execute("SELECT decisions FROM run_queue WHERE run_id = %s", (run_id,)).fetchone()
        return None if row is None else row[0]

    return await store.read(work)


async def request_cancel(store: PostgresStore, run_id: str, result: str) -> QueuedRunStatus | None:
    """Cancel a queued run at once (its result: ``result``); ask the node of one in flight
    to cancel it. The run's status after, or None for an unknown run."""

    def work(db: psycopg.Connection[Any]) -> QueuedRunStatus | None:
        row = db.execute(
            "SELECT status FROM run_queue WHERE run_id = %s FOR UPDATE", (run_id,)
        ).fetchone()
        if row is None:
            return None
        status: QueuedRunStatus = row[0]
        if status == "queued":
            db.execute(
                f"UPDATE run_queue SET status = 'cancelled', ended_at = {NOW}, result = %s, "
                "cancel_requested = true WHERE run_id = %s",
                (result, run_id),
            )
            db.execute("SELECT pg_notify(%s, %s)", (DONE_CHANNEL, run_id))
            return "cancelled"
        if status in ("claimed", "running"):
            db.execute("UPDATE run_queue SET cancel_requested = true WHERE run_id = %s", (run_id,))
            db.execute("SELECT pg_notify(%s, %s)", (CANCEL_CHANNEL, run_id))
        return status

    return await store.transaction(work)


# --- the node's side ---------------------------------------------------------------------


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


def _registered(db: psycopg.Connection[Any], node_id: str) -> bool:
    """Whether the node still has its row, locked (FOR SHARE) until the transaction ends,
    so that a sweep that counts it dead waits for this transaction, or comes first and
    this one sees the row gone. A node counted dead claims nothing more and starts no
    run it had claimed: it would run them with its agents' leases taken anew after the
    sweep let them go, and so write into them, while the runs are back in the queue."""
    row = db.execute("SELECT 1 FROM nodes WHERE node_id = %s FOR SHARE", (node_id,)).fetchone()
    return row is not None


async def claim(store: PostgresStore, node_id: str, agent_names: Sequence[str]) -> QueuedRun | None:
    """Claim the oldest queued run of the given classes that may run now: none of its
    conversation's runs is in flight, and no older one of it waits (runs of one
    conversation go in order). SKIP LOCKED: nodes claiming at once take different runs."""
    return (await claim_next(store, node_id, agent_names)).run


@attrs.frozen
class Claimed:
    """What a claim got: the run (None: none could be claimed), and whether another
    queued run of the classes was seen (the node claims again at once only then: a run
    queued later NOTIFYs)."""

    run: QueuedRun | None
    more: bool


async def claim_next(store: PostgresStore, node_id: str, agent_names: Sequence[str]) -> Claimed:
    """``claim``, saying too whether more runs wait (one statement, one round trip)."""

    def work(db: psycopg.Connection[Any]) -> Claimed:
        # One statement: the node's row locked FOR SHARE (see _registered: a node
        # counted dead claims nothing), the claim, and whether another queued run of
        # the classes is there (a run another node holds locked counts: a claim then
        # finds it taken, as one after a NOTIFY would).
        row = db.execute(
            "WITH node AS (SELECT 1 FROM nodes WHERE node_id = %(node)s FOR SHARE), "
            "candidate AS ("
            " SELECT run_id FROM run_queue q"
            f" WHERE q.status = 'queued' AND q.agent_name = ANY(%(names)s) AND q.available_at <= {NOW}"
            " AND NOT EXISTS (SELECT 1 FROM run_queue o WHERE o.agent_id = q.agent_id"
            "  AND (o.status IN ('claimed', 'running') OR (o.status = 'queued' AND o.seq < q.seq)))"
            " AND EXISTS (SELECT 1 FROM node)"
            " ORDER BY q.seq LIMIT 1 FOR UPDATE SKIP LOCKED), "
            "claimed AS ("
            f"UPDATE run_queue SET status = 'claimed', node_id = %(node)s, claimed_at = {NOW}, "
            "attempts = attempts + 1 WHERE run_id IN (SELECT run_id FROM candidate) "
            f"RETURNING {_COLUMNS}) "
            "SELECT c.*, EXISTS (SELECT 1 FROM run_queue m WHERE m.status = 'queued' "
            " AND m.agent_name = ANY(%(names)s) AND m.run_id NOT IN (SELECT run_id FROM candidate)"
            f" AND m.available_at <= {NOW}) AND EXISTS (SELECT 1 FROM node) "
            "FROM (SELECT 1) one LEFT JOIN claimed c ON true",
            {"node": node_id, "names": list(agent_names)},
        ).fetchone()
        assert row is not None  # one row, with or without a claimed run
        run = None if row[0] is None else _queued_run(row)
        return Claimed(run, bool(row[-1]))

    return await store.transaction(work)


async def mark_running(store: PostgresStore, run_id: str, node_id: str) -> bool:
    """Whether the node still holds the run (and it is now ``running``)."""
    return await start_running(store, run_id, node_id) is not None


async def start_running(store: PostgresStore, run_id: str, node_id: str) -> bool | None:
    """Mark the run ``running``, if the node still holds it (else None); and whether the
    agent has a record of the run already (False: it starts afresh), read in the same
    statement so that the node need not read it apart."""

    def work(db: psycopg.Connection[Any]) -> bool | None:
        # The node's row FOR SHARE, as _registered does, in the one statement.
        row = db.execute(
            "UPDATE run_queue SET status = 'running' WHERE run_id = %(run)s "
            "AND node_id = %(node)s AND status IN ('claimed', 'running') "
            "AND EXISTS (SELECT 1 FROM nodes WHERE node_id = %(node)s FOR SHARE) "
            "RETURNING EXISTS (SELECT 1 FROM runs WHERE run_id = %(run)s)",
            {"run": run_id, "node": node_id},
        ).fetchone()
        return None if row is None else bool(row[0])

    return await store.transaction(work)


@attrs.frozen
class LastEvents:
    """The events of a run not yet written when it ended, written with its end (see
    ``_run_events.write_batch``)."""

    entries: Sequence[Entry]
    max_events: int
    max_bytes: int


async def finish(
    store: PostgresStore,
    run: QueuedRun,
    node_id: str,
    *,
    status: QueuedRunStatus,
    result: str,
    error: str | None,
    events: LastEvents | None = None,
) -> bool:
    """Record the run's end (with its last ``events``, in the same transaction) and tell
    the listeners; False when the node no longer held the run (it was declared dead and
    the run put back in the queue: nothing is written)."""

    def work(db: psycopg.Connection[Any]) -> bool:
        # The NOTIFYs are sent at COMMIT. The queued channel only when a run of the
        # conversation waits (its turn has come): a run of another conversation was
        # announced when it was queued, and waking every node for nothing costs each a
        # claim.
        row = db.execute(
            f"UPDATE run_queue SET status = %s, ended_at = {NOW}, result = %s, error = %s, "
            "node_id = NULL, decisions = NULL WHERE run_id = %s AND node_id = %s "
            "AND status IN ('claimed', 'running') RETURNING "
            "CASE WHEN EXISTS (SELECT 1 FROM run_queue w WHERE w.agent_id = run_queue.agent_id "
            "AND w.status = 'queued') THEN pg_notify(%s, agent_name) END, "
            "pg_notify(%s, run_id)",
            (status, result, error, run.run_id, node_id, QUEUED_CHANNEL, DONE_CHANNEL),
        ).fetchone()
        if row is None:
            return False
        if events is not None and events.entries:
            write_batch(
                db, run.run_id, events.entries, events.max_events, events.max_bytes, held_by=None
            )
        return True

    return await store.transaction(work)


async def hand_back(
    store: PostgresStore,
    run: QueuedRun,
    node_id: str,
    *,
    agent_record: Literal["keep", "auto"],
    delay: float = 0.0,
) -> bool:
    """Put a run the node holds back in the queue, for any node to claim after
    ``delay`` seconds; False when the node no longer held it.

    ``agent_record``: ``keep`` leaves the agent's own record of the run as it is (the
    node never started it, or it stays ``running`` and the next node finds it
    ``interrupted``). ``auto`` is for a run the node cancelled to hand it back, which
    its agent recorded ``cancelled``: when the conversation kept something of it (an
    answer of the model after its prompt), the record becomes ``interrupted`` again and
    the next node resumes it from the journal; when it kept nothing (the prompt was
    taken back out), the record and its journal are deleted and the next node starts
    the run afresh."""

    def work(db: psycopg.Connection[Any]) -> bool:
        row = db.execute(
            f"UPDATE run_queue SET status = 'queued', node_id = NULL, "
            f"available_at = {NOW} + %s WHERE run_id = %s AND node_id = %s "
            "AND status IN ('claimed', 'running') RETURNING run_id",
            (delay, run.run_id, node_id),
        ).fetchone()
        if row is None:
            return False
        if agent_record == "auto":
            kept = db.execute(
                "SELECT EXISTS (SELECT 1 FROM messages m WHERE m.agent_id = r.agent_id "
                "AND m.seq > r.position AND m.role = 'assistant') FROM runs r "
                "WHERE r.run_id = %s AND r.status = 'cancelled'",
                (run.run_id,),
            ).fetchone()
            if kept is not None and kept[0]:
                db.execute(
                    "UPDATE runs SET status = 'interrupted', ended_at = NULL, error = NULL "
                    "WHERE run_id = %s",
                    (run.run_id,),
                )
            elif kept is not None:
                db.execute("DELETE FROM tool_calls WHERE run_id = %s", (run.run_id,))
                db.execute("DELETE FROM runs WHERE run_id = %s", (run.run_id,))
        db.execute("SELECT pg_notify(%s, %s)", (QUEUED_CHANNEL, run.agent_name))
        return True

    return await store.transaction(work)
