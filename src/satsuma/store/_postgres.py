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
"""

from __future__ import annotations

import functools
import json
import logging
import math
import re
import select
import threading
from collections.abc import Callable, Mapping, Sequence
from datetime import timedelta
from typing import TYPE_CHECKING, Any, Final, TypeVar, final

import attrs
import trio

from .._exceptions import LeaseLost, StoreClosed, StoreError, StoreUnavailable, StoreUnreadable
from .._messages import Message, Usage
from ._lease import Lease, Owner, hold, holder_gone, let_go, owner_text
from ._link import Link, Network, Ticket, run_abandonable
from ._records import (
    ApprovalDecision,
    ApprovalRecord,
    JournalEntry,
    PendingApproval,
    RunRecord,
    RunRecordStatus,
)
from ._retention import PruneReport, seconds_of
from ._rows import (
    APPROVAL_COLUMNS,
    RUN_COLUMNS,
    Damaged,
    approval_record,
    decision_values,
    journal_entry,
    message,
    pending_approval,
    run_record,
    usage_json,
)

if TYPE_CHECKING:
    import psycopg

__all__ = ["PostgresStore"]

logger = logging.getLogger("satsuma.store")

T = TypeVar("T")

# Each entry moves the schema from the previous version to its own; never edit one that
# has shipped, add the next. A cluster (issue 19) adds its own tables and columns (the
# runs a node queues and claims, nodes) as later versions: runs.status is free text, a
# run's position may be NULL, and the lease row already has owner, epoch and expiry.
_MIGRATIONS: Final[dict[int, tuple[str, ...]]] = {
    1: (
        # JSON is kept as text, never jsonb, which reorders keys (see _rows.py).
        """CREATE TABLE messages (
            agent_id TEXT NOT NULL,
            seq INTEGER NOT NULL,
            role TEXT NOT NULL,
            content TEXT NOT NULL,
            PRIMARY KEY (agent_id, seq)
        )""",
        # seq: the order runs were added in (SQLite's rowid), for runs that started in
        # the same instant.
        """CREATE TABLE runs (
            run_id TEXT PRIMARY KEY,
            seq BIGINT GENERATED ALWAYS AS IDENTITY,
            agent_id TEXT NOT NULL,
            status TEXT NOT NULL,
            prompt TEXT NOT NULL,
            started_at DOUBLE PRECISION NOT NULL,
            ended_at DOUBLE PRECISION,
            usage TEXT NOT NULL,
            error TEXT,
            position INTEGER
        )""",
        "CREATE INDEX runs_by_agent ON runs (agent_id, started_at, seq)",
        # position: a sequence, not a count of the run's calls as in SQLite, where
        # transactions take turns; here two calls of one turn start at the same time.
        """CREATE TABLE tool_calls (
            run_id TEXT NOT NULL,
            tool_use_id TEXT NOT NULL,
            position BIGINT GENERATED ALWAYS AS IDENTITY,
            tool_name TEXT NOT NULL,
            input TEXT NOT NULL,
            finished BOOLEAN NOT NULL DEFAULT false,
            content TEXT,
            is_error BOOLEAN NOT NULL DEFAULT false,
            error_kind TEXT,
            PRIMARY KEY (run_id, tool_use_id)
        )""",
        # Who owns each agent (see _lease.py). A released lease keeps its row, so that
        # the epoch only ever grows. expires_at is on the database's clock, the one
        # clock every machine of a cluster shares.
        """CREATE TABLE leases (
            agent_id TEXT PRIMARY KEY,
            owner_id TEXT,
            pid INTEGER NOT NULL,
            host TEXT NOT NULL,
            process_start TEXT NOT NULL,
            epoch BIGINT NOT NULL,
            expires_at DOUBLE PRECISION NOT NULL
        )""",
    ),
    # The cluster (satsuma.cluster): the queue of runs that nodes claim, and the nodes.
    2: (
        # status: queued, claimed, running, completed, failed, cancelled. node_id: the
        # node that claimed it, while claimed or running. result: the RunResult as JSON
        # text, once ended. available_at: not claimed before (a run handed back because
        # its agent was still held elsewhere waits a little). Times on the database's
        # clock, seconds since the epoch.
        """CREATE TABLE run_queue (
            run_id TEXT PRIMARY KEY,
            seq BIGINT GENERATED ALWAYS AS IDENTITY,
            agent_name TEXT NOT NULL,
            agent_id TEXT NOT NULL,
            prompt TEXT NOT NULL,
            status TEXT NOT NULL,
            node_id TEXT,
            attempts INTEGER NOT NULL DEFAULT 0,
            cancel_requested BOOLEAN NOT NULL DEFAULT false,
            submitted_at DOUBLE PRECISION NOT NULL,
            available_at DOUBLE PRECISION NOT NULL,
            claimed_at DOUBLE PRECISION,
            ended_at DOUBLE PRECISION,
            result TEXT,
            error TEXT
        )""",
        "CREATE INDEX run_queue_queued ON run_queue (seq) WHERE status = 'queued'",
        "CREATE INDEX run_queue_by_agent ON run_queue (agent_id, seq)",
        # At most one run of a conversation in flight, whatever the claiming query does.
        "CREATE UNIQUE INDEX run_queue_one_in_flight ON run_queue (agent_id) "
        "WHERE status IN ('claimed', 'running')",
        "CREATE INDEX run_queue_by_node ON run_queue (node_id) "
        "WHERE status IN ('claimed', 'running')",
        # agents: the Agent names it serves, as a JSON list.
        """CREATE TABLE nodes (
            node_id TEXT PRIMARY KEY,
            name TEXT NOT NULL,
            host TEXT NOT NULL,
            pid INTEGER NOT NULL,
            agents TEXT NOT NULL,
            started_at DOUBLE PRECISION NOT NULL,
            heartbeat_at DOUBLE PRECISION NOT NULL,
            expires_at DOUBLE PRECISION NOT NULL,
            draining BOOLEAN NOT NULL DEFAULT false
        )""",
    ),
    3: (
        # The calls a run paused on, waiting for a person's decision (the run's status
        # is then awaiting_approval). Replaced each time the run pauses again.
        """CREATE TABLE approvals (
            run_id TEXT NOT NULL,
            tool_use_id TEXT NOT NULL,
            position INTEGER NOT NULL,
            tool_name TEXT NOT NULL,
            input TEXT NOT NULL,
            reason TEXT NOT NULL,
            PRIMARY KEY (run_id, tool_use_id)
        )""",
    ),
    # The events of queued runs, recorded by the node that runs them for the clients
    # that watch (satsuma.cluster, _run_events.py). seq: the event's place in its run's
    # stream, from 0; a missing seq is an event dropped (the run passed its cap, or the
    # write failed). kind: which go first when the run passes its cap (0 text deltas,
    # 1 progress and updates, 2 the rest). size: the event's bytes. event: JSON text.
    4: (
        """CREATE TABLE run_events (
            run_id TEXT NOT NULL,
            seq BIGINT NOT NULL,
            kind SMALLINT NOT NULL,
            size INTEGER NOT NULL,
            event TEXT NOT NULL,
            PRIMARY KEY (run_id, seq)
        )""",
        # One row per run with events: the next seq, what is stored (for the cap), how
        # many were dropped. Its lock orders the writers of one run.
        """CREATE TABLE run_event_streams (
            run_id TEXT PRIMARY KEY,
            next_seq BIGINT NOT NULL DEFAULT 0,
            stored_events INTEGER NOT NULL DEFAULT 0,
            stored_bytes BIGINT NOT NULL DEFAULT 0,
            dropped BIGINT NOT NULL DEFAULT 0,
            updated_at DOUBLE PRECISION NOT NULL
        )""",
    ),
    # What was decided on each call a run paused on, when the run was resumed (NULL
    # while undecided): verdict approved, edited or denied; the edited input (JSON
    # text); the denial's reason; who decided, if the decision said; when. Decided rows
    # are kept when the run pauses again, as the record of who approved what.
    5: (
        "ALTER TABLE approvals ADD COLUMN verdict TEXT, ADD COLUMN decided_input TEXT, "
        "ADD COLUMN denial_reason TEXT, ADD COLUMN decided_by TEXT, "
        "ADD COLUMN decided_at DOUBLE PRECISION",
    ),
    # Where the holder's pid means its process: boot id and PID namespace (see
    # _lease.py); '' for a holder recorded before, which is judged by expiry.
    6: ("ALTER TABLE leases ADD COLUMN host_id TEXT NOT NULL DEFAULT ''",),
}
SCHEMA_VERSION: Final = max(_MIGRATIONS)

# pg_advisory_xact_lock keys. The two-key form never collides with the one-key form
# that write_tail takes per agent.
_MIGRATION_LOCK: Final = (0x5A75, 1)

_NOW: Final = "extract(epoch from clock_timestamp())::float8"

_INSTALL_HINT: Final = (
    "PostgresStore needs psycopg 3, an optional dependency of satsuma: "
    "pip install 'satsuma[postgres]'"
)


def _check_driver() -> None:
    try:
        import psycopg  # noqa: F401
    except ImportError as exc:
        raise ImportError(_INSTALL_HINT) from exc


# A URL's "user:password@" (up to the last @ before the path, as libpq reads it) and a
# keyword string's password=..., quoted or not.
_URL_PASSWORD: Final = re.compile(r"(://[^/@\s\"]*?:)[^/\s\"]*@")
_KEYWORD_PASSWORD: Final = re.compile(r"(password\s*=\s*)('(?:[^'\\]|\\.)*'|[^\s\"]+)", re.I)


def _without_password(text: str) -> str:
    """``text`` with every password of a connection string in it shown as ``***``."""
    text = _URL_PASSWORD.sub(r"\1***@", text)
    return _KEYWORD_PASSWORD.sub(r"\1***", text)


def _location(dsn: str) -> str:
    """The database as a person reads it, without the password."""
    import psycopg
    from psycopg.conninfo import conninfo_to_dict

    try:
        params = conninfo_to_dict(dsn)
    except psycopg.ProgrammingError as exc:
        # libpq quotes the string it could not read, password and all.
        raise ValueError(
            f"not a PostgreSQL connection string: {_without_password(str(exc))}"
        ) from None
    user = f"{params['user']}@" if params.get("user") else ""
    host = str(params.get("host") or "")
    port = f":{params['port']}" if params.get("port") else ""
    dbname = str(params.get("dbname") or "")
    if host.startswith("/"):  # a Unix socket's folder
        return f"postgresql://{user}{port}/{dbname}?host={host}"
    return f"postgresql://{user}{host}{port}/{dbname}"


@final
class PostgresStore:
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
        self.location = _location(dsn)
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
    def connect_seconds(self) -> int:
        """How long connecting may take (``connect_timeout`` as libpq counts it)."""
        return self._network.connect_timeout

    @property
    def cancel_timeout(self) -> float:
        """How long cancelling an abandoned call may take (see the class)."""
        return self._network.cancel_timeout

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
                await trio.to_thread.run_sync(_close_all, idle, limiter=self._limiter)

    async def __aenter__(self) -> PostgresStore:
        await self.open()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

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
            raise _refused_connection(self.location, exc) from exc
        return Link(connection)

    def _connect(self) -> Link:
        import psycopg

        link = self.connect()
        link.connection.prepare_threshold = self._prepare_threshold
        try:
            _limit_transactions(link.connection, self._transaction_timeout_ms)
        except psycopg.Error as exc:
            link.close()
            raise StoreUnavailable(
                self.location, f"cannot reach the database ({_first_line(exc)})"
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
            if not _said_goodbye(link.connection):
                return link, True
            link.close()
        if self._closed:
            raise StoreClosed(self.location, "the store is closed")
        return self._connect(), False

    def _checkin(self, ticket: Ticket, link: Link) -> None:
        """Give a connection back: to the pool when it is clean (idle, outside any
        transaction) and its caller still waits, else closed."""
        from psycopg.pq import TransactionStatus

        if not ticket.release(link):
            return  # abandoned: closed (see _link)
        connection = link.connection
        clean = (
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
        _close_all(idle)

    def _prepare(self, ticket: Ticket) -> None:
        import psycopg

        link, _ = self._checkout(ticket, fresh=True)
        connection = link.connection
        try:
            # A migration may take long (an index on a big table): it has no time limit.
            _limit_transactions(connection, 0)
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
                row = connection.execute("SELECT max(version) FROM satsuma_schema").fetchone()
                current = (row[0] if row else None) or 0
                if current > SCHEMA_VERSION:
                    raise StoreUnreadable(
                        self.location,
                        f"its schema is version {current}, newer than this satsuma knows "
                        f"({SCHEMA_VERSION}); upgrade satsuma to use it",
                    )
                for version in range(current + 1, SCHEMA_VERSION + 1):
                    for statement in _MIGRATIONS[version]:
                        connection.execute(statement)
                    connection.execute(
                        "INSERT INTO satsuma_schema (version) VALUES (%s)", (version,)
                    )
            _limit_transactions(connection, self._transaction_timeout_ms)
        except psycopg.Error as exc:
            lost = connection.broken
            ticket.release(link)
            link.close()  # a store that did not open keeps nothing open
            raise _error(self.location, exc, lost=lost, committing=False) from exc
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
            try:
                if transaction:
                    # Pipeline mode: statements go out without waiting for each answer,
                    # which are read when needed, so a write is two round trips (up to
                    # its first read; the rest and COMMIT) rather than one per statement.
                    with connection.pipeline(), connection.transaction():
                        check = self._send_lease_check(connection, lease)
                        try:
                            result = work(connection)
                        finally:
                            # Before COMMIT is sent: a refused lease rolls it all back.
                            if check is not None:
                                self._verify_lease(check, lease)
                        committing = True
                else:
                    result = work(connection)
            except psycopg.Error as exc:
                self._checkin(ticket, link)
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
                raise _error(
                    self.location, exc, lost=connection.broken, committing=committing
                ) from exc
            except Damaged as exc:
                self._checkin(ticket, link)
                raise StoreUnreadable(
                    self.location, f"{exc}; nothing was guessed in its place"
                ) from None
            except BaseException:
                self._checkin(ticket, link)
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

    # --- ownership ----------------------------------------------------------------------

    def _refusal(self, db: psycopg.Connection[Any], lease: Lease) -> LeaseLost:
        row = db.execute(
            "SELECT owner_id, pid, host, process_start, epoch, host_id FROM leases "
            "WHERE agent_id = %s",
            (lease.agent_id,),
        ).fetchone()
        return self._refused(lease, row)

    def _refused(self, lease: Lease, row: tuple[Any, ...] | None) -> LeaseLost:
        if row is None or row[0] is None:
            now = "no one holds it now"
        else:
            holder = Owner(
                owner_id=row[0], pid=row[1], host=row[2], process_start=row[3], host_id=row[5]
            )
            now = f"{owner_text(holder)} holds it now (epoch {row[4]})"
        return LeaseLost(
            self.location,
            f"agent {lease.agent_id!r}: a write under a lease it no longer has (epoch "
            f"{lease.epoch}) was refused; {now}",
        )

    def _send_lease_check(
        self, db: psycopg.Connection[Any], lease: Lease | None
    ) -> psycopg.Cursor[Any] | None:
        if lease is None:
            return None
        # FOR SHARE: a takeover (which locks the row FOR UPDATE) waits until this write
        # committed, and a write that comes after the takeover sees the new epoch.
        return db.execute(
            "SELECT owner_id, pid, host, process_start, epoch, host_id FROM leases "
            "WHERE agent_id = %s FOR SHARE",
            (lease.agent_id,),
        )

    def _verify_lease(self, check: psycopg.Cursor[Any], lease: Lease | None) -> None:
        assert lease is not None
        row = check.fetchone()
        if row is not None and row[0] == lease.owner.owner_id and row[4] == lease.epoch:
            return
        raise self._refused(lease, row)

    async def acquire_lease(self, agent_id: str, owner: Owner, *, seconds: float) -> Lease:
        def work(db: psycopg.Connection[Any]) -> Lease:
            # A row first (epoch 0, no holder), so that two first takers queue on its lock.
            db.execute(
                "INSERT INTO leases (agent_id, owner_id, pid, host, process_start, epoch, "
                "expires_at) VALUES (%s, NULL, 0, '', '', 0, 0) ON CONFLICT (agent_id) DO NOTHING",
                (agent_id,),
            )
            row = db.execute(
                "SELECT owner_id, pid, host, process_start, epoch, expires_at, "
                f"{_NOW}, host_id FROM leases WHERE agent_id = %s FOR UPDATE",
                (agent_id,),
            ).fetchone()
            assert row is not None  # inserted above, and never deleted
            holder_id, pid, host, process_start, epoch, expires_at, now, host_id = row
            if holder_id is not None and holder_id != owner.owner_id:
                holder = Owner(
                    owner_id=holder_id,
                    pid=pid,
                    host=host,
                    process_start=process_start,
                    host_id=host_id,
                )
                if not holder_gone(holder, expires_at, now=now):
                    raise StoreError(
                        self.location,
                        f"agent {agent_id!r} is already open in {owner_text(holder)}; an "
                        "agent has one owner at a time (close it there first, or use "
                        "another agent_id)",
                    )
            lease = Lease(agent_id=agent_id, owner=owner, epoch=epoch + 1, expires_at=now + seconds)
            db.execute(
                "UPDATE leases SET owner_id = %s, pid = %s, host = %s, process_start = %s, "
                "epoch = %s, expires_at = %s, host_id = %s WHERE agent_id = %s",
                (
                    owner.owner_id,
                    owner.pid,
                    owner.host,
                    owner.process_start,
                    lease.epoch,
                    lease.expires_at,
                    owner.host_id,
                    agent_id,
                ),
            )
            return lease

        lease = await self._call(work)
        hold(owner)
        return lease

    async def renew_lease(self, lease: Lease, *, seconds: float) -> Lease:
        def work(db: psycopg.Connection[Any]) -> float:
            row = db.execute(
                f"UPDATE leases SET expires_at = {_NOW} + %s WHERE agent_id = %s "
                "AND owner_id = %s AND epoch = %s RETURNING expires_at",
                (seconds, lease.agent_id, lease.owner.owner_id, lease.epoch),
            ).fetchone()
            if row is None:
                raise self._refusal(db, lease)
            expires_at: float = row[0]
            return expires_at

        return attrs.evolve(lease, expires_at=await self._call(work, transaction=False))

    async def release_lease(self, lease: Lease) -> None:
        def work(db: psycopg.Connection[Any]) -> None:
            db.execute(
                "UPDATE leases SET owner_id = NULL WHERE agent_id = %s AND owner_id = %s "
                "AND epoch = %s",
                (lease.agent_id, lease.owner.owner_id, lease.epoch),
            )

        try:
            await self._call(work, transaction=False)
        finally:
            let_go(lease.owner)

    # --- conversations ------------------------------------------------------------------

    async def load_messages(self, agent_id: str) -> list[Message]:
        def work(db: psycopg.Connection[Any]) -> list[Message]:
            rows = db.execute(
                "SELECT seq, role, content FROM messages WHERE agent_id = %s ORDER BY seq",
                (agent_id,),
            ).fetchall()
            return [
                message(agent_id, seq, expected, role, content)
                for expected, (seq, role, content) in enumerate(rows)
            ]

        return await self._call(work, transaction=False)

    def _write_tail(
        self, db: psycopg.Connection[Any], agent_id: str, start: int, messages: Sequence[Message]
    ) -> None:
        # One writer of an agent's conversation at a time, as SQLite's single writer
        # gives: two tails written at once could otherwise leave a gap in seq.
        db.execute("SELECT pg_advisory_xact_lock(hashtextextended(%s, 0))", (agent_id,))
        row = db.execute(
            "SELECT coalesce(max(seq), -1) + 1 FROM messages WHERE agent_id = %s", (agent_id,)
        ).fetchone()
        count = row[0] if row else 0
        if start > count:
            raise StoreError(
                self.location,
                f"write_tail at {start} past the end ({count}) of agent {agent_id!r}",
            )
        db.execute("DELETE FROM messages WHERE agent_id = %s AND seq >= %s", (agent_id, start))
        if messages:
            with db.cursor() as cursor:
                cursor.executemany(
                    "INSERT INTO messages (agent_id, seq, role, content) VALUES (%s, %s, %s, %s)",
                    [
                        (agent_id, start + offset, m.role, json.dumps(list(m.content)))
                        for offset, m in enumerate(messages)
                    ],
                )

    async def write_tail(
        self, agent_id: str, start: int, messages: Sequence[Message], *, lease: Lease | None = None
    ) -> None:
        await self._call(lambda db: self._write_tail(db, agent_id, start, messages), lease)

    # --- runs ---------------------------------------------------------------------------

    async def start_run(
        self,
        record: RunRecord,
        *,
        start: int | None = None,
        messages: Sequence[Message] = (),
        lease: Lease | None = None,
    ) -> None:
        def work(db: psycopg.Connection[Any]) -> None:
            if start is not None:
                self._write_tail(db, record.agent_id, start, messages)
            db.execute(
                f"INSERT INTO runs ({RUN_COLUMNS}) VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s)",
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
                ),
            )

        await self._call(work, lease)

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
        def work(db: psycopg.Connection[Any]) -> None:
            db.execute(
                "UPDATE runs SET status = %s, ended_at = %s, usage = %s, error = %s "
                "WHERE run_id = %s",
                (status, ended_at, usage_json(usage), error, run_id),
            )

        await self._call(work, lease)

    async def runs(self, agent_id: str) -> list[RunRecord]:
        def work(db: psycopg.Connection[Any]) -> list[RunRecord]:
            rows = db.execute(
                f"SELECT {RUN_COLUMNS} FROM runs WHERE agent_id = %s ORDER BY started_at, seq",
                (agent_id,),
            ).fetchall()
            return [run_record(row) for row in rows]

        return await self._call(work, transaction=False)

    async def get_run(self, run_id: str) -> RunRecord | None:
        def work(db: psycopg.Connection[Any]) -> RunRecord | None:
            row = db.execute(
                f"SELECT {RUN_COLUMNS} FROM runs WHERE run_id = %s", (run_id,)
            ).fetchone()
            return run_record(row) if row is not None else None

        return await self._call(work, transaction=False)

    async def mark_interrupted(
        self, agent_id: str, *, lease: Lease | None = None
    ) -> list[RunRecord]:
        def work(db: psycopg.Connection[Any]) -> list[RunRecord]:
            rows = db.execute(
                "UPDATE runs SET status = 'interrupted' WHERE agent_id = %s "
                f"AND status = 'running' RETURNING {RUN_COLUMNS}, seq",
                (agent_id,),
            ).fetchall()
            rows.sort(key=lambda row: (row[4], row[-1]))  # started_at, then seq
            return [run_record(row[:-1]) for row in rows]

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
        calls = [(p.tool_use_id, p.tool_name, json.dumps(p.input), p.reason) for p in pending]

        def work(db: psycopg.Connection[Any]) -> None:
            db.execute(
                "UPDATE runs SET status = 'awaiting_approval', usage = %s WHERE run_id = %s",
                (usage_json(usage), run_id),
            )
            db.execute("DELETE FROM approvals WHERE run_id = %s AND verdict IS NULL", (run_id,))
            # After the calls an earlier pause of the run asked about (decided, and kept).
            # The run's row, locked by the UPDATE above, orders two pauses of one run.
            row = db.execute(
                "SELECT coalesce(max(position) + 1, 0) FROM approvals WHERE run_id = %s",
                (run_id,),
            ).fetchone()
            first = row[0] if row is not None else 0
            if calls:
                with db.cursor() as cursor:
                    cursor.executemany(
                        "INSERT INTO approvals (run_id, tool_use_id, position, tool_name, "
                        "input, reason) VALUES (%s, %s, %s, %s, %s, %s)",
                        [
                            (run_id, call[0], first + offset, *call[1:])
                            for offset, call in enumerate(calls)
                        ],
                    )

        await self._call(work, lease)

    async def pending_calls(self, run_id: str) -> list[PendingApproval]:
        def work(db: psycopg.Connection[Any]) -> list[PendingApproval]:
            # One statement, so one snapshot: the calls and the run's status agree.
            rows = db.execute(
                "SELECT tool_use_id, tool_name, input, reason FROM approvals "
                "WHERE run_id = %s AND verdict IS NULL AND EXISTS (SELECT 1 FROM runs "
                "WHERE runs.run_id = %s AND runs.status = 'awaiting_approval') "
                "ORDER BY position",
                (run_id, run_id),
            ).fetchall()
            return [pending_approval(run_id, row) for row in rows]

        return await self._call(work, transaction=False)

    async def runs_awaiting_approval(self, agent_id: str | None = None) -> list[RunRecord]:
        def work(db: psycopg.Connection[Any]) -> list[RunRecord]:
            # Two statements, so that one agent's are found through its index.
            if agent_id is None:
                rows = db.execute(
                    f"SELECT {RUN_COLUMNS} FROM runs WHERE status = 'awaiting_approval' "
                    "ORDER BY started_at, seq"
                ).fetchall()
            else:
                rows = db.execute(
                    f"SELECT {RUN_COLUMNS} FROM runs WHERE agent_id = %s "
                    "AND status = 'awaiting_approval' ORDER BY started_at, seq",
                    (agent_id,),
                ).fetchall()
            return [run_record(row) for row in rows]

        return await self._call(work, transaction=False)

    async def claim_paused_run(
        self,
        run_id: str,
        *,
        decisions: Mapping[str, ApprovalDecision] | None = None,
        lease: Lease | None = None,
    ) -> bool:
        decided = [
            (*decision_values(decision), run_id, call_id)
            for call_id, decision in (decisions or {}).items()
        ]

        def work(db: psycopg.Connection[Any]) -> bool:
            # One statement: of two claims at once, the second waits for the first's row
            # lock, then finds the status changed and updates nothing. The decisions are
            # written in the same transaction, by the winner only.
            row = db.execute(
                "UPDATE runs SET status = 'running' WHERE run_id = %s "
                "AND status = 'awaiting_approval' RETURNING run_id",
                (run_id,),
            ).fetchone()
            if row is None:
                return False
            if decided:
                with db.cursor() as cursor:
                    cursor.executemany(
                        "UPDATE approvals SET verdict = %s, decided_input = %s, "
                        "denial_reason = %s, decided_by = %s, decided_at = %s "
                        "WHERE run_id = %s AND tool_use_id = %s AND verdict IS NULL",
                        decided,
                    )
            return True

        return await self._call(work, lease)

    async def approvals(self, run_id: str) -> list[ApprovalRecord]:
        def work(db: psycopg.Connection[Any]) -> list[ApprovalRecord]:
            rows = db.execute(
                f"SELECT {APPROVAL_COLUMNS} FROM approvals WHERE run_id = %s ORDER BY position",
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
        encoded = json.dumps(input)

        def work(db: psycopg.Connection[Any]) -> None:
            # A call run again (an idempotent one, on resume) keeps its place in the journal.
            db.execute(
                "INSERT INTO tool_calls (run_id, tool_use_id, tool_name, input) "
                "VALUES (%s, %s, %s, %s) ON CONFLICT (run_id, tool_use_id) DO UPDATE SET "
                "tool_name = excluded.tool_name, input = excluded.input, finished = false, "
                "content = NULL, is_error = false, error_kind = NULL",
                (run_id, tool_use_id, tool_name, encoded),
            )

        await self._call(work, lease)

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
        encoded = json.dumps(content)

        def work(db: psycopg.Connection[Any]) -> None:
            db.execute(
                "UPDATE tool_calls SET finished = true, content = %s, is_error = %s, "
                "error_kind = %s WHERE run_id = %s AND tool_use_id = %s",
                (encoded, is_error, error_kind, run_id, tool_use_id),
            )

        await self._call(work, lease)

    async def calls(self, run_id: str) -> list[JournalEntry]:
        def work(db: psycopg.Connection[Any]) -> list[JournalEntry]:
            rows = db.execute(
                "SELECT tool_use_id, tool_name, input, finished, content, is_error, error_kind "
                "FROM tool_calls WHERE run_id = %s ORDER BY position",
                (run_id,),
            ).fetchall()
            return [journal_entry(run_id, row) for row in rows]

        return await self._call(work, transaction=False)

    # --- retention --------------------------------------------------------------------------

    async def prune(
        self,
        *,
        older_than: float | timedelta,
        conversations: bool = False,
        dry_run: bool = False,
    ) -> PruneReport:
        from ._postgres_retention import prune

        return await prune(
            self, seconds_of(older_than), conversations=conversations, dry_run=dry_run
        )


def _limit_transactions(connection: psycopg.Connection[Any], ms: int) -> None:
    """Have the server end the session's transactions unfinished after ``ms`` (0: no
    limit). Set on the session rather than in the DSN's options, which stay the user's.
    A transaction in pipeline mode whose client stopped sending counts as active, not
    idle: only transaction_timeout (PostgreSQL 17) ends it."""
    timeouts = "set_config('idle_in_transaction_session_timeout', %(ms)s, false)"
    if connection.info.server_version >= 170000:
        timeouts += ", set_config('transaction_timeout', %(ms)s, false)"
    connection.execute(f"SELECT {timeouts}", {"ms": str(ms)})


def _said_goodbye(connection: psycopg.Connection[Any]) -> bool:
    """Whether an idle connection has something to read: nothing is due on one, so it is
    the server's last words (a shutdown, a restart, a terminated backend) or its EOF."""
    if connection.closed or connection.broken:
        return True
    try:
        if hasattr(select, "poll"):  # select.select refuses descriptors past 1023
            poller = select.poll()
            poller.register(connection.fileno(), select.POLLIN)
            return bool(poller.poll(0))
        readable, _, _ = select.select([connection.fileno()], [], [], 0)
    except (OSError, ValueError):
        return True
    return bool(readable)


