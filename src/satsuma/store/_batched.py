"""A write's rows of one kind in one statement, on PostgreSQL (``Dialect.batches``): a
conversation's new tail, a step's calls started, a step's outcomes.

On PostgreSQL each statement of a write is one more message for the client to build and
send (psycopg's pipeline sends each with a system call of its own) and for the server to
wake for and run: a turn of two tool calls sent 16 statements, most of them the tail's
checks and deletions and one row each. Here a tail is one statement beside its lock, and
the calls of a step one statement for all, up to ``MOST`` rows. The rows go as a
``VALUES`` list of plain parameters: the planner knows how many there are (so an
outcome finds its call by the primary key, never a scan), and the driver passes each
as it is (arrays would be quoted and escaped element by element in Python). SQLite runs
the same writes one statement each, at no cost of the kind (``_sql``, ``_step``).

The tail's statement writes what ``SQLStore._write_tail`` writes, in one snapshot:
its messages go in at ``start`` on (a row already there is replaced), the rows after
them are deleted, the summaries from ``start`` on too, and the statement fails with the
refusal's text (``_dialect.REFUSED``) when ``start`` is past the conversation's end.
The end is ``max(seq)`` in a subquery of its own, which PostgreSQL answers from the
index's last entry (in the main query of a statement with ``WITH``, it reads every row
of the conversation).
Its sub-statements write rows that never overlap (the new tail's seqs, the seqs after
it, another table), as PostgreSQL requires of one statement; the end is read in the
main query, from the snapshot before any of them, and its one row is always computed,
so the check always runs. The agent's lock is taken by the statement before
it, so that the snapshot is taken after the lock (a writer that held it has committed).

A write under a lease that writes a tail (``TailWrite``) has the agent's lock taken by
the lease's check, in the same statement (``_postgres_pipeline``): the lock comes after
the lease's row, as it did, and before every row of the write, in every write of a
conversation (a step without a lease takes it first too, ``_step``).

Calls of one step go in one statement only when their ids differ (two rows of one call
in one statement are refused by ``ON CONFLICT``, and would update one row twice), in
their order, which numbers their positions; otherwise one statement each, as on SQLite.
Each text (a message's content, a call's input) is the JSON text the single writes
store.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable, Sequence
from typing import Any, Final, Generic, TypeVar

import attrs

from .._messages import Message
from ._dialect import REFUSED, Connection
from ._records import JournalEntry

__all__ = [
    "MOST",
    "TailWrite",
    "distinct_calls",
    "finish_calls_at_once",
    "start_calls_at_once",
    "tail_at_once",
]

T = TypeVar("T")


@attrs.frozen
class TailWrite(Generic[T]):
    """A store call's work that writes ``agent_id``'s conversation: ``write(db, locked)``,
    ``locked`` saying whether the agent's lock is held already (taken by the lease's
    check on PostgreSQL, ``_postgres_pipeline``); called as any work, it is not.

    Attributes:
        agent_id: The agent whose conversation it writes.
        write: The work.
    """

    agent_id: str
    write: Callable[[Any, bool], T]

    def __call__(self, db: Any) -> T:
        return self.write(db, False)

    def held(self, db: Any) -> T:
        """The work, the agent's lock held already."""
        return self.write(db, True)


# At most this many rows go in one statement (a longer tail, say a whole conversation
# written at once, goes one row each): a statement's text, and psycopg's prepared
# statement for it, is one per count of rows.
MOST: Final = 32


@functools.cache
def _tail_sql(rows: int) -> str:
    put = ", ".join(["(%s::integer, %s::text, %s::text)"] * rows)
    return (
        "WITH after AS (DELETE FROM messages WHERE agent_id = %s AND seq >= %s), "
        "past AS (DELETE FROM summaries WHERE agent_id = %s AND through > %s)"
        + (
            ", put AS (INSERT INTO messages (agent_id, seq, role, content) "
            f"SELECT %s, tail.seq, tail.role, tail.content FROM (VALUES {put}) "
            "AS tail (seq, role, content) ON CONFLICT (agent_id, seq) DO UPDATE "
            "SET role = excluded.role, content = excluded.content)"
            if rows
            else ""
        )
        # max(seq) in a subquery of its own, which reads the index's last entry only.
        + " SELECT CASE WHEN known.tail_end >= %s THEN 0 "
        "ELSE (%s || known.tail_end || %s)::integer END FROM (SELECT coalesce((SELECT "
        "max(seq) FROM messages WHERE agent_id = %s), -1) + 1 AS tail_end) AS known"
    )


# As _step's one call started, for several: a call run again keeps its place.
@functools.cache
def _started_sql(rows: int) -> str:
    values = ", ".join(["(%s, %s, %s, %s)"] * rows)
    return (
        f"INSERT INTO tool_calls (run_id, tool_use_id, tool_name, input) VALUES {values} "
        "ON CONFLICT (run_id, tool_use_id) DO UPDATE SET tool_name = excluded.tool_name, "
        "input = excluded.input, finished = false, content = NULL, is_error = false, "
        "error_kind = NULL"
    )


# The rows are a VALUES list, whose length the planner knows: each finds its call by
# the primary key (a set-returning function, planned as 100 rows, had it scan the table).
@functools.cache
def _finished_sql(rows: int) -> str:
    values = ", ".join(["(%s::text, %s::text, %s::text, %s::boolean, %s::text)"] * rows)
    return (
        "UPDATE tool_calls SET finished = true, content = outcome.content, "
        "is_error = outcome.is_error, error_kind = outcome.error_kind "
        f"FROM (VALUES {values}) AS outcome (run_id, tool_use_id, content, is_error, "
        "error_kind) WHERE tool_calls.run_id = outcome.run_id "
        "AND tool_calls.tool_use_id = outcome.tool_use_id"
    )


def tail_at_once(db: Connection, agent_id: str, start: int, messages: Sequence[Message]) -> bool:
    """Write ``messages`` as ``agent_id``'s conversation from ``start`` on, in one statement
    (see the module's notes), the caller holding the agent's lock; False, and nothing
    sent, when they are more than ``MOST``."""
    if len(messages) > MOST:
        return False
    params: list[Any] = [agent_id, start + len(messages), agent_id, start]
    if messages:
        params.append(agent_id)
        for offset, m in enumerate(messages):
            params += (start + offset, m.role, json.dumps(list(m.content)))
    params += (
        start,
        f"{REFUSED}write_tail at {start} past the end (",
        f") of agent {agent_id!r}",
        agent_id,
    )
    db.execute(_tail_sql(len(messages)), params)
    return True


def distinct_calls(entries: Sequence[JournalEntry]) -> bool:
    """Whether ``entries`` are more than one call and at most ``MOST``, each of its own
    (see the module)."""
    return 1 < len(entries) <= MOST and len({(e.run_id, e.tool_use_id) for e in entries}) == len(
        entries
    )


def start_calls_at_once(db: Connection, entries: Sequence[JournalEntry]) -> None:
    """Journal ``entries`` (``distinct_calls``) as started, in one statement."""
    params: list[Any] = []
    for e in entries:
        params += (e.run_id, e.tool_use_id, e.tool_name, json.dumps(e.input))
    db.execute(_started_sql(len(entries)), params)


def finish_calls_at_once(db: Connection, entries: Sequence[JournalEntry]) -> None:
    """Journal the outcomes of ``entries`` (``distinct_calls``), in one statement."""
    params: list[Any] = []
    for e in entries:
        params += (e.run_id, e.tool_use_id, json.dumps(e.content), e.is_error, e.error_kind)
    db.execute(_finished_sql(len(entries)), params)
