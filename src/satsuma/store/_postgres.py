"""PostgresStore: the Store interface on PostgreSQL, for agents shared by processes and
machines.

The driver is psycopg 3, through its *sync* API in worker threads: its async API runs
only under asyncio (under trio, ``AsyncConnection.connect`` fails with "no running event
loop"), and the trio-native drivers found have had no release for years. A query in a
worker thread costs the thread hop on top of the round trip (docs/persistence.md has the
figures). The threads run under the store's own ``trio.CapacityLimiter``, one per
connection of its pool, so store calls never queue behind a sync tool's threads, nor
tools behind the store.

The pool is a list of idle connections, not psycopg_pool: the limiter already bounds how
many connections are in use, and psycopg_pool makes its connections in background
threads that a caller waits for (up to its timeout) while the server is down, where a
store call must fail at once with a StoreError that says so.

Each Store call is one transaction (a plain read is one statement, which PostgreSQL
runs as one). A caller that is cancelled (its deadline passed) returns at once, without
waiting for its thread: the connection is dropped from the pool, what runs on it is
cancelled server-side, and the thread woken (see ``_link``). Whether an abandoned write
was committed is unknown; the store logs that it may have been.

The statements are the SQL stores' (``_sql``); this module holds the connections and the
leases on the database's clock; a write goes out in one pipeline (``_postgres_pipeline``).
"""

from __future__ import annotations

import functools
import logging
import math
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Final, TypeVar, final

import attrs
import trio

from .._exceptions import StoreClosed, StoreError, StoreUnavailable, StoreUnreadable
from ._dialect import POSTGRES
from ._lease import Lease, Owner
from ._link import (
    Link,
    Network,
    Ticket,
    close_all,
    limit_transactions,
    run_abandonable,
    said_goodbye,
)
from ._postgres_errors import error, first_line, location, refused_connection
from ._postgres_lease import renew, take
from ._postgres_pipeline import pipelined, settle, unanswered
from ._records import RunRecord
from ._retention import PruneReport
from ._rows import Damaged
from ._run_query import RunQuery, sql_find_runs
from ._schema import POSTGRES_MIGRATIONS, POSTGRES_SCHEMA_VERSION, upgrade
from ._sql import SQLStore

if TYPE_CHECKING:
    import psycopg

__all__ = ["SCHEMA_VERSION", "PostgresStore"]

logger = logging.getLogger("satsuma.store")

T = TypeVar("T")

SCHEMA_VERSION: Final = POSTGRES_SCHEMA_VERSION

# pg_advisory_xact_lock keys. The two-key form never collides with the one-key form
# that write_tail takes per agent.
_MIGRATION_LOCK: Final = (0x5A75, 1)

_INSTALL_HINT: Final = (
    "PostgresStore needs psycopg 3, an optional dependency of satsuma: "
    "pip install 'satsuma[postgres]'"
)


def _check_driver() -> None:
    try:
        import psycopg  # noqa: F401
    except ImportError as exc:
        raise ImportError(_INSTALL_HINT) from exc


