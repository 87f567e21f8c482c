"""An agent takes back its own claim of a paused run that ran nothing (``release_claim``).

In one process, an agent resumes a paused run with decisions by claiming it
(``Store.claim_paused_run``: the record ``running``, the decisions on its calls), then runs
the decided calls. When the claim's own write fails (a connection lost as it commits),
the agent cannot know whether it committed, but it knows that no decided call ran, since
it runs them only after the claim returns. Left ``running``, the run could not be
resumed with decisions again (``RunNotAwaitingApproval``) and the person's decisions
would be lost; taken back, the run awaits approval again, exactly as before the claim.

A claim is known by the time its decisions were made (``decided_at``, recorded on each
of its calls): only that claim is taken back, never another's, and nothing is done when
it did not commit. (A cluster's node takes back its claim by its queue's row instead:
``_take_back``.) On MemoryStore, SQLiteStore and PostgresStore; any other ``Store`` has
nothing to take back with.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

import attrs
import trio

from ._base import Store
from ._lease import Lease
from ._memory import MemoryStore
from ._sql import SQLStore

__all__ = ["release_claim"]


async def release_claim(
    store: Store,
    run_id: str,
    call_ids: Collection[str],
    decided_at: float,
    *,
    lease: Lease | None = None,
) -> bool:
    """Put the run back ``awaiting_approval``, ``call_ids`` undecided again, if a claim
    whose decisions were made at ``decided_at`` took it (its record ``running``, each of
    these calls decided at that time); whether it did. Written under ``lease``; only the
    agent that claimed the run and ran none of its decided calls may call it.

    False on a ``Store`` that is not one of satsuma's: it has nothing to do this with.

    Raises:
        StoreError: it could not be written (``LeaseLost``: another owner has the agent).
    """
    calls = frozenset(call_ids)
    if isinstance(store, MemoryStore):
        return await _in_memory(store, run_id, calls, decided_at, lease)
    if isinstance(store, SQLStore):
        return await _in_sql(store, run_id, calls, decided_at, lease)
    await trio.lowlevel.checkpoint()
    return False


async def _in_memory(
    store: MemoryStore,
    run_id: str,
    calls: frozenset[str],
    decided_at: float,
    lease: Lease | None,
) -> bool:
    await trio.lowlevel.checkpoint()
    store._check(lease)
    record = store._runs.get(run_id)
    approvals = store._approvals.get(run_id, [])
    ours = {
        a.tool_use_id
        for a in approvals
        if a.decision is not None and a.decision.decided_at == decided_at
    }
    if record is None or record.status != "running" or not calls or ours != calls:
        return False
    store._runs[run_id] = attrs.evolve(record, status="awaiting_approval")
    store._paused.add(run_id)
    store._approvals[run_id] = [
        attrs.evolve(a, decision=None) if a.tool_use_id in calls else a for a in approvals
    ]
    return True


async def _in_sql(
    store: SQLStore,
    run_id: str,
    calls: frozenset[str],
    decided_at: float,
    lease: Lease | None,
) -> bool:
    dialect = store._dialect
    sql = dialect.sql
    take_back = (
        "UPDATE runs SET status = 'awaiting_approval' WHERE run_id = ? AND status = 'running'"
    )
    if dialect.returning:
        take_back += " RETURNING run_id"

    def work(db: Any) -> bool:
        # The run's row locked first: a claim whose connection was lost may still be
        # committing on the server, holding it; once it has ended, what it left is read.
        db.execute(sql("UPDATE runs SET status = status WHERE run_id = ?"), (run_id,))
        rows = db.execute(
            sql("SELECT tool_use_id FROM approvals WHERE run_id = ? AND decided_at = ?"),
            (run_id, decided_at),
        ).fetchall()
        if not calls or {row[0] for row in rows} != calls:
            return False  # not this claim's: it did not commit (or is not this run's)
        # A claim only ever decides undecided calls, so these are this claim's decisions;
        # the run is still its own while it is running (a later run would have ended it).
        if dialect.returning:
            taken = db.execute(sql(take_back), (run_id,)).fetchone() is not None
        else:
            taken = db.execute(sql(take_back), (run_id,)).rowcount == 1
        if not taken:
            return False
        for call_id in sorted(calls):
            db.execute(
                sql(
                    "UPDATE approvals SET verdict = NULL, decided_input = NULL, "
                    "denial_reason = NULL, decided_by = NULL, decided_at = NULL "
                    "WHERE run_id = ? AND tool_use_id = ?"
                ),
                (run_id, call_id),
            )
        return True

    return await store._call(work, lease)
