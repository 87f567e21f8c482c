"""A write's rows of one kind in one statement, on PostgreSQL (``Dialect.batches``): a
conversation's new tail, a step's calls started, a step's outcomes.

On PostgreSQL each statement of a write is one more message for the client to build and
send (psycopg's pipeline sends each with a system call of its own) and for the server to
wake for and run: a turn of two tool calls sent 16 statements, most of them the tail's
checks and deletions and one row each. Here a tail is one statement beside its lock, and
the calls of a step one statement for all. The rows go as one JSON text
(``json_to_recordset``), which the driver passes as it is, where arrays would be quoted
and escaped element by element in Python. SQLite runs the same writes one statement
each, at no cost of the kind (``_sql``, ``_step``).

The tail's statement writes what ``SQLStore._write_tail`` writes, in one snapshot:
its messages go in at ``start`` on (a row already there is replaced), the rows after
them are deleted, the summaries from ``start`` on too, and the statement fails with the
refusal's text (``_dialect.REFUSED``) when ``start`` is past the conversation's end.
Its sub-statements write rows that never overlap (the new tail's seqs, the seqs after
it, another table), as PostgreSQL requires of one statement; the end is read in the
main query, from the snapshot before any of them, and one aggregate row is always
computed, so the check always runs. The agent's lock is taken by the statement before
it, so that the snapshot is taken after the lock (a writer that held it has committed).

A write under a lease that writes a tail (``TailWrite``) has the agent's lock taken by
the lease's check, in the same statement (``_postgres_pipeline``): the lock comes after
the lease's row, as it did, and before every row of the write, in every write of a
conversation (a step without a lease takes it first too, ``_step``).

Calls of one step go in one statement only when their ids differ (two rows of one call
in one statement are refused by ``ON CONFLICT``, and would update one row twice), in
their order, which numbers their positions; otherwise one statement each, as on SQLite.
Each text (a message's content, a call's input) is the JSON text the single writes
store, carried as a JSON string, which the server gives back unchanged.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import Any, Final, Generic, TypeVar

import attrs

from .._messages import Message
from ._dialect import REFUSED, Connection
from ._records import JournalEntry

__all__ = [
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


_TAIL: Final = (
    "WITH after AS (DELETE FROM messages WHERE agent_id = %(agent)s AND seq >= %(after)s), "
    "past AS (DELETE FROM summaries WHERE agent_id = %(agent)s AND through > %(start)s), "
    "put AS (INSERT INTO messages (agent_id, seq, role, content) "
    "SELECT %(agent)s, %(start)s + tail.n - 1, tail.role, tail.content "
    "FROM ROWS FROM (json_to_recordset(%(tail)s::json) AS (role text, content text)) "
    "WITH ORDINALITY AS tail (role, content, n) "
    "ON CONFLICT (agent_id, seq) DO UPDATE SET role = excluded.role, "
    "content = excluded.content) "
    "SELECT CASE WHEN coalesce(max(seq), -1) + 1 >= %(start)s THEN 0 "
    "ELSE (%(before)s || (coalesce(max(seq), -1) + 1) || %(behind)s)::integer END "
    "FROM messages WHERE agent_id = %(agent)s"
)

# As _step's one call started, for several: a call run again keeps its place.
_STARTED: Final = (
    "INSERT INTO tool_calls (run_id, tool_use_id, tool_name, input) "
    "SELECT call.run_id, call.tool_use_id, call.tool_name, call.input "
    "FROM ROWS FROM (json_to_recordset(%s::json) "
    "AS (run_id text, tool_use_id text, tool_name text, input text)) WITH ORDINALITY "
    "AS call (run_id, tool_use_id, tool_name, input, n) ORDER BY call.n "
    "ON CONFLICT (run_id, tool_use_id) DO UPDATE SET tool_name = excluded.tool_name, "
    "input = excluded.input, finished = false, content = NULL, is_error = false, "
    "error_kind = NULL"
)

_FINISHED: Final = (
    "UPDATE tool_calls SET finished = true, content = outcome.content, "
    "is_error = outcome.is_error, error_kind = outcome.error_kind "
    "FROM json_to_recordset(%s::json) "
    "AS outcome (run_id text, tool_use_id text, content text, is_error boolean, error_kind text) "
    "WHERE tool_calls.run_id = outcome.run_id AND tool_calls.tool_use_id = outcome.tool_use_id"
)


def tail_at_once(db: Connection, agent_id: str, start: int, messages: Sequence[Message]) -> None:
    """Write ``messages`` as ``agent_id``'s conversation from ``start`` on, in one statement
    (see the module's notes); the caller holds the agent's lock."""
    db.execute(
        _TAIL,
        {
            "agent": agent_id,
            "start": start,
            "after": start + len(messages),
            "tail": json.dumps(
                [{"role": m.role, "content": json.dumps(list(m.content))} for m in messages]
            ),
            "before": f"{REFUSED}write_tail at {start} past the end (",
            "behind": f") of agent {agent_id!r}",
        },
    )


def distinct_calls(entries: Sequence[JournalEntry]) -> bool:
    """Whether ``entries`` are more than one call, each of its own (see the module)."""
    return len(entries) > 1 and len({(e.run_id, e.tool_use_id) for e in entries}) == len(entries)


def start_calls_at_once(db: Connection, entries: Sequence[JournalEntry]) -> None:
    """Journal ``entries`` (``distinct_calls``) as started, in one statement."""
    db.execute(
        _STARTED,
        (
            json.dumps(
                [
                    {
                        "run_id": e.run_id,
                        "tool_use_id": e.tool_use_id,
                        "tool_name": e.tool_name,
                        "input": json.dumps(e.input),
                    }
                    for e in entries
                ]
            ),
        ),
    )


def finish_calls_at_once(db: Connection, entries: Sequence[JournalEntry]) -> None:
    """Journal the outcomes of ``entries`` (``distinct_calls``), in one statement."""
    db.execute(
        _FINISHED,
        (
            json.dumps(
                [
                    {
                        "run_id": e.run_id,
                        "tool_use_id": e.tool_use_id,
                        "content": json.dumps(e.content),
                        "is_error": e.is_error,
                        "error_kind": e.error_kind,
                    }
                    for e in entries
                ]
            ),
        ),
    )
