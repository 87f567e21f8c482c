"""SQLiteStore: the Store interface on a SQLite file (stdlib sqlite3, WAL mode).

One connection, used by one worker thread at a time (a capacity limiter of 1): every
database call runs off the trio thread, writes never contend with each other, and so no
caller ever sees "database is locked". Each Store call is one transaction. The
statements are the SQL stores' (``_sql``); this module holds the file and the thread.
"""

from __future__ import annotations

import os
import sqlite3
import time
from collections.abc import Callable
from os import PathLike, fspath
from pathlib import Path
from typing import Final, Literal, TypeVar, final

import attrs
import trio

from .._exceptions import StoreClosed, StoreError, StoreUnavailable, StoreUnreadable
from ._dialect import SQLITE
from ._lease import LEASE_ROW, Lease, Owner, lease_holds, lease_lost, next_epoch
from ._records import RunRecord
from ._retention import PruneReport
from ._rows import Damaged
from ._run_query import RunQuery, sql_find_runs
from ._schema import SQLITE_MIGRATIONS, SQLITE_SCHEMA_VERSION, upgrade
from ._sql import SQLStore
from ._sqlite_retention import prune

__all__ = ["SCHEMA_VERSION", "SQLiteStore"]

T = TypeVar("T")

SCHEMA_VERSION: Final = SQLITE_SCHEMA_VERSION