@final
class PostgresStore(SQLStore):
    """A Store in a PostgreSQL database, which several processes and machines may share.

    It keeps what SQLiteStore keeps, with the same guarantees: each call one transaction,
    one owner per agent with every write fenced by its lease's epoch, rows that do not
    decode reported by name, and a schema that migrates itself when the store opens
    (tables ``satsuma_schema``, ``messages``, ``runs``, ``tool_calls``, ``leases``, and
    for ``satsuma.cluster`` ``run_queue``, ``nodes``, ``run_events`` and
    ``run_event_streams``, in the schema the connection's
    ``search_path`` names first).

    Needs the extra: ``pip install 'satsuma[postgres]'``.

    Args:
        dsn: A libpq connection string or URI, e.g. ``"postgresql://app@db/agents"``
            (a password may be in it, or in ``PGPASSWORD`` or ``~/.pgpass``).
        pool_size: How many connections the store opens at most, and so how many of
            its calls run at once; the others wait their turn (default 8).
        connect_timeout: Seconds to wait for a new connection before giving up with a
            StoreUnavailable (default 10; libpq counts whole seconds, at least 2).
        transaction_timeout: Seconds after which the server ends a transaction of this
            store that has not finished (default 10; PostgreSQL 17 and later, where
            older servers end only one idle between statements). The store's
            transactions take milliseconds; one lasts longer when its process was
            paused (SIGSTOP, a long garbage collection) in the middle of it, holding
            locks that every other process of a cluster would wait for until it goes
            on. The server rolls it back and drops the connection instead.
        prepare_threshold: After how many runs of a query on a connection psycopg
            prepares it on the server (its ``prepare_threshold``; default 5, 0 for at
            once). ``None`` turns server-side prepared statements off, which a pooler
            in transaction mode needs unless it tracks them itself (PgBouncer before
            1.21 or without ``max_prepared_statements``, Supavisor): see
            docs/deployment.md.
        keepalives_idle: Seconds a connection may be idle before TCP sends a
            keepalive probe (default 10), so that a connection whose peer is gone
            (a partition, a server that vanished) is found dead while idle.
        keepalives_interval: Seconds between unanswered probes (default 3).
        keepalives_count: Unanswered probes after which the connection is dead
            (default 3).
        tcp_user_timeout: Seconds that data sent may stay unacknowledged before the
            connection is dead (default 20; libpq's ``tcp_user_timeout``): bounds a
            call on a network that stopped answering, with or without a deadline of
            the caller's. A value the DSN sets for any of these four (or for
            ``connect_timeout``) wins; libpq ignores them on a Unix socket.
        cancel_timeout: Seconds that cancelling a call abandoned by its caller may
            take (default 2): the server is asked to stop its query, and the
            connection's thread is woken once it answered or this passed.

    A caller cancelled while a call runs (``trio.move_on_after``, a deadline, its
    scope's cancel) returns at once, with ``trio.Cancelled`` as ever: the call's
    connection is dropped from the pool and closed once its thread comes back, and
    what it was running is cancelled on the server when the server can be reached.
    A write abandoned that way may or may not have been committed (the store logs a
    warning saying so, on the logger ``satsuma.store``).

    Raises:
        ImportError: psycopg is not installed (the message says what to install).
        ValueError: ``dsn`` is not a connection string, ``pool_size`` is below 1,
            ``prepare_threshold`` is negative, or a timeout or count is not positive.
        StoreError: (when first used) the database does not exist or may not be
            written, or its schema is newer than this satsuma knows;
            StoreUnavailable, its subclass, when the server cannot be reached (it
            refused the connection, or did not answer within ``connect_timeout``).
    """

    _dialect = POSTGRES

    def __init__(
        self,
        dsn: str,
        *,
        pool_size: int = 8,
        connect_timeout: float = 10.0,
        transaction_timeout: float = 10.0,
        prepare_threshold: int | None = 5,
        keepalives_idle: float = 10.0,
        keepalives_interval: float = 3.0,
        keepalives_count: int = 3,
        tcp_user_timeout: float = 20.0,
        cancel_timeout: float = 2.0,
    ) -> None:
        _check_driver()
        if pool_size < 1:
            raise ValueError(f"pool_size must be at least 1, got: {pool_size!r}")
        if prepare_threshold is not None and (
            not isinstance(prepare_threshold, int) or prepare_threshold < 0
        ):
            raise ValueError(
                f"prepare_threshold must be None or 0 or more, got: {prepare_threshold!r}"
            )
        for label, seconds in (
            ("transaction_timeout", transaction_timeout),
            ("keepalives_idle", keepalives_idle),
            ("keepalives_interval", keepalives_interval),
            ("keepalives_count", keepalives_count),
            ("tcp_user_timeout", tcp_user_timeout),
            ("cancel_timeout", cancel_timeout),
        ):
            if not seconds > 0:
                raise ValueError(f"{label} must be positive, got: {seconds!r}")
        self.dsn = dsn
        self.location = location(dsn)
        self._network = Network(
            connect_timeout=max(2, math.ceil(connect_timeout)),
            # libpq counts these in whole seconds (and milliseconds), 0 meaning the
            # system's default: never round a short setting down to that.
            keepalives_idle=max(1, math.ceil(keepalives_idle)),
            keepalives_interval=max(1, math.ceil(keepalives_interval)),
            keepalives_count=max(1, math.ceil(keepalives_count)),
            tcp_user_timeout_ms=max(1, math.ceil(tcp_user_timeout * 1000)),
            cancel_timeout=cancel_timeout,
        )
        self._transaction_timeout_ms = max(1, round(transaction_timeout * 1000))
        self._prepare_threshold = prepare_threshold
        self._limiter = trio.CapacityLimiter(pool_size)
        self._idle: list[Link] = []
        self._idle_lock = threading.Lock()  # worker threads take and give connections
        self._opening = trio.Lock()
        self._opened = False
        self._closed = False

    def __repr__(self) -> str:
        return f"PostgresStore({self.location!r})"

    @property
    def _where(self) -> str:
        return self.location

    @property
    def connect_seconds(self) -> int:
        """How long connecting may take (``connect_timeout`` as libpq counts it)."""
        return self._network.connect_timeout

    @property
    def cancel_timeout(self) -> float:
        """How long cancelling an abandoned call may take (see the class)."""
        return self._network.cancel_timeout

    @property
    def pool_size(self) -> int:
        """How many connections the store opens at most (``pool_size``)."""
        return int(self._limiter.total_tokens)

    # --- lifecycle ----------------------------------------------------------------------

    async def open(self) -> None:
        """Connect and bring the schema up to date now (it is done on first use
        otherwise), so that a bad DSN or an unreachable server is reported at start."""
        async with self._opening:
            if self._closed:
                raise StoreClosed(self.location, "the store is closed")
            if self._opened:
                return
            await run_abandonable(
                self._prepare,
                cancel_timeout=self._network.cancel_timeout,
                limiter=self._limiter,
            )
            self._opened = True

    async def aclose(self) -> None:
        """Close the store's connections. Calls made after fail with StoreClosed; a call
        in flight finishes, and its connection is closed after it."""
        async with self._opening:
            with self._idle_lock:
                self._closed = True
                idle, self._idle = self._idle, []
            if idle:
                await trio.to_thread.run_sync(close_all, idle, limiter=self._limiter)

    # --- connections (these run in worker threads) ---------------------------------------

    def connect(self, *, application_name: str | None = None) -> Link:
        """A new connection to the store's database, with its network settings (for
        ``satsuma.cluster``'s listeners too, which keep theirs apart from the pool).
        Blocks: call it in a worker thread.

        Raises:
            StoreUnavailable: the server refused, or did not answer in
                ``connect_timeout``.
        """
        import psycopg

        parameters = self._network.parameters(self.dsn)
        if application_name is not None:
            parameters["application_name"] = application_name
        try:
            connection = psycopg.connect(
                self.dsn,
                autocommit=True,  # transactions are explicit: a read is one statement
                **parameters,
            )
        except psycopg.Error as exc:
            raise refused_connection(self.location, exc) from exc
        return Link(connection)

    def _connect(self) -> Link:
        import psycopg

        link = self.connect()
        link.connection.prepare_threshold = self._prepare_threshold
        try:
            limit_transactions(link.connection, self._transaction_timeout_ms)
        except psycopg.Error as exc:
            link.close()
            raise StoreUnavailable(
                self.location, f"cannot reach the database ({first_line(exc)})"
            ) from exc
        return link

    def _checkout(self, ticket: Ticket, *, fresh: bool) -> tuple[Link, bool]:
        """A connection, held by ``ticket``, and whether it was idle in the pool (and so
        may have gone stale in a way not seen yet)."""
        link, reused = self._take(fresh=fresh)
        if not ticket.hold(link):
            raise _Abandoned
        return link, reused

    def _take(self, *, fresh: bool) -> tuple[Link, bool]:
        while not fresh:
            with self._idle_lock:
                if self._closed:
                    raise StoreClosed(self.location, "the store is closed")
                if not self._idle:
                    break
                link = self._idle.pop()
            if not said_goodbye(link.connection):
                return link, True
            link.close()
        if self._closed:
            raise StoreClosed(self.location, "the store is closed")
        return self._connect(), False

    def _checkin(self, ticket: Ticket, link: Link, *, drop: bool = False) -> None:
        """Give a connection back: pooled when clean and awaited, unless ``drop``."""
        from psycopg.pq import TransactionStatus

        if not ticket.release(link):
            return  # abandoned: closed (see _link)
        connection = link.connection
        clean = not drop and (
            not connection.closed
            and not connection.broken
            and connection.info.transaction_status == TransactionStatus.IDLE
        )
        if clean:
            with self._idle_lock:
                if not self._closed:
                    self._idle.append(link)
                    return
        link.close()

    def _drop_idle(self) -> None:
        with self._idle_lock:
            idle, self._idle = self._idle, []
        close_all(idle)

    def _prepare(self, ticket: Ticket) -> None:
        import psycopg

        link, _ = self._checkout(ticket, fresh=True)
        connection = link.connection
        try:
            # A migration may take long (an index on a big table): it has no time limit.
            limit_transactions(connection, 0)
            row = connection.execute("SHOW server_encoding").fetchone()
            encoding = row[0] if row else None
            if isinstance(encoding, bytes):  # as psycopg hands back text under SQL_ASCII
                encoding = encoding.decode("ascii", "replace")
            if encoding != "UTF8":
                # Other encodings cannot hold every character of a conversation.
                raise StoreError(
                    self.location,
                    f"the database's encoding is {encoding}, not UTF8; "
                    "create it with ENCODING 'UTF8'",
                )
            with connection.transaction():
                connection.execute("SELECT pg_advisory_xact_lock(%s, %s)", _MIGRATION_LOCK)
                exists = connection.execute("SELECT to_regclass('satsuma_schema')").fetchone()
                if exists is None or exists[0] is None:
                    connection.execute("CREATE TABLE satsuma_schema (version INTEGER NOT NULL)")
                upgrade(
                    connection,
                    self.location,
                    POSTGRES_MIGRATIONS,
                    "INSERT INTO satsuma_schema (version) VALUES (%s)",
                )
            limit_transactions(connection, self._transaction_timeout_ms)
        except psycopg.Error as exc:
            lost = connection.broken
            ticket.release(link)
            link.close()  # a store that did not open keeps nothing open
            raise error(self.location, exc, lost=lost, committing=False) from exc
        except BaseException:
            ticket.release(link)
            link.close()
            raise
        self._checkin(ticket, link)

    def _run(
        self,
        work: Callable[[psycopg.Connection[Any]], T],
        lease: Lease | None,
        transaction: bool,
        ticket: Ticket,
    ) -> T:
        import psycopg

        for attempt in (1, 2):
            link, reused = self._checkout(ticket, fresh=attempt > 1)
            connection = link.connection
            committing = False
            began = None
            try:
                if transaction:
                    # One round trip, and one more per answer read on the way.
                    with connection.pipeline():
                        began = connection.execute("BEGIN")
                        result = pipelined(connection, work, lease)
                        committing = True  # COMMIT is sent as the pipeline ends
                else:
                    result = work(connection)
            except psycopg.Error as exc:
                # Lost with no answer at all: the server never ran it (_postgres_pipeline).
                committing = committing and not (connection.broken and unanswered(began))
                refused = settle(connection, self.location, lease, exc)
                # A pipeline failed part-way: psycopg may count as prepared statements the
                # server skipped ("_pg3_N does not exist" ever after): not given back.
                self._checkin(ticket, link, drop=transaction)
                if refused is not None:
                    raise refused from None
                if (
                    reused
                    and connection.broken
                    and not committing
                    and attempt == 1
                    and not ticket.abandoned
                ):
                    # A connection that broke while it was idle (the server restarted,
                    # or dropped it): nothing of this call was committed, so it is run
                    # again, once, on a new connection; the other idle ones are stale too.
                    self._drop_idle()
                    continue
                raise error(
                    self.location, exc, lost=connection.broken, committing=committing
                ) from exc
            except Damaged as exc:
                self._checkin(ticket, link)
                raise StoreUnreadable(
                    self.location, f"{exc}; nothing was guessed in its place"
                ) from None
            except BaseException:
                self._checkin(ticket, link, drop=transaction)  # as after a psycopg.Error
                raise
            self._checkin(ticket, link)
            return result
        raise AssertionError("unreachable: the second attempt returns or raises")

    async def _call(
        self,
        work: Callable[[psycopg.Connection[Any]], T],
        lease: Lease | None = None,
        *,
        transaction: bool = True,
    ) -> T:
        if not self._opened:
            await self.open()

        def abandoned() -> None:
            # The caller gets trio.Cancelled, which cannot say this: its write may have
            # reached COMMIT before the cancel did.
            logger.log(
                logging.WARNING if transaction else logging.DEBUG,
                "%s: a call was abandoned by its caller (cancelled, or past its deadline) "
                "while the database had it; its change may or may not have been "
                "written. Its connection is dropped",
                self.location,
            )

        return await run_abandonable(
            functools.partial(self._run, work, lease, transaction),
            cancel_timeout=self._network.cancel_timeout,
            limiter=self._limiter,
            on_abandon=abandoned,
        )

    # --- ownership (the statements are _postgres_lease's) --------------------------------

    async def _take_lease(self, agent_id: str, owner: Owner, seconds: float) -> Lease:
        return await self._call(lambda db: take(db, self.location, agent_id, owner, seconds))

    async def renew_lease(self, lease: Lease, *, seconds: float) -> Lease:
        expires_at = await self._call(
            lambda db: renew(db, self.location, lease, seconds), transaction=False
        )
        return attrs.evolve(lease, expires_at=expires_at)

    async def _find_runs(self, query: RunQuery) -> list[RunRecord]:
        return await sql_find_runs(self.read, self._dialect, query)

    # --- retention --------------------------------------------------------------------------

    async def _prune(self, older_than: float, *, conversations: bool, dry_run: bool) -> PruneReport:
        from ._postgres_retention import prune  # the cluster's tables too: loaded when used

        return await prune(self, older_than, conversations=conversations, dry_run=dry_run)


class _Abandoned(Exception):
    """Raised in a worker thread whose caller left before it took a connection: its
    answer goes nowhere (trio drops an abandoned thread's result)."""