def _close_all(links: Sequence[Link]) -> None:
    for link in links:
        link.close()


class _Abandoned(Exception):
    """Raised in a worker thread whose caller left before it took a connection: its
    answer goes nowhere (trio drops an abandoned thread's result)."""


def _first_line(exc: BaseException) -> str:
    return " ".join(str(exc).split("\n", 1)[0].split()) or type(exc).__name__


# SQLSTATEs after which the same call may succeed later: the server is starting,
# stopping or out of connections (57P01-57P03, 53300, 53200), the connection failed
# (class 08), or the call waited too long or lost a conflict (57014 a statement or lock
# timeout, 55P03, 40001, 40P01).
_TRY_LATER: Final = frozenset(
    {"57P01", "57P02", "57P03", "53300", "53200", "57014", "55P03", "40001", "40P01"}
)


def _error(location: str, exc: psycopg.Error, *, lost: bool, committing: bool) -> StoreError:
    """The StoreError for one of psycopg's, of the class that says what the caller does
    next: try again later (the connection broke, the server is away, busy or timed the
    call out) or read the message."""
    problem = _explain(exc, lost=lost, committing=committing)
    sqlstate = getattr(exc, "sqlstate", None) or ""
    if lost or sqlstate in _TRY_LATER or sqlstate.startswith("08"):
        return StoreUnavailable(location, problem)
    return StoreError(location, problem)