@final
class SQLiteStore(SQLStore):
    """A Store in a SQLite file.

    Args:
        path: The database file; its folder is created if needed.
        durability: ``"normal"`` (default: a committed change survives the process being
            killed, as SQLite's WAL mode with ``synchronous=NORMAL`` guarantees) or
            ``"full"`` (it also survives a power cut, at the cost of an fsync per commit).

    Raises:
        StoreError: (when first used) the file is corrupt or not a database, cannot be
            written, or has a schema newer than this satsuma knows.
    """

    _dialect = SQLITE

    def __init__(
        self, path: str | PathLike[str], *, durability: Literal["normal", "full"] = "normal"
    ) -> None:
        if durability not in ("normal", "full"):
            raise ValueError(f"durability must be 'normal' or 'full', got: {durability!r}")
        self.path = Path(fspath(path))
        self._durability = durability
        self._connection: sqlite3.Connection | None = None
        self._limiter = trio.CapacityLimiter(1)
        self._opening = trio.Lock()
        self._closed = False
        # Why the store closed itself (its file went away while open), or None.
        self._gone: str | None = None
        # (st_dev, st_ino) of the database file and of its -wal and -shm files, as the
        # store opened them (see _check_files).
        self._files: dict[str, tuple[int, int]] = {}
        # The path as it was when opened: a relative one must not name another file
        # after the process changes its working directory.
        self._opened_path = self.path

    def __repr__(self) -> str:
        return f"SQLiteStore({str(self.path)!r})"

    @property
    def _where(self) -> str:
        return str(self.path)

    # --- lifecycle ----------------------------------------------------------------------

    async def open(self) -> None:
        """Open the file now (it is opened on first use otherwise), so that a bad file is
        reported at start."""
        async with self._opening:
            if self._closed or self._gone is not None:
                raise self._closed_error()
            if self._connection is not None:
                return
            self._connection = await trio.to_thread.run_sync(self._connect, limiter=self._limiter)

    async def aclose(self) -> None:
        """Close the file. Calls made after fail with StoreClosed."""
        async with self._opening:
            self._closed = True
            connection, self._connection = self._connection, None
            if connection is not None:
                await trio.to_thread.run_sync(connection.close, limiter=self._limiter)

    def _connect(self) -> sqlite3.Connection:
        where = str(self.path)
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise StoreError(where, f"cannot create its folder: {exc.strerror or exc}") from exc
        try:
            connection = sqlite3.connect(
                where, isolation_level=None, check_same_thread=False, timeout=30.0
            )
        except sqlite3.Error as exc:
            raise StoreError(where, f"cannot be opened: {exc}") from exc
        try:
            self._prepare(connection)
        except StoreError:
            connection.close()
            raise
        except sqlite3.DatabaseError as exc:
            connection.close()
            raise _error(where, exc) from exc
        # The files as they are now, with the connection holding them: each call first
        # checks that the path still names them (see _check_files).
        self._opened_path = Path(os.path.abspath(where))
        self._files = _identities(self._opened_path)
        return connection

    def _prepare(self, connection: sqlite3.Connection) -> None:
        where = str(self.path)
        check = connection.execute("PRAGMA quick_check").fetchone()
        if check is None or check[0] != "ok":
            raise StoreUnreadable(
                where, f"the database is corrupt (quick_check: {check and check[0]})"
            )
        mode = connection.execute("PRAGMA journal_mode=WAL").fetchone()[0]
        if mode.lower() != "wal":
            raise StoreError(where, f"cannot use WAL mode (journal_mode stays {mode})")
        connection.execute(f"PRAGMA synchronous={self._durability.upper()}")
        connection.execute("PRAGMA foreign_keys=ON")
        connection.execute("BEGIN IMMEDIATE")  # also proves the file is writable
        try:
            connection.execute(
                "CREATE TABLE IF NOT EXISTS satsuma_schema (version INTEGER NOT NULL)"
            )
            upgrade(
                connection,
                where,
                SQLITE_MIGRATIONS,
                "INSERT INTO satsuma_schema (version) VALUES (?)",
            )
            connection.execute("COMMIT")
        except BaseException:
            connection.execute("ROLLBACK")
            raise

    async def _call(
        self,
        work: Callable[[sqlite3.Connection], T],
        lease: Lease | None = None,
        *,
        transaction: bool = True,
    ) -> T:
        # A read is a transaction too (transaction=False changes nothing): with one
        # writer at a time, BEGIN IMMEDIATE costs a read nothing more.
        if self._connection is None:
            await self.open()

        def run() -> T:
            connection = self._connection
            if connection is None or self._gone is not None:
                raise self._closed_error()
            self._check_files(committed=False)
            try:
                connection.execute("BEGIN IMMEDIATE")
                try:
                    if lease is not None:
                        self._check_lease(connection, lease)
                    result = work(connection)
                    connection.execute("COMMIT")
                except BaseException:
                    if connection.in_transaction:
                        connection.execute("ROLLBACK")
                    raise
            except sqlite3.Error as exc:
                raise _error(str(self.path), exc) from exc
            except Damaged as exc:
                raise StoreUnreadable(
                    str(self.path), f"{exc}; nothing was guessed in its place"
                ) from None
            self._check_files(committed=True)
            return result

        # Not abandoned on cancel: a transaction is short, and it either commits whole or
        # not at all; waiting for it keeps the connection in one piece.
        return await trio.to_thread.run_sync(run, limiter=self._limiter)

    def _closed_error(self) -> StoreClosed:
        return StoreClosed(str(self.path), self._gone or "the store is closed")

    def _check_files(self, *, committed: bool) -> None:
        """Refuse to go on once the path no longer names the files the connection holds.

        SQLite keeps writing into a file that was deleted or replaced under it (into the
        inode it has open), so its commits "succeed" where no one will read them: the
        next process opens whatever is at the path. Checked before each transaction
        (nothing of it is written) and after its commit (then it went into the old
        file, and the caller is told so); three stats each time, about 8 µs a call
        (docs/persistence.md has the figure). The store then closes itself for good:
        which file holds the truth is a person's decision, not the store's.
        """
        changes = [
            f"{_NAMES[suffix]} was {'deleted or moved away' if now is None else 'replaced'}"
            for suffix, before in self._files.items()
            if (now := _identity(self._opened_path, suffix)) != before
        ]
        if not changes:
            return
        self._gone = (
            f"{', '.join(changes)} while the store had it open; the store refuses every "
            "call from now on rather than write where no one will read it (open the "
            "store again once you know which file holds the conversations)"
        )
        if committed:
            raise StoreClosed(
                str(self.path),
                f"{self._gone}. This change was committed into the file the store still "
                "had open, which is no longer the one at this path",
            )
        raise StoreClosed(str(self.path), f"{self._gone}. Nothing of this change was written")

    # --- ownership ----------------------------------------------------------------------

    def _check_lease(self, db: sqlite3.Connection, lease: Lease) -> None:
        row = db.execute(LEASE_ROW, (lease.agent_id,)).fetchone()
        if not lease_holds(lease, row):
            raise lease_lost(self._where, lease, row)

    async def _take_lease(self, agent_id: str, owner: Owner, seconds: float) -> Lease:
        def work(db: sqlite3.Connection) -> Lease:
            row = db.execute(
                "SELECT owner_id, pid, host, process_start, epoch, expires_at, host_id "
                "FROM leases WHERE agent_id = ?",
                (agent_id,),
            ).fetchone()
            epoch = next_epoch(self._where, agent_id, owner, row)
            lease = Lease(
                agent_id=agent_id, owner=owner, epoch=epoch, expires_at=time.time() + seconds
            )
            db.execute(
                "INSERT INTO leases (agent_id, owner_id, pid, host, process_start, epoch, "
                "expires_at, host_id) VALUES (?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (agent_id) "
                "DO UPDATE SET owner_id = excluded.owner_id, pid = excluded.pid, "
                "host = excluded.host, process_start = excluded.process_start, "
                "epoch = excluded.epoch, expires_at = excluded.expires_at, "
                "host_id = excluded.host_id",
                (
                    agent_id,
                    owner.owner_id,
                    owner.pid,
                    owner.host,
                    owner.process_start,
                    epoch,
                    lease.expires_at,
                    owner.host_id,
                ),
            )
            return lease

        return await self._call(work)

    async def renew_lease(self, lease: Lease, *, seconds: float) -> Lease:
        renewed = attrs.evolve(lease, expires_at=time.time() + seconds)

        def work(db: sqlite3.Connection) -> None:
            db.execute(
                "UPDATE leases SET expires_at = ? WHERE agent_id = ?",
                (renewed.expires_at, lease.agent_id),
            )

        await self._call(work, lease)
        return renewed

    async def _find_runs(self, query: RunQuery) -> list[RunRecord]:
        return await sql_find_runs(self.read, self._dialect, query)

    # --- retention --------------------------------------------------------------------------

    async def _prune(self, older_than: float, *, conversations: bool, dry_run: bool) -> PruneReport:
        return await prune(self, older_than, conversations=conversations, dry_run=dry_run)


