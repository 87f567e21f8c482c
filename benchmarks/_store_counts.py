"""Exact counts of what a PostgresStore asks of its server: store calls (each one hop to
a worker thread), transactions, SQL statements, round trips and NOTIFYs.

``count(store)`` wraps one store instance's single way to its connections (``_run``), so
that two stores in one process (a cluster's caller and its node) are counted apart. A
benchmark's figures, not a test's: the wrapper reads private names of the store, which
is fine for a measurement and would be wrong anywhere else.

NOTIFYs: the pg_notify calls in the statements sent (one a statement sends only on a
condition, as a run's end does for the queued channel, counts). Round trips: a read
(autocommit) waits for each statement; a transaction is sent in
pipeline mode, where a statement waits only when its answer is read (a fetch with
statements sent since the last answer: one round trip), and COMMIT is one more.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable
from typing import Any

import attrs

from satsuma.store import PostgresStore
from satsuma.store._batched import TailWrite  # private: a measurement (see the module)

__all__ = ["Counts", "count"]


@attrs.define
class Counts:
    """What one store asked of its server, from when ``count`` wrapped it."""

    calls: int = 0
    transactions: int = 0
    statements: int = 0
    round_trips: int = 0
    notifies: int = 0
    # Store calls by the function that made them (its module and name).
    callers: Counter[str] = attrs.field(factory=Counter)

    def per(self, runs: int) -> dict[str, float]:
        return {
            name: value / runs for name, value in attrs.asdict(self).items() if name != "callers"
        }

    def reset(self) -> None:
        self.calls = self.transactions = self.statements = self.round_trips = self.notifies = 0
        self.callers.clear()


class _Cursor:
    """A cursor whose fetches count the round trip they wait for."""

    def __init__(self, cursor: Any, link: _Connection) -> None:
        self._cursor = cursor
        self._link = link

    def __getattr__(self, name: str) -> Any:
        return getattr(self._cursor, name)

    def __enter__(self) -> _Cursor:
        self._cursor.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        self._cursor.__exit__(*exc)

    def __iter__(self) -> Any:
        self._link.answered()
        return iter(self._cursor)

    def execute(self, query: Any, params: Any = None, **kwargs: Any) -> _Cursor:
        self._link.sent(query, 1)
        self._cursor.execute(query, params, **kwargs)
        return self

    def executemany(self, query: Any, rows: Iterable[Any], **kwargs: Any) -> None:
        rows = list(rows)
        self._link.sent(query, len(rows))
        self._cursor.executemany(query, rows, **kwargs)

    def fetchone(self) -> Any:
        self._link.answered()
        return self._cursor.fetchone()

    def fetchall(self) -> Any:
        self._link.answered()
        return self._cursor.fetchall()

    def fetchmany(self, size: int = 0) -> Any:
        self._link.answered()
        return self._cursor.fetchmany(size)


class _Connection:
    """A connection that counts the statements sent through it."""

    def __init__(self, connection: Any, counts: Counts, pipelined: bool) -> None:
        self._connection = connection
        self._counts = counts
        self._pipelined = pipelined
        self._unanswered = 0
        self.ended = False

    def __getattr__(self, name: str) -> Any:
        return getattr(self._connection, name)

    def sent(self, query: Any, statements: int) -> None:
        text = query if isinstance(query, str) else repr(query)
        self._counts.statements += statements
        self._counts.notifies += text.count("pg_notify") * statements
        if self._pipelined:
            self._unanswered += statements
        else:
            self._counts.round_trips += statements

    def answered(self) -> None:
        # A fetch once the call has ended (its transaction's answers all came back with
        # its COMMIT) waits for nothing.
        if self._pipelined and self._unanswered and not self.ended:
            self._counts.round_trips += 1
            self._unanswered = 0

    def execute(self, query: Any, params: Any = None, **kwargs: Any) -> _Cursor:
        self.sent(query, 1)
        return _Cursor(self._connection.execute(query, params, **kwargs), self)

    def cursor(self, *args: Any, **kwargs: Any) -> _Cursor:
        return _Cursor(self._connection.cursor(*args, **kwargs), self)


def count(store: PostgresStore) -> Counts:
    """Count from now on what ``store`` (this instance only) asks of its server."""
    counts = Counts()
    run: Callable[..., Any] = store._run  # private: a measurement (see the module)

    def counted(work: Callable[[Any], Any], lease: Any, transaction: bool, ticket: Any) -> Any:
        counts.calls += 1
        code = getattr(work, "__code__", None)
        where = f"{code.co_filename.rsplit('/', 1)[-1]}:{code.co_firstlineno}" if code else "?"
        counts.callers[f"{where} {getattr(work, '__qualname__', '?')}"] += 1
        if transaction:
            counts.transactions += 1
            counts.round_trips += 1  # COMMIT
            if lease is not None:
                counts.statements += 1  # the lease check sent ahead of the work

        links: list[_Connection] = []

        def wrapped(connection: Any, *held: bool) -> Any:
            links.append(_Connection(connection, counts, transaction))
            return work.write(links[-1], *held) if held else work(links[-1])

        try:
            if isinstance(work, TailWrite):  # the store tells it whether it holds a lock
                return run(TailWrite(work.agent_id, wrapped), lease, transaction, ticket)
            return run(wrapped, lease, transaction, ticket)
        finally:
            for link in links:
                link.ended = True

    store._run = counted  # type: ignore[method-assign]
    return counts
