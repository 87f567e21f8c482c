"""A step of a run written at once (``Step``; ``_write_step`` writes one): the writes an agent makes
at one point of its loop, which its durability order lets go together, in one
transaction of satsuma's stores rather than one each.

An agent writes, for a turn with tool calls: the ``tool_use`` message and each call
journaled as started (all before any tool runs); each call's outcome as it finishes; the
results before the next model call; and at a run's end the rest of the conversation and
the run record's end. Writes that must all be durable before the same next thing are one
step: the ``tool_use`` message with the calls started (before the tools), the last
outcome of a turn with its results (before the model call), the last messages with the
run's end. A write that must be durable before a side effect is never put in a step with
one that comes after it.

Inside a step the writes are made in this order, which is also the order a store that is
not satsuma's gets them one call each (``_write_step``): the calls' outcomes, the
conversation's tail, the calls started, the runs' ends.

The journal's and the runs' statements of the SQL stores are here too (``start_call``,
``finish_call``, ``end_run_sql``), for their single calls and for a step alike.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import Any, Final

import attrs

from .._messages import Message, Usage
from ._batched import distinct_calls, finish_calls_at_once, start_calls_at_once
from ._dialect import Connection, Dialect
from ._records import JournalEntry, RunRecordStatus
from ._rows import usage_json

__all__ = ["RunEnd", "Step", "end_run_sql", "finish_call", "start_call", "step_sql"]


@attrs.frozen(kw_only=True)
class RunEnd:
    """How a run ended, as ``Store.end_run`` records it.

    Attributes:
        run_id: The run.
        status: Its final status.
        ended_at: When it ended (seconds since the epoch).
        usage: What it used.
        error: Why it failed, or None.
    """

    run_id: str
    status: RunRecordStatus
    ended_at: float
    usage: Usage
    error: str | None


@attrs.frozen(kw_only=True)
class Step:
    """The writes of one agent that go together (see the module's notes).

    Attributes:
        agent_id: The agent whose writes these are.
        finished: Calls' outcomes (``JournalEntry`` with ``finished`` true).
        start: Where the conversation's new tail starts (as ``write_tail``'s
            ``start``), or None when the conversation is not written.
        messages: The conversation from ``start`` on.
        started: Calls journaled as started.
        ends: Runs' ends.
        riders: Statements of others that go in the step's transaction, after its own
            (a cluster node's recorded events, ``_opening``); each is given the
            transaction's connection.
    """

    agent_id: str
    finished: Sequence[JournalEntry] = ()
    start: int | None = None
    messages: Sequence[Message] = ()
    started: Sequence[JournalEntry] = ()
    ends: Sequence[RunEnd] = ()
    riders: Sequence[Callable[[Any], None]] = ()

    @property
    def empty(self) -> bool:
        """Whether the step writes nothing."""
        return not (self.finished or self.start is not None or self.started or self.ends)


# --- the SQL stores' statements -------------------------------------------------------

# A call run again (an idempotent one, on resume) keeps its place in the journal.
_AGAIN: Final = (
    " ON CONFLICT (run_id, tool_use_id) DO UPDATE SET tool_name = excluded.tool_name, "
    "input = excluded.input, finished = {false}, content = NULL, is_error = {false}, "
    "error_kind = NULL"
)
_CALL_NUMBERED: Final = (
    "INSERT INTO tool_calls (run_id, tool_use_id, position, tool_name, input) "
    "VALUES (?, ?, ?, ?, ?)" + _AGAIN
)
_CALL: Final = (
    "INSERT INTO tool_calls (run_id, tool_use_id, tool_name, input) VALUES (?, ?, ?, ?)" + _AGAIN
)
_FINISH: Final = (
    "UPDATE tool_calls SET finished = {true}, content = ?, is_error = ?, error_kind = ? "
    "WHERE run_id = ? AND tool_use_id = ?"
)
_END: Final = "UPDATE runs SET status = ?, ended_at = ?, usage = ?, error = ? WHERE run_id = ?"


def start_call(db: Connection, dialect: Dialect, entry: JournalEntry) -> None:
    """Journal ``entry``'s call as started (``Store.call_started``)."""
    sql = dialect.sql
    encoded = json.dumps(entry.input)
    if dialect.numbers_calls:
        (position,) = db.execute(
            sql("SELECT count(*) FROM tool_calls WHERE run_id = ?"), (entry.run_id,)
        ).fetchone()
        values: tuple[Any, ...] = (
            entry.run_id,
            entry.tool_use_id,
            position,
            entry.tool_name,
            encoded,
        )
        db.execute(sql(_CALL_NUMBERED), values)
    else:
        db.execute(sql(_CALL), (entry.run_id, entry.tool_use_id, entry.tool_name, encoded))


def finish_call(db: Connection, dialect: Dialect, entry: JournalEntry) -> None:
    """Journal ``entry``'s outcome (``Store.call_finished``)."""
    db.execute(
        dialect.sql(_FINISH),
        (
            json.dumps(entry.content),
            entry.is_error,
            entry.error_kind,
            entry.run_id,
            entry.tool_use_id,
        ),
    )


def end_run_sql(db: Connection, dialect: Dialect, end: RunEnd) -> None:
    """Record ``end`` on its run (``Store.end_run``)."""
    db.execute(
        dialect.sql(_END), (end.status, end.ended_at, usage_json(end.usage), end.error, end.run_id)
    )


def step_sql(
    db: Connection,
    dialect: Dialect,
    step: Step,
    write_tail: Callable[[Connection, str, int, Sequence[Message], bool], None],
    *,
    locked: bool = False,
) -> None:
    """``step``'s statements, in its order, in the caller's transaction (``write_tail``:
    the store's own, which keeps the conversation's rules; ``locked``: the agent's lock
    is held already, ``_batched.TailWrite``)."""
    if dialect.batches and step.start is not None and dialect.agent_lock and not locked:
        # The agent's lock before any row, as under a lease (see _batched's notes).
        db.execute(dialect.sql(dialect.agent_lock), (step.agent_id,))
        locked = True
    if dialect.batches and distinct_calls(step.finished):
        finish_calls_at_once(db, step.finished)
    else:
        for entry in step.finished:
            finish_call(db, dialect, entry)
    if step.start is not None:
        write_tail(db, step.agent_id, step.start, step.messages, locked)
    if dialect.batches and distinct_calls(step.started):
        start_calls_at_once(db, step.started)
    else:
        for entry in step.started:
            start_call(db, dialect, entry)
    for end in step.ends:
        end_run_sql(db, dialect, end)
    for rider in step.riders:
        rider(db)