_NAMES: Final = {"": "the file", "-wal": "its -wal file", "-shm": "its -shm file"}


def _identity(path: Path, suffix: str) -> tuple[int, int] | None:
    try:
        found = os.stat(f"{path}{suffix}")
    except FileNotFoundError:
        return None
    return (found.st_dev, found.st_ino)


def _identities(path: Path) -> dict[str, tuple[int, int]]:
    """The database file and its -wal and -shm files, by (st_dev, st_ino). In WAL mode
    SQLite keeps the -wal and -shm files (the same ones) for as long as any
    connection has the database open; a new connection after one of them is deleted
    would make its own, and see none of what is in the old one."""
    found = {suffix: _identity(path, suffix) for suffix in _NAMES}
    return {suffix: identity for suffix, identity in found.items() if identity is not None}


# SQLite's primary result codes (sqlite3.Error.sqlite_errorcode & 0xFF).
_BUSY: Final = 5
_LOCKED: Final = 6
_CORRUPT: Final = 11
_NOTADB: Final = 26


def _error(where: str, exc: sqlite3.Error) -> StoreError:
    """The StoreError for one of SQLite's, of the class that says what the caller does
    next: wait (another connection held the lock for the whole busy timeout), have a
    person look at the file (corrupt, or not a database), or read the message."""
    code = getattr(exc, "sqlite_errorcode", None)
    primary = code & 0xFF if isinstance(code, int) else None
    text = _explain(exc)
    if primary in (_BUSY, _LOCKED):
        return StoreUnavailable(where, text)
    lowered = str(exc).lower()
    if primary in (_CORRUPT, _NOTADB) or "not a database" in lowered or "malformed" in lowered:
        return StoreUnreadable(where, text)
    return StoreError(where, text)


def _explain(exc: sqlite3.Error) -> str:
    """A clear sentence for SQLite's errors a user can cause."""
    text = str(exc)
    lowered = text.lower()
    if "database is locked" in lowered or "database table is locked" in lowered:
        return (
            "another connection held the database's write lock for longer than the busy "
            f"timeout (30 s); nothing of this change was written ({text})"
        )
    if "not a database" in lowered or "malformed" in lowered:
        return f"the file is not a SQLite database, or is corrupt ({text})"
    if "readonly" in lowered or "read-only" in lowered or "unable to open" in lowered:
        return f"the file cannot be written ({text})"
    if "disk is full" in lowered or "disk i/o" in lowered:
        return f"the disk is full or failing; nothing of this change was written ({text})"
    return text
