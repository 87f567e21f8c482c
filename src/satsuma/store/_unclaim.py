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
``_take_back``.) On MemoryStore, SQLiteStore and PostgresStore, each of which inherits its method from
here (``MemoryClaims``, ``SQLClaims``, as ``_summaries`` gives the SQL stores theirs);
any other ``Store`` has nothing to take back with.
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from typing import TYPE_CHECKING, Any, ClassVar, TypeVar

import attrs
import trio

from ._base import Store
from ._dialect import Dialect
from ._lease import Lease
from ._records import ApprovalRecord, RunRecord

T = TypeVar("T")

__all__ = ["MemoryClaims", "SQLClaims", "release_claim"]


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
    if isinstance(store, (MemoryClaims, SQLClaims)):
        return await store._release_claim(run_id, frozenset(call_ids), decided_at, lease)
    await trio.lowlevel.checkpoint()
    return False


class MemoryClaims:
    """``release_claim``'s work on MemoryStore (which inherits it)."""

    if TYPE_CHECKING:  # MemoryStore's
        _runs: dict[str, RunRecord]
        _paused: set[str]
        _approvals: dict[str, list[ApprovalRecord]]

        def _check(self, lease: Lease | None) -> None: ...

    async def _release_claim(
        self, run_id: str, calls: frozenset[str], decided_at: float, lease: Lease | None
    ) -> bool:
        """See the module's ``release_claim``."""
        await trio.lowlevel.checkpoint()
        self._check(lease)
        record = self._runs.get(run_id)
        approvals = self._approvals.get(run_id, [])
        ours = {
            a.tool_use_id
            for a in approvals
            if a.decision is not None and a.decision.decided_at == decided_at
        }
        if record is None or record.status != "running" or not calls or ours != calls:
            return False
        self._runs[run_id] = attrs.evolve(record, status="awaiting_approval")
        self._paused.add(run_id)
        self._approvals[run_id] = [
            attrs.evolve(a, decision=None) if a.tool_use_id in calls else a for a in approvals
        ]
        return True


class SQLClaims:
    """``release_claim``'s work on the two SQL stores (SQLStore inherits it)."""

    _dialect: ClassVar[Dialect]

    if TYPE_CHECKING:  # SQLStore's

        async def _call(
            self, work: Callable[[Any], T], lease: Lease | None = None, *, transaction: bool = True
        ) -> T: ...

    async def _release_claim(
        self, run_id: str, calls: frozenset[str], decided_at: float, lease: Lease | None
    ) -> bool:
        """See the module's ``release_claim``."""
        dialect = self._dialect
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

        return await self._call(work, lease)
