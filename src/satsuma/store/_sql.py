"""SQLStore: the Store methods written once for SQLite and PostgreSQL, over ``_dialect``.

A driver (``_sqlite``, ``_postgres``) supplies what is its own: how a call reaches the
database (``_call``: sqlite3 on the store's one worker thread; psycopg in a pool of
connections a caller can walk away from), how a write's lease is checked inside its
transaction, taking and renewing leases, and pruning. The rest is here (summaries:
``_summaries``).

``transaction`` and ``read`` are the same calls, named, for satsuma's modules with tables
beside the store's (queue, run events, retention, status), never the driver's ``_call``.
"""

from __future__ import annotations

import abc
import json
from collections.abc import Callable, Mapping, Sequence
from typing import Any, ClassVar, Final, Self, TypeVar

from .._exceptions import StoreError
from .._messages import Message, Usage
from ._base import BaseStore
from ._batched import TailWrite, tail_at_once
from ._dialect import REFUSED, Connection, Dialect, executemany
from ._lease import Lease, let_go
from ._load_agent import Loaded, load_sql
from ._records import (
    ApprovalDecision,
    ApprovalRecord,
    JournalEntry,
    PendingApproval,
    RunRecord,
    RunRecordStatus,
    outcome_entry,
)
from ._rows import (
    approval_record,
    decision_values,
    journal_entry,
    message,
    pending_approval,
    proposal,
    proposal_text,
    run_record,
    usage_json,
)
from ._step import RunEnd, Step, end_run_sql, finish_call, start_call, step_sql
from ._summaries import SummaryMethods, drop_past
from ._unclaim import SQLClaims

__all__ = ["SQLStore"]

T = TypeVar("T")

_INTERRUPT: Final = (
    "UPDATE runs SET status = 'interrupted' WHERE agent_id = ? AND status = 'running'"
)
_INTERRUPT_RETURNING: Final = _INTERRUPT + " RETURNING {run_columns}, {added}"
_START: Final = "INSERT INTO runs ({run_columns}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
_CLAIM: Final = (
    "UPDATE runs SET status = 'running' WHERE run_id = ? AND status = 'awaiting_approval'"
)
_CLAIM_RETURNING: Final = _CLAIM + " RETURNING run_id"
# A decision taken ahead of a resume: kept once, and only on a call still pending.
_PROPOSE: Final = (
    "UPDATE approvals SET proposed = ? WHERE run_id = ? AND tool_use_id = ? AND verdict IS NULL "
    "AND proposed IS NULL AND EXISTS (SELECT 1 FROM runs WHERE runs.run_id = ? "
    "AND runs.status = 'awaiting_approval')"
)
_PROPOSED: Final = (
    "SELECT tool_use_id, proposed FROM approvals WHERE run_id = ? AND verdict IS NULL "
    "AND proposed IS NOT NULL AND EXISTS (SELECT 1 FROM runs WHERE runs.run_id = ? "
    "AND runs.status = 'awaiting_approval')"
)


_END_OF_TAIL: Final = "SELECT coalesce(max(seq), -1) + 1 FROM messages WHERE agent_id = ?"
# Fails, with the text of the refusal (see _dialect.REFUSED), when ? is past the end.
_PAST_THE_END: Final = (
    "SELECT CASE WHEN coalesce(max(seq), -1) + 1 >= ? THEN 0 "
    "ELSE (? || (coalesce(max(seq), -1) + 1) || ?)::integer END FROM messages WHERE agent_id = ?"
)


