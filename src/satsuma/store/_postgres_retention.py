"""``PostgresStore.prune`` and the queue's own expiry: what the retention policy deletes
in PostgreSQL (see ``_retention``), in batches that never stall a running cluster.

Each batch is one short transaction of the store's (``transaction``) that locks the rows
it deletes with ``FOR UPDATE SKIP LOCKED``: a row another transaction holds (a node
finishing that run, another prune) is skipped, not waited for, and goes at the next
prune. Batches walk the primary key from where the last one stopped, so a prune reads
each table once however large it is.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Final

from ._dialect import NOW, POSTGRES
from ._ledger_expiry import prune as prune_ledgers
from ._ledger_expiry import prune_counts
from ._retention import PRUNE_BATCH, PruneReport, batches, ended_before, idle

if TYPE_CHECKING:
    import psycopg

    from ._sql import SQLStore

__all__ = ["expire_queue", "prune"]

_QUEUE_ENDED: Final = "('completed', 'failed', 'cancelled')"
_ENDED_BEFORE: Final = ended_before("runs", "%(cut)s")
# A queued run that prune deletes (one parameter: the cut).
_QUEUE_ENDED_BEFORE: Final = f"q.status IN {_QUEUE_ENDED} AND q.ended_at < %(cut)s"
# An agent (``m.agent_id``) whose conversation prune(conversations=True) deletes: as on
# SQLite, and no run of it waits in the queue or runs on a node either.
_IDLE: Final = (
    idle("%(cut)s") + " AND NOT EXISTS (SELECT 1 FROM run_queue q WHERE q.agent_id = m.agent_id "
    f"AND q.status NOT IN {_QUEUE_ENDED})"
)


async def prune(
    store: SQLStore, older_than: float, *, conversations: bool, dry_run: bool
) -> PruneReport:
    """``Store.prune`` on PostgreSQL; ``older_than`` in seconds, on the database's clock
    (the one every machine of a cluster shares)."""
    cut = await _cut(store, older_than)
    now = cut + older_than  # holds expire on the clock of the process that took them
    if dry_run:
        return await store.transaction(lambda db: _counts(db, cut, now, conversations))
    report = await batches(store.transaction, _runs_batch, cut)
    report += await batches(store.transaction, _queue_batch, cut)
    if conversations:
        report += await batches(store.transaction, _conversations_batch, cut)
    return report + await prune_ledgers(store, POSTGRES, cut, now)


async def expire_queue(store: SQLStore, older_than: float) -> int:
    """Delete the queue's runs that ended more than ``older_than`` seconds ago, with
    their events (what nodes do by themselves, see ``Node(result_retention=...)``); how
    many runs."""
    report = await batches(store.transaction, _queue_batch, await _cut(store, older_than))
    return report.run_queue


async def _cut(store: SQLStore, older_than: float) -> float:
    def work(db: psycopg.Connection[Any]) -> float:
        row = db.execute(f"SELECT {NOW} - %s", (older_than,)).fetchone()
        assert row is not None
        cut: float = row[0]
        return cut

    return await store.read(work)


def _counts(
    db: psycopg.Connection[Any], cut: float, now: float, conversations: bool
) -> PruneReport:
    db.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
    doomed = f"SELECT run_id FROM runs WHERE {_ENDED_BEFORE}"
    queued = f"SELECT run_id FROM run_queue q WHERE {_QUEUE_ENDED_BEFORE}"
    row = db.execute(
        f"SELECT (SELECT count(*) FROM runs WHERE {_ENDED_BEFORE}), "
        f"(SELECT count(*) FROM tool_calls WHERE run_id IN ({doomed})), "
        f"(SELECT count(*) FROM approvals WHERE run_id IN ({doomed})), "
        f"(SELECT count(*) FROM run_queue q WHERE {_QUEUE_ENDED_BEFORE}), "
        f"(SELECT count(*) FROM run_events WHERE run_id IN ({queued}))",
        {"cut": cut},
    ).fetchone()
    assert row is not None
    agents = messages = 0
    if conversations:
        counted = db.execute(
            f"SELECT count(DISTINCT agent_id), count(*) FROM messages m WHERE {_IDLE}",
            {"cut": cut},
        ).fetchone()
        assert counted is not None
        agents, messages = counted
    ledgers, holds = prune_counts(db, POSTGRES, cut, now)
    return PruneReport(
        dry_run=True,
        cut=cut,
        runs=row[0],
        tool_calls=row[1],
        approvals=row[2],
        run_queue=row[3],
        run_events=row[4],
        conversations=agents,
        messages=messages,
        budget_ledgers=ledgers,
        budget_holds=holds,
    )


# The tail of a batch's statement: how many rows its ``doomed`` chose, and the last key.
_CHOSEN: Final = "(SELECT count(*) FROM doomed), (SELECT max(run_id) FROM doomed)"
_RUNS_BATCH: Final = (
    "WITH doomed AS (SELECT run_id FROM runs WHERE run_id > %(after)s AND "
    f"{_ENDED_BEFORE} ORDER BY run_id LIMIT %(batch)s FOR UPDATE SKIP LOCKED), "
    "calls AS (DELETE FROM tool_calls WHERE run_id IN (SELECT run_id FROM doomed) "
    "RETURNING 1), "
    "approved AS (DELETE FROM approvals WHERE run_id IN (SELECT run_id FROM doomed) "
    "RETURNING 1), "
    "gone AS (DELETE FROM runs WHERE run_id IN (SELECT run_id FROM doomed) RETURNING 1) "
    "SELECT (SELECT count(*) FROM gone), (SELECT count(*) FROM calls), "
    f"(SELECT count(*) FROM approved), {_CHOSEN}"
)
_QUEUE_BATCH: Final = (
    "WITH doomed AS (SELECT run_id FROM run_queue q WHERE run_id > %(after)s AND "
    f"{_QUEUE_ENDED_BEFORE} ORDER BY run_id LIMIT %(batch)s FOR UPDATE SKIP LOCKED), "
    "events AS (DELETE FROM run_events WHERE run_id IN (SELECT run_id FROM doomed) "
    "RETURNING 1), "
    "streams AS (DELETE FROM run_event_streams WHERE run_id IN "
    "(SELECT run_id FROM doomed) RETURNING 1), "
    "gone AS (DELETE FROM run_queue WHERE run_id IN (SELECT run_id FROM doomed) "
    "RETURNING 1) "
    "SELECT (SELECT count(*) FROM gone), (SELECT count(*) FROM events), "
    f"(SELECT count(*) FROM streams), {_CHOSEN}"
)


def _delete_batch(
    db: psycopg.Connection[Any], statement: str, cut: float, after: str
) -> tuple[list[int], str]:
    """Run one batch's ``statement`` (it ends with ``_CHOSEN``): the counts it deleted,
    and the run_id to go on after ("" when done)."""
    row = db.execute(statement, {"after": after, "cut": cut, "batch": PRUNE_BATCH}).fetchone()
    assert row is not None
    *counts, seen, last = row
    return counts, (last if seen == PRUNE_BATCH else "")


def _runs_batch(cut: float, after: str, db: psycopg.Connection[Any]) -> tuple[PruneReport, str]:
    """One batch of ended run records with their journals and approvals."""
    (runs, calls, approvals), after = _delete_batch(db, _RUNS_BATCH, cut, after)
    report = PruneReport(dry_run=False, cut=cut, runs=runs, tool_calls=calls, approvals=approvals)
    return report, after


def _queue_batch(cut: float, after: str, db: psycopg.Connection[Any]) -> tuple[PruneReport, str]:
    """One batch of ended queued runs with their events."""
    (queued, events, _), after = _delete_batch(db, _QUEUE_BATCH, cut, after)
    return PruneReport(dry_run=False, cut=cut, run_queue=queued, run_events=events), after


def _conversations_batch(
    cut: float, after: str, db: psycopg.Connection[Any]
) -> tuple[PruneReport, str]:
    """One batch of agents looked at (their conversations deleted when idle), and the
    agent_id to go on after."""
    candidates = [
        agent_id
        for (agent_id,) in db.execute(
            "SELECT DISTINCT agent_id FROM messages WHERE agent_id > %s ORDER BY agent_id LIMIT %s",
            (after, PRUNE_BATCH),
        ).fetchall()
    ]
    idle = [
        agent_id
        for (agent_id,) in db.execute(
            f"SELECT m.agent_id FROM unnest(%(ids)s::text[]) AS m(agent_id) WHERE {_IDLE} "
            "ORDER BY m.agent_id",
            {"ids": candidates, "cut": cut},
        ).fetchall()
    ]
    messages = 0
    deleted: list[str] = []
    if idle:
        # The lock write_tail and start_run take for one agent's conversation: a write
        # made now commits before the check below (which then sees its run) or after the
        # delete. An agent that is open holds its lease and is never idle; this orders
        # writes made without a lease. Taken in order: two prunes at once cannot
        # deadlock.
        db.execute(
            "SELECT pg_advisory_xact_lock(hashtextextended(a, 0)) FROM unnest(%s::text[]) a",
            (idle,),
        )
        rows = db.execute(
            f"DELETE FROM messages m WHERE m.agent_id = ANY(%(ids)s) AND {_IDLE} "
            "RETURNING m.agent_id",
            {"ids": idle, "cut": cut},
        ).fetchall()
        messages = len(rows)
        deleted = sorted({agent_id for (agent_id,) in rows})
        # A released lease row goes with its conversation. The next owner's epoch starts
        # again at 1, which lets no stale write in: a write is checked against the
        # holder's own id (unique to the opened agent) as well as the epoch.
        db.execute("DELETE FROM leases WHERE agent_id = ANY(%s) AND owner_id IS NULL", (deleted,))
        db.execute("DELETE FROM summaries WHERE agent_id = ANY(%s)", (deleted,))  # Compaction's
    report = PruneReport(dry_run=False, cut=cut, conversations=len(deleted), messages=messages)
    return report, (candidates[-1] if len(candidates) == PRUNE_BATCH else "")