def _refused_connection(location: str, exc: psycopg.Error) -> StoreError:
    """A connection that could not be made: the server is away (StoreUnavailable), or it
    refused this user or database (a plain StoreError: trying again does not help)."""
    text = _first_line(exc)
    lowered = text.lower()
    if any(
        refusal in lowered
        for refusal in ("authentication failed", "does not exist", "no password", "pg_hba.conf")
    ):
        return StoreError(location, f"cannot reach the database ({text})")
    return StoreUnavailable(location, f"cannot reach the database ({text})")


def _explain(exc: psycopg.Error, *, lost: bool, committing: bool) -> str:
    """A clear sentence for the errors of PostgreSQL and of the connection to it;
    ``lost``: the connection broke."""
    from psycopg import errors

    text = _first_line(exc)
    if lost and committing:
        return (
            "the connection was lost while the change was committed: it may or may not "
            f"have been written ({text})"
        )
    if lost:
        return (
            f"the connection to the database was lost; nothing of this change was written ({text})"
        )
    if isinstance(exc, errors.DiskFull):
        return f"the disk is full or failing; nothing of this change was written ({text})"
    if isinstance(exc, (errors.InsufficientPrivilege, errors.ReadOnlySqlTransaction)):
        return f"the database cannot be written by this user ({text})"
    return text