class SQLStore(SummaryMethods, SQLClaims, BaseStore):
    """The Store methods of SQLiteStore and PostgresStore (see the module's notes)."""

    _dialect: ClassVar[Dialect]

    @property
    @abc.abstractmethod
    def _where(self) -> str:
        """The database as error messages name it."""

    @abc.abstractmethod
    async def open(self) -> None: ...

    @abc.abstractmethod
    async def _call(
        self, work: Callable[[Any], T], lease: Lease | None = None, *, transaction: bool = True
    ) -> T:
        """``work(connection)`` in one transaction, checked against ``lease`` when given
        (``LeaseLost``: nothing of it is written); with ``transaction=False``, where the
        driver can, outside any (``work`` is then one statement)."""

    async def __aenter__(self) -> Self:
        await self.open()
        return self

    # --- for satsuma's own modules ------------------------------------------------------

    async def transaction(self, work: Callable[[Any], T]) -> T:
        """``work(connection)`` in one transaction of the store's, as its own calls run:
        for satsuma's modules that keep tables in the store's database (the cluster's
        queue, events, retention and status), not for users.

        Raises:
            StoreError: as the store's own calls do (its subclass says what to do next).
        """
        return await self._call(work)

    async def read(self, work: Callable[[Any], T]) -> T:
        """``work(connection)``, one statement (on PostgreSQL outside any transaction,
        which the server runs as one), as ``transaction`` does otherwise."""
        return await self._call(work, transaction=False)

    # --- ownership ----------------------------------------------------------------------

    async def release_lease(self, lease: Lease) -> None:
        def work(db: Connection) -> None:
            db.execute(
                self._dialect.sql(
                    "UPDATE leases SET owner_id = NULL WHERE agent_id = ? AND owner_id = ? "
                    "AND epoch = ?"
                ),
                (lease.agent_id, lease.owner.owner_id, lease.epoch),
            )

        try:
            await self._call(work, transaction=False)
        finally:
            let_go(lease.owner)

    # --- conversations ------------------------------------------------------------------

    async def load_messages(self, agent_id: str) -> list[Message]:
        def work(db: Connection) -> list[Message]:
            rows = db.execute(
                self._dialect.sql(
                    "SELECT seq, role, content FROM messages WHERE agent_id = ? ORDER BY seq"
                ),
                (agent_id,),
            ).fetchall()
            return [
                message(agent_id, seq, expected, role, content)
                for expected, (seq, role, content) in enumerate(rows)
            ]

        return await self._call(work, transaction=False)

    def _write_tail(
        self,
        db: Connection,
        agent_id: str,
        start: int,
        messages: Sequence[Message],
        locked: bool = False,
    ) -> None:
        sql = self._dialect.sql
        if self._dialect.agent_lock is not None and not locked:
            db.execute(sql(self._dialect.agent_lock), (agent_id,))
        if self._dialect.batches and tail_at_once(db, agent_id, start, messages):
            return  # the same, in one statement
        # max(seq) walks the primary key's index; count(*) would read every row.
        said = (f"write_tail at {start} past the end (", f") of agent {agent_id!r}")
        if self._dialect.refuses:
            # The server refuses a start past the end itself: no answer to wait for.
            db.execute(sql(_PAST_THE_END), (start, REFUSED + said[0], said[1], agent_id))
        else:
            row = db.execute(sql(_END_OF_TAIL), (agent_id,)).fetchone()
            count = row[0] if row else 0
            if start > count:
                raise StoreError(self._where, f"{said[0]}{count}{said[1]}")
        db.execute(sql("DELETE FROM messages WHERE agent_id = ? AND seq >= ?"), (agent_id, start))
        drop_past(db, self._dialect, agent_id, start)
        executemany(
            db,
            sql("INSERT INTO messages (agent_id, seq, role, content) VALUES (?, ?, ?, ?)"),
            [
                (agent_id, start + offset, m.role, json.dumps(list(m.content)))
                for offset, m in enumerate(messages)
            ],
        )

    async def write_tail(
        self, agent_id: str, start: int, messages: Sequence[Message], *, lease: Lease | None = None
    ) -> None:
        def work(db: Connection, locked: bool) -> None:
            self._write_tail(db, agent_id, start, messages, locked)

        await self._call(TailWrite(agent_id, work), lease)

    # --- runs ---------------------------------------------------------------------------

    async def start_run(
        self,
        record: RunRecord,
        *,
        start: int | None = None,
        messages: Sequence[Message] = (),
        lease: Lease | None = None,
    ) -> None:
        def work(db: Connection, locked: bool = False) -> None:
            if start is not None:
                self._write_tail(db, record.agent_id, start, messages, locked)
            db.execute(
                self._dialect.sql(_START),
                (
                    record.run_id,
                    record.agent_id,
                    record.status,
                    record.prompt,
                    record.started_at,
                    record.ended_at,
                    usage_json(record.usage),
                    record.error,
                    record.position,
                    record.agent,
                ),
            )

        await self._call(work if start is None else TailWrite(record.agent_id, work), lease)

    async def end_run(
        self,
        run_id: str,
        *,
        status: RunRecordStatus,
        ended_at: float,
        usage: Usage,
        error: str | None,
        lease: Lease | None = None,
    ) -> None:
        end = RunEnd(run_id=run_id, status=status, ended_at=ended_at, usage=usage, error=error)
        await self._call(lambda db: end_run_sql(db, self._dialect, end), lease)

    async def write_step(self, step: Step, *, lease: Lease | None = None) -> None:
        """Write ``step`` in one transaction (see ``satsuma.store._step``)."""

        def work(db: Connection, locked: bool = False) -> None:
            step_sql(db, self._dialect, step, self._write_tail, locked=locked)

        await self._call(work if step.start is None else TailWrite(step.agent_id, work), lease)

    async def runs(self, agent_id: str) -> list[RunRecord]:
        def work(db: Connection) -> list[RunRecord]:
            rows = db.execute(
                self._dialect.sql(
                    "SELECT {run_columns} FROM runs WHERE agent_id = ? ORDER BY started_at, {added}"
                ),
                (agent_id,),
            ).fetchall()
            return [run_record(row) for row in rows]

        return await self._call(work, transaction=False)

    async def load_agent(self, agent_id: str, *, lease: Lease | None = None) -> Loaded:
        """``_load_agent.load_agent`` in one transaction."""
        return await self._call(lambda db: load_sql(db, self._dialect, agent_id), lease)

    async def get_run(self, run_id: str) -> RunRecord | None:
        def work(db: Connection) -> RunRecord | None:
            row = db.execute(
                self._dialect.sql("SELECT {run_columns} FROM runs WHERE run_id = ?"), (run_id,)
            ).fetchone()
            return run_record(row) if row is not None else None

        return await self._call(work, transaction=False)

    async def mark_interrupted(
        self, agent_id: str, *, lease: Lease | None = None
    ) -> list[RunRecord]:
        sql = self._dialect.sql

        def work(db: Connection) -> list[RunRecord]:
            if self._dialect.returning:
                # One statement: the runs it marks are the runs it returns.
                rows = db.execute(sql(_INTERRUPT_RETURNING), (agent_id,)).fetchall()
                rows.sort(key=lambda row: (row[4], row[-1]))  # started_at, then as added
            else:
                rows = db.execute(
                    sql(
                        "SELECT {run_columns}, {added} FROM runs WHERE agent_id = ? "
                        "AND status = 'running' ORDER BY started_at, {added}"
                    ),
                    (agent_id,),
                ).fetchall()
                db.execute(sql(_INTERRUPT), (agent_id,))
            return [run_record((*row[:2], "interrupted", *row[3:-1])) for row in rows]

        return await self._call(work, lease)

    # --- runs awaiting approval -----------------------------------------------------------

    async def pause_run(
        self,
        run_id: str,
        pending: Sequence[PendingApproval],
        *,
        usage: Usage,
        lease: Lease | None = None,
    ) -> None:
        sql = self._dialect.sql
        calls = [(p.tool_use_id, p.tool_name, json.dumps(p.input), p.reason) for p in pending]

        def work(db: Connection) -> None:
            db.execute(
                sql("UPDATE runs SET status = 'awaiting_approval', usage = ? WHERE run_id = ?"),
                (usage_json(usage), run_id),
            )
            db.execute(sql("DELETE FROM approvals WHERE run_id = ? AND verdict IS NULL"), (run_id,))
            # After the calls an earlier pause of the run asked about (decided, and kept).
            # The run's row, locked by the UPDATE above, orders two pauses of one run.
            row = db.execute(
                sql("SELECT coalesce(max(position) + 1, 0) FROM approvals WHERE run_id = ?"),
                (run_id,),
            ).fetchone()
            first = row[0] if row is not None else 0
            executemany(
                db,
                sql(
                    "INSERT INTO approvals (run_id, tool_use_id, position, tool_name, input, "
                    "reason) VALUES (?, ?, ?, ?, ?, ?)"
                ),
                [(run_id, call[0], first + offset, *call[1:]) for offset, call in enumerate(calls)],
            )

        await self._call(work, lease)

    async def pending_calls(self, run_id: str) -> list[PendingApproval]:
        def work(db: Connection) -> list[PendingApproval]:
            # One statement, so one snapshot: the calls and the run's status agree.
            rows = db.execute(
                self._dialect.sql(
                    "SELECT tool_use_id, tool_name, input, reason FROM approvals "
                    "WHERE run_id = ? AND verdict IS NULL AND EXISTS (SELECT 1 FROM runs "
                    "WHERE runs.run_id = ? AND runs.status = 'awaiting_approval') "
                    "ORDER BY position"
                ),
                (run_id, run_id),
            ).fetchall()
            return [pending_approval(run_id, row) for row in rows]

        return await self._call(work, transaction=False)

    async def runs_awaiting_approval(self, agent_id: str | None = None) -> list[RunRecord]:
        sql = self._dialect.sql

        def work(db: Connection) -> list[RunRecord]:
            # Two statements, so that one agent's are found through its index.
            if agent_id is None:
                cursor = db.execute(
                    sql(
                        "SELECT {run_columns} FROM runs WHERE status = 'awaiting_approval' "
                        "ORDER BY started_at, {added}"
                    )
                )
            else:
                cursor = db.execute(
                    sql(
                        "SELECT {run_columns} FROM runs WHERE agent_id = ? "
                        "AND status = 'awaiting_approval' ORDER BY started_at, {added}"
                    ),
                    (agent_id,),
                )
            return [run_record(row) for row in cursor.fetchall()]

        return await self._call(work, transaction=False)

    async def claim_paused_run(
        self,
        run_id: str,
        *,
        decisions: Mapping[str, ApprovalDecision] | None = None,
        lease: Lease | None = None,
    ) -> bool:
        sql = self._dialect.sql
        decided = [
            (*decision_values(decision), run_id, call_id)
            for call_id, decision in (decisions or {}).items()
        ]

        def work(db: Connection) -> bool:
            # One statement: of two claims at once, the second waits for the first (its
            # row lock, or SQLite's one writer), then finds the status changed and
            # updates nothing. The decisions are written in the same transaction, by
            # the winner only. PostgreSQL's pipeline knows a rowcount only once the
            # result is read: RETURNING reads it.
            if self._dialect.returning:
                cursor = db.execute(sql(_CLAIM_RETURNING), (run_id,))
                claimed = cursor.fetchone() is not None
            else:
                claimed = db.execute(sql(_CLAIM), (run_id,)).rowcount == 1
            if not claimed:
                return False
            executemany(
                db,
                sql(
                    "UPDATE approvals SET verdict = ?, decided_input = ?, denial_reason = ?, "
                    "decided_by = ?, decided_at = ? WHERE run_id = ? AND tool_use_id = ? "
                    "AND verdict IS NULL"
                ),
                decided,
            )
            return True

        return await self._call(work, lease)

    async def propose_decision(
        self, run_id: str, tool_use_id: str, decision: ApprovalDecision
    ) -> bool:
        sql = self._dialect.sql
        values = (proposal_text(decision), run_id, tool_use_id, run_id)

        def work(db: Connection) -> bool:
            # One statement: of two proposals at once, one finds the column taken.
            if self._dialect.returning:
                return (
                    db.execute(sql(_PROPOSE + " RETURNING run_id"), values).fetchone() is not None
                )
            return bool(db.execute(sql(_PROPOSE), values).rowcount == 1)

        return await self._call(work)

    async def proposed_decisions(self, run_id: str) -> dict[str, ApprovalDecision]:
        def work(db: Connection) -> dict[str, ApprovalDecision]:
            rows = db.execute(self._dialect.sql(_PROPOSED), (run_id, run_id)).fetchall()
            return {call_id: proposal(run_id, call_id, text) for call_id, text in rows}

        return await self._call(work, transaction=False)

    async def approvals(self, run_id: str) -> list[ApprovalRecord]:
        def work(db: Connection) -> list[ApprovalRecord]:
            rows = db.execute(
                self._dialect.sql(
                    "SELECT {approval_columns} FROM approvals WHERE run_id = ? ORDER BY position"
                ),
                (run_id,),
            ).fetchall()
            return [approval_record(run_id, row) for row in rows]

        return await self._call(work, transaction=False)

    # --- the tool-call journal ------------------------------------------------------------

    async def call_started(
        self,
        run_id: str,
        tool_use_id: str,
        tool_name: str,
        input: Any,
        *,
        lease: Lease | None = None,
    ) -> None:
        entry = JournalEntry(
            run_id=run_id, tool_use_id=tool_use_id, tool_name=tool_name, input=input
        )
        await self._call(lambda db: start_call(db, self._dialect, entry), lease)

    async def call_finished(
        self,
        run_id: str,
        tool_use_id: str,
        *,
        content: Any,
        is_error: bool,
        error_kind: str | None,
        lease: Lease | None = None,
    ) -> None:
        entry = outcome_entry(
            run_id, tool_use_id, content=content, is_error=is_error, error_kind=error_kind
        )
        await self._call(lambda db: finish_call(db, self._dialect, entry), lease)

    async def calls(self, run_id: str) -> list[JournalEntry]:
        def work(db: Connection) -> list[JournalEntry]:
            rows = db.execute(
                self._dialect.sql(
                    "SELECT tool_use_id, tool_name, input, finished, content, is_error, "
                    "error_kind FROM tool_calls WHERE run_id = ? ORDER BY position"
                ),
                (run_id,),
            ).fetchall()
            return [journal_entry(run_id, row) for row in rows]

        return await self._call(work, transaction=False)
