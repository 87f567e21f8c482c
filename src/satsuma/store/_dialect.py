"""What SQLite and PostgreSQL write differently, as one small table (``Dialect``), so that
each statement of the SQL stores (``_sql``) is written once.

A statement is written with ``?`` for its parameters and ``{field}`` for what differs:
``{true}`` and ``{false}`` (SQLite keeps booleans as 1 and 0), ``{added}`` (the column
that keeps the order rows were added in: SQLite's rowid, PostgreSQL's identity ``seq``),
``{run_columns}`` and ``{approval_columns}`` (the columns ``_rows`` decodes). What the
two do differently beyond words (locks, RETURNING, how a journal numbers its calls) is
a flag of the table that the shared code reads.
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from typing import Any, Final, Protocol

import attrs

from ._rows import APPROVAL_COLUMNS, RUN_COLUMNS

__all__ = ["NOW", "POSTGRES", "REFUSED", "SQLITE", "Connection", "Dialect", "executemany"]

NOW: Final = "extract(epoch from clock_timestamp())::float8"
"""PostgreSQL's clock, in seconds since the epoch: the one clock every machine of a
cluster shares, for leases, the queue and its events."""


REFUSED: Final = "satsuma refuses: "
"""How a refusal made by the server itself (``Dialect.refuses``) starts: the statement
casts ``REFUSED`` and the refusal's text to an integer, which fails with that text in the
error's message (``_postgres_pipeline`` makes it the StoreError)."""


class Cursor(Protocol):
    """What the stores read of a cursor of either driver."""

    @property
    def rowcount(self) -> int: ...

    def fetchone(self) -> Any: ...

    def fetchall(self) -> list[Any]: ...


class Connection(Protocol):
    """What the stores use of a connection of either driver (sqlite3's or psycopg's)."""

    def execute(self, query: str, params: Any = ..., /) -> Cursor: ...

    def cursor(self) -> Any: ...


@attrs.frozen(kw_only=True)
class Dialect:
    """How one database writes what the stores say.

    Attributes:
        name: The database, as a person reads it.
        placeholder: A parameter's marker in the driver's statements.
        true: A boolean column's true.
        false: Its false.
        added: The column that orders rows added in the same instant.
        returning: A write says what it changed (``RETURNING``) where the store needs
            it in the same statement; SQLite before 3.35 has no RETURNING, and its
            transactions take turns, so a read before the write sees the same rows.
        agent_lock: The statement (one parameter: the agent id) that makes writers of
            one conversation take turns, or None where transactions already do.
        numbers_calls: The store numbers a run's journal itself (the count of its
            calls), where the database has no identity column for it.
        refuses: A write's own checks (a tail past the conversation's end) are made by
            the server, failing the transaction, rather than read and made by the store:
            a write then never waits for an answer before its COMMIT is sent.
        batches: A write's rows of one kind (a tail's messages, a step's calls) go in
            one statement, and a write of a conversation under a lease takes the
            agent's lock in the lease's check (``_batched``), where each statement
            costs a message to the server; else one statement each.
    """

    name: str
    placeholder: str
    true: str
    false: str
    added: str
    returning: bool
    agent_lock: str | None
    numbers_calls: bool
    refuses: bool
    batches: bool
    # Statements as this dialect writes them, by their template (a dict: threads of the
    # store fill it, each writing the same value).
    _written: dict[str, str] = attrs.field(factory=dict, eq=False, repr=False)

    def sql(self, template: str) -> str:
        """``template`` written for this database (see the module's notes)."""
        try:
            return self._written[template]
        except KeyError:
            written = template.format(
                true=self.true,
                false=self.false,
                added=self.added,
                run_columns=RUN_COLUMNS,
                approval_columns=APPROVAL_COLUMNS,
            ).replace("?", self.placeholder)
            self._written[template] = written
            return written


SQLITE: Final = Dialect(
    name="SQLite",
    placeholder="?",
    true="1",
    false="0",
    added="rowid",
    returning=False,
    agent_lock=None,  # one writer at a time (BEGIN IMMEDIATE)
    numbers_calls=True,
    refuses=False,  # a read costs no round trip
    batches=False,  # a statement is a function call in this process
)

POSTGRES: Final = Dialect(
    name="PostgreSQL",
    placeholder="%s",
    true="true",
    false="false",
    added="seq",
    returning=True,
    # One writer of an agent's conversation at a time, as SQLite's single writer gives:
    # two tails written at once could otherwise leave a gap in seq. The one-key form
    # never collides with the two-key form of the schema's migration lock.
    agent_lock="SELECT pg_advisory_xact_lock(hashtextextended(?, 0))",
    # Two calls of one turn start at the same time: position is an identity column.
    numbers_calls=False,
    refuses=True,  # a write is one round trip (see _postgres_pipeline)
    batches=True,
)


def executemany(db: Connection, query: str, rows: Sequence[Sequence[Any]]) -> None:
    """Run ``query`` once for each of ``rows`` (none: nothing is sent)."""
    if rows:
        with contextlib.closing(db.cursor()) as cursor:
            cursor.executemany(query, rows)
