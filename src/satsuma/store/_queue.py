"""The cluster's run queue in PostgreSQL (satsuma.cluster uses it, with the node table
of ``_nodes``, whose functions and channels this module passes on).

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

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Final, Literal

import attrs

from ._dialect import NOW
from ._end_notice import RESULT_CHANNEL, end_notice, read_end_notice
from ._lease import Lease
from ._nodes import (
    CANCEL_CHANNEL,
    DONE_CHANNEL,
    QUEUED_CHANNEL,
    WATCH_CHANNEL,
    Heartbeat,
    heartbeat,
    register_node,
    sweep,
    unregister_node,
)
from ._postgres import PostgresStore
from ._run_events import Batch, Entry, Stored, append_ctes, batch_params, trim, write_batch

if TYPE_CHECKING:
    import psycopg

# The node table's functions are the queue's too (run_queue.heartbeat, ...), and the
# format of a run's end notice (run_queue.read_end_notice), and a batch of events written
# in a transaction of another's (run_queue.write_batch: an agent's step, which carries
# them). A node's claim that takes the run's agent too is ``_claim_take``'s.
__all__ = [
    "CANCEL_CHANNEL",
    "Batch",
    "DONE_CHANNEL",
    "Claimed",
    "Heartbeat",
    "LastEvents",
    "QUEUED_CHANNEL",
    "RESULT_CHANNEL",
    "WATCH_CHANNEL",
    "QueuedRun",
    "QueuedRunStatus",
    "heartbeat",
    "read_end_notice",
    "register_node",
    "sweep",
    "unregister_node",
    "write_batch",
]

QueuedRunStatus = Literal["queued", "claimed", "running", "completed", "failed", "cancelled"]
ENDED: Final = ("completed", "failed", "cancelled")

_COLUMNS: Final = (
    "run_id, agent_name, agent_id, prompt, status, node_id, attempts, cancel_requested, "
    "submitted_at, claimed_at, ended_at, error, watched"
)
_FIELDS: Final = tuple(_COLUMNS.split(", "))  # QueuedRun's, in the order of the columns


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
        watched: Someone streams its events (``Cluster.stream``, ``submit(watched=True)``,
            or a ``Cluster.events`` stream opened while it was in flight): its node asks
            the model for each answer as it is written. Otherwise answers come whole.
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
    watched: bool = False


def _queued_run(row: Sequence[Any]) -> QueuedRun:
    return QueuedRun(**dict(zip(_FIELDS, row, strict=False)))


# --- the client's side -------------------------------------------------------------------


async def enqueue(
    store: PostgresStore,
    run_id: str,
    agent_name: str,
    agent_id: str,
    prompt: str,
    *,
    watched: bool = False,
) -> None:
    def work(db: psycopg.Connection[Any]) -> None:
        db.execute(
            "INSERT INTO run_queue (run_id, agent_name, agent_id, prompt, status, watched, "
            f"submitted_at, available_at) VALUES (%s, %s, %s, %s, 'queued', %s, {NOW}, {NOW})",
            (run_id, agent_name, agent_id, prompt, watched),
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


def _no_flush_wait(db: psycopg.Connection[Any]) -> None:
    """Commit the caller's transaction without waiting for its WAL to reach the disk
    (``synchronous_commit = off``, for this transaction only; sent ahead in its
    pipeline, no round trip of its own): for a claim and a start, whose flush was most
    of their time (one fsync each, 0.3 to 4 ms measured on a shared machine, against
    0.1 ms without).

    What it risks: a crash of the server (or a failover) within a moment of the commit
    loses the change, and the run is ``queued`` (or ``claimed``) again after recovery.
    Nothing durable can have been built on it meanwhile: the node's next write (taking
    the agent's lease, the run's record) waits for its own flush, and the WAL is one
    stream, flushed (and replicated) in order, so the claim or start is on disk before
    that write returns. A node whose write failed because the server went away hands
    the run back, which the queue refuses when the run is no longer its. The writes a
    caller is told of (a submit, a run's end and its NOTIFY, a hand-back, a cancel)
    keep waiting for their flush."""
    db.execute("SET LOCAL synchronous_commit = off")


_CLAIM: Final = (
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
    "FROM (SELECT 1) one LEFT JOIN claimed c ON true"
)


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
    """``claim``, saying too whether more runs wait (one statement, one round trip: its
    answer is read once the transaction's answers came back with its COMMIT)."""

    def work(db: psycopg.Connection[Any]) -> psycopg.Cursor[Any]:
        _no_flush_wait(db)
        return claim_statement(db, node_id, agent_names)

    # Read here, not in the transaction: a read there would wait for the answer before
    # COMMIT goes out (a round trip more). The answer came back with the COMMIT's, so
    # the read waits for nothing (psycopg reads a cursor's connection only for an
    # answer it does not have yet).
    return claimed((await store.transaction(work)).fetchone())


def claim_statement(
    db: psycopg.Connection[Any], node_id: str, agent_names: Sequence[str]
) -> psycopg.Cursor[Any]:
    """The claim's one statement, sent (read it with ``claimed``): the node's row
    locked FOR SHARE (see _nodes.py: a node counted dead claims nothing), the claim, and
    whether another queued run of the classes is there (a run another node holds locked
    counts: a claim then finds it taken, as one after a NOTIFY would)."""
    return db.execute(_CLAIM, {"node": node_id, "names": list(agent_names)})


def claimed(row: Sequence[Any] | None) -> Claimed:
    """What ``claim_statement``'s row says."""
    assert row is not None  # one row, with or without a claimed run
    return Claimed(None if row[0] is None else _queued_run(row), bool(row[-1]))


async def mark_running(store: PostgresStore, run_id: str, node_id: str) -> bool:
    """Whether the node still holds the run (and it is now ``running``)."""
    return await start_running(store, run_id, node_id) is not None


async def start_running(store: PostgresStore, run_id: str, node_id: str) -> bool | None:
    """Mark the run ``running``, if the node still holds it (else None); and whether the
    agent has a record of the run already (False: it starts afresh), read in the same
    statement so that the node need not read it apart."""

    def work(db: psycopg.Connection[Any]) -> bool | None:
        _no_flush_wait(db)
        # The node's row FOR SHARE (see _nodes.py: a node counted dead starts no run
        # it had claimed), in the one statement.
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
    stored: Stored | None = None  # what the run stored before, if known (``trim``)


async def finish(
    store: PostgresStore,
    run: QueuedRun,
    node_id: str,
    *,
    status: QueuedRunStatus,
    result: str,
    error: str | None,
    events: LastEvents | None = None,
    release: Lease | None = None,
) -> bool:
    """Record the run's end (with its last ``events``, in the same transaction) and tell
    the listeners (with the result itself when it fits in a NOTIFY: ``_end_notice``);
    False when the node no longer held the run (it was declared dead and the run put
    back in the queue: nothing is written). ``release``: the lease of the run's agent,
    let go in the same transaction (``_opening.Taken``), so that a run of the conversation
    that waits, claimable from this commit on, finds its agent free."""
    notice = end_notice(run.run_id, result)
    # One statement, whose answer is read once the transaction's came back with its
    # COMMIT (no round trip halfway): the end, and what goes with it only if the end
    # was written (the node held the run): the lease let go, the last events.
    # The NOTIFYs are sent at COMMIT. The queued channel only when a run of the
    # conversation waits (its turn has come): a run of another conversation was
    # announced when it was queued, and waking every node for nothing costs each a
    # claim. The result's (_end_notice), or, for one too long for it, the done
    # channel's (its waiters read the queue): one NOTIFY for the end.
    done = "pg_notify(%(done_channel)s, run_id)" if notice is None else "NULL"
    parts = [
        f"WITH done AS (UPDATE run_queue SET status = %(status)s, ended_at = {NOW}, "
        "result = %(result)s, error = %(error)s, node_id = NULL, decisions = NULL "
        "WHERE run_id = %(run)s AND node_id = %(node)s AND status IN ('claimed', 'running') "
        "RETURNING CASE WHEN EXISTS (SELECT 1 FROM run_queue w "
        "WHERE w.agent_id = run_queue.agent_id AND w.status = 'queued') "
        "THEN pg_notify(%(queued)s, agent_name) END AS queued, "
        "CASE WHEN %(notice)s::text IS NOT NULL THEN pg_notify(%(result_channel)s, %(notice)s) "
        f"END AS notice, {done} AS done)"
    ]
    params: dict[str, Any] = {}
    if release is not None:
        # As Store.release_lease does it; the agent's own release, as it closes, then
        # changes nothing.
        parts.append(
            "released AS (UPDATE leases SET owner_id = NULL WHERE agent_id = %(agent)s "
            "AND owner_id = %(owner)s AND epoch = %(epoch)s AND EXISTS (SELECT 1 FROM done))"
        )
        params.update(agent=release.agent_id, owner=release.owner.owner_id, epoch=release.epoch)
    last = events if events is not None and events.entries else None
    if last is not None:
        parts.append(append_ctes("EXISTS (SELECT 1 FROM done)"))
        params.update(batch_params(run.run_id, last.entries))
    params.update(
        status=status,
        result=result,
        error=error,
        run=run.run_id,
        node=node_id,
        queued=QUEUED_CHANNEL,
        notice=notice,
        result_channel=RESULT_CHANNEL,
        done_channel=DONE_CHANNEL,
    )
    statement = ", ".join(parts) + " SELECT queued, notice, done FROM done"

    def work(db: psycopg.Connection[Any]) -> psycopg.Cursor[Any]:
        cursor = db.execute(statement, params)
        if last is not None:
            trim(db, run.run_id, params, last.stored, last.max_events, last.max_bytes)
        return cursor

    # Read once the transaction's answers came back (see claim_next).
    return (await store.transaction(work)).fetchone() is not None


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
