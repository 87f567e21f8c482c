"""A cluster node takes back its claim of a paused run (``take_back_claim``).

A node resumes a paused run with the decisions ``Cluster.resume`` queued with it: its
agent claims the run (``Store.claim_paused_run``: the record ``running``, the decisions
on the calls) and then runs the decided calls. When the store goes away between the
two (one connection lost mid-commit, say), the node cannot know whether the claim
committed, but it knows that no decided call ran. Left ``running``, the record would be
found ``interrupted`` by the next attempt, whose repair could not tell a call that never
started from one that may have: a non-idempotent approved call would be answered
"Interrupted", and the decision lost. Taken back, the run awaits approval again, as
before the claim, and the next attempt claims it with the same decisions (the queue
keeps them until the run ends), so they are applied once.

PostgreSQL only, like the queue (``_queue``): one transaction of PostgresStore's.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import TYPE_CHECKING, Any

from ._postgres import PostgresStore

if TYPE_CHECKING:
    import psycopg

__all__ = ["take_back_claim"]


async def take_back_claim(
    store: PostgresStore, run_id: str, node_id: str, call_ids: Collection[str]
) -> bool:
    """Put the run back ``awaiting_approval`` with ``call_ids`` (the calls its claim
    decided) undecided again; whether it did. Nothing is done when the claim did not
    commit (the run still awaits approval), nor once the run is no longer the node's
    (it was counted dead: another node has the run): the queue's row, locked first,
    says so. Only a node whose agent claimed the run and ran none of its decided calls
    may call it.

    Raises:
        StoreError: it could not be written.
    """
    calls = list(call_ids)

    def work(db: psycopg.Connection[Any]) -> bool:
        held = db.execute(
            "SELECT 1 FROM run_queue WHERE run_id = %s AND node_id = %s "
            "AND status IN ('claimed', 'running') FOR UPDATE",
            (run_id, node_id),
        ).fetchone()
        if held is None:
            return False
        if (
            db.execute(
                "UPDATE runs SET status = 'awaiting_approval' WHERE run_id = %s "
                "AND status = 'running' RETURNING run_id",
                (run_id,),
            ).fetchone()
            is None
        ):
            return False
        # Only this pause's calls: those an earlier pause of the run asked about keep
        # their decisions (they ran).
        db.execute(
            "UPDATE approvals SET verdict = NULL, decided_input = NULL, denial_reason = NULL, "
            "decided_by = NULL, decided_at = NULL WHERE run_id = %s AND tool_use_id = ANY(%s)",
            (run_id, calls),
        )
        return True

    return await store.transaction(work)
